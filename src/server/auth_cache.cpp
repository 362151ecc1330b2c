#include "server/auth_cache.h"

namespace gpucloud::server {

std::optional<auth::Principal> AuthCache::find(const std::string& token_hash, SysTime now, Clock::time_point mono_now) {
  auto it = entries_.find(token_hash);
  if (it == entries_.end()) return std::nullopt;
  if ((!it->second.expires_at || *it->second.expires_at > now) && mono_now - it->second.cached_at < max_age_)
    return it->second.principal;
  entries_.erase(it);
  return std::nullopt;
}

bool AuthCache::insert(const std::string& token_hash, auth::Principal principal, std::optional<SysTime> expires_at,
                       std::uint64_t lookup_generation, Clock::time_point mono_now) {
  if (lookup_generation != generation_) return false;
  if (entries_.size() >= kMaxEntries) entries_.clear();  // bounded; refilled by the next requests
  entries_[token_hash] = Entry{std::move(principal), expires_at, mono_now};
  return true;
}

void AuthCache::invalidate() {
  entries_.clear();
  ++generation_;
}

}  // namespace gpucloud::server
