#include "server/openapi.h"

#include <algorithm>
#include <cctype>

#include <boost/json.hpp>

namespace gpucloud::server {
namespace json = boost::json;

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

json::object problem_response_ref() {
  json::object r;
  r["description"] = "A problem (application/problem+json) with a stable code";
  r["content"] = json::object{{"application/problem+json",
                               json::object{{"schema", json::object{{"$ref", "#/components/schemas/Problem"}}}}}};
  return r;
}
}  // namespace

json::object openapi_document(const Router& router) {
  json::object paths;
  for (const Route& route : router.routes()) {
    json::object op;
    op["summary"] = route.summary;
    op["tags"] = json::array{json::value(route.tag)};
    op["operationId"] = lower(route.method) + route.pattern;
    json::array parameters;
    for (const auto& seg : route.segments) {
      if (seg.size() > 2 && seg.front() == '{') {
        parameters.push_back(json::object{{"name", seg.substr(1, seg.size() - 2)},
                                          {"in", "path"},
                                          {"required", true},
                                          {"schema", json::object{{"type", "string"}}}});
      }
    }
    if (!parameters.empty()) op["parameters"] = std::move(parameters);
    if (route.access == Access::public_route) op["security"] = json::array{};
    if (route.method == "POST" || route.method == "PUT" || route.method == "PATCH") {
      op["requestBody"] = json::object{
          {"content", json::object{{"application/json", json::object{{"schema", json::object{{"type", "object"}}}}}}}};
    }
    json::object responses;
    responses["2XX"] = json::object{{"description", "Success"}};
    responses["default"] = problem_response_ref();
    op["responses"] = std::move(responses);
    // The document's paths are relative to the server URL /api/v1 where they live there.
    json::value& entry = paths[route.pattern];
    if (!entry.is_object()) entry = json::object{};
    entry.as_object()[lower(route.method)] = std::move(op);
  }
  json::object doc;
  doc["openapi"] = "3.0.3";
  doc["info"] = json::object{{"title", "gpucloud API"}, {"version", GPUCLOUD_VERSION}};
  doc["servers"] = json::array{json::object{{"url", "/"}}};
  doc["paths"] = std::move(paths);
  json::object problem_schema{
      {"type", "object"},
      {"required", json::array{"type", "title", "status", "detail", "code"}},
      {"properties", json::object{{"type", json::object{{"type", "string"}}},
                                  {"title", json::object{{"type", "string"}}},
                                  {"status", json::object{{"type", "integer"}}},
                                  {"detail", json::object{{"type", "string"}}},
                                  {"code", json::object{{"type", "string"}}}}}};
  doc["components"] = json::object{
      {"schemas", json::object{{"Problem", std::move(problem_schema)}}},
      {"securitySchemes", json::object{{"bearer", json::object{{"type", "http"}, {"scheme", "bearer"}}}}}};
  doc["security"] = json::array{json::object{{"bearer", json::array{}}}};
  return doc;
}

}  // namespace gpucloud::server
