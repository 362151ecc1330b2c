#include "server/http_types.h"

#include <boost/json.hpp>
#include <boost/url/parse_query.hpp>

#include "api/problem.h"

namespace gpucloud::server {

std::string_view Request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

std::map<std::string, std::string> Request::query() const {
  std::map<std::string, std::string> out;
  if (query_string.empty()) return out;
  auto params = boost::urls::parse_query(query_string);
  if (!params) return out;
  // The views are still percent-encoded ("2026-11-26T07%3A44%3A00Z"): decode each. A '+'
  // stays a '+' (this is not a form body), so a time offset like +08:00 survives unencoded.
  for (auto p : *params) out[p.key.decode()] = p.has_value ? p.value.decode() : std::string();
  return out;
}

Response json_response(int status, const boost::json::value& body) {
  return Response{status, "application/json", boost::json::serialize(body), {}, {}, {}};
}

Response problem_response(const Error& error) {
  Response r{http_status(error.code), api::kProblemContentType, api::problem_body(error), {}, {}, {}};
  if ((error.code == ErrorCode::rate_limited || error.code == ErrorCode::unavailable) && error.retry_after_seconds > 0)
    r.headers.emplace_back("Retry-After", std::to_string(error.retry_after_seconds));
  return r;
}

Response empty_response(int status) { return Response{status, "", "", {}, {}, {}}; }

}  // namespace gpucloud::server
