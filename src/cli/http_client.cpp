#include "cli/http_client.h"
#include "cli/version.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace gpucloud::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return value;
    }
  }
  return {};
}

Result<Endpoint> parse_endpoint(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return fail(ErrorCode::invalid_argument,
                fmt::format("invalid endpoint \"{}\": {}", url, why));
  };
  constexpr std::string_view kHttp = "http://";
  if (url.starts_with("https://")) {
    return bad("only http:// endpoints are supported (put a TLS proxy in front if needed)");
  }
  if (!url.starts_with(kHttp)) return bad("expected http://HOST[:PORT]");
  std::string_view rest = url.substr(kHttp.size());
  std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  std::string_view path = rest.substr(authority.size());
  if (path.find_first_of("?#") != std::string_view::npos) return bad("no query or fragment allowed");
  if (authority.find('@') != std::string_view::npos) return bad("no user info allowed");
  if (authority.empty()) return bad("missing host");

  Endpoint ep;
  std::string_view port;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    ep.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("unexpected text after IPv6 address");
      port = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      ep.host = std::string(authority.substr(0, colon));
      port = authority.substr(colon + 1);
    } else {
      ep.host = std::string(authority);
    }
  }
  if (ep.host.empty()) return bad("missing host");
  for (char c : ep.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':' || c == '%')) {
      return bad("bad character in host");
    }
  }
  if (port.empty()) {
    ep.port = "80";
  } else {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(),
                                        [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("bad port");
    }
    int p = std::stoi(std::string(port));
    if (p < 1 || p > 65535) return bad("port out of range");
    ep.port = std::to_string(p);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  ep.base_path = std::string(path);
  std::string host_part = ep.host.find(':') != std::string::npos ? "[" + ep.host + "]" : ep.host;
  ep.host_header = ep.port == "80" ? host_part : host_part + ":" + ep.port;
  ep.url = "http://" + ep.host_header + ep.base_path;
  return ep;
}

namespace {

class BeastTransport final : public HttpTransport {
 public:
  BeastTransport(Endpoint endpoint, std::chrono::milliseconds timeout)
      : endpoint_(std::move(endpoint)), timeout_(timeout) {}

  Result<HttpResponse> send(const HttpRequest& request) override {
    auto timeout = request.timeout.count() > 0 ? request.timeout : timeout_;
    auto unreachable = [&](std::string_view what, const boost::system::error_code& ec) {
      std::string reason = ec == beast::error::timeout
                               ? fmt::format("no answer within {} s", timeout.count() / 1000.0)
                               : ec.message();
      return fail(ErrorCode::unavailable,
                  fmt::format("cannot {} gpucloud at {}: {}", what, endpoint_.url, reason));
    };

    http::verb verb = http::string_to_verb(request.method);
    if (verb == http::verb::unknown) {
      return fail(ErrorCode::internal, "unknown HTTP method " + request.method);
    }

    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    boost::system::error_code ec;

    auto results = resolver.resolve(endpoint_.host, endpoint_.port, ec);
    if (ec) return unreachable("resolve", ec);

    // Beast's timeouts apply to asynchronous operations; run each one to completion.
    auto run = [&] {
      ioc.restart();
      ioc.run();
    };
    stream.expires_after(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
    stream.async_connect(results, [&](const boost::system::error_code& e, const tcp::endpoint&) {
      ec = e;
    });
    run();
    if (ec) return unreachable("connect to", ec);

    http::request<http::string_body> req{verb, request.target, 11};
    req.set(http::field::host, endpoint_.host_header);
    req.set(http::field::user_agent, "gpucloud-cli/" GPUCLOUD_CLI_VERSION);
    req.set(http::field::accept, "application/json, application/problem+json");
    req.set(http::field::connection, "close");
    for (const auto& [name, value] : request.headers) req.set(name, value);
    if (!request.body.empty() && request.header("Content-Type").empty()) {
      req.set(http::field::content_type, "application/json");
    }
    req.body() = request.body;
    req.prepare_payload();

    stream.expires_after(timeout);
    http::async_write(stream, req, [&](const boost::system::error_code& e, std::size_t) {
      ec = e;
    });
    run();
    if (ec) return unreachable("send a request to", ec);

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    stream.expires_after(timeout);
    http::async_read(stream, buffer, parser, [&](const boost::system::error_code& e, std::size_t) {
      ec = e;
    });
    run();
    if (ec) return unreachable("read the answer of", ec);

    auto& res = parser.get();
    HttpResponse out;
    out.status = static_cast<int>(res.result_int());
    out.content_type = std::string(res[http::field::content_type]);
    out.retry_after = std::string(res[http::field::retry_after]);
    out.body = std::move(res.body());
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return out;
  }

 private:
  Endpoint endpoint_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<HttpTransport> make_http_transport(Endpoint endpoint,
                                                   std::chrono::milliseconds timeout) {
  return std::make_unique<BeastTransport>(std::move(endpoint), timeout);
}

}  // namespace gpucloud::cli
