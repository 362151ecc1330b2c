#include "cli/http_client.h"
#include "cli/http_connection.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace gpucloud::cli {

namespace beast = boost::beast;
namespace http = beast::http;

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
    HttpConnection conn(endpoint_, fmt::format("no answer within {} s", timeout.count() / 1000.0));
    if (auto c = conn.connect(timeout); !c) return fail(c.error());
    if (auto w = conn.send(request, "application/json, application/problem+json", timeout); !w) return fail(w.error());
    auto& stream = conn.stream();
    boost::system::error_code ec;

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    stream.expires_after(timeout);
    http::async_read(stream, buffer, parser, [&](const boost::system::error_code& e, std::size_t) {
      ec = e;
    });
    conn.run();
    if (ec) return fail(conn.unreachable("read the answer of", ec));

    auto& res = parser.get();
    HttpResponse out;
    out.status = static_cast<int>(res.result_int());
    out.content_type = std::string(res[http::field::content_type]);
    out.retry_after = std::string(res[http::field::retry_after]);
    out.body = std::move(res.body());
    conn.shutdown();
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
