#include "auth/login_throttle.h"

namespace gpucloud::auth {
namespace {
std::string key_of(const std::string& username, const std::string& address) { return username + '\n' + address; }
}  // namespace

std::deque<LoginThrottle::Clock::time_point>& LoginThrottle::failures(const std::string& key, Clock::time_point now) {
  auto& list = failures_[key];
  while (!list.empty() && now - list.front() >= window_) list.pop_front();
  return list;
}

std::int64_t LoginThrottle::retry_after(const std::string& username, const std::string& address, Clock::time_point now) {
  auto key = key_of(username, address);
  auto& list = failures(key, now);
  if (static_cast<int>(list.size()) < limit_) {
    if (list.empty()) failures_.erase(key);  // keep the map small
    return 0;
  }
  auto wait = std::chrono::duration_cast<std::chrono::seconds>(list.front() + window_ - now).count();
  return wait < 1 ? 1 : wait;
}

void LoginThrottle::record_failure(const std::string& username, const std::string& address, Clock::time_point now) {
  failures(key_of(username, address), now).push_back(now);
}

void LoginThrottle::record_success(const std::string& username, const std::string& address) {
  failures_.erase(key_of(username, address));
}

}  // namespace gpucloud::auth
