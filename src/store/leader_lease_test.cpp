// The background lease (issue 27) on the store's own SQL: who may take it, when, and the
// fence a leader's commits check. Replicas share PostgreSQL; the same statements run here on
// SQLite (PostgresStoreTest runs the replicas themselves).
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "store/leader_lease.h"
#include "store/store.h"

namespace gpucloud::store {
namespace {

using Outcome = LeaseClaim::Outcome;
constexpr std::int64_t kLong = 60'000'000;  // a minute

class LeaderLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-lease");
    auto opened = Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(opened);
    store_ = std::move(*opened);
  }
  LeaseClaim claim(const std::string& holder, std::optional<std::int64_t> held, bool lock, std::int64_t term = kLong) {
    auto c = store_->write_now([&](Database& db) { return claim_lease(db, kBackgroundLease, holder, held, lock, term); });
    EXPECT_TRUE(c) << c.error().detail;
    return c ? *c : LeaseClaim{};
  }
  Status fence(std::int64_t epoch) {
    return store_->write_now([&](Database& db) { return check_lease_fence(db, kBackgroundLease, epoch); });
  }
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(LeaderLeaseTest, TheFirstClaimLeadsAndOthersStandByWhileItRenews) {
  auto a = claim("a", std::nullopt, true);
  EXPECT_EQ(a.outcome, Outcome::leading);
  EXPECT_EQ(a.epoch, 1);
  auto b = claim("b", std::nullopt, false);  // b cannot hold the lock a's session holds
  EXPECT_EQ(b.outcome, Outcome::standby);
  EXPECT_EQ(b.holder, "a");
  auto renewed = claim("a", 1, true);
  EXPECT_EQ(renewed.outcome, Outcome::leading);
  EXPECT_EQ(renewed.epoch, 1) << "a renewal keeps the epoch";
  EXPECT_TRUE(fence(1));
}

TEST_F(LeaderLeaseTest, AnExpiredLeaseIsTakenWithTheNextEpochAndTheOldLeaderIsDeposedAndFenced) {
  ASSERT_EQ(claim("a", std::nullopt, false, -1).outcome, Outcome::leading);  // expired at once
  auto b = claim("b", std::nullopt, false);
  EXPECT_EQ(b.outcome, Outcome::leading);
  EXPECT_EQ(b.epoch, 2);
  auto late = claim("a", 1, false);
  EXPECT_EQ(late.outcome, Outcome::deposed) << "a paused leader never takes the lease back by renewing";
  EXPECT_EQ(late.holder, "b");
  auto refused = fence(1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);
  EXPECT_TRUE(fence(2));
}

TEST_F(LeaderLeaseTest, ALockHeldByTheLeaderAndNowByAnotherMeansItsSessionEndedSoTheLeaseMovesAtOnce) {
  ASSERT_EQ(claim("a", std::nullopt, true).outcome, Outcome::leading);
  // The lease is far from expiring; b holds the advisory lock now: a's session is gone.
  auto b = claim("b", std::nullopt, true);
  EXPECT_EQ(b.outcome, Outcome::leading);
  EXPECT_EQ(b.epoch, 2);
}

TEST_F(LeaderLeaseTest, ALeaderWithoutTheLockIsNotTakenOverByOneThatHasIt) {
  // a took the lease by expiry while another session still held the lock: the lock says
  // nothing about a, so c holding it later must wait out a's term.
  ASSERT_EQ(claim("a", std::nullopt, false).outcome, Outcome::leading);
  EXPECT_EQ(claim("c", std::nullopt, true).outcome, Outcome::standby);
}

}  // namespace
}  // namespace gpucloud::store
