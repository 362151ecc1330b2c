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
  for (auto p : *params) out[std::string(p.key)] = p.has_value ? std::string(p.value) : std::string();
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
