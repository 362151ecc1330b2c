// The auth cache: a lookup that began before an invalidation never puts its (possibly stale)
// principal back, so a revoke holds from the very next request.
#include <gtest/gtest.h>

#include "server/auth_cache.h"

namespace gpucloud::server {
namespace {
using namespace std::chrono_literals;

auth::Principal principal(std::string role) {
  return auth::Principal{auth::User{"u-1", "alice", std::nullopt, std::move(role), false, {}}, "tok-1", "session"};
}

TEST(AuthCache, ALookupStartedBeforeAnInvalidationIsNotCached) {
  AuthCache cache;
  auto now = system_now();
  auto mono = AuthCache::Clock::now();
  auto started = cache.generation();  // a request begins its store lookup...
  cache.invalidate();                 // ...a revoke commits and invalidates meanwhile...
  EXPECT_FALSE(cache.insert("h", principal("admin"), std::nullopt, started, mono));  // ...its answer is not kept
  EXPECT_FALSE(cache.find("h", now, mono));
  EXPECT_EQ(cache.size(), 0u);
  // A lookup begun after the invalidation is cached.
  EXPECT_TRUE(cache.insert("h", principal("user"), std::nullopt, cache.generation(), mono));
  ASSERT_TRUE(cache.find("h", now, mono));
  EXPECT_EQ(cache.find("h", now, mono)->user.role, "user");
}

TEST(AuthCache, InvalidateForgetsEverything) {
  AuthCache cache;
  auto mono = AuthCache::Clock::now();
  cache.insert("a", principal("admin"), std::nullopt, cache.generation(), mono);
  cache.insert("b", principal("user"), std::nullopt, cache.generation(), mono);
  cache.invalidate();
  EXPECT_FALSE(cache.find("a", system_now(), mono));
  EXPECT_FALSE(cache.find("b", system_now(), mono));
}

TEST(AuthCache, OnASharedStoreEntriesLiveOneSecond) {
  AuthCache cache(AuthCache::kSharedStoreMaxAge);
  const auto now = system_now();
  const auto mono = AuthCache::Clock::now();
  auth::Principal p;
  p.user.id = "u-1";
  p.token_id = "tok-1";
  ASSERT_TRUE(cache.insert("api", p, std::nullopt, cache.generation(), mono));
  EXPECT_TRUE(cache.find("api", now, mono + std::chrono::milliseconds(900)));
  EXPECT_FALSE(cache.find("api", now, mono + std::chrono::seconds(1))) << "another gpucloudd may have revoked it";
}

TEST(AuthCache, ExpiredTokensAndOldEntriesAreNotServed) {
  AuthCache cache;
  auto now = system_now();
  auto mono = AuthCache::Clock::now();
  cache.insert("session", principal("user"), now + 1s, cache.generation(), mono);
  EXPECT_TRUE(cache.find("session", now, mono));
  EXPECT_FALSE(cache.find("session", now + 1s, mono)) << "a session is refused from its expiry on";
  cache.insert("api", principal("user"), std::nullopt, cache.generation(), mono);
  EXPECT_TRUE(cache.find("api", now, mono + AuthCache::kMaxAge - 1s));
  EXPECT_FALSE(cache.find("api", now, mono + AuthCache::kMaxAge)) << "re-read after kMaxAge";
}

}  // namespace
}  // namespace gpucloud::server
