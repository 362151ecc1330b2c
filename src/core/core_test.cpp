#include <vector>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "api/problem.h"
#include "auth/credentials.h"
#include "auth/login_throttle.h"
#include "core/ids.h"
#include "core/platform_clock.h"
#include "core/time_format.h"

namespace gpucloud {
namespace {
namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(Ids, HavePrefixAndAreNeverValidNames) {
  auto id = new_id("i");
  EXPECT_TRUE(looks_like_id(id, "i"));
  EXPECT_TRUE(looks_like_any_id(id));
  EXPECT_FALSE(is_valid_resource_name(id));
  EXPECT_NE(new_id("i"), new_id("i"));
  EXPECT_TRUE(is_valid_resource_name("train-1"));
  EXPECT_FALSE(is_valid_resource_name("Train"));
  EXPECT_FALSE(is_valid_resource_name("1abc"));
  EXPECT_FALSE(is_valid_resource_name(std::string(64, 'a')));
}

TEST(TimeFormat, RoundTripsRfc3339) {
  auto t = parse_rfc3339("2026-11-30T12:34:56Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(format_rfc3339(*t), "2026-11-30T12:34:56Z");
  auto offset = parse_rfc3339("2026-11-30T20:34:56+08:00");
  EXPECT_EQ(*offset, *t);
  EXPECT_EQ(format_rfc3339(*parse_rfc3339("2026-01-02T03:04:05.25Z")), "2026-01-02T03:04:05.250000Z");
  EXPECT_FALSE(parse_rfc3339("2026-13-01T00:00:00Z"));
  EXPECT_FALSE(parse_rfc3339("yesterday"));
}

TEST(Credentials, TokenHashIsSha256HexAndSecretsAreRandom) {
  EXPECT_EQ(auth::token_hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto a = auth::new_token_secret();
  auto b = auth::new_token_secret();
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with("gpc_"));
  EXPECT_GE(a.size(), 4u + 43u);  // 256 bits in base64url
}

TEST(Credentials, PasswordsUseArgon2id) {
  auto hash = auth::hash_password("correct horse");
  ASSERT_TRUE(hash);
  EXPECT_TRUE(hash->starts_with("$argon2id$"));
  EXPECT_TRUE(auth::verify_password("correct horse", *hash));
  EXPECT_FALSE(auth::verify_password("wrong horse", *hash));
  EXPECT_FALSE(auth::check_password_strength("short"));
}

TEST(LoginThrottle, BlocksAfterLimitUntilWindowPasses) {
  auth::LoginThrottle throttle(5, 900s);
  auto t0 = std::chrono::steady_clock::time_point{} + 1000h;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(throttle.retry_after("u", "1.2.3.4", t0 + std::chrono::seconds(i)), 0);
    throttle.record_failure("u", "1.2.3.4", t0 + std::chrono::seconds(i));
  }
  EXPECT_EQ(throttle.retry_after("u", "1.2.3.4", t0 + 10s), 890);
  EXPECT_EQ(throttle.retry_after("u", "5.6.7.8", t0 + 10s), 0);  // per (user, address)
  EXPECT_EQ(throttle.retry_after("v", "1.2.3.4", t0 + 10s), 0);
  EXPECT_EQ(throttle.retry_after("u", "1.2.3.4", t0 + 901s), 0);
}

TEST(Problem, DocumentCarriesCodeStatusAndExtras) {
  Error e{ErrorCode::no_capacity, "no host has 2 free RTX 4090", {{"gpus_free", 1}}, 0};
  auto body = boost::json::parse(api::problem_body(e)).as_object();
  EXPECT_EQ(body.at("type").as_string(), "about:blank");
  EXPECT_EQ(body.at("status").as_int64(), 409);
  EXPECT_EQ(body.at("code").as_string(), "no_capacity");
  EXPECT_EQ(body.at("detail").as_string(), "no host has 2 free RTX 4090");
  EXPECT_EQ(body.at("gpus_free").as_int64(), 1);
  EXPECT_EQ(http_status(ErrorCode::insufficient_balance), 402);
  EXPECT_EQ(http_status(ErrorCode::quota_exceeded), 403);
  EXPECT_EQ(http_status(ErrorCode::rate_limited), 429);
}

TEST(PlatformClock, TestClockFiresTimersInDeadlineOrderSeeingTheirDeadline) {
  asio::io_context io;
  auto start = *parse_rfc3339("2026-01-01T00:00:00Z");
  PlatformClock clock(io.get_executor(), true, start);
  std::vector<std::pair<std::string, SysTime>> fired;
  auto record = [&](std::string name) {
    return [&fired, &clock, name]() -> asio::awaitable<void> {
      fired.emplace_back(name, clock.now());
      co_return;
    };
  };
  clock.schedule_at(start + 30s, "c", record("c"));
  clock.schedule_at(start + 10s, "a", record("a"));
  clock.schedule_at(start + 20s, "b", [&]() -> asio::awaitable<void> {
    fired.emplace_back("b", clock.now());
    // A timer scheduled while firing, still inside the window, fires in the same advance.
    clock.schedule_at(clock.now() + 5s, "b2", record("b2"));
    co_return;
  });
  clock.schedule_at(start + 100s, "late", record("late"));
  bool done = false;
  auto run = [&]() -> asio::awaitable<void> {
    auto now = co_await clock.advance(60s);
    EXPECT_TRUE(now);
    EXPECT_EQ(*now, start + 60s);
    done = true;
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  ASSERT_TRUE(done);
  ASSERT_EQ(fired.size(), 4u);
  EXPECT_EQ(fired[0], std::make_pair(std::string("a"), start + 10s));
  EXPECT_EQ(fired[1], std::make_pair(std::string("b"), start + 20s));
  EXPECT_EQ(fired[2], std::make_pair(std::string("b2"), start + 25s));
  EXPECT_EQ(fired[3], std::make_pair(std::string("c"), start + 30s));
  EXPECT_EQ(clock.now(), start + 60s);
  EXPECT_EQ(clock.pending_timers(), 1u);
}

TEST(PlatformClock, AdvanceIsRefusedInRealMode) {
  asio::io_context io;
  PlatformClock clock(io.get_executor(), false, system_now());
  std::optional<Result<SysTime>> result;
  auto run = [&]() -> asio::awaitable<void> { result = co_await clock.advance(1s); };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  ASSERT_TRUE(result);
  ASSERT_FALSE(*result);
  EXPECT_EQ(result->error().code, ErrorCode::forbidden);
}

TEST(PlatformClock, RealModeTimersFire) {
  asio::io_context io;
  PlatformClock clock(io.get_executor(), false, system_now());
  bool fired = false;
  clock.schedule_after(std::chrono::milliseconds(20), "soon", [&]() -> asio::awaitable<void> {
    fired = true;
    co_return;
  });
  io.run_for(std::chrono::seconds(2));
  EXPECT_TRUE(fired);
}

}  // namespace
}  // namespace gpucloud
