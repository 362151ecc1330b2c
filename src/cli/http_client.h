#pragma once
// A small synchronous HTTP/1.1 client (http:// only, one connection per request) behind an
// interface, so the command dispatcher can be tested with canned answers.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace gpucloud::cli {

struct HttpRequest {
  std::string method;  // "GET", "POST", "PUT", "PATCH", "DELETE"
  std::string target;  // origin-form: "/api/v1/instances?all=true"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // 0 = the transport's default.
  std::chrono::milliseconds timeout{0};

  std::string_view header(std::string_view name) const;
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string retry_after;
  std::string body;
};

// Failures to talk to the server at all (refused, timed out, reset) are `unavailable` errors
// whose detail names the endpoint. HTTP error statuses are not failures at this level.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual Result<HttpResponse> send(const HttpRequest& request) = 0;
};

// "http://HOST[:PORT][/PREFIX]" — the server root; API paths are PREFIX + "/api/v1/...".
struct Endpoint {
  std::string url;        // normalised, no trailing slash
  std::string host;       // without IPv6 brackets
  std::string port;       // "80" when absent
  std::string host_header;
  std::string base_path;  // "" or "/prefix"
};

Result<Endpoint> parse_endpoint(std::string_view url);

std::unique_ptr<HttpTransport> make_http_transport(
    Endpoint endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace gpucloud::cli
