// Expired Idempotency-Keys do not linger: any claim purges every expired key, not only its own.
#include <filesystem>

#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "store/idempotency.h"
#include "store/store.h"

namespace gpucloud::store {
namespace {
namespace fs = std::filesystem;

TEST(IdempotencyPurge, AClaimPurgesEveryExpiredKey) {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-idem");
  auto store = Store::open((dir / "test.db").string(), 1);
  ASSERT_TRUE(store);
  auto& s = **store;
  IdempotencyScope old_key{"u-1", "POST", "/api/v1/tokens", "old", "h"};
  IdempotencyScope fresh_key{"u-1", "POST", "/api/v1/tokens", "fresh", "h"};
  IdempotencyScope other_user{"u-2", "POST", "/api/v1/ssh-keys", "new", "h"};
  auto now = system_now();
  auto long_ago = now - kIdempotencyRetention - std::chrono::minutes(1);
  ASSERT_TRUE(s.write_now([&](Database& db) { return complete_idempotency_key(db, old_key, {201, "{}"}, long_ago); }));
  ASSERT_TRUE(s.write_now([&](Database& db) { return complete_idempotency_key(db, fresh_key, {201, "{}"}, now); }));
  auto count = [&] {
    return s.read_now([](Database& db) -> Result<std::int64_t> {
      auto row = db.one("SELECT COUNT(*) FROM idempotency_keys");
      if (!row) return tl::unexpected(row.error());
      return (*row)->int64(0);
    });
  };
  EXPECT_EQ(*count(), 2);
  // Another user's claim on another path removes the expired key; the live one stays.
  auto claim = s.write_now([&](Database& db) { return claim_idempotency_key(db, other_user, now, false); });
  ASSERT_TRUE(claim);
  EXPECT_EQ(*count(), 1);
  auto replay = s.write_now([&](Database& db) { return claim_idempotency_key(db, fresh_key, now, false); });
  EXPECT_EQ(replay->outcome, ClaimOutcome::replay);
  (*store).reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpucloud::store
