#pragma once
// Failed logins per (username, client address): after `limit` failures inside `window`,
// further attempts are refused until the oldest failure leaves the window. An attempt is
// reserved before its password is hashed and counts as a failure until it succeeds, so
// parallel guesses cannot all reach Argon2 before the first failure is recorded. Memory is
// bounded: at most `max_entries` keys, the least recently used idle ones evicted first.
// Monotonic clock; touched only on the event loop.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

namespace gpucloud::auth {

class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDefaultMaxEntries = 10000;
  LoginThrottle(int limit, std::chrono::seconds window, std::size_t max_entries = kDefaultMaxEntries)
      : limit_(limit), window_(window), max_entries_(max_entries) {}

  // Reserves an attempt: 0 when it may go ahead (then call finish_attempt exactly once),
  // else the seconds to wait (failures and attempts still running together reach the limit).
  std::int64_t begin_attempt(const std::string& username, const std::string& address, Clock::time_point now);
  enum class Outcome { failed, succeeded, not_checked };
  // Ends a reserved attempt: a failure stays counted for `window`; a success clears the key;
  // an attempt that never reached the password check (server busy) just frees its place.
  void finish_attempt(const std::string& username, const std::string& address, Outcome outcome, Clock::time_point now);

  // Seconds to wait before trying again, or 0 when an attempt is allowed now (reserves nothing).
  std::int64_t retry_after(const std::string& username, const std::string& address, Clock::time_point now);
  void record_failure(const std::string& username, const std::string& address, Clock::time_point now);
  void record_success(const std::string& username, const std::string& address);

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::deque<Clock::time_point> failures;
    int in_flight = 0;
    Clock::time_point last_used;
  };
  Entry& entry(const std::string& key, Clock::time_point now);
  std::int64_t wait_for(const Entry& e, Clock::time_point now) const;
  void make_room(Clock::time_point now);
  int limit_;
  std::chrono::seconds window_;
  std::size_t max_entries_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace gpucloud::auth
