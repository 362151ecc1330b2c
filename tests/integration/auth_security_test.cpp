// Security of auth end to end: no secret at rest, revocation that reaches open streams and
// terminals at once, login throttling under parallel guesses, bounded input, and the
// idempotency and session behaviours around them.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <gtest/gtest.h>

#include "auth/credentials.h"
#include "support/capabilities.h"
#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// Every byte of the store: the database, its write-ahead log and shared-memory index.
std::string store_bytes(const TestDaemon& daemon) {
  std::string all;
  for (const char* suffix : {"", "-wal", "-shm"}) all += file_bytes(daemon.data_dir() + "/gpucloud.db" + suffix);
  return all;
}

std::string token_of(const HttpResult& r) { return std::string(r.json().at("token").as_string()); }

TEST(AuthSecrets, StoreFilesHoldNoTokenSessionOrPassword) {
  TestDaemon daemon;
  daemon.start();
  std::vector<std::string> secrets = {"admin-password-1"};
  std::string admin = daemon.admin_token();
  secrets.push_back(admin);
  const std::string pw_alice = "alice-secret-pw-1", pw_bob = "bob-secret-pw-22";
  secrets.insert(secrets.end(), {pw_alice, pw_bob});
  ASSERT_EQ(daemon.post("/api/v1/auth/register", {{"username", "alice"}, {"password", pw_alice}}).status, 201);
  const std::string bob_body = json::serialize(json::object{{"username", "bob"}, {"password", pw_bob}});
  // A plain SHA-256 of a body holding a password would let a copy of the store test guesses.
  secrets.push_back(auth::token_hash(bob_body));
  auto bob = daemon.request("POST", "/api/v1/admin/users", bob_body, admin, {{"Idempotency-Key", "make-bob"}});
  ASSERT_EQ(bob.status, 201) << bob.body;
  std::string alice = daemon.login("alice", pw_alice);
  secrets.push_back(alice);
  secrets.push_back(daemon.login("bob", pw_bob));
  std::map<std::string, std::string> key{{"Idempotency-Key", "tok-1"}};
  auto first = daemon.request("POST", "/api/v1/tokens", R"({"name":"ci"})", alice, key);
  ASSERT_EQ(first.status, 201) << first.body;
  secrets.push_back(token_of(first));
  secrets.push_back(token_of(daemon.post("/api/v1/tokens", {{"name", "plain"}}, alice)));
  const std::string pw_new = "changed-secret-pw-3";
  secrets.push_back(pw_new);
  ASSERT_EQ(daemon.request("PUT", "/api/v1/me/password",
                           json::serialize(json::object{{"old_password", pw_alice}, {"new_password", pw_new}}), alice)
                .status,
            204);

  // The replay is the same token without its secret: shown once, never stored.
  auto again = daemon.request("POST", "/api/v1/tokens", R"({"name":"ci"})", alice, key);
  ASSERT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(again.json().at("id"), first.json().at("id"));
  EXPECT_FALSE(again.json().as_object().contains("token")) << again.body;
  EXPECT_EQ(again.json().at("token_redacted"), json::value(true)) << again.body;
  EXPECT_EQ(daemon.get("/api/v1/tokens", alice).json().at("items").as_array().size(), 2u) << "no second token minted";

  auto check = [&](const std::string& when) {
    std::string bytes = store_bytes(daemon);
    ASSERT_GT(bytes.size(), 4096u) << when;
    for (const auto& secret : secrets) EXPECT_EQ(bytes.find(secret), std::string::npos) << when << ": " << secret;
    EXPECT_EQ(bytes.find("gpc_"), std::string::npos) << when << ": something token-shaped is stored";
    EXPECT_NE(bytes.find("$argon2id$"), std::string::npos) << when << ": passwords are stored as Argon2id";
  };
  check("while running");
  ASSERT_EQ(daemon.stop(), 0);
  check("after stop");

  // After a restart the key still replays, still without the secret.
  daemon.start();
  auto bob_again = daemon.request("POST", "/api/v1/admin/users", bob_body, daemon.admin_token(), {{"Idempotency-Key", "make-bob"}});
  EXPECT_EQ(bob_again.status, 201) << bob_again.body;
  EXPECT_EQ(bob_again.headers["idempotent-replayed"], "true");
  auto later = daemon.request("POST", "/api/v1/tokens", R"({"name":"ci"})", daemon.login("alice", pw_new), key);
  EXPECT_EQ(later.status, 201);
  EXPECT_EQ(later.headers["idempotent-replayed"], "true");
  EXPECT_EQ(later.json().at("id"), first.json().at("id"));
  EXPECT_FALSE(later.json().as_object().contains("token"));
}

// One daemon for the suite (shared_daemon.h): nothing here restarts it, and each test has
// users and keys of its own names.
class AuthSecurityTest : public SharedDaemonTest<AuthSecurityTest> {};

// A daemon per test: its test ends by stopping the daemon with an event stream still open.
class AuthStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { daemon_.start(); }
  TestDaemon daemon_;
};

TEST_F(AuthSecurityTest, ParallelWrongPasswordsGetAtMostFiveAnswers401) {
  const std::string victim = unique_name("victim");
  daemon_.register_and_login(victim);
  std::vector<HttpResult> answers(20);
  std::vector<std::thread> guesses;
  for (int i = 0; i < 20; ++i)
    guesses.emplace_back([&, i] {
      answers[i] = http_request(daemon_.port(), "POST", "/api/v1/auth/login",
                                R"({"username":")" + victim + R"(","password":"wrong-guess-)" + std::to_string(i) + "\"}",
                                {{"Content-Type", "application/json"}});
    });
  for (auto& t : guesses) t.join();
  int unauthorized = 0, limited = 0;
  for (auto& a : answers) {
    if (a.status == 401) ++unauthorized;
    if (a.status == 429) {
      ++limited;
      EXPECT_EQ(a.code(), "rate_limited");
      EXPECT_GT(std::stoi(a.headers["retry-after"]), 0);
    }
  }
  EXPECT_LE(unauthorized, 5);
  EXPECT_EQ(unauthorized + limited, 20);
  // The right password is now refused too, until the window passes.
  EXPECT_EQ(daemon_.post("/api/v1/auth/login", {{"username", victim}, {"password", "password-123"}}).status, 429);
}

// More logins at once than the password pool queues (64): the rest are told to come back.
TEST_F(AuthSecurityTest, AFloodOfLoginsPastThePasswordQueueIsUnavailableWithRetryAfter) {
  constexpr int kLogins = 160;
  const std::string flood = unique_name("flood");
  std::vector<HttpResult> answers(kLogins);
  std::vector<std::thread> logins;
  for (int i = 0; i < kLogins; ++i)
    logins.emplace_back([&, i] {
      answers[i] = http_request(daemon_.port(), "POST", "/api/v1/auth/login",
                                R"({"username":")" + flood + std::to_string(i) + R"(","password":"password-123"})",
                                {{"Content-Type", "application/json"}});
    });
  for (auto& t : logins) t.join();
  int unavailable = 0, unauthorized = 0;
  for (auto& a : answers) {
    if (a.status == 401) ++unauthorized;
    if (a.status == 503) {
      ++unavailable;
      EXPECT_EQ(a.code(), "unavailable");
      EXPECT_EQ(a.headers["retry-after"], "1");
    }
  }
  std::cerr << "password queue flood: " << unavailable << " of " << kLogins << " answered 503\n";
  EXPECT_GE(unavailable, 1) << "the queue is unbounded";
  EXPECT_EQ(unavailable + unauthorized, kLogins);
  EXPECT_EQ(daemon_.post("/api/v1/auth/login", {{"username", flood + "0"}, {"password", "password-123"}}).status, 401)
      << "a 503 did not count as a failed login";
}

TEST_F(AuthSecurityTest, OverlongUsernameOrPasswordIsRefusedBeforeAnyCheck) {
  auto long_name = daemon_.post("/api/v1/auth/login", {{"username", std::string(33, 'a')}, {"password", "password-123"}});
  EXPECT_EQ(long_name.status, 400);
  EXPECT_EQ(long_name.code(), "invalid_argument");
  auto long_password = daemon_.post("/api/v1/auth/login", {{"username", "admin"}, {"password", std::string(1025, 'p')}});
  EXPECT_EQ(long_password.status, 400);
  EXPECT_NE(long_password.body.find("password"), std::string::npos);
  std::string token = daemon_.register_and_login(unique_name("longpw"));
  auto change = daemon_.request("PUT", "/api/v1/me/password",
                                json::serialize(json::object{{"old_password", std::string(4096, 'x')}, {"new_password", "new-password-1"}}),
                                token);
  EXPECT_EQ(change.status, 400);
  // None of these counted as a failed login.
  daemon_.admin_token();
}

TEST(AuthSessions, SessionsExpireByTheirTtl) {
  TestDaemon daemon(DaemonOptions{"session_ttl = \"2s\"\n"});
  daemon.start();
  std::string token = daemon.register_and_login("shortlived");
  auto login = daemon.post("/api/v1/auth/login", {{"username", "shortlived"}, {"password", "password-123"}});
  EXPECT_EQ(daemon.get("/api/v1/me", token).status, 200);  // cached from here on
  auto refused_within = [&](const std::string& t, std::chrono::seconds limit) {
    HttpResult me;
    for (auto deadline = Clock::now() + limit; Clock::now() < deadline;) {
      me = daemon.get("/api/v1/me", t);
      if (me.status != 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return me;
  };
  auto expired = refused_within(token, std::chrono::seconds(6));
  EXPECT_EQ(expired.status, 401);
  EXPECT_NE(expired.body.find("expired"), std::string::npos) << expired.body;
  EXPECT_EQ(refused_within(token_of(login), std::chrono::seconds(6)).status, 401);
}

TEST_F(AuthSecurityTest, ADemotedOperatorLosesOperatorRoutesOnTheNextRequest) {
  std::string admin = daemon_.admin_token();
  const std::string op2_name = unique_name("op2");
  ASSERT_EQ(daemon_.post("/api/v1/admin/users", {{"username", op2_name}, {"password", "password-123"}, {"role", "admin"}}, admin).status, 201);
  std::string op2 = daemon_.login(op2_name, "password-123");
  ASSERT_EQ(daemon_.get("/api/v1/admin/users", op2).status, 200);  // its principal is cached now
  ASSERT_EQ(daemon_.request("PATCH", "/api/v1/admin/users/" + op2_name, R"({"role":"user"})", admin).status, 200);
  EXPECT_EQ(daemon_.get("/api/v1/admin/users", op2).status, 403);
  EXPECT_EQ(daemon_.get("/api/v1/me", op2).json().at("role").as_string(), "user");
}

TEST_F(AuthSecurityTest, AKeyRepeatedWhileTheFirstIsInFlightIsConflict) {
  std::string admin = daemon_.admin_token();
  const std::string body = R"({"username":")" + unique_name("twice") + R"(","password":"password-123"})";
  const std::string key = unique_name("same");  // the operator's keys are shared by the suite
  // Keep the password pool busy so the first create is still hashing when the repeats come.
  const std::string nobody = unique_name("nobody");
  std::vector<std::thread> load;
  for (int i = 0; i < 6; ++i)
    load.emplace_back([&, i] {
      http_request(daemon_.port(), "POST", "/api/v1/auth/login",
                   R"({"username":")" + nobody + std::to_string(i) + R"(","password":"password-123"})",
                   {{"Content-Type", "application/json"}});
    });
  std::vector<HttpResult> answers(6);
  std::vector<std::thread> creates;
  for (int i = 0; i < 6; ++i)
    creates.emplace_back([&, i] {
      answers[i] = daemon_.request("POST", "/api/v1/admin/users", body, admin, {{"Idempotency-Key", key}});
    });
  for (auto& t : creates) t.join();
  for (auto& t : load) t.join();
  int created = 0, conflicts = 0, replays = 0;
  for (auto& a : answers) {
    if (a.status == 201 && a.headers.count("idempotent-replayed")) ++replays;
    else if (a.status == 201) ++created;
    else if (a.status == 409) {
      ++conflicts;
      EXPECT_NE(a.body.find("in progress"), std::string::npos) << a.body;
    }
  }
  EXPECT_EQ(created, 1);
  EXPECT_GE(conflicts, 1);
  EXPECT_EQ(created + conflicts + replays, 6);
  auto replay = daemon_.request("POST", "/api/v1/admin/users", body, admin, {{"Idempotency-Key", key}});
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.headers["idempotent-replayed"], "true");
}

// Runs `curl -N` on the event stream in the background; knows when it connected and ended.
class StreamWatcher {
 public:
  StreamWatcher(const TestDaemon& daemon, const std::string& token)
      : out_(daemon.dir() + "/stream-" + random_suffix() + ".txt") {
    std::string cmd = "curl -sN --max-time 20 -H 'Authorization: Bearer " + token + "' " + daemon.endpoint() +
                      "/api/v1/events/stream > " + out_;
    thread_ = std::thread([this, cmd] {
      shell(cmd);
      ended_at_ = Clock::now();
      ended_ = true;
    });
  }
  ~StreamWatcher() { thread_.join(); }
  bool wait_connected() {
    for (auto deadline = Clock::now() + std::chrono::seconds(10); Clock::now() < deadline;) {
      if (file_bytes(out_).find(": connected") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Seconds from `since` until the stream ended, or -1 if it is still open after `limit`.
  double ended_within(Clock::time_point since, std::chrono::seconds limit) {
    while (!ended_ && Clock::now() < since + limit) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return ended_ ? std::chrono::duration<double>(ended_at_.load() - since).count() : -1;
  }
  std::string output() const { return file_bytes(out_); }

 private:
  std::string out_;
  std::atomic<bool> ended_ = false;
  std::atomic<Clock::time_point> ended_at_{};
  std::thread thread_;
};

TEST_F(AuthStreamTest, EventStreamsOfARevokedTokenOrADisabledUserCloseWithinTwoSeconds) {
  std::string session = daemon_.register_and_login("streamer");
  auto api = daemon_.post("/api/v1/tokens", {{"name", "s"}}, session);
  std::string api_token = token_of(api);
  std::string other = daemon_.register_and_login("streamer2");
  StreamWatcher by_api(daemon_, api_token), by_session(daemon_, session), other_a(daemon_, other),
      other_b(daemon_, other);
  ASSERT_TRUE(by_api.wait_connected() && by_session.wait_connected() && other_a.wait_connected() &&
              other_b.wait_connected());

  auto revoked_at = Clock::now();
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/tokens/" + std::string(api.json().at("id").as_string()), "", session).status, 204);
  double after_revoke = by_api.ended_within(revoked_at, std::chrono::seconds(5));
  std::cerr << "event stream closed " << after_revoke << " s after its token was revoked\n";
  EXPECT_GE(after_revoke, 0) << "the stream of a revoked token is still open";
  EXPECT_LT(after_revoke, 2.0);

  auto disabled_at = Clock::now();
  ASSERT_EQ(daemon_.request("PATCH", "/api/v1/admin/users/streamer", R"({"disabled":true})", daemon_.admin_token()).status, 200);
  double after_disable = by_session.ended_within(disabled_at, std::chrono::seconds(5));
  EXPECT_GE(after_disable, 0) << "the stream of a disabled user is still open";
  EXPECT_LT(after_disable, 2.0);

  // Logging out one session (the same token opened two streams) ends both; another user's
  // stream opened with another token stays.
  std::string other_second = daemon_.login("streamer2", "password-123");
  StreamWatcher second(daemon_, other_second);
  ASSERT_TRUE(second.wait_connected());
  auto logout_at = Clock::now();
  ASSERT_EQ(daemon_.request("POST", "/api/v1/auth/logout", "", other).status, 204);
  EXPECT_GE(other_a.ended_within(logout_at, std::chrono::seconds(5)), 0);
  EXPECT_GE(other_b.ended_within(logout_at, std::chrono::seconds(5)), 0);
  EXPECT_LT(second.ended_within(Clock::now(), std::chrono::seconds(1)), 0) << "an unrelated session's stream stays open";
  EXPECT_EQ(daemon_.stop(), 0) << "SIGTERM with an event stream open";  // and ends that stream
}

// Its own daemon, with a host on the engine.
TEST(AuthTerminalTest, DOCKER_ROOT_TheTerminalOfARevokedTokenClosesWithinTwoSeconds) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon daemon(DaemonOptions{R"(
[[hosts]]
name = "node-1"
cpu = 4
memory_gib = 16
port_range = "36600-36699"
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
)"});
  daemon.start();
  std::string session = daemon.register_and_login("termuser");
  ASSERT_EQ(daemon.post("/api/v1/instances", {{"name", "shell"}, {"gpu_count", 0}}, session).status, 202);
  auto running = daemon.wait_for_state("shell", "running", session);
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  auto api = daemon.post("/api/v1/tokens", {{"name", "term"}}, session);

  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace websocket = beast::websocket;
  auto open = [&](websocket::stream<beast::tcp_stream>& ws, const std::string& token) {
    beast::get_lowest_layer(ws).connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), daemon.port()));
    ws.set_option(websocket::stream_base::decorator(
        [token](websocket::request_type& req) { req.set(beast::http::field::authorization, "Bearer " + token); }));
    ws.handshake("127.0.0.1", "/api/v1/instances/shell/terminal");
    ws.binary(true);
    ws.write(asio::buffer(std::string("echo ready-$((40+2))\n")));
    std::string seen;
    beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(15));
    while (seen.find("ready-42") == std::string::npos) {
      beast::flat_buffer buffer;
      ws.read(buffer);
      seen += beast::buffers_to_string(buffer.data());
    }
  };
  // Reads until the server ends the session; seconds from `since`, or -1 past `limit`.
  auto ends_within = [](websocket::stream<beast::tcp_stream>& ws, Clock::time_point since, std::chrono::seconds limit) {
    beast::get_lowest_layer(ws).expires_at(since + limit);
    for (;;) {
      beast::flat_buffer buffer;
      beast::error_code ec;
      ws.read(buffer, ec);
      if (ec == beast::error::timeout) return -1.0;
      if (ec) return std::chrono::duration<double>(Clock::now() - since).count();
    }
  };
  asio::io_context io;
  websocket::stream<beast::tcp_stream> by_token(io), by_user(io);
  open(by_token, token_of(api));
  open(by_user, session);
  auto revoked_at = Clock::now();
  ASSERT_EQ(daemon.request("DELETE", "/api/v1/tokens/term", "", session).status, 204);
  double after_revoke = ends_within(by_token, revoked_at, std::chrono::seconds(5));
  std::cerr << "terminal closed " << after_revoke << " s after its token was revoked\n";
  EXPECT_GE(after_revoke, 0) << "the terminal of a revoked token is still open";
  EXPECT_LT(after_revoke, 2.0);
  auto disabled_at = Clock::now();
  ASSERT_EQ(daemon.request("PATCH", "/api/v1/admin/users/termuser", R"({"disabled":true})", daemon.admin_token()).status, 200);
  double after_disable = ends_within(by_user, disabled_at, std::chrono::seconds(5));
  EXPECT_GE(after_disable, 0) << "the terminal of a disabled user is still open";
  EXPECT_LT(after_disable, 2.0);
}

}  // namespace
}  // namespace gpucloud::testing
