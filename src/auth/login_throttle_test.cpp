// Login throttling: attempts are counted before their password is hashed, and the
// throttle's memory stays bounded under a flood of usernames.
#include <gtest/gtest.h>

#include "auth/login_throttle.h"

namespace gpucloud::auth {
namespace {
using namespace std::chrono_literals;
using Outcome = LoginThrottle::Outcome;
const auto t0 = std::chrono::steady_clock::time_point{} + 1000h;

TEST(LoginThrottleAttempts, ParallelGuessesReserveAtMostTheLimit) {
  LoginThrottle throttle(5, 900s);
  int admitted = 0, refused = 0;
  // 20 guesses arrive before any has been checked.
  for (int i = 0; i < 20; ++i) (throttle.begin_attempt("u", "1.2.3.4", t0) == 0 ? admitted : refused)++;
  EXPECT_EQ(admitted, 5);
  EXPECT_EQ(refused, 15);
  EXPECT_EQ(throttle.begin_attempt("u", "1.2.3.4", t0), 1) << "attempts under way settle soon: retry in 1 s";
  for (int i = 0; i < 5; ++i) throttle.finish_attempt("u", "1.2.3.4", Outcome::failed, t0 + 1s);
  EXPECT_EQ(throttle.begin_attempt("u", "1.2.3.4", t0 + 10s), 891) << "five failures: wait for the window";
  EXPECT_EQ(throttle.begin_attempt("u", "5.6.7.8", t0 + 10s), 0) << "per (user, address)";
  EXPECT_EQ(throttle.begin_attempt("u", "1.2.3.4", t0 + 902s), 0);
}

TEST(LoginThrottleAttempts, SuccessClearsAndAnUncheckedAttemptCountsNothing) {
  LoginThrottle throttle(2, 900s);
  ASSERT_EQ(throttle.begin_attempt("u", "a", t0), 0);
  throttle.finish_attempt("u", "a", Outcome::failed, t0);
  ASSERT_EQ(throttle.begin_attempt("u", "a", t0), 0);
  throttle.finish_attempt("u", "a", Outcome::not_checked, t0);  // server busy: no verdict
  ASSERT_EQ(throttle.begin_attempt("u", "a", t0), 0) << "the unchecked attempt freed its place";
  throttle.finish_attempt("u", "a", Outcome::failed, t0);
  EXPECT_GT(throttle.begin_attempt("u", "a", t0), 1) << "an unchecked attempt must not clear failures";
  LoginThrottle other(2, 900s);
  ASSERT_EQ(other.begin_attempt("v", "a", t0), 0);
  other.finish_attempt("v", "a", Outcome::failed, t0);
  ASSERT_EQ(other.begin_attempt("v", "a", t0), 0);
  other.finish_attempt("v", "a", Outcome::succeeded, t0);
  EXPECT_EQ(other.size(), 0u);
}

TEST(LoginThrottleAttempts, MemoryIsBoundedUnderAFloodOfUsernames) {
  LoginThrottle throttle(5, 900s, 1000);
  // A target under attack, then a flood of random names from the same address.
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(throttle.begin_attempt("target", "1.2.3.4", t0), 0);
    throttle.finish_attempt("target", "1.2.3.4", Outcome::failed, t0);
  }
  std::size_t largest = 0;
  for (int i = 0; i < 50000; ++i) {
    std::string name = "flood-" + std::to_string(i);
    auto now = t0 + std::chrono::milliseconds(i);
    if (throttle.begin_attempt(name, "6.6.6.6", now) == 0) throttle.finish_attempt(name, "6.6.6.6", Outcome::failed, now);
    largest = std::max(largest, throttle.size());
  }
  EXPECT_LE(largest, 1000u);
  // Attempts under way are never evicted: their reservation is still released correctly.
  LoginThrottle busy(1, 900s, 10);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(busy.begin_attempt("b" + std::to_string(i), "a", t0), 0);
  EXPECT_EQ(busy.begin_attempt("new", "a", t0), 0);
  EXPECT_NE(busy.begin_attempt("b0", "a", t0), 0) << "b0's attempt is still counted";
}

}  // namespace
}  // namespace gpucloud::auth
