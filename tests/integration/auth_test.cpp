// The foundation end to end: the real gpucloudd on loopback, driven over HTTP.
#include <fstream>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "core/time_format.h"
#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// One daemon for the whole suite (shared_daemon.h): nothing here restarts it, and every test
// works with users of its own names, so they cannot see each other's effects. The suite runs
// as one ctest entry (CMakeLists.txt, GPUCLOUD_SHARED_DAEMON_SUITES), which is what makes the
// daemon shared; run alone, a test starts it for itself as before.
class AuthTest : public SharedDaemonTest<AuthTest> {};

// What must restart the daemon gets one of its own.
class AuthRestartTest : public ::testing::Test {
 protected:
  void SetUp() override { daemon_.start(); }
  TestDaemon daemon_;
};

TEST_F(AuthTest, HealthzAnswersWithoutToken) {
  auto r = daemon_.get("/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json().at("status").as_string(), "ok");
  EXPECT_EQ(daemon_.get("/api/v1/healthz").status, 200);
}

TEST_F(AuthTest, RegisterLoginMe) {
  auto reg = daemon_.post("/api/v1/auth/register", {{"username", "alice"}, {"password", "password-123"}, {"email", "a@example.com"}});
  ASSERT_EQ(reg.status, 201) << reg.body;
  EXPECT_EQ(reg.json().at("username").as_string(), "alice");
  EXPECT_TRUE(reg.json().at("id").as_string().starts_with("u-"));
  EXPECT_FALSE(reg.json().as_object().contains("password_hash"));
  auto login = daemon_.post("/api/v1/auth/login", {{"username", "alice"}, {"password", "password-123"}});
  ASSERT_EQ(login.status, 200) << login.body;
  std::string token(login.json().at("token").as_string());
  EXPECT_TRUE(login.json().as_object().contains("expires_at"));
  auto me = daemon_.get("/api/v1/me", token);
  ASSERT_EQ(me.status, 200);
  EXPECT_EQ(me.json().at("username").as_string(), "alice");
  EXPECT_EQ(me.json().at("role").as_string(), "user");
  EXPECT_EQ(me.json().at("email").as_string(), "a@example.com");
}

TEST_F(AuthTest, RegisterRefusesBadInputAndTakenNames) {
  EXPECT_EQ(daemon_.post("/api/v1/auth/register", {{"username", "Bad Name"}, {"password", "password-123"}}).code(),
            "invalid_argument");
  auto short_pw = daemon_.post("/api/v1/auth/register", {{"username", "bob"}, {"password", "short"}});
  EXPECT_EQ(short_pw.status, 400);
  EXPECT_NE(short_pw.body.find("password"), std::string::npos);
  EXPECT_EQ(daemon_.post("/api/v1/auth/register", {{"username", "bob"}, {"password", "password-123"}}).status, 201);
  auto taken = daemon_.post("/api/v1/auth/register", {{"username", "bob"}, {"password", "password-456"}});
  EXPECT_EQ(taken.status, 409);
  EXPECT_EQ(taken.code(), "conflict");
  EXPECT_EQ(taken.headers["content-type"], "application/problem+json");
}

TEST_F(AuthTest, WrongPasswordIsUnauthorizedThenThrottled) {
  daemon_.register_and_login("carol");
  for (int i = 0; i < 5; ++i) {
    auto r = daemon_.post("/api/v1/auth/login", {{"username", "carol"}, {"password", "wrong-password"}});
    EXPECT_EQ(r.status, 401) << i;
    EXPECT_EQ(r.code(), "unauthorized");
  }
  auto limited = daemon_.post("/api/v1/auth/login", {{"username", "carol"}, {"password", "password-123"}});
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.code(), "rate_limited");
  ASSERT_TRUE(limited.headers.count("retry-after"));
  EXPECT_GT(std::stoi(limited.headers["retry-after"]), 0);
  // Another username from the same address is not affected.
  daemon_.register_and_login("dave");
}

TEST_F(AuthTest, MissingOrBadTokenIsUnauthorized) {
  EXPECT_EQ(daemon_.get("/api/v1/me").status, 401);
  EXPECT_EQ(daemon_.get("/api/v1/me", "gpc_not-a-token").code(), "unauthorized");
}

TEST_F(AuthTest, ApiTokensAreShownOnceAndRevocationIsImmediate) {
  std::string session = daemon_.register_and_login("erin");
  auto created = daemon_.post("/api/v1/tokens", {{"name", "ci"}}, session);
  ASSERT_EQ(created.status, 201) << created.body;
  std::string api_token(created.json().at("token").as_string());
  std::string id(created.json().at("id").as_string());
  EXPECT_TRUE(id.starts_with("tok-"));
  EXPECT_EQ(daemon_.get("/api/v1/me", api_token).status, 200);
  auto list = daemon_.get("/api/v1/tokens", session);
  ASSERT_EQ(list.status, 200);
  auto items = list.json().at("items").as_array();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_FALSE(items[0].as_object().contains("token"));
  EXPECT_TRUE(list.json().at("next_cursor").is_null());
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/tokens/" + id, "", session).status, 204);
  EXPECT_EQ(daemon_.get("/api/v1/me", api_token).status, 401);
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/tokens/" + id, "", session).status, 404);
}

TEST_F(AuthTest, ATokenCanBeRevokedByItsName) {
  std::string session = daemon_.register_and_login("tokname");
  auto ci = daemon_.post("/api/v1/tokens", {{"name", "ci"}}, session);
  std::string ci_token(ci.json().at("token").as_string());
  std::string other = daemon_.register_and_login("tokother");
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/tokens/ci", "", other).status, 404) << "another user's name is not found";
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/tokens/ci", "", session).status, 204);
  EXPECT_EQ(daemon_.get("/api/v1/me", ci_token).status, 401);
  // Two live tokens of one name: the name does not say which.
  daemon_.post("/api/v1/tokens", {{"name", "twin"}}, session);
  auto second = daemon_.post("/api/v1/tokens", {{"name", "twin"}}, session);
  auto ambiguous = daemon_.request("DELETE", "/api/v1/tokens/twin", "", session);
  EXPECT_EQ(ambiguous.status, 409) << ambiguous.body;
  EXPECT_EQ(daemon_.get("/api/v1/me", std::string(second.json().at("token").as_string())).status, 200) << "nothing revoked";
}

TEST_F(AuthTest, AnotherUsersTokenAnswersNotFound) {
  std::string a = daemon_.register_and_login("frank");
  std::string b = daemon_.register_and_login("grace");
  auto created = daemon_.post("/api/v1/tokens", {{"name", "mine"}}, a);
  std::string id(created.json().at("id").as_string());
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/tokens/" + id, "", b).status, 404);
  EXPECT_EQ(daemon_.get("/api/v1/me", std::string(created.json().at("token").as_string())).status, 200);
}

TEST_F(AuthTest, LogoutRevokesTheSession) {
  std::string token = daemon_.register_and_login("heidi");
  EXPECT_EQ(daemon_.request("POST", "/api/v1/auth/logout", "", token).status, 204);
  EXPECT_EQ(daemon_.get("/api/v1/me", token).status, 401);
}

TEST_F(AuthTest, PasswordChangeRevokesOtherSessions) {
  std::string first = daemon_.register_and_login("ivan");
  std::string second = daemon_.login("ivan", "password-123");
  auto wrong = daemon_.request("PUT", "/api/v1/me/password",
                               R"({"old_password":"nope-nope","new_password":"new-password-1"})", first);
  EXPECT_EQ(wrong.status, 400);
  auto changed = daemon_.request("PUT", "/api/v1/me/password",
                                 R"({"old_password":"password-123","new_password":"new-password-1"})", first);
  EXPECT_EQ(changed.status, 204) << changed.body;
  EXPECT_EQ(daemon_.get("/api/v1/me", first).status, 200);
  EXPECT_EQ(daemon_.get("/api/v1/me", second).status, 401);
  EXPECT_EQ(daemon_.post("/api/v1/auth/login", {{"username", "ivan"}, {"password", "password-123"}}).status, 401);
  daemon_.login("ivan", "new-password-1");
}

TEST_F(AuthTest, DisabledUserCannotUseTokensOrLogIn) {
  std::string user = daemon_.register_and_login("judy");
  std::string api = std::string(daemon_.post("/api/v1/tokens", {{"name", "t"}}, user).json().at("token").as_string());
  std::string admin = daemon_.admin_token();
  auto me = daemon_.get("/api/v1/me", user).json();
  std::string id(me.at("id").as_string());
  auto patched = daemon_.request("PATCH", "/api/v1/admin/users/" + id, R"({"disabled": true})", admin);
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(daemon_.get("/api/v1/me", user).status, 401);
  EXPECT_EQ(daemon_.get("/api/v1/me", api).status, 401);
  EXPECT_EQ(daemon_.post("/api/v1/auth/login", {{"username", "judy"}, {"password", "password-123"}}).status, 401);
  daemon_.request("PATCH", "/api/v1/admin/users/judy", R"({"disabled": false})", admin);
  EXPECT_EQ(daemon_.get("/api/v1/me", api).status, 200);
}

TEST_F(AuthTest, OperatorEndpointsAreForbiddenToUsers) {
  std::string user = daemon_.register_and_login("mallory");
  auto r = daemon_.get("/api/v1/admin/users", user);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.code(), "forbidden");
  std::string admin = daemon_.admin_token();
  auto list = daemon_.get("/api/v1/admin/users", admin);
  ASSERT_EQ(list.status, 200);
  EXPECT_GE(list.json().at("items").as_array().size(), 2u);
  auto me = daemon_.get("/api/v1/me", admin);
  EXPECT_EQ(me.json().at("role").as_string(), "admin");
  auto created = daemon_.post("/api/v1/admin/users", {{"username", "operator2"}, {"password", "password-123"}, {"role", "admin"}}, admin);
  EXPECT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(daemon_.get("/api/v1/admin/users", daemon_.login("operator2", "password-123")).status, 200);
}

TEST_F(AuthTest, ClockIsForbiddenWithoutTestClock) {
  auto r = daemon_.post("/api/v1/admin/clock", {{"advance_seconds", 60}}, daemon_.admin_token());
  EXPECT_EQ(r.status, 403);
}

TEST_F(AuthTest, MalformedJsonUnknownRouteWrongMethodWrongType) {
  auto bad = daemon_.request("POST", "/api/v1/auth/login", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.code(), "invalid_argument");
  EXPECT_EQ(bad.headers["content-type"], "application/problem+json");
  auto array = daemon_.request("POST", "/api/v1/auth/login", "[1,2]");
  EXPECT_EQ(array.status, 400);
  auto unknown = daemon_.get("/api/v1/no-such-thing");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.code(), "not_found");
  auto method = daemon_.request("DELETE", "/api/v1/auth/login");
  EXPECT_EQ(method.status, 405);
  EXPECT_EQ(method.code(), "method_not_allowed");
  auto type = daemon_.request("POST", "/api/v1/auth/login", "username=a", "", {{"Content-Type", "text/plain"}});
  EXPECT_EQ(type.status, 415);
  EXPECT_EQ(type.code(), "unsupported_media_type");
  auto missing = daemon_.post("/api/v1/auth/register", {{"password", "password-123"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.json().at("detail").as_string().find("username"), std::string::npos);
}

// HEAD answers like GET without the body, on the same keep-alive connection.
TEST_F(AuthTest, HeadIsAGetWithoutItsBody) {
  std::string token = daemon_.register_and_login("headuser");
  auto get = daemon_.get("/api/v1/me", token);
  ASSERT_EQ(get.status, 200);
  std::string url = daemon_.endpoint() + "/api/v1/me";
  // Two HEADs then a GET on one connection (curl reuses it): the heads carry no body.
  std::string out = shell("curl -s -i --head -H 'Authorization: Bearer " + token + "' " + url + " --next -s -i --head " + url +
                          " --next -s -H 'Authorization: Bearer " + token + "' " + url + " | tr A-Z a-z");
  EXPECT_NE(out.find("http/1.1 200"), std::string::npos) << out;
  EXPECT_NE(out.find("content-length: " + std::to_string(get.body.size())), std::string::npos) << out;
  EXPECT_NE(out.find("http/1.1 401"), std::string::npos) << "the second HEAD has no token: " << out;
  EXPECT_EQ(out.find("\"username\""), out.rfind("\"username\"")) << "only the GET has a body: " << out;
  EXPECT_NE(out.find("headuser"), std::string::npos) << out;
  EXPECT_EQ(shell("curl -s -o /dev/null -w '%{http_code}' --head " + daemon_.endpoint() + "/api/v1/auth/login"), "405");
}

TEST_F(AuthTest, OversizedBodyIsRefused) {
  std::string big = R"({"username":"x","password":")" + std::string(2 * 1024 * 1024, 'a') + "\"}";
  auto r = daemon_.request("POST", "/api/v1/auth/register", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.code(), "payload_too_large");
  auto users = daemon_.get("/api/v1/admin/users?limit=1000", daemon_.admin_token()).json();
  for (const auto& u : users.at("items").as_array()) EXPECT_NE(u.at("username").as_string(), "x") << "registered anyway";
}

TEST_F(AuthTest, IdempotencyKeyReplaysAndRefusesOtherBody) {
  std::string token = daemon_.register_and_login("nina");
  std::map<std::string, std::string> key{{"Idempotency-Key", "k-1"}};
  auto first = daemon_.request("POST", "/api/v1/tokens", R"({"name":"a"})", token, key);
  ASSERT_EQ(first.status, 201);
  auto again = daemon_.request("POST", "/api/v1/tokens", R"({"name":"a"})", token, key);
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  // The same token, its secret shown once only (contract-notes.md).
  auto replayed = again.json().as_object();
  EXPECT_EQ(replayed.at("id"), first.json().at("id"));
  EXPECT_FALSE(replayed.contains("token"));
  EXPECT_EQ(replayed.at("token_redacted"), boost::json::value(true));
  auto other = daemon_.request("POST", "/api/v1/tokens", R"({"name":"b"})", token, key);
  EXPECT_EQ(other.status, 409);
  EXPECT_EQ(daemon_.get("/api/v1/tokens", token).json().at("items").as_array().size(), 1u);
  // Keys are scoped per user: another user may use the same key.
  std::string other_user = daemon_.register_and_login("oscar");
  EXPECT_EQ(daemon_.request("POST", "/api/v1/tokens", R"({"name":"a"})", other_user, key).status, 201);
}

TEST_F(AuthRestartTest, RestartKeepsUsersAndTokensAndSigtermExitsZero) {
  std::string token = daemon_.register_and_login("peggy");
  EXPECT_EQ(daemon_.stop(), 0);
  daemon_.start();
  EXPECT_EQ(daemon_.get("/api/v1/me", token).status, 200);
  daemon_.login("peggy", "password-123");
}

TEST_F(AuthTest, OpenApiListsExactlyTheServedRoutes) {
  auto doc = daemon_.get("/api/v1/openapi.json");
  ASSERT_EQ(doc.status, 200);
  EXPECT_EQ(std::string(doc.json().at("openapi").as_string()).substr(0, 2), "3.");
  std::string admin = daemon_.admin_token();
  const auto parsed = doc.json();
  const auto& paths = parsed.at("paths").as_object();
  EXPECT_TRUE(paths.contains("/api/v1/me"));
  EXPECT_TRUE(paths.contains("/api/v1/auth/login"));
  EXPECT_TRUE(paths.contains("/api/v1/tokens/{id}"));
  EXPECT_TRUE(paths.contains("/healthz"));
  EXPECT_TRUE(paths.contains("/metrics"));
  // Every documented path and method is served: none answers "no such endpoint" or 405.
  for (const auto& [path, methods] : paths) {
    std::string concrete(path);
    for (std::size_t open; (open = concrete.find('{')) != std::string::npos;)
      concrete.replace(open, concrete.find('}', open) - open + 1, "nonexistent-id");
    for (const auto& [method, op] : methods.as_object()) {
      std::string upper(method);
      for (char& c : upper) c = static_cast<char>(std::toupper(c));
      if (upper == "POST" && concrete == "/api/v1/auth/logout") continue;  // would end the admin session
      if (concrete == "/api/v1/events/stream") continue;  // never ends by design; events_test covers it
      auto r = daemon_.request(upper, concrete, upper == "GET" || upper == "DELETE" ? "" : "{}", admin);
      EXPECT_NE(r.status, 405) << upper << " " << concrete;
      if (r.status == 404) {
        EXPECT_EQ(r.body.find("no such endpoint"), std::string::npos) << upper << " " << concrete;
      }
    }
  }
}

TEST_F(AuthTest, MetricsCountRequestsPerRoute) {
  daemon_.get("/healthz");
  auto m = daemon_.get("/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("gpucloud_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"}"), std::string::npos);
  EXPECT_NE(m.body.find("gpucloud_http_request_duration_seconds_bucket"), std::string::npos);
}

TEST(AuthLogTest, LogOfAWholeRunHoldsNoSecret) {
  TestDaemon daemon;
  daemon.start();
  const std::string password = "very-secret-password-42";
  daemon.post("/api/v1/auth/register", {{"username", "quentin"}, {"password", password}});
  daemon.post("/api/v1/auth/login", {{"username", "quentin"}, {"password", "wrong-" + password}});
  std::string token = daemon.login("quentin", password);
  auto api = daemon.post("/api/v1/tokens", {{"name", "x"}}, token);
  std::string api_token(api.json().at("token").as_string());
  daemon.get("/api/v1/me", api_token);
  daemon.request("PUT", "/api/v1/me/password", R"({"old_password":")" + password + R"(","new_password":"another-)" + password + "\"}", token);
  daemon.stop();
  std::string log = daemon.log();
  EXPECT_NE(log.find("\"route\":\"/api/v1/me\""), std::string::npos) << "the request log is missing";
  EXPECT_EQ(log.find(password), std::string::npos);
  EXPECT_EQ(log.find(token), std::string::npos);
  EXPECT_EQ(log.find(api_token), std::string::npos);
  EXPECT_EQ(log.find("$argon2id$"), std::string::npos);
  EXPECT_EQ(log.find("admin-password-1"), std::string::npos);
}

// Bodies through an instance's web-service proxy may reach [server] proxy_max_body_bytes (a
// Notebook upload), and only for a caller whose token is valid; every other request keeps
// max_body_bytes. A proxied request to an instance that does not exist is 404 once its body
// is read: the size was admitted.
TEST(ProxyBodyLimitTest, LargerBodiesOnlyThroughTheProxiesAndOnlyForAnAuthenticatedCaller) {
  DaemonOptions options;
  options.config_toml = "[server]\nmax_body_bytes = 1048576\nproxy_max_body_bytes = 3145728\n";
  TestDaemon daemon(options);
  daemon.start();
  const std::string token = daemon.register_and_login("uploader");
  const std::string two_mib(2 << 20, 'a');
  const std::string four_mib(4 << 20, 'a');
  const std::string proxied = "/api/v1/instances/i-nothere/proxy/8000/upload";
  const std::map<std::string, std::string> octets{{"content-type", "application/octet-stream"}};

  auto admitted = daemon.request("PUT", proxied, two_mib, token, octets);
  EXPECT_EQ(admitted.status, 404) << admitted.body;
  auto jupyter = daemon.request("PUT", "/api/v1/instances/i-nothere/jupyter/api/contents/x.bin", two_mib, token, octets);
  EXPECT_EQ(jupyter.status, 404) << jupyter.body;
  auto past_proxy_limit = daemon.request("PUT", proxied, four_mib, token, octets);
  EXPECT_EQ(past_proxy_limit.status, 413) << past_proxy_limit.body;
  EXPECT_NE(past_proxy_limit.body.find("3145728"), std::string::npos) << past_proxy_limit.body;
  auto anonymous = daemon.request("PUT", proxied, two_mib, "", octets);
  EXPECT_EQ(anonymous.status, 413) << "no large body before authentication: " << anonymous.body;
  auto forged = daemon.request("PUT", proxied, two_mib, "gct_not-a-token", octets);
  EXPECT_EQ(forged.status, 413) << forged.body;
  auto api = daemon.request("POST", "/api/v1/ssh-keys", two_mib, token, {{"content-type", "application/json"}});
  EXPECT_EQ(api.status, 413) << "the API keeps max_body_bytes: " << api.body;
  EXPECT_NE(api.body.find("1048576"), std::string::npos) << api.body;

  // A chunked body counts against the same limits.
  const std::string file = daemon.dir() + "/two-mib.bin";
  std::ofstream(file, std::ios::binary) << two_mib;
  auto chunked = [&](const std::string& path) {
    return shell("curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Transfer-Encoding: chunked' -H 'Content-Type: "
                 "application/octet-stream' -H 'Authorization: Bearer " + token + "' --data-binary @" + file + " " +
                 daemon.endpoint() + path);
  };
  EXPECT_EQ(chunked(proxied), "404");
  EXPECT_EQ(chunked("/api/v1/ssh-keys"), "413");
}

TEST(AuthBootstrapTest, AdminPasswordIsWrittenWhenNotGiven) {
  DaemonOptions options;
  options.admin_password = "";
  TestDaemon daemon(options);
  daemon.start();
  std::ifstream in(daemon.data_dir() + "/admin-password");
  std::string password;
  std::getline(in, password);
  ASSERT_GE(password.size(), 16u);
  struct stat st {};
  ASSERT_EQ(::stat((daemon.data_dir() + "/admin-password").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  daemon.login("admin", password);
}

TEST(AuthConfigTest, ClosedRegistrationAndBadConfigRefused) {
  DaemonOptions options;
  options.config_toml = "registration = \"closed\"\n";
  TestDaemon daemon(options);
  daemon.start();
  auto r = daemon.post("/api/v1/auth/register", {{"username", "rita"}, {"password", "password-123"}});
  EXPECT_EQ(r.status, 403);
  DaemonOptions bad;
  bad.config_toml = "listen = \"127.0.0.1:0\"\nbogus_key = 1\n";
  TestDaemon broken(bad);
  try {
    broken.start();
    FAIL() << "a config with an unknown key must stop the daemon";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bogus_key"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpucloud::testing

namespace gpucloud::testing {
namespace {

TEST(TestClockTest, AdvanceMovesThePlatformClockAndSurvivesARestart) {
  DaemonOptions options;
  options.test_clock = true;
  TestDaemon daemon(options);
  daemon.start();
  std::string admin = daemon.admin_token();
  auto first = daemon.post("/api/v1/admin/clock", {{"advance_seconds", 3600}}, admin);
  ASSERT_EQ(first.status, 200) << first.body;
  auto t1 = parse_rfc3339(std::string(first.json().at("now").as_string()));
  auto second = daemon.post("/api/v1/admin/clock", {{"advance_seconds", 86400}}, admin);
  auto t2 = parse_rfc3339(std::string(second.json().at("now").as_string()));
  ASSERT_TRUE(t1 && t2);
  EXPECT_EQ(*t2 - *t1, std::chrono::hours(24));
  EXPECT_EQ(daemon.post("/api/v1/admin/clock", {{"advance_seconds", -5}}, admin).status, 400);
  EXPECT_EQ(daemon.post("/api/v1/admin/clock", {{"advance_seconds", 5}}, daemon.register_and_login("uma")).status, 403);
  daemon.restart();
  auto after = daemon.post("/api/v1/admin/clock", {{"advance_seconds", 0}}, daemon.admin_token());
  EXPECT_EQ(*parse_rfc3339(std::string(after.json().at("now").as_string())), *t2) << "the test clock resumes where it was";
}

}  // namespace
}  // namespace gpucloud::testing
