#include "server/request_conversion.h"

#include <boost/url/parse.hpp>

namespace gpucloud::server {
namespace http = boost::beast::http;

Request to_request(http::request<http::string_body>& in, const std::string& client, Result<void>& valid) {
  Request out;
  out.method = std::string(in.method_string());
  out.client_address = client;
  auto target = boost::urls::parse_origin_form(in.target());
  if (!target) {
    valid = fail(ErrorCode::invalid_argument, "request target is not a valid path");
    return out;
  }
  out.path = std::string(target->path());
  out.query_string = std::string(target->encoded_query());
  out.headers.reserve(8);
  for (const auto& field : in) {
    std::string name(field.name_string());
    for (char& c : name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');  // ASCII only: no locale call per byte
    out.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  out.body = std::move(in.body());
  return out;
}

}  // namespace gpucloud::server
