// A host's disk pool (issue 23): the accounting (a take past the capacity is refused and
// changes nothing; two writers on one store never overbook it) and the operator's warnings
// (80 % and 95 % of real use, once per crossing).
#include "core/unique_temp_dir.h"
#include "market/disk_pool.h"

#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "market/hosts.h"
#include "store/store.h"

namespace gpucloud::market {
namespace {
namespace fs = std::filesystem;

std::string pool_temp_db() {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-pool");
  return (dir / "test.db").string();
}

class DiskPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = pool_temp_db();
    auto s = store::Store::open(path_, 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    agent::HostInventory h;
    h.name = "node-1";
    h.zone = "zone-a";
    h.cpu = 8;
    h.memory_gib = 32;
    h.port_min = 30000;
    h.port_max = 30999;
    h.inventory_source = "simulated";
    h.disk_pool = agent::DiskPool{"/srv", 30 * kGiB, 3 * kGiB, 5 * kGiB, 25 * kGiB};
    auto r = store_->write_now([&](store::Database& db) { return register_host(db, h, config_, system_now()); });
    ASSERT_TRUE(r) << r.error().detail;
    host_id_ = r->host.id;
    EXPECT_EQ(r->host.disk_pool.capacity_bytes, 25 * kGiB);
    EXPECT_FALSE(r->disk_pool_crossing);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(fs::path(path_).parent_path(), ec);
  }
  Status take(std::int64_t gib) {
    return store_->write_now([&](store::Database& db) { return take_disk_pool(db, host_id_, gib * kGiB, "disk x"); });
  }
  DiskPoolState pool() {
    auto p = store_->read_now([&](store::Database& db) { return load_disk_pool(db, host_id_); });
    EXPECT_TRUE(p && *p);
    return **p;
  }
  std::optional<DiskPoolCrossing> report(std::int64_t used_percent) {
    agent::DiskPool p{"/srv", 100 * kGiB, used_percent * kGiB, 5 * kGiB, 95 * kGiB};
    auto r = store_->write_now([&](store::Database& db) { return record_disk_pool(db, host_id_, p); });
    EXPECT_TRUE(r);
    return r ? *r : std::nullopt;
  }
  std::string path_, host_id_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
};

TEST_F(DiskPoolTest, ATakePastTheCapacityIsRefusedNamingTheHostAndWhatIsShort) {
  ASSERT_TRUE(take(20));
  auto refused = take(6);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::no_capacity);
  EXPECT_NE(refused.error().detail.find("node-1"), std::string::npos) << refused.error().detail;
  EXPECT_NE(refused.error().detail.find("1 GiB short"), std::string::npos) << refused.error().detail;
  EXPECT_EQ(pool().provisioned_bytes, 20 * kGiB) << "a refusal changes nothing";
  ASSERT_TRUE(take(5)) << "exactly the capacity fits";
  ASSERT_TRUE(take(-20));
  EXPECT_EQ(pool().provisioned_bytes, 5 * kGiB);
  ASSERT_TRUE(take(-100));
  EXPECT_EQ(pool().provisioned_bytes, 0) << "never below zero";
}

// Two stores on one file are two writers (two processes): each take is a conditional update
// in its own transaction, so together they reach the capacity and never pass it.
TEST_F(DiskPoolTest, TwoWritersNeverOverbookThePool) {
  auto second = store::Store::open(path_, 1);
  ASSERT_TRUE(second);
  std::atomic<int> taken{0};
  auto writer = [&](store::Store& s) {
    for (int n = 0; n < 20; ++n) {
      auto r = s.write_now([&](store::Database& db) { return take_disk_pool(db, host_id_, kGiB, "disk"); });
      if (r) ++taken;
      else EXPECT_EQ(r.error().code, ErrorCode::no_capacity) << r.error().detail;
    }
  };
  std::thread a([&] { writer(*store_); });
  std::thread b([&] { writer(**second); });
  a.join();
  b.join();
  EXPECT_EQ(taken.load(), 25);
  EXPECT_EQ(pool().provisioned_bytes, 25 * kGiB);
}

TEST_F(DiskPoolTest, AHostThatNeverReportedItsPoolIsCountedNotChecked) {
  agent::HostInventory h;
  h.name = "node-old";
  h.zone = "zone-a";
  h.cpu = 8;
  h.memory_gib = 32;
  h.port_min = 31000;
  h.port_max = 31999;
  auto r = store_->write_now([&](store::Database& db) { return register_host(db, h, config_, system_now()); });
  ASSERT_TRUE(r);
  auto big = store_->write_now([&](store::Database& db) { return take_disk_pool(db, r->host.id, 1000 * kGiB, "disk"); });
  EXPECT_TRUE(big);
  auto p = store_->read_now([&](store::Database& db) { return load_disk_pool(db, r->host.id); });
  ASSERT_TRUE(p && *p);
  EXPECT_EQ((*p)->provisioned_bytes, 1000 * kGiB);
  EXPECT_FALSE((*p)->capacity_bytes);
}

TEST_F(DiskPoolTest, TheOperatorIsWarnedOncePerCrossingOf80And95Percent) {
  EXPECT_FALSE(report(50));
  auto at80 = report(81);
  ASSERT_TRUE(at80);
  EXPECT_EQ(at80->percent, 80);
  EXPECT_FALSE(report(85)) << "once per crossing";
  auto at95 = report(96);
  ASSERT_TRUE(at95);
  EXPECT_EQ(at95->percent, 95);
  EXPECT_FALSE(report(97));
  EXPECT_FALSE(report(90)) << "falling back re-arms 95 silently";
  auto again = report(95);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->percent, 95);
  EXPECT_FALSE(report(10));
  EXPECT_EQ(pool().warned_percent, 0);
  EXPECT_EQ(pool().used_bytes, 10 * kGiB);
  EXPECT_EQ(pool().capacity_bytes, 95 * kGiB);
}

}  // namespace
}  // namespace gpucloud::market
