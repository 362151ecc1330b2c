// System disks in a host's disk pool (instances/system_disk.h) when the host's engine starts
// or stops enforcing their sizes after instances were placed on it (its first report came
// after them, or its storage driver changed): they start or stop counting, each once, even
// past the pool's capacity; a released instance never counts.
#include "instances/system_disk.h"

#include <filesystem>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "market/disk_pool.h"
#include "store/store.h"

namespace gpucloud::instances {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

class SystemDiskPoolRecountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-sysdisk");
    auto s = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
    auto r = store_->write_now([](store::Database& db) {
      return db.exec_script(R"sql(
INSERT INTO billing_accounts (id, kind, name, balance, created_at) VALUES ('ba-1', 'user', 'alice', 0, 0);
INSERT INTO users (id, username, password_hash, role, created_at, billing_account) VALUES ('u-1', 'alice', 'x', 'user', 0, 'ba-1');
INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, memory_gib, port_min, port_max, created_at,
                   disk_pool_capacity_bytes)
  VALUES ('h-1', 'node-1', 'zone-a', 'ready', 1, 'simulated', 'docker', 8, 32, 30000, 30099, 0, 26843545600);
INSERT INTO images (id, name, engine_image, visibility, state, created_at) VALUES ('img-1', 'base', 'b', 'public', 'available', 0);
INSERT INTO instances (id, owner, name, state, zone, host_id, gpu_count, cpu, memory_gib, system_disk_gib, image_id, created_at) VALUES
  ('i-1', 'u-1', 'a', 'running', 'zone-a', 'h-1', 1, 4, 16, 10, 'img-1', 0),
  ('i-2', 'u-1', 'b', 'stopped', 'zone-a', 'h-1', 1, 4, 16, 20, 'img-1', 0),
  ('i-gone', 'u-1', 'c', 'released', 'zone-a', 'h-1', 1, 4, 16, 30, 'img-1', 0);
)sql");
    });
    ASSERT_TRUE(r) << r.error().detail;
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void report(bool enforced) {
    json::object observed{{"system_disk", json::object{{"enforced", enforced}, {"reason", enforced ? "" : "overlay2"}}}};
    auto s = store_->write_now(
        [&](store::Database& db) { return record_system_disk_report(db, "node-1", observed, system_now()); });
    ASSERT_TRUE(s) << s.error().detail;
  }
  std::int64_t provisioned() {
    auto p = store_->read_now([](store::Database& db) { return market::load_disk_pool(db, "h-1"); });
    EXPECT_TRUE(p && *p);
    return p && *p ? (*p)->provisioned_bytes : -1;
  }
  std::int64_t held(const std::string& id) {
    auto row = store_->read_now([&](store::Database& db) {
      return db.one("SELECT disk_pool_bytes FROM instances WHERE id = ?", {id});
    });
    EXPECT_TRUE(row && *row);
    return row && *row ? (*row)->int64(0) : -1;
  }

  fs::path dir_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(SystemDiskPoolRecountTest, InstancesPlacedBeforeTheFirstReportCountOnceItSaysEnforced) {
  EXPECT_EQ(provisioned(), 0) << "placed while the host had not said: nothing taken";
  report(true);
  EXPECT_EQ(held("i-1"), 10 * kGiBBytes);
  EXPECT_EQ(held("i-2"), 20 * kGiBBytes);
  EXPECT_EQ(held("i-gone"), 0);
  // 30 GiB in a 25 GiB pool: they exist, so they count; the next take is refused.
  EXPECT_EQ(provisioned(), 30 * kGiBBytes);
  auto take = store_->write_now([](store::Database& db) { return market::take_disk_pool(db, "h-1", kGiBBytes, "disk x"); });
  ASSERT_FALSE(take);
  EXPECT_EQ(take.error().code, ErrorCode::no_capacity);
  // The same report again (every reconcile sends it; another replica may record it too).
  report(true);
  EXPECT_EQ(provisioned(), 30 * kGiBBytes);
  // A release gives back what the instance held.
  auto freed = store_->write_now([](store::Database& db) { return free_system_disk(db, "i-1"); });
  ASSERT_TRUE(freed) << freed.error().detail;
  EXPECT_EQ(provisioned(), 20 * kGiBBytes);
}

TEST_F(SystemDiskPoolRecountTest, AHostThatStopsEnforcingGivesItsSystemDisksBackAndTakesThemAgainLater) {
  report(true);
  ASSERT_EQ(provisioned(), 30 * kGiBBytes);
  report(false);
  EXPECT_EQ(provisioned(), 0);
  EXPECT_EQ(held("i-1"), 0);
  EXPECT_EQ(held("i-2"), 0);
  report(false);
  EXPECT_EQ(provisioned(), 0);
  report(true);
  EXPECT_EQ(provisioned(), 30 * kGiBBytes);
}

}  // namespace
}  // namespace gpucloud::instances
