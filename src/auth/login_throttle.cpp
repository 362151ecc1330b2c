#include "auth/login_throttle.h"

#include <algorithm>
#include <vector>

namespace gpucloud::auth {
namespace {
std::string key_of(const std::string& username, const std::string& address) { return username + '\n' + address; }
}  // namespace

LoginThrottle::Entry& LoginThrottle::entry(const std::string& key, Clock::time_point now) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_entries_) make_room(now);
    it = entries_.emplace(key, Entry{}).first;
  }
  auto& e = it->second;
  while (!e.failures.empty() && now - e.failures.front() >= window_) e.failures.pop_front();
  e.last_used = now;
  return e;
}

// Drops keys whose failures all left the window; if that is not enough, the least recently
// used idle keys, down to 90% of the cap so a flood of new names costs amortised O(1).
void LoginThrottle::make_room(Clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) {
    const Entry& e = kv.second;
    return e.in_flight == 0 && (e.failures.empty() || now - e.failures.back() >= window_);
  });
  if (entries_.size() < max_entries_) return;
  std::vector<std::pair<Clock::time_point, const std::string*>> idle;
  for (const auto& [key, e] : entries_)
    if (e.in_flight == 0) idle.emplace_back(e.last_used, &key);
  std::size_t target = max_entries_ - max_entries_ / 10;
  std::size_t evict = entries_.size() > target ? std::min(idle.size(), entries_.size() - target) : 0;
  if (evict == 0) return;
  std::nth_element(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(evict - 1), idle.end());
  std::vector<std::string> victims;
  for (std::size_t i = 0; i < evict; ++i) victims.push_back(*idle[i].second);
  for (const auto& key : victims) entries_.erase(key);
}

std::int64_t LoginThrottle::wait_for(const Entry& e, Clock::time_point now) const {
  if (static_cast<int>(e.failures.size()) + e.in_flight < limit_) return 0;
  if (static_cast<int>(e.failures.size()) < limit_) return 1;  // attempts still running settle it soon
  auto wait = std::chrono::duration_cast<std::chrono::seconds>(e.failures.front() + window_ - now).count();
  return wait < 1 ? 1 : wait;
}

std::int64_t LoginThrottle::begin_attempt(const std::string& username, const std::string& address, Clock::time_point now) {
  auto& e = entry(key_of(username, address), now);
  if (auto wait = wait_for(e, now); wait > 0) return wait;
  ++e.in_flight;
  return 0;
}

void LoginThrottle::finish_attempt(const std::string& username, const std::string& address, Outcome outcome,
                                   Clock::time_point now) {
  auto key = key_of(username, address);
  auto& e = entry(key, now);
  if (e.in_flight > 0) --e.in_flight;
  if (outcome == Outcome::failed) {
    e.failures.push_back(now);
  } else if (outcome == Outcome::not_checked) {
    if (e.failures.empty() && e.in_flight == 0) entries_.erase(key);
  } else if (e.in_flight == 0) {
    entries_.erase(key);
  } else {
    e.failures.clear();
  }
}

std::int64_t LoginThrottle::retry_after(const std::string& username, const std::string& address, Clock::time_point now) {
  auto key = key_of(username, address);
  auto& e = entry(key, now);
  auto wait = wait_for(e, now);
  if (wait == 0 && e.failures.empty() && e.in_flight == 0) entries_.erase(key);  // keep the map small
  return wait;
}

void LoginThrottle::record_failure(const std::string& username, const std::string& address, Clock::time_point now) {
  entry(key_of(username, address), now).failures.push_back(now);
}

void LoginThrottle::record_success(const std::string& username, const std::string& address) {
  auto it = entries_.find(key_of(username, address));
  if (it == entries_.end()) return;
  if (it->second.in_flight == 0) entries_.erase(it);
  else it->second.failures.clear();
}

}  // namespace gpucloud::auth
