#pragma once
// The authenticated reverse proxy to an instance's HTTP services (Jupyter, and any declared
// TCP port): what passes between the browser and the instance (pure; unit-tested beside).
//
// - To the instance go the browser's request line, body and end-to-end headers, without its
//   gpucloud credentials (Authorization, the session cookie, X-CSRF-Token), Origin (checked
//   here already; the service would compare it with its own address), or hop-by-hop headers;
//   Host names the instance's address, X-Forwarded-{Host,Proto,Prefix} say where it was reached.
// - Back come the status, the body and the end-to-end headers, minus any Set-Cookie for
//   gpucloud's own session cookie (an instance cannot replace the user's session).
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpucloud::server {

inline constexpr int kJupyterPort = 8888;  // where the instance's init binds Jupyter (its own address)

bool is_hop_by_hop_header(std::string_view lower_name);
// Percent-encodes a decoded path for the request line (unreserved, sub-delims, ':', '@' and
// '/' stay as they are).
std::string encode_path(std::string_view decoded_path);
// A Cookie header without gpucloud's session cookie ("" when nothing else is left).
std::string without_session_cookie(std::string_view cookie_header);
// Whether a browser header (lower-case name) goes on to the instance.
bool forwards_request_header(std::string_view lower_name);
// Whether an instance's response header goes back to the browser.
bool forwards_response_header(std::string_view lower_name, std::string_view value);
// The request target at the instance for a request to `path` (decoded) under `prefix`
// ("/api/v1/instances/ID/proxy/PORT"): the rest of the path (at least "/"), encoded, with the
// query. nullopt when `path` is not under `prefix`.
std::optional<std::string> upstream_target(std::string_view path, std::string_view prefix, std::string_view query);

// Removes every occurrence of `secret` from `text` (Jupyter Notebook writes its token into the
// pages it serves; the browser must never see it). An empty secret changes nothing.
std::string scrub(std::string text, std::string_view secret);
// The same over a body that arrives in chunks: an occurrence split between chunks is caught
// (feed() holds back the last secret.size() - 1 bytes until the next chunk or finish()).
class Scrubber {
 public:
  explicit Scrubber(std::string secret) : secret_(std::move(secret)) {}
  std::string feed(std::string_view chunk);
  std::string finish();

 private:
  std::string secret_, pending_;
};

}  // namespace gpucloud::server
