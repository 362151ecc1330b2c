#include "server/browser_session.h"

#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {

Request with(std::string method, std::vector<std::pair<std::string, std::string>> headers) {
  Request r;
  r.method = std::move(method);
  r.path = "/api/v1/instances";
  r.headers = std::move(headers);
  return r;
}

TEST(BrowserSessionCookie, ParsesTheCookieHeader) {
  EXPECT_EQ(cookie_value("gpucloud_session=abc", "gpucloud_session"), "abc");
  EXPECT_EQ(cookie_value("a=1; gpucloud_session=gpc_x-y; b=2", "gpucloud_session"), "gpc_x-y");
  EXPECT_EQ(cookie_value("a=1;gpucloud_session=\"q\"", "gpucloud_session"), "q");
  EXPECT_EQ(cookie_value("xgpucloud_session=no; other=1", "gpucloud_session"), "");
  EXPECT_EQ(cookie_value("", "gpucloud_session"), "");
  EXPECT_EQ(cookie_value("garbage; ;=;", "gpucloud_session"), "");
}

TEST(BrowserSessionCookie, SetAndClear) {
  EXPECT_EQ(session_cookie_header("tok", std::chrono::seconds(3600), false),
            "gpucloud_session=tok; HttpOnly; SameSite=Strict; Path=/; Max-Age=3600");
  EXPECT_EQ(session_cookie_header("tok", std::chrono::seconds(60), true),
            "gpucloud_session=tok; HttpOnly; SameSite=Strict; Path=/; Max-Age=60; Secure");
  EXPECT_EQ(cleared_session_cookie_header(false), "gpucloud_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
}

TEST(BrowserSessionCredential, BearerFirstThenCookie) {
  auto both = request_credential(with("GET", {{"authorization", "Bearer b"}, {"cookie", "gpucloud_session=c"}}));
  EXPECT_EQ(both.token, "b");
  EXPECT_FALSE(both.via_cookie);
  auto cookie = request_credential(with("GET", {{"cookie", "gpucloud_session=c"}}));
  EXPECT_EQ(cookie.token, "c");
  EXPECT_TRUE(cookie.via_cookie);
  EXPECT_EQ(request_credential(with("GET", {{"authorization", "Basic x"}, {"cookie", "gpucloud_session=c"}})).token, "");
  EXPECT_EQ(request_credential(with("GET", {})).token, "");
}

TEST(BrowserSessionOrigin, IsSchemeAndHost) {
  EXPECT_EQ(own_origin(with("GET", {{"host", "Console.Example:8080"}})), "http://console.example:8080");
  EXPECT_EQ(own_origin(with("GET", {{"host", "c.example"}, {"x-forwarded-proto", "https"}})), "https://c.example");
  EXPECT_EQ(own_origin(with("GET", {})), "");
  EXPECT_TRUE(origin_is_own(with("POST", {{"host", "h:1"}, {"origin", "http://h:1"}})));
  EXPECT_FALSE(origin_is_own(with("POST", {{"host", "h:1"}, {"origin", "http://evil:1"}})));
  EXPECT_FALSE(origin_is_own(with("POST", {{"host", "h:1"}, {"origin", "https://h:1"}})));
  EXPECT_FALSE(origin_is_own(with("POST", {{"host", "h:1"}, {"origin", "null"}})));
  EXPECT_FALSE(origin_is_own(with("POST", {{"host", "h:1"}})));
}

TEST(BrowserSessionCsrf, BoundToTheSessionAndChecked) {
  std::string key(32, 'k');
  auto token = csrf_token_for(key, "tok-1");
  EXPECT_EQ(token.size(), 64u);
  EXPECT_TRUE(csrf_token_matches(key, "tok-1", token));
  EXPECT_FALSE(csrf_token_matches(key, "tok-2", token));
  EXPECT_FALSE(csrf_token_matches(std::string(32, 'j'), "tok-1", token));
  EXPECT_FALSE(csrf_token_matches(key, "tok-1", ""));
  EXPECT_FALSE(csrf_token_matches(key, "tok-1", token.substr(1)));

  auto get = with("GET", {{"host", "h"}});
  EXPECT_EQ(cookie_request_refusal(get, key, "tok-1"), "");
  auto post = with("POST", {{"host", "h"}});
  EXPECT_NE(cookie_request_refusal(post, key, "tok-1"), "");
  post.headers.emplace_back("x-csrf-token", token);
  EXPECT_EQ(cookie_request_refusal(post, key, "tok-1"), "");
  post.headers.emplace_back("origin", "http://evil.example");
  EXPECT_NE(cookie_request_refusal(post, key, "tok-1").find("cross-origin"), std::string::npos);
  auto cross_get = with("GET", {{"host", "h"}, {"origin", "http://evil.example"}});
  EXPECT_NE(cookie_request_refusal(cross_get, key, "tok-1"), "");
  auto del = with("DELETE", {{"host", "h"}, {"origin", "http://h"}, {"x-csrf-token", "wrong"}});
  EXPECT_NE(cookie_request_refusal(del, key, "tok-1"), "");

  auto ws = with("GET", {{"host", "h"}});
  ws.websocket_upgrade = true;
  EXPECT_NE(cookie_request_refusal(ws, key, "tok-1"), "");  // no Origin on a cookie WebSocket
  ws.headers.emplace_back("origin", "http://h");
  EXPECT_EQ(cookie_request_refusal(ws, key, "tok-1"), "");

  // An instance's web service (Jupyter's own XHRs): no X-CSRF-Token, but its own Origin.
  auto proxied = with("POST", {{"host", "h"}});
  EXPECT_NE(cookie_request_refusal(proxied, key, "tok-1", true), "") << "no Origin: refused";
  proxied.headers.emplace_back("origin", "http://h");
  EXPECT_EQ(cookie_request_refusal(proxied, key, "tok-1", true), "");
  EXPECT_NE(cookie_request_refusal(proxied, key, "tok-1", false), "") << "the API itself still wants the token";
  auto forged = with("POST", {{"host", "h"}, {"origin", "http://evil.example"}});
  EXPECT_NE(cookie_request_refusal(forged, key, "tok-1", true).find("cross-origin"), std::string::npos);
}

}  // namespace
}  // namespace gpucloud::server
