// libFuzzer: raw bytes as an HTTP/1.1 request through what the server does before a handler
// runs, without a network: Beast's parser with the server's limits, server::to_request,
// the query and header readers, and Router::match over the API's route patterns.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/request_conversion.h"
#include "server/router.h"

namespace {
namespace http = boost::beast::http;
using gpucloud::server::Access;

const gpucloud::server::Router& api_router() {
  static const gpucloud::server::Router router = [] {
    gpucloud::server::Router r;
    const char* routes[][2] = {
        {"GET", "/healthz"}, {"GET", "/metrics"}, {"GET", "/api/v1/version"}, {"POST", "/api/v1/auth/register"},
        {"POST", "/api/v1/auth/login"}, {"POST", "/api/v1/auth/logout"}, {"GET", "/api/v1/me"},
        {"GET", "/api/v1/tokens"}, {"POST", "/api/v1/tokens"}, {"DELETE", "/api/v1/tokens/{id}"},
        {"GET", "/api/v1/market"}, {"GET", "/api/v1/zones"}, {"GET", "/api/v1/instances"},
        {"POST", "/api/v1/instances"}, {"GET", "/api/v1/instances/{id}"}, {"PATCH", "/api/v1/instances/{id}"},
        {"DELETE", "/api/v1/instances/{id}"}, {"POST", "/api/v1/instances/{id}/stop"},
        {"POST", "/api/v1/instances/{id}/start"}, {"POST", "/api/v1/instances/{id}/restart"},
        {"GET", "/api/v1/instances/{id}/terminal"}, {"GET", "/api/v1/ssh-keys"}, {"POST", "/api/v1/ssh-keys"},
        {"DELETE", "/api/v1/ssh-keys/{id}"}, {"GET", "/api/v1/images"}, {"GET", "/api/v1/events"},
        {"GET", "/api/v1/events/stream"}, {"GET", "/api/v1/admin/hosts"}, {"GET", "/api/v1/admin/prices"},
        {"PUT", "/api/v1/admin/prices"}, {"GET", "/api/v1/admin/users"}, {"PATCH", "/api/v1/admin/users/{id}"},
    };
    for (const auto& [method, pattern] : routes) r.add(method, pattern, Access::user, "fuzz", "fuzz", nullptr);
    return r;
  }();
  return router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);  // as HttpServer::serve
  parser.body_limit(1024 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  // As http::read feeds it: put() what arrived until the message is done; the end of the
  // input is the peer closing the connection.
  std::size_t used = 0;
  while (!parser.is_done()) {
    std::size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      // http::read would now wait for more bytes; there are none (all the input was given),
      // so the peer has closed. Calling put() again without new bytes breaks Beast's
      // preconditions (its chunk-header scan asserts), which the server never does.
      ec = {};
      if (parser.got_some()) parser.put_eof(ec);
      break;
    }
    if (ec) break;
    if (n == 0) break;
  }
  if (ec || !parser.is_header_done()) return 0;
  auto message = parser.release();
  gpucloud::Result<void> valid;
  gpucloud::server::Request request = gpucloud::server::to_request(message, "127.0.0.1", valid);
  if (!valid) return 0;
  (void)request.query();
  (void)request.header("authorization");
  (void)request.header("content-type");
  (void)request.header("idempotency-key");
  std::map<std::string, std::string> params;
  (void)api_router().match(request.method, request.path, params);
  return 0;
}
