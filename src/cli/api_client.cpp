#include "cli/api_client.h"

#include <array>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

constexpr std::array kCodes = {
    ErrorCode::invalid_argument,   ErrorCode::unauthorized,      ErrorCode::forbidden,
    ErrorCode::not_found,          ErrorCode::conflict,          ErrorCode::insufficient_balance,
    ErrorCode::no_capacity,        ErrorCode::quota_exceeded,    ErrorCode::rate_limited,
    ErrorCode::payload_too_large,  ErrorCode::method_not_allowed, ErrorCode::unsupported_media_type,
    ErrorCode::unavailable,        ErrorCode::internal,
};

ErrorCode code_for_status(int status) {
  switch (status) {
    case 400: return ErrorCode::invalid_argument;
    case 401: return ErrorCode::unauthorized;
    case 402: return ErrorCode::insufficient_balance;
    case 403: return ErrorCode::forbidden;
    case 404: return ErrorCode::not_found;
    case 405: return ErrorCode::method_not_allowed;
    case 409: return ErrorCode::conflict;
    case 413: return ErrorCode::payload_too_large;
    case 415: return ErrorCode::unsupported_media_type;
    case 429: return ErrorCode::rate_limited;
    case 503: return ErrorCode::unavailable;
    default: return ErrorCode::internal;
  }
}

std::string first_line(std::string_view text, std::size_t max = 200) {
  auto end = text.find_first_of("\r\n");
  text = text.substr(0, end);
  if (text.size() > max) return std::string(text.substr(0, max)) + "…";
  return std::string(text);
}

}  // namespace

Error problem_to_error(const HttpResponse& response) {
  Error error;
  error.code = code_for_status(response.status);
  if (!response.retry_after.empty()) {
    try {
      error.retry_after_seconds = std::stoll(response.retry_after);
    } catch (...) {
    }
  }
  boost::system::error_code ec;
  json::value doc = json::parse(response.body, ec);
  const json::object* problem = !ec ? doc.if_object() : nullptr;
  if (problem == nullptr) {
    std::string body = first_line(response.body);
    error.detail = body.empty() ? fmt::format("the server answered HTTP {}", response.status)
                                : fmt::format("the server answered HTTP {}: {}",
                                              response.status, body);
    return error;
  }
  if (auto* code = problem->if_contains("code"); code && code->is_string()) {
    for (ErrorCode candidate : kCodes) {
      if (to_string(candidate) == code->get_string()) error.code = candidate;
    }
  }
  auto text = [&](const char* key) -> std::string {
    auto* v = problem->if_contains(key);
    return v && v->is_string() && !v->get_string().empty() ? std::string(v->get_string()) : "";
  };
  error.detail = text("detail");
  if (error.detail.empty()) error.detail = text("title");
  if (error.detail.empty()) error.detail = fmt::format("the server answered HTTP {}", response.status);
  for (const auto& member : *problem) {
    if (member.value().is_int64() && member.key() != "status") {
      error.numbers.emplace_back(std::string(member.key()), member.value().get_int64());
    }
  }
  return error;
}

std::string error_message(const Error& error) {
  std::string out = "error: " + error.detail;
  if (error.code == ErrorCode::rate_limited && error.retry_after_seconds > 0 &&
      error.detail.find("retry") == std::string::npos &&
      error.detail.find("Retry") == std::string::npos) {
    out += fmt::format(" (retry after {} s)", error.retry_after_seconds);
  }
  return out;
}

std::string url_escape(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

ApiClient::ApiClient(HttpTransport& transport, std::string base_path, std::string token)
    : transport_(transport), base_path_(std::move(base_path)), token_(std::move(token)) {}

Result<json::value> ApiClient::call(std::string_view method, std::string_view path,
                                    const json::value* body, const Headers& headers,
                                    std::chrono::milliseconds timeout) {
  HttpRequest request;
  request.method = std::string(method);
  request.target = base_path_ + "/api/v1" + std::string(path);
  request.timeout = timeout;
  if (!token_.empty()) request.headers.emplace_back("Authorization", "Bearer " + token_);
  for (const auto& h : headers) request.headers.push_back(h);
  if (body != nullptr) {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = json::serialize(*body);
  }
  auto response = transport_.send(request);
  if (!response) return fail(response.error());
  if (response->status < 200 || response->status >= 300) return fail(problem_to_error(*response));
  if (response->body.empty() || response->status == 204) return json::value(nullptr);
  boost::system::error_code ec;
  json::value doc = json::parse(response->body, ec);
  if (ec) {
    return fail(ErrorCode::internal,
                fmt::format("the server answered HTTP {} with a body that is not JSON: {}",
                            response->status, first_line(response->body)));
  }
  return doc;
}

Result<json::value> ApiClient::get(std::string_view path) {
  return call("GET", path, nullptr, {}, {});
}

Result<json::value> ApiClient::post(std::string_view path, const json::value& body,
                                    const Headers& headers, std::chrono::milliseconds timeout) {
  return call("POST", path, &body, headers, timeout);
}

Result<json::value> ApiClient::put(std::string_view path, const json::value& body) {
  return call("PUT", path, &body, {}, {});
}

Result<json::value> ApiClient::patch(std::string_view path, const json::value& body) {
  return call("PATCH", path, &body, {}, {});
}

Result<json::value> ApiClient::del(std::string_view path) {
  return call("DELETE", path, nullptr, {}, {});
}

Result<json::value> ApiClient::get_all(std::string_view path, std::size_t max_items) {
  json::array items;
  std::string cursor;
  const char sep = path.find('?') == std::string_view::npos ? '?' : '&';
  for (int page = 0; page < 10000; ++page) {
    std::string target = std::string(path);
    if (!cursor.empty()) target += fmt::format("{}cursor={}", sep, url_escape(cursor));
    auto doc = get(target);
    if (!doc) return doc;
    auto* obj = doc->if_object();
    if (obj == nullptr) return doc;  // not a collection: hand it back as it is
    json::value next = nullptr;
    if (auto* v = obj->if_contains("items"); v && v->is_array()) {
      for (auto& item : v->get_array()) items.push_back(std::move(item));
    }
    if (auto* v = obj->if_contains("next_cursor"); v && v->is_string() &&
                                                    !v->get_string().empty()) {
      next = *v;
    }
    if (next.is_null() || items.size() >= max_items ||
        std::string(next.get_string()) == cursor) {
      break;
    }
    cursor = std::string(next.get_string());
  }
  return json::value(json::object{{"items", std::move(items)}, {"next_cursor", nullptr}});
}

}  // namespace gpucloud::cli
