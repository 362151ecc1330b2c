#include "server/openapi.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <boost/json.hpp>

#include "server/openapi_schemas.h"

namespace gpucloud::server {
namespace json = boost::json;
using openapi::OperationSpec;

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

json::object schema_ref(std::string_view component) {
  return {{"$ref", "#/components/schemas/" + std::string(component)}};
}

json::object json_content(json::object schema, std::string_view media = "application/json") {
  return {{media, json::object{{"schema", std::move(schema)}}}};
}

// A route without a table entry still gets a valid, unique id: "post/api/v1/x/{id}" -> "postApiV1XId".
std::string generic_operation_id(const Route& route) {
  std::string id = lower(route.method);
  bool upper_next = true;
  for (unsigned char c : route.pattern) {
    if (!std::isalnum(c)) {
      upper_next = true;
      continue;
    }
    id += static_cast<char>(upper_next ? std::toupper(c) : c);
    upper_next = false;
  }
  return id;
}

// The problem statuses api.md names, with the codes each can carry.
std::string_view problem_description(int status) {
  switch (status) {
    case 400: return "invalid_argument: a field (named in detail), the body or a query parameter is wrong";
    case 401: return "unauthorized: no token, or an expired or revoked one, or a disabled user";
    case 402: return "insufficient_balance";
    case 403: return "forbidden (operator only, or not allowed here) or quota_exceeded";
    case 404: return "not_found (also another user's resource)";
    case 409: return "conflict (wrong state, a taken name, an Idempotency-Key reused) or no_capacity";
    case 413: return "payload_too_large";
    case 415: return "unsupported_media_type: request bodies must be application/json";
    case 429: return "rate_limited: retry after Retry-After seconds";
    default: return "A problem";
  }
}

json::object problem_response(int status) {
  json::object r;
  r["description"] = problem_description(status);
  r["content"] = json_content(schema_ref("Problem"), "application/problem+json");
  if (status == 429)
    r["headers"] = json::object{{"Retry-After", json::object{{"description", "Seconds to wait"},
                                                             {"schema", json::object{{"type", "integer"}}}}}};
  return r;
}

json::object success_response(const OperationSpec& spec) {
  json::object r;
  switch (spec.status) {
    case 101: r["description"] = "Switching Protocols: the WebSocket is open"; break;
    case 201: r["description"] = "Created"; break;
    case 202: r["description"] = "Accepted: the resource in its transitional state; poll it or follow /events/stream"; break;
    case 204: r["description"] = "Done; no body"; break;
    default: r["description"] = "OK"; break;
  }
  if (spec.status == 101 || spec.status == 204) return r;
  if (!spec.response.empty()) {
    r["content"] = json_content(schema_ref(spec.response), spec.media);
  } else if (spec.media == "application/json") {
    r["content"] = json_content(json::object{{"type", "object"}});
  } else {
    r["content"] = json_content(json::object{{"type", "string"}}, spec.media);
  }
  return r;
}

json::object query_parameter(const openapi::QueryParam& q) {
  json::object schema{{"type", q.type}};
  if (!q.values.empty()) {
    json::array values;
    for (auto v : q.values) values.emplace_back(v);
    schema["enum"] = std::move(values);
  }
  return {{"name", q.name}, {"in", "query"}, {"required", false}, {"description", q.description},
          {"schema", std::move(schema)}};
}

json::object header_parameter(std::string_view name, std::string_view description) {
  return {{"name", name}, {"in", "header"}, {"required", false}, {"description", description},
          {"schema", json::object{{"type", "string"}}}};
}

bool takes_body(const Route& route) {
  return route.method == "POST" || route.method == "PUT" || route.method == "PATCH";
}

json::object operation(const Route& route, const OperationSpec* spec) {
  json::object op;
  op["summary"] = route.summary;
  op["tags"] = json::array{json::value(route.tag)};
  op["operationId"] = spec ? std::string(spec->operation_id) : generic_operation_id(route);
  json::array parameters;
  for (const auto& seg : route.segments) {
    if (seg.size() > 2 && seg.front() == '{') {
      std::string_view description = spec ? spec->id_description : "The resource's id or its name";
      parameters.push_back(json::object{{"name", seg.substr(1, seg.size() - 2)},
                                        {"in", "path"},
                                        {"required", true},
                                        {"description", description},
                                        {"schema", json::object{{"type", "string"}}}});
    }
  }
  if (spec) {
    for (const auto& q : spec->query) parameters.push_back(query_parameter(q));
    if (spec->idempotent)
      parameters.push_back(header_parameter("Idempotency-Key", "Makes a retry safe: a repeat with the same key and body "
                                                               "returns the first answer (kept 24 h)"));
    if (spec->media == "text/event-stream")
      parameters.push_back(header_parameter("Last-Event-ID", "Resume after this seq"));
  }
  if (!parameters.empty()) op["parameters"] = std::move(parameters);
  if (route.access == Access::public_route) op["security"] = json::array{};
  // Who may call it, for clients and for the authorization matrix test that walks every route.
  op["x-gpucloud-access"] = route.access == Access::public_route ? "public" : route.access == Access::admin ? "operator" : "user";

  bool has_body = spec ? !spec->request.empty() : takes_body(route);
  if (has_body) {
    json::object body;
    body["required"] = spec ? spec->request_required : false;
    body["content"] = json_content(spec ? schema_ref(spec->request) : json::object{{"type", "object"}});
    op["requestBody"] = std::move(body);
  }

  json::object responses;
  if (!spec) {
    responses["2XX"] = json::object{{"description", "Success"}};
  } else {
    responses[std::to_string(spec->status)] = success_response(*spec);
    // The handler's own problems, then what the pipeline answers before the handler runs.
    std::set<int> problems(spec->errors.begin(), spec->errors.end());
    if (route.access != Access::public_route) problems.insert(401);
    if (route.access == Access::admin) problems.insert(403);
    if (has_body) problems.insert({400, 413, 415});
    if (spec->idempotent) problems.insert({400, 409});
    for (int status : problems) responses[std::to_string(status)] = problem_response(status);
  }
  responses["default"] = problem_response(0);
  op["responses"] = std::move(responses);
  return op;
}
}  // namespace

json::object openapi_document(const Router& router) {
  json::object paths;
  for (const Route& route : router.routes()) {
    const OperationSpec* spec = openapi::find_operation_spec(route.method, route.pattern);
    // The document's paths carry the full /api/v1 prefix; /healthz and /metrics live outside it.
    json::value& entry = paths[route.pattern];
    if (!entry.is_object()) entry = json::object{};
    entry.as_object()[lower(route.method)] = operation(route, spec);
  }
  json::object doc;
  doc["openapi"] = "3.0.3";
  doc["info"] = json::object{
      {"title", "gpucloud API"},
      {"version", GPUCLOUD_VERSION},
      {"description", "The REST API v1 contract: JSON in and out; errors are application/problem+json with a "
                      "stable `code`; lists are {items, next_cursor}; money in the currency's smallest unit."}};
  doc["servers"] = json::array{json::object{{"url", "/"}}};
  doc["paths"] = std::move(paths);
  doc["components"] = json::object{
      {"schemas", openapi::component_schemas()},
      {"securitySchemes", json::object{{"bearer", json::object{{"type", "http"}, {"scheme", "bearer"}}}}}};
  doc["security"] = json::array{json::object{{"bearer", json::array{}}}};
  return doc;
}

}  // namespace gpucloud::server
