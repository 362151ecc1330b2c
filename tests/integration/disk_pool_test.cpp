// A host's disk pool on a small filesystem, as issue 23's review had it: the daemon's data
// directory on a 900 MiB loop-mounted ext4. Provisioned sizes never pass the pool's capacity
// ((size - reserve) x [agent] disk_overcommit): a disk larger than the pool is refused 409
// no_capacity naming the host, and several disks that together pass it are refused at the one
// that would cross. GET /admin/hosts shows the pool as the agent measured it.
#include <gtest/gtest.h>

#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

std::string pool_config() {
  static const int base = port_block();
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 2
memory_gib = 4
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[agent]
disk_overcommit = 4.0
)";
}

// A daemon of its own: its data directory is the loop filesystem.
class DiskPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    GPUCLOUD_NEED("root", have_root(), "needs root (a loop-mounted filesystem)");
    DaemonOptions o{pool_config()};
    daemon_ = std::make_unique<TestDaemon>(o);
    image_ = daemon_->dir() + "/pool.img";
    const std::string mnt = daemon_->data_dir();
    const std::string out = shell("truncate -s 900M '" + image_ + "' && mkfs.ext4 -q -F '" + image_ + "' && mount -o loop '" +
                                  image_ + "' '" + mnt + "' && echo mounted");
    ASSERT_NE(out.find("mounted"), std::string::npos) << out;
    mounted_ = mnt;
    daemon_->start();
    user_ = daemon_->register_and_login("alice");
  }
  void TearDown() override {
    if (daemon_) daemon_->stop();
    if (!mounted_.empty()) shell("umount -l '" + mounted_ + "' 2>&1; rm -f '" + image_ + "'");
  }
  HttpResult create(const std::string& name, int gib) {
    return daemon_->post("/api/v1/disks", {{"name", name}, {"size_gib", gib}, {"host", "node-1"}}, user_);
  }
  std::unique_ptr<TestDaemon> daemon_;
  std::string image_, mounted_, user_;
};

TEST_F(DiskPoolTest, DOCKER_ROOT_DisksNeverProvisionMoreThanTheSmallPoolHolds) {
  // The pool as the agent measured it: ~850 MiB as df counts it, 256 MiB held back, x 4.
  auto hosts = daemon_->get("/api/v1/admin/hosts", daemon_->admin_token());
  ASSERT_EQ(hosts.status, 200) << hosts.body;
  const json::value doc = hosts.json();
  const auto& pool = doc.at("items").as_array().at(0).at("disk_pool").as_object();
  const std::int64_t capacity = pool.at("capacity_bytes").as_int64();
  EXPECT_GT(pool.at("size_bytes").as_int64(), 700LL << 20);
  EXPECT_LT(pool.at("size_bytes").as_int64(), 900LL << 20);
  EXPECT_EQ(pool.at("reserve_bytes").as_int64(), 256LL << 20);
  EXPECT_EQ(capacity, (pool.at("size_bytes").as_int64() - (256LL << 20)) * 4);
  ASSERT_GT(capacity, 2LL << 30);
  ASSERT_LT(capacity, 3LL << 30);

  // Larger than the pool: refused, naming the host, nothing made.
  auto big = create("big", 5);
  ASSERT_EQ(big.status, 409) << big.body;
  EXPECT_EQ(big.json().at("code").as_string(), "no_capacity");
  EXPECT_NE(big.body.find("node-1"), std::string::npos) << big.body;
  EXPECT_EQ(daemon_->get("/api/v1/disks", user_).json().at("items").as_array().size(), 0u);

  // 1 + 1 GiB fit; the third crosses and is refused.
  for (const char* name : {"one", "two"}) {
    auto r = create(name, 1);
    ASSERT_EQ(r.status, 202) << r.body;
    const std::string id(r.json().at("id").as_string());
    ASSERT_TRUE(wait_until([&] { return daemon_->get("/api/v1/disks/" + id, user_).json().at("state") == "available"; }, 60s, "disk " + id + " available"));
  }
  auto third = create("three", 1);
  ASSERT_EQ(third.status, 409) << third.body;
  EXPECT_EQ(third.json().at("code").as_string(), "no_capacity");
  EXPECT_NE(third.body.find("short"), std::string::npos) << third.body;
  auto after = daemon_->get("/api/v1/admin/hosts", daemon_->admin_token());
  EXPECT_EQ(after.json().at("items").as_array().at(0).at("disk_pool").at("provisioned_bytes").as_int64(), 2LL << 30);
}

// The host says so at its first report (an instance placed before that is not counted).
::testing::AssertionResult reports_system_disks_enforced(TestDaemon& daemon) {
  return wait_until(
      [&] {
        auto h = daemon.get("/api/v1/admin/hosts", daemon.admin_token()).json();
        return h.at("items").as_array().at(0).at("system_disk_enforced").as_bool();
      },
      60s, "the host reports its system disks enforced");
}

// On overlay2 (the suite's engine) with [agent] system_disk_filesystems on, gpucloudd's default:
// the host enforces system disks (each a sized filesystem of its container's own), so an
// instance's system disk is a provision of the pool from create to release, and its image
// file lives in the data directory until the release.
TEST(SystemDiskPoolTest, DOCKER_ROOT_OnOverlay2AnInstancesSystemDiskIsEnforcedAndProvisionedUntilItsRelease) {
  GPUCLOUD_NEED_ENGINE();
  DaemonOptions o{pool_config()};
  o.system_disk_filesystems = true;
  TestDaemon daemon(o);
  daemon.start();
  const std::string user = daemon.register_and_login("dora");
  ASSERT_TRUE(reports_system_disks_enforced(daemon));
  auto made = daemon.post("/api/v1/instances", json::object{{"name", "sd"}, {"gpu_count", 0}, {"system_disk_gib", 10}}, user);
  ASSERT_EQ(made.status, 202) << made.body;
  const std::string id(made.json().at("id").as_string());
  ASSERT_TRUE(wait_until([&] { return daemon.get("/api/v1/instances/" + id, user).json().at("state") == "running"; }, 90s,
                         "instance running"));
  auto hosts = daemon.get("/api/v1/admin/hosts", daemon.admin_token());
  ASSERT_EQ(hosts.status, 200) << hosts.body;
  const json::value hosts_doc = hosts.json();
  const auto& host = hosts_doc.at("items").as_array().at(0).as_object();
  EXPECT_TRUE(host.at("system_disk_enforced").as_bool()) << hosts.body;
  EXPECT_EQ(host.at("disk_pool").at("provisioned_bytes").as_int64(), 10LL << 30) << hosts.body;
  const std::string images = daemon.data_dir() + "/agent/system-disks";
  EXPECT_EQ(shell("ls '" + images + "' | grep -c '\\.img$'"), "1\n") << shell("ls -la '" + images + "'");

  ASSERT_EQ(daemon.request("DELETE", "/api/v1/instances/" + id, "", user).status, 202);
  ASSERT_TRUE(wait_until([&] { return daemon.get("/api/v1/instances/" + id, user).json().at("state") == "released"; }, 90s,
                         "instance released"));
  EXPECT_TRUE(wait_until([&] { return shell("ls '" + images + "' 2>/dev/null").empty(); }, 30s, "the image deleted"));
  auto after = daemon.get("/api/v1/admin/hosts", daemon.admin_token());
  EXPECT_EQ(after.json().at("items").as_array().at(0).at("disk_pool").at("provisioned_bytes").as_int64(), 0) << after.body;
}

// kill -9 between the container's create and its system disk filesystem (fault point
// agent.ensure.after_container_create): the restarted agent finds a container that never
// started and no filesystem, and makes it before the start; without that the instance would
// run with no limit for good.
TEST(SystemDiskPoolTest, DOCKER_ROOT_AKillAfterTheContainerIsMadeStillGivesItItsSystemDiskFilesystem) {
  GPUCLOUD_NEED_ENGINE();
  DaemonOptions o{pool_config()};
  o.system_disk_filesystems = true;
  TestDaemon daemon(o);
  daemon.start();
  const std::string user = daemon.register_and_login("erin");
  ASSERT_TRUE(reports_system_disks_enforced(daemon));
  daemon.stop();
  daemon.start("agent.ensure.after_container_create");
  try {
    daemon.post("/api/v1/instances", json::object{{"name", "victim"}, {"gpu_count", 0}, {"system_disk_gib", 10}}, user);
  } catch (...) {
  }
  ASSERT_TRUE(daemon.killed_at("agent.ensure.after_container_create"));
  daemon.start();
  auto settled = daemon.wait_for_state("victim", "running", user, std::chrono::seconds(60));
  ASSERT_EQ(settled.at("state").as_string(), "running") << json::serialize(settled);
  const std::string container = "gpucloud-" + daemon.installation_id() + "-" + std::string(settled.at("id").as_string());
  const std::string upper = shell("docker inspect -f '{{.GraphDriver.Data.UpperDir}}' " + container);
  ASSERT_GT(upper.size(), 6u) << upper;
  const std::string layer = upper.substr(0, upper.size() - 6);  // without "/diff\n"
  EXPECT_EQ(shell("findmnt -n -o FSTYPE --mountpoint '" + layer + "'"), "ext4\n") << layer;
  EXPECT_EQ(shell("docker exec " + container + " sh -c \"df -P -k / | tail -1 | awk '{print (\\$2 > 9000000 && \\$2 <= 10485760)}'\""),
            "1\n")
      << shell("docker exec " + container + " df -k /");
  ASSERT_EQ(daemon.request("DELETE", "/api/v1/instances/victim", "", user).status, 202);
  ASSERT_EQ(daemon.wait_for_state("victim", "released", user).at("state").as_string(), "released");
  EXPECT_TRUE(wait_until([&] { return shell("ls '" + daemon.data_dir() + "/agent/system-disks' 2>/dev/null").empty(); }, 30s,
                         "the image deleted"));
}

// Storage needs money, snapshots a quota, and the recycle bin's deadline is the first deletion
// (issue 23), through the API on the test clock. A daemon of its own: the test moves its clock.
class StorageMoneyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    GPUCLOUD_NEED("root", have_root(), "needs root (loop-mounted disks)");
    DaemonOptions o{pool_config_with(R"(
[quotas]
snapshots = 1
[policy]
recycle_days = 7
)")};
    o.test_clock = true;
    o.signup_credit = 0;
    daemon_ = std::make_unique<TestDaemon>(o);
    daemon_->start();
    user_ = daemon_->register_and_login("carol");
  }
  static std::string pool_config_with(const std::string& more) {
    std::string c = pool_config();
    c.replace(c.find("[agent]\ndisk_overcommit = 4.0\n"), std::string("[agent]\ndisk_overcommit = 4.0\n").size(), "");
    return c + more;
  }
  void credit(std::int64_t amount) {
    auto r = daemon_->post("/api/v1/admin/users/carol/credit", {{"amount", amount}, {"note", "test"}}, daemon_->admin_token());
    ASSERT_EQ(r.status, 201) << r.body;
  }
  void advance(std::int64_t seconds) {
    auto r = daemon_->post("/api/v1/admin/clock", {{"advance_seconds", seconds}}, daemon_->admin_token());
    ASSERT_EQ(r.status, 200) << r.body;
  }
  std::unique_ptr<TestDaemon> daemon_;
  std::string user_;
};

TEST_F(StorageMoneyTest, DOCKER_ROOT_StorageNeedsMoneySnapshotsAQuotaAndTheBinKeepsItsFirstDeadline) {
  // At balance 0 no disk is made, however small (a GiB-day is priced).
  auto broke = daemon_->post("/api/v1/disks", {{"name", "data"}, {"size_gib", 1}}, user_);
  ASSERT_EQ(broke.status, 402) << broke.body;
  EXPECT_EQ(broke.json().at("code").as_string(), "insufficient_balance");
  EXPECT_EQ(daemon_->get("/api/v1/disks", user_).json().at("items").as_array().size(), 0u);
  credit(100);  // ¥1.00: a day of 1 GiB (0.48 fen) yes, of 2,000 GiB (¥9.60) no
  auto huge = daemon_->post("/api/v1/disks", {{"name", "huge"}, {"size_gib", 2000}}, user_);
  ASSERT_EQ(huge.status, 402) << huge.body;
  auto made = daemon_->post("/api/v1/disks", {{"name", "data"}, {"size_gib", 1}}, user_);
  ASSERT_EQ(made.status, 202) << made.body;
  const std::string id(made.json().at("id").as_string());
  ASSERT_TRUE(wait_until([&] { return daemon_->get("/api/v1/disks/" + id, user_).json().at("state") == "available"; }, 60s,
                         "disk " + id + " available"));

  // One snapshot allowed; the second is over the quota.
  auto snap = daemon_->post("/api/v1/disks/" + id + "/snapshots", {{"name", "one"}}, user_);
  ASSERT_EQ(snap.status, 202) << snap.body;
  const std::string snap_id(snap.json().at("id").as_string());
  ASSERT_TRUE(wait_until([&] { return daemon_->get("/api/v1/snapshots/" + snap_id, user_).json().at("state") == "available"; },
                         60s, "snapshot " + snap_id + " available"));
  auto second = daemon_->post("/api/v1/disks/" + id + "/snapshots", {{"name", "two"}}, user_);
  ASSERT_EQ(second.status, 403) << second.body;
  EXPECT_EQ(second.json().at("code").as_string(), "quota_exceeded");
  auto quota = daemon_->get("/api/v1/me/quota", user_);
  EXPECT_EQ(quota.json().at("snapshots").as_int64(), 1);
  EXPECT_EQ(quota.json().at("used").at("snapshots").as_int64(), 1);

  // Delete, restore 5 days later, delete again: the bin keeps the first deadline, so the disk
  // is gone 7 days after the FIRST deletion, not the second.
  auto del = daemon_->request("DELETE", "/api/v1/disks/" + id, "", user_);
  ASSERT_EQ(del.status, 202) << del.body;
  const std::string first_deleted(del.json().at("deleted_at").as_string());
  advance(5 * 86400);
  auto restored = daemon_->post("/api/v1/disks/" + id + "/restore", json::object{}, user_);
  ASSERT_EQ(restored.status, 200) << restored.body;
  auto again = daemon_->request("DELETE", "/api/v1/disks/" + id, "", user_);
  ASSERT_EQ(again.status, 202) << again.body;
  EXPECT_EQ(std::string(again.json().at("deleted_at").as_string()), first_deleted);
  advance(2 * 86400 + 60);
  ASSERT_TRUE(wait_until([&] { return daemon_->get("/api/v1/disks/" + id, user_).status == 404; }, 60s, "disk " + id + " purged"))
      << "the disk outlived its first deadline: " << daemon_->get("/api/v1/disks/" + id, user_).body;
}

}  // namespace
}  // namespace gpucloud::testing
