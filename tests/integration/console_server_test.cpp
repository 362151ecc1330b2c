// The web console's server side against the real daemon: its static files (from a small fake
// console directory given by [server] console_dir), browser sign-in with the session cookie,
// CSRF and Origin checks, and what ends a browser session.
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;

fs::path console_fixture_dir() {
  static const fs::path dir = gpucloud::testing::unique_temp_dir("gpucloud-console");
  return dir;
}

void write_file(const fs::path& path, const std::string& body) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << body;
}

// HEAD: the answer has a Content-Length and no body (the shared helper would wait for one).
HttpResult head_request(int port, const std::string& target) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(30));
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  http::request<http::empty_body> req{http::verb::head, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.keep_alive(false);
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> parser;
  parser.skip(true);
  http::read(stream, buffer, parser);
  HttpResult out;
  out.status = parser.get().result_int();
  for (const auto& f : parser.get()) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(f.value());
  }
  return out;
}

class ConsoleServerTest : public SharedDaemonTest<ConsoleServerTest> {
 public:
  static DaemonOptions daemon_options() {
    auto dir = console_fixture_dir();
    fs::remove_all(dir);
    write_file(dir / "index.html", "<!doctype html><title>gpucloud</title>");
    write_file(dir / "assets" / "index-a1b2c3.js", "console.log('console');");
    // Not real gzip: the server passes the precompressed sibling through as it is.
    write_file(dir / "assets" / "index-a1b2c3.js.gz", "GZIPPED-BYTES");
    write_file(dir / "assets" / "index-d4e5f6.css", "body{}");
    write_file(dir.parent_path() / (dir.filename().string() + "-secret.txt"), "top secret");
    DaemonOptions o;
    o.config_toml = "[server]\nconsole_dir = \"" + dir.string() + "\"\n";
    return o;
  }
  static void TearDownTestSuite() {
    SharedDaemonTest<ConsoleServerTest>::TearDownTestSuite();
    fs::remove_all(console_fixture_dir());
    fs::remove(console_fixture_dir().parent_path() / (console_fixture_dir().filename().string() + "-secret.txt"));
  }

 protected:
  struct BrowserSession {
    std::string cookie;  // "gpucloud_session=..."
    std::string csrf;
    json::value body;
  };
  // Registers `name` and signs in as a browser does.
  BrowserSession sign_in(const std::string& name, const std::string& password = "password-123") {
    auto reg = daemon_.post("/api/v1/auth/register", {{"username", name}, {"password", password}});
    EXPECT_EQ(reg.status, 201) << reg.body;
    auto r = daemon_.post("/api/v1/auth/session", {{"username", name}, {"password", password}});
    EXPECT_EQ(r.status, 200) << r.body;
    BrowserSession s;
    std::string set_cookie = r.headers["set-cookie"];
    s.cookie = set_cookie.substr(0, set_cookie.find(';'));
    s.csrf = std::string(r.json().at("csrf_token").as_string());
    s.body = r.json();
    return s;
  }
  HttpResult with_cookie(const BrowserSession& s, const std::string& method, const std::string& path,
                         const std::string& body = "", std::map<std::string, std::string> headers = {}) {
    headers["Cookie"] = s.cookie;
    return http_request(daemon_.port(), method, path, body, headers);
  }
};

TEST_F(ConsoleServerTest, ServesIndexAssetsGzipAndClientRoutes) {
  auto index = http_request(daemon_.port(), "GET", "/");
  ASSERT_EQ(index.status, 200) << index.body;
  EXPECT_EQ(index.body, "<!doctype html><title>gpucloud</title>");
  EXPECT_EQ(index.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(index.headers["cache-control"], "no-cache");
  EXPECT_NE(index.headers["content-security-policy"].find("default-src 'self'"), std::string::npos);
  EXPECT_NE(index.headers["content-security-policy"].find("style-src 'self' 'unsafe-inline'"), std::string::npos);
  EXPECT_EQ(index.headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(index.headers["referrer-policy"], "same-origin");
  EXPECT_EQ(index.headers["x-frame-options"], "SAMEORIGIN");

  auto js = http_request(daemon_.port(), "GET", "/assets/index-a1b2c3.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.body, "console.log('console');");
  EXPECT_EQ(js.headers["content-type"], "text/javascript; charset=utf-8");
  EXPECT_EQ(js.headers["cache-control"], "public, max-age=31536000, immutable");
  EXPECT_EQ(js.headers["vary"], "Accept-Encoding");
  EXPECT_EQ(js.headers.count("content-encoding"), 0u);
  auto gz = http_request(daemon_.port(), "GET", "/assets/index-a1b2c3.js", "", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_EQ(gz.status, 200);
  EXPECT_EQ(gz.body, "GZIPPED-BYTES");
  EXPECT_EQ(gz.headers["content-encoding"], "gzip");
  EXPECT_EQ(gz.headers["content-type"], "text/javascript; charset=utf-8");
  auto refused_gz = http_request(daemon_.port(), "GET", "/assets/index-a1b2c3.js", "", {{"Accept-Encoding", "gzip;q=0"}});
  EXPECT_EQ(refused_gz.body, "console.log('console');");
  auto css = http_request(daemon_.port(), "GET", "/assets/index-d4e5f6.css");
  EXPECT_EQ(css.headers["content-type"], "text/css; charset=utf-8");

  // Client routes answer index.html; a missing hashed asset is 404.
  for (const char* route : {"/instances/i-abc", "/market", "/billing/statements/2026-11"}) {
    auto r = http_request(daemon_.port(), "GET", route);
    EXPECT_EQ(r.status, 200) << route;
    EXPECT_EQ(r.body, index.body) << route;
    EXPECT_EQ(r.headers["cache-control"], "no-cache") << route;
  }
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/assets/index-000000.js").status, 404);
  auto head = head_request(daemon_.port(), "/instances/i-abc");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], std::to_string(index.body.size()));
  EXPECT_EQ(head.headers["content-type"], "text/html; charset=utf-8");
  // Not GET or HEAD: no console answer.
  EXPECT_EQ(http_request(daemon_.port(), "POST", "/instances/i-abc", "{}").status, 404);
}

TEST_F(ConsoleServerTest, NoPathReachesAFileOutsideTheDirectory) {
  const std::string secret = console_fixture_dir().filename().string() + "-secret.txt";
  for (const std::string& target : std::vector<std::string>{"/../" + secret, "/assets/../../" + secret, "/%2e%2e/" + secret, "/assets/..%2f..%2f" + secret,
                             "/%2e%2e%2f" + secret, "/..%5c" + secret, std::string("/assets/%00.js")}) {
    auto r = http_request(daemon_.port(), "GET", target);
    EXPECT_EQ(r.body.find("top secret"), std::string::npos) << target;
    EXPECT_TRUE(r.status == 404 || r.status == 400 || r.body.find("<!doctype html>") == 0) << target << " " << r.status;
  }
}

TEST_F(ConsoleServerTest, ApiMetricsAndHealthzAreUnchanged) {
  auto unknown = http_request(daemon_.port(), "GET", "/api/v1/no-such-endpoint");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.headers["content-type"], "application/problem+json");
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/api/v1/instances").status, 401);
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/healthz").headers["content-type"], "application/json");
  EXPECT_NE(http_request(daemon_.port(), "GET", "/metrics").body.find("gpucloud_http"), std::string::npos);
}

TEST_F(ConsoleServerTest, CookieSignInNeedsCsrfForUnsafeMethods) {
  auto name = unique_name("cookie");
  auto s = sign_in(name);
  EXPECT_EQ(s.body.at("user").at("username").as_string(), name);
  EXPECT_TRUE(s.body.as_object().contains("expires_at"));
  EXPECT_EQ(s.csrf.size(), 64u);
  auto raw = daemon_.post("/api/v1/auth/session", {{"username", name}, {"password", "password-123"}});
  const std::string set_cookie = raw.headers["set-cookie"];
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos);
  EXPECT_NE(set_cookie.find("Path=/"), std::string::npos);
  EXPECT_NE(set_cookie.find("Max-Age=86400"), std::string::npos);
  EXPECT_EQ(set_cookie.find("Secure"), std::string::npos);
  auto tls = http_request(daemon_.port(), "POST", "/api/v1/auth/session",
                          json::serialize(json::object{{"username", name}, {"password", "password-123"}}),
                          {{"X-Forwarded-Proto", "https"}});
  EXPECT_NE(tls.headers["set-cookie"].find("; Secure"), std::string::npos);

  // GET works with the cookie alone; the session reads back with the same CSRF token.
  auto me = with_cookie(s, "GET", "/api/v1/me");
  ASSERT_EQ(me.status, 200) << me.body;
  EXPECT_EQ(me.json().at("username").as_string(), name);
  auto session = with_cookie(s, "GET", "/api/v1/auth/session");
  ASSERT_EQ(session.status, 200) << session.body;
  EXPECT_EQ(session.json().at("csrf_token").as_string(), s.csrf);
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/api/v1/auth/session").status, 401);
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/api/v1/auth/session", "", {{"Cookie", "gpucloud_session=gpc_forged"}}).status,
            401);

  // POST without the CSRF token: 403, nothing made.
  const std::string body = json::serialize(json::object{{"name", "from-browser"}});
  auto no_csrf = with_cookie(s, "POST", "/api/v1/tokens", body);
  EXPECT_EQ(no_csrf.status, 403) << no_csrf.body;
  EXPECT_EQ(no_csrf.code(), "forbidden");
  EXPECT_NE(no_csrf.body.find("X-CSRF-Token"), std::string::npos);
  auto wrong = with_cookie(s, "POST", "/api/v1/tokens", body, {{"X-CSRF-Token", std::string(64, '0')}});
  EXPECT_EQ(wrong.status, 403);
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/tokens").json().at("items").as_array().size(), 0u);
  // With it (and a same-origin Origin): done.
  auto made = with_cookie(s, "POST", "/api/v1/tokens", body, {{"X-CSRF-Token", s.csrf}, {"Origin", "http://127.0.0.1"}});
  EXPECT_EQ(made.status, 201) << made.body;
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/tokens").json().at("items").as_array().size(), 1u);
  // Another session's CSRF token is not this one's.
  auto other = sign_in(unique_name("cookie2"));
  EXPECT_EQ(with_cookie(s, "POST", "/api/v1/tokens", body, {{"X-CSRF-Token", other.csrf}}).status, 403);
}

TEST_F(ConsoleServerTest, CrossOriginRequestsWithTheCookieAreRefused) {
  auto s = sign_in(unique_name("xorigin"));
  const std::string body = json::serialize(json::object{{"name", "evil"}});
  auto cross = with_cookie(s, "POST", "/api/v1/tokens", body, {{"X-CSRF-Token", s.csrf}, {"Origin", "http://evil.example"}});
  EXPECT_EQ(cross.status, 403) << cross.body;
  EXPECT_NE(cross.body.find("Origin"), std::string::npos);
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/tokens").json().at("items").as_array().size(), 0u);
  // The event stream checks Origin too.
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/events/stream", "", {{"Origin", "http://evil.example"}}).status, 403);
  // A bearer token is unaffected by Origin and needs no CSRF token.
  auto token = daemon_.login(std::string(s.body.at("user").at("username").as_string()), "password-123");
  auto bearer = http_request(daemon_.port(), "POST", "/api/v1/tokens", body,
                             {{"Authorization", "Bearer " + token}, {"Origin", "http://evil.example"}});
  EXPECT_EQ(bearer.status, 201) << bearer.body;
}

TEST_F(ConsoleServerTest, LogoutEndsTheBrowserSession) {
  auto s = sign_in(unique_name("logout"));
  auto no_csrf = with_cookie(s, "DELETE", "/api/v1/auth/session");
  EXPECT_EQ(no_csrf.status, 403);
  auto out = with_cookie(s, "DELETE", "/api/v1/auth/session", "", {{"X-CSRF-Token", s.csrf}});
  EXPECT_EQ(out.status, 204) << out.body;
  EXPECT_NE(out.headers["set-cookie"].find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/me").status, 401);
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/auth/session").status, 401);

  // POST /auth/logout with the cookie ends it too.
  auto name = unique_name("logout2");
  auto t = sign_in(name);
  EXPECT_EQ(with_cookie(t, "POST", "/api/v1/auth/logout", "", {{"X-CSRF-Token", t.csrf}}).status, 204);
  EXPECT_EQ(with_cookie(t, "GET", "/api/v1/me").status, 401);
}

TEST_F(ConsoleServerTest, PasswordChangeEndsEverySessionAndCanRevokeApiTokens) {
  auto name = unique_name("passwd");
  auto s = sign_in(name);
  auto second_browser = daemon_.post("/api/v1/auth/session", {{"username", name}, {"password", "password-123"}});
  std::string other_cookie = second_browser.headers["set-cookie"].substr(0, second_browser.headers["set-cookie"].find(';'));
  auto cli_session = daemon_.login(name, "password-123");
  auto api = daemon_.request("POST", "/api/v1/tokens", json::serialize(json::object{{"name", "ci"}}), cli_session);
  ASSERT_EQ(api.status, 201) << api.body;
  std::string api_token(api.json().at("token").as_string());

  // From the browser, without revoke_tokens: every session ends (this one too), API tokens stay.
  auto changed = with_cookie(s, "PUT", "/api/v1/me/password",
                             json::serialize(json::object{{"old_password", "password-123"}, {"new_password", "password-456"}}),
                             {{"X-CSRF-Token", s.csrf}});
  ASSERT_EQ(changed.status, 204) << changed.body;
  EXPECT_NE(changed.headers["set-cookie"].find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(with_cookie(s, "GET", "/api/v1/me").status, 401);
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/api/v1/me", "", {{"Cookie", other_cookie}}).status, 401);
  EXPECT_EQ(daemon_.get("/api/v1/me", cli_session).status, 401);
  EXPECT_EQ(daemon_.get("/api/v1/me", api_token).status, 200);

  // From the CLI with revoke_tokens: its own session stays (the spec's "other sessions"), the
  // API tokens and browser sessions go.
  auto t = daemon_.post("/api/v1/auth/session", {{"username", name}, {"password", "password-456"}});
  std::string browser = t.headers["set-cookie"].substr(0, t.headers["set-cookie"].find(';'));
  auto cli = daemon_.login(name, "password-456");
  auto revoke = daemon_.request("PUT", "/api/v1/me/password",
                                json::serialize(json::object{{"old_password", "password-456"},
                                                             {"new_password", "password-789"},
                                                             {"revoke_tokens", true}}),
                                cli);
  ASSERT_EQ(revoke.status, 204) << revoke.body;
  EXPECT_EQ(daemon_.get("/api/v1/me", api_token).status, 401);
  EXPECT_EQ(http_request(daemon_.port(), "GET", "/api/v1/me", "", {{"Cookie", browser}}).status, 401);
  EXPECT_EQ(daemon_.get("/api/v1/me", cli).status, 200);
  auto bad = daemon_.request("PUT", "/api/v1/me/password",
                             json::serialize(json::object{{"old_password", "password-789"},
                                                          {"new_password", "password-000"},
                                                          {"revoke_tokens", "yes"}}),
                             cli);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(daemon_.get("/api/v1/me", cli).status, 200);
}

TEST_F(ConsoleServerTest, SignInFailsAsLoginDoes) {
  auto name = unique_name("signfail");
  ASSERT_EQ(daemon_.post("/api/v1/auth/register", {{"username", name}, {"password", "password-123"}}).status, 201);
  auto wrong = daemon_.post("/api/v1/auth/session", {{"username", name}, {"password", "wrong-password"}});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.headers.count("set-cookie"), 0u);
  EXPECT_EQ(daemon_.post("/api/v1/auth/session", {{"username", name}}).status, 400);
}

}  // namespace
}  // namespace gpucloud::testing
