#pragma once
// Principals by token hash, kept on the event loop so most requests need no store read.
// Invalidation is immediate even for lookups already under way: every invalidate() moves a
// generation counter, and a lookup that read the store under an older generation is not
// cached (its answer may predate the revoke, logout, password change, disable or demotion).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "auth/accounts.h"
#include "core/time_format.h"

namespace gpucloud::server {

class AuthCache {
 public:
  using Clock = std::chrono::steady_clock;
  // Bounds staleness from changes made by another process sharing the store.
  static constexpr auto kMaxAge = std::chrono::seconds(60);
  // On PostgreSQL other gpucloudd share the store: a token revoked or a user disabled through
  // one of them is refused by every other within this (issue 27: within 2 s).
  static constexpr auto kSharedStoreMaxAge = std::chrono::seconds(1);
  static constexpr std::size_t kMaxEntries = 100000;

  explicit AuthCache(Clock::duration max_age = kMaxAge) : max_age_(max_age) {}

  // Take before starting a store lookup; pass to insert() with its result.
  std::uint64_t generation() const { return generation_; }
  // The cached principal, unless absent, expired (`now`: the wall clock tokens expire by)
  // or older than its max age.
  std::optional<auth::Principal> find(const std::string& token_hash, SysTime now, Clock::time_point mono_now);
  // Caches a lookup's result; refused (false) when invalidate() ran after `lookup_generation`.
  bool insert(const std::string& token_hash, auth::Principal principal, std::optional<SysTime> expires_at,
              std::uint64_t lookup_generation, Clock::time_point mono_now);
  // Forgets everything and outdates every lookup under way.
  void invalidate();
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    auth::Principal principal;
    std::optional<SysTime> expires_at;
    Clock::time_point cached_at;
  };
  Clock::duration max_age_;
  std::unordered_map<std::string, Entry> entries_;
  std::uint64_t generation_ = 0;
};

}  // namespace gpucloud::server
