#pragma once
// Browser sign-in: the session cookie, its CSRF token and the Origin checks (pure functions,
// unit-tested beside; App::handle applies them).
//
// - The cookie `gpucloud_session` holds a normal session token (stored as its hash), so
//   revocation, disabling and expiry work as for a bearer token.
// - The CSRF token is HMAC-SHA-256(DATA_DIR/csrf.key, "csrf\n" + session token id): bound to
//   the session, nothing stored, gone with the session.
// - The server's own origin is scheme://Host, the scheme "https" when X-Forwarded-Proto says
//   so (a TLS proxy in front), else "http" (gpucloudd itself speaks plain HTTP). The same
//   header decides the cookie's Secure flag.
#include <chrono>
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace gpucloud::server {

inline constexpr std::string_view kSessionCookie = "gpucloud_session";

// The value of cookie `name` in a Cookie header ("" when absent).
std::string cookie_value(std::string_view cookie_header, std::string_view name);
std::string session_cookie_header(std::string_view token, std::chrono::seconds max_age, bool secure);
std::string cleared_session_cookie_header(bool secure);
// The request came to the client over TLS (X-Forwarded-Proto: https from the proxy in front).
bool request_is_https(const Request& request);
// "http://HOST[:PORT]" or "https://..." from the Host header; "" without one.
std::string own_origin(const Request& request);
// Whether the request's Origin header (which must be present) names this server.
bool origin_is_own(const Request& request);
bool is_unsafe_method(std::string_view method);
std::string csrf_token_for(std::string_view key, std::string_view session_token_id);
bool csrf_token_matches(std::string_view key, std::string_view session_token_id, std::string_view presented);

// The credential a request carries: Authorization: Bearer first, else the session cookie.
struct RequestCredential {
  std::string token;
  bool via_cookie = false;
};
RequestCredential request_credential(const Request& request);

// What a cookie-authenticated request must also show, else the reason it is refused ("" when
// it may go on). Unsafe methods: X-CSRF-Token matching the session, and an Origin (when
// present) naming this server. WebSocket upgrades: an Origin naming this server (a missing
// one is refused). Anything else: an Origin, when present, naming this server.
// `proxied`: a request for an instance's own web service (/jupyter/, /proxy/PORT/), whose pages
// cannot send the console's X-CSRF-Token (Jupyter has its own _xsrf): an unsafe method there
// needs an Origin naming this server instead, which a cross-site form or fetch cannot forge.
std::string cookie_request_refusal(const Request& request, std::string_view csrf_key, std::string_view session_token_id,
                                   bool proxied = false);

}  // namespace gpucloud::server
