#include "server/browser_session.h"

#include <sodium.h>

#include "auth/credentials.h"

namespace gpucloud::server {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

std::string cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    auto semi = header.find(';');
    auto pair = trim(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    auto eq = pair.find('=');
    if (eq == std::string_view::npos) continue;
    if (trim(pair.substr(0, eq)) != name) continue;
    auto value = trim(pair.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return std::string(value);
  }
  return "";
}

std::string session_cookie_header(std::string_view token, std::chrono::seconds max_age, bool secure) {
  std::string out = std::string(kSessionCookie) + "=" + std::string(token) +
                    "; HttpOnly; SameSite=Strict; Path=/; Max-Age=" + std::to_string(max_age.count());
  if (secure) out += "; Secure";
  return out;
}

std::string cleared_session_cookie_header(bool secure) { return session_cookie_header("", std::chrono::seconds(0), secure); }

bool request_is_https(const Request& request) {
  auto proto = request.header("x-forwarded-proto");
  auto comma = proto.find(',');  // the first proxy's view is the client's
  return lower(trim(proto.substr(0, comma))) == "https";
}

std::string own_origin(const Request& request) {
  auto host = trim(request.header("host"));
  if (host.empty()) return "";
  return std::string(request_is_https(request) ? "https://" : "http://") + lower(host);
}

bool origin_is_own(const Request& request) {
  auto origin = trim(request.header("origin"));
  if (origin.empty()) return false;
  auto own = own_origin(request);
  return !own.empty() && lower(origin) == own;
}

bool is_unsafe_method(std::string_view method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS" && method != "TRACE";
}

std::string csrf_token_for(std::string_view key, std::string_view session_token_id) {
  return auth::keyed_hash(key, "csrf\n" + std::string(session_token_id));
}

bool csrf_token_matches(std::string_view key, std::string_view session_token_id, std::string_view presented) {
  std::string expected = csrf_token_for(key, session_token_id);
  if (presented.size() != expected.size()) return false;
  return sodium_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

RequestCredential request_credential(const Request& request) {
  std::string_view authorization = request.header("authorization");
  if (!authorization.empty()) {
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer) return {"", false};
    return {std::string(authorization.substr(kBearer.size())), false};
  }
  auto cookie = cookie_value(request.header("cookie"), kSessionCookie);
  if (!cookie.empty()) return {std::move(cookie), true};
  return {"", false};
}

std::string cookie_request_refusal(const Request& request, std::string_view csrf_key, std::string_view session_token_id,
                                   bool proxied) {
  bool has_origin = !trim(request.header("origin")).empty();
  if (request.websocket_upgrade) {
    if (!has_origin) return "a WebSocket authenticated by the session cookie must send Origin";
    if (!origin_is_own(request)) return "cross-origin request refused: Origin does not match this server";
    return "";
  }
  if (has_origin && !origin_is_own(request)) return "cross-origin request refused: Origin does not match this server";
  if (proxied && is_unsafe_method(request.method)) {
    if (!has_origin) return "an unsafe request to an instance's web service authenticated by the session cookie must send Origin";
    return "";
  }
  if (is_unsafe_method(request.method) &&
      !csrf_token_matches(csrf_key, session_token_id, trim(request.header("x-csrf-token"))))
    return "missing or wrong X-CSRF-Token: a request authenticated by the session cookie needs the csrf_token of "
           "its session (POST or GET /api/v1/auth/session)";
  return "";
}

}  // namespace gpucloud::server
