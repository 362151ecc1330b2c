#include "server/request_conversion.h"

#include <cctype>
#include <string_view>

#include <boost/url/parse.hpp>

namespace gpucloud::server {
namespace http = boost::beast::http;

namespace {
// A target with characters RFC 3986 does not allow raw (`{`, `|`, a stray `%`), as clients
// send them, percent-encoded: the request is then routed and authenticated like any other,
// and its parameters are judged by the route (after authentication), not refused up front.
std::string lenient_target(std::string_view raw) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  static constexpr std::string_view kAllowed = "-._~!$&'()*+,;=:@/?";
  std::string out;
  out.reserve(raw.size() + 8);
  for (std::size_t n = 0; n < raw.size(); ++n) {
    const char c = raw[n];
    const bool escape = c == '%' && n + 2 < raw.size() && hex(raw[n + 1]) && hex(raw[n + 2]);
    if (std::isalnum(static_cast<unsigned char>(c)) || kAllowed.find(c) != std::string_view::npos || escape) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const auto b = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}
}  // namespace

Request to_request(http::request<http::string_body>& in, const std::string& client, Result<void>& valid) {
  Request out;
  out.method = std::string(in.method_string());
  out.client_address = client;
  std::string lenient;
  auto target = boost::urls::parse_origin_form(in.target());
  if (!target) {
    lenient = lenient_target(in.target());
    target = boost::urls::parse_origin_form(lenient);
  }
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
