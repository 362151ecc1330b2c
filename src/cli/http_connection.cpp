#include "cli/http_connection.h"

#include <algorithm>

#include <boost/asio/connect.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "cli/version.h"

namespace gpucloud::cli {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

HttpConnection::HttpConnection(const Endpoint& endpoint, std::string timeout_reason)
    : endpoint_(endpoint), timeout_reason_(std::move(timeout_reason)), stream_(ioc_) {}

void HttpConnection::run() {
  ioc_.restart();
  ioc_.run();
}

Error HttpConnection::unreachable(std::string_view what, const boost::system::error_code& ec) const {
  std::string reason = ec == beast::error::timeout ? timeout_reason_ : ec.message();
  return fail(ErrorCode::unavailable, fmt::format("cannot {} gpucloud at {}: {}", what, endpoint_.url, reason)).value();
}

Status HttpConnection::connect(std::chrono::milliseconds timeout) {
  tcp::resolver resolver(ioc_);
  boost::system::error_code ec;
  auto results = resolver.resolve(endpoint_.host, endpoint_.port, ec);
  if (ec) return tl::unexpected(unreachable("resolve", ec));
  stream_.expires_after(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
  stream_.async_connect(results, [&](const boost::system::error_code& e, const tcp::endpoint&) { ec = e; });
  run();
  if (ec) return tl::unexpected(unreachable("connect to", ec));
  return ok();
}

Status HttpConnection::send(const HttpRequest& request, std::string_view accept, std::chrono::milliseconds timeout) {
  http::verb verb = http::string_to_verb(request.method);
  if (verb == http::verb::unknown) return fail(ErrorCode::internal, "unknown HTTP method " + request.method);
  http::request<http::string_body> req{verb, request.target, 11};
  req.set(http::field::host, endpoint_.host_header);
  req.set(http::field::user_agent, "gpucloud-cli/" GPUCLOUD_CLI_VERSION);
  req.set(http::field::accept, accept);
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : request.headers) req.set(name, value);
  if (!request.body.empty() && request.header("Content-Type").empty()) {
    req.set(http::field::content_type, "application/json");
  }
  req.body() = request.body;
  req.prepare_payload();

  boost::system::error_code ec;
  stream_.expires_after(timeout);
  http::async_write(stream_, req, [&](const boost::system::error_code& e, std::size_t) { ec = e; });
  run();
  if (ec) return tl::unexpected(unreachable("send a request to", ec));
  return ok();
}

void HttpConnection::shutdown() {
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

}  // namespace gpucloud::cli
