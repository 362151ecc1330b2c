#pragma once
// Failed logins per (username, client address): after `limit` failures inside `window`,
// further attempts are refused until the oldest failure leaves the window. Monotonic clock;
// touched only on the event loop.
#include <chrono>
#include <deque>
#include <string>
#include <unordered_map>

namespace gpucloud::auth {

class LoginThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  LoginThrottle(int limit, std::chrono::seconds window) : limit_(limit), window_(window) {}

  // Seconds to wait before trying again, or 0 when an attempt is allowed now.
  std::int64_t retry_after(const std::string& username, const std::string& address, Clock::time_point now);
  void record_failure(const std::string& username, const std::string& address, Clock::time_point now);
  void record_success(const std::string& username, const std::string& address);

 private:
  std::deque<Clock::time_point>& failures(const std::string& key, Clock::time_point now);
  int limit_;
  std::chrono::seconds window_;
  std::unordered_map<std::string, std::deque<Clock::time_point>> failures_;
};

}  // namespace gpucloud::auth
