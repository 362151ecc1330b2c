// Data disks for real: the daemon, the Docker Engine, loop devices and OpenSSH. A disk's data
// outlives its instance, a full disk says ENOSPC, a grow shows inside the running instance,
// a snapshot gives the old content back, the recycle bin restores, and bad requests are
// refused with their code and change nothing.
#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/ssh_client.h"
#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

// Two hosts on this machine's engine, so "a disk on another host" can be tried.
std::string two_host_config() {
  static const int base = port_block();
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[hosts]]
name = "node-2"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base + 100) + "-" + std::to_string(base + 199) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[quotas]
disk_gib = 20
[policy]
recycle_days = 2
)";
}

// A daemon per test: one test moves the test clock past the recycle period, and all are
// DOCKER_ tests, which ctest runs one per entry (a shared suite holds none, CMakeLists.txt).
class DisksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    DaemonOptions o{two_host_config()};
    o.test_clock = true;
    daemon_ = std::make_unique<TestDaemon>(o);
    daemon_->start();
    user_ = daemon_->register_and_login("alice");
    key_ = make_key();
    auto r = daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, user_);
    ASSERT_EQ(r.status, 201) << r.body;
  }
  void TearDown() override {
    if (!key_.dir.empty()) shell("rm -rf '" + key_.dir + "'");
  }
  json::value create_instance(const std::string& name, json::array data_disks) {
    json::object body{{"name", name}, {"gpu_count", 0}, {"ssh_keys", json::array{"laptop"}}, {"data_disks", data_disks}};
    auto r = daemon_->post("/api/v1/instances", body, user_);
    EXPECT_EQ(r.status, 202) << r.body;
    auto running = daemon_->wait_for_state(name, "running", user_);
    if (running.is_object() && running.at("state").as_string() == "running") wait_ssh(running);
    return running;
  }
  // The instance answers SSH (its sshd starts just after `running`).
  void wait_ssh(const json::value& instance) {
    int rc = -1;
    ASSERT_TRUE(wait_until([&] { ssh_run(instance, key_, "true", &rc); return rc == 0; }, 20s, "ssh to answer", 200ms));
  }
  json::value disk(const std::string& id) { return daemon_->get("/api/v1/disks/" + id, user_).json(); }
  // Waits until the disk's state is `state`; returns the disk.
  json::value wait_disk(const std::string& id, const std::string& state) {
    json::value d;
    EXPECT_TRUE(wait_until(
        [&] {
          d = disk(id);
          return d.is_object() && d.as_object().contains("state") && d.at("state").as_string() == state;
        },
        60s, "disk " + id + " to be " + state));
    return d;
  }
  bool has_event(const std::string& resource, const std::string& type) {
    auto list = daemon_->get("/api/v1/events?resource=" + resource + "&limit=1000", user_).json();
    if (!list.is_object()) return false;
    for (const auto& e : list.at("items").as_array())
      if (e.at("type").as_string() == type) return true;
    return false;
  }
  void stop(const std::string& name) {
    ASSERT_EQ(daemon_->post("/api/v1/instances/" + name + "/stop", json::object{}, user_).status, 202);
    ASSERT_EQ(daemon_->wait_for_state(name, "stopped", user_).at("state").as_string(), "stopped");
  }
  json::value start_instance(const std::string& name) {
    EXPECT_EQ(daemon_->post("/api/v1/instances/" + name + "/start", json::object{}, user_).status, 202);
    auto running = daemon_->wait_for_state(name, "running", user_);
    if (running.is_object() && running.at("state").as_string() == "running") wait_ssh(running);
    return running;
  }
  std::string first_disk_of(const json::value& instance) {
    const auto& disks = instance.at("data_disks").as_array();
    EXPECT_FALSE(disks.empty()) << json::serialize(instance);
    return disks.empty() ? std::string() : std::string(disks[0].at("id").as_string());
  }
  std::unique_ptr<TestDaemon> daemon_;
  std::string user_;
  KeyPair key_;
};

TEST_F(DisksTest, DOCKER_ROOT_DataOnADiskOutlivesItsInstanceAndMovesToTheNext) {
  auto first = create_instance("first", json::array{json::object{{"size_gib", 1}, {"mount_path", "/root/data"}}});
  ASSERT_EQ(first.at("state").as_string(), "running") << json::serialize(first);
  std::string id = first_disk_of(first);
  EXPECT_EQ(disk(id).at("state").as_string(), "attached");
  int rc = -1;
  std::string sum = ssh_run(first, key_,
                            "head -c 5000000 /dev/urandom > /root/data/blob && sync && sha256sum /root/data/blob | cut -c1-64",
                            &rc);
  ASSERT_EQ(rc, 0) << sum;
  ASSERT_EQ(sum.size(), 65u) << sum;
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/first", "", user_).status, 202);
  daemon_->wait_for_state("first", "released", user_);
  auto kept = wait_disk(id, "available");
  EXPECT_TRUE(kept.at("instance").is_null());
  EXPECT_GT(kept.at("used_bytes").as_int64(), 0);
  auto second = create_instance("second", json::array{json::object{{"id", id}, {"mount_path", "/mnt/data"}}});
  ASSERT_EQ(second.at("state").as_string(), "running") << json::serialize(second);
  std::string again = ssh_run(second, key_, "sha256sum /mnt/data/blob | cut -c1-64", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(again, sum);
}

TEST_F(DisksTest, DOCKER_ROOT_SLOW_AFullDiskSaysEnospcAndAGrowShowsInsideTheInstance) {
  auto box = create_instance("box", json::array{json::object{{"size_gib", 1}}});
  ASSERT_EQ(box.at("state").as_string(), "running") << json::serialize(box);
  std::string id = first_disk_of(box);
  int rc = -1;
  // Writing a GiB takes longer than one ssh command may last on a loaded machine: the fill
  // runs in the background inside the instance and the test waits for its end (no single
  // quotes: ssh_run wraps the command in them).
  ssh_run(box, key_, "nohup sh -c \"dd if=/dev/zero of=/root/data/fill bs=1M count=1100 2>&1; echo dd=\\$?\" >/root/fill.log 2>&1 &",
          &rc);
  ASSERT_EQ(rc, 0);
  std::string out;
  ASSERT_TRUE(wait_until([&] {
    out = ssh_run(box, key_, "cat /root/fill.log", &rc);
    return out.find("dd=") != std::string::npos;
  }, 120s, "the fill to end"));
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_EQ(out.find("dd=0"), std::string::npos) << out;
  ssh_run(box, key_, "rm -f /root/data/fill", &rc);
  auto grow = daemon_->post("/api/v1/disks/" + id + "/resize", {{"size_gib", 2}}, user_);
  ASSERT_EQ(grow.status, 202) << grow.body;
  ASSERT_TRUE(wait_until([&] { return has_event(id, "disk.resized"); }, 60s, "the disk to grow"));
  std::string df = ssh_run(box, key_, "df -B1M --output=size /root/data | tail -1", &rc);
  ASSERT_EQ(rc, 0) << df;
  if (std::stoll(df) < 1500 && daemon_->log().find("disk_online_resize_refused") != std::string::npos) {
    // This machine's root lacks CAP_SYS_RESOURCE, which an online resize2fs needs: the
    // filesystem grows at its next mount instead. A restart of the instance shows it.
    stop("box");
    box = start_instance("box");
    df = ssh_run(box, key_, "df -B1M --output=size /root/data | tail -1", &rc);
  }
  EXPECT_GT(std::stoll(df), 1500) << "the instance sees about 2 GiB: " << df;
  std::string out2 = ssh_run(box, key_, "dd if=/dev/zero of=/root/data/fill bs=1M count=1500 2>&1; echo dd=$?", &rc);
  EXPECT_NE(out2.find("dd=0"), std::string::npos) << "1.5 GiB fits now: " << out2;
}

TEST_F(DisksTest, DOCKER_ROOT_ASnapshotGivesTheOldContentBack) {
  auto box = create_instance("box", json::array{json::object{{"size_gib", 1}}});
  ASSERT_EQ(box.at("state").as_string(), "running") << json::serialize(box);
  std::string id = first_disk_of(box);
  int rc = -1;
  ssh_run(box, key_, "echo before > /root/data/file && sync", &rc);
  ASSERT_EQ(rc, 0);
  // Taken while the instance runs: the filesystem is frozen while it is copied.
  auto snap = daemon_->post("/api/v1/disks/" + id + "/snapshots", {{"name", "before"}}, user_);
  ASSERT_EQ(snap.status, 202) << snap.body;
  std::string snap_id(snap.json().at("id").as_string());
  ASSERT_TRUE(wait_until(
      [&] { return daemon_->get("/api/v1/snapshots/" + snap_id, user_).json().at("state").as_string() == "available"; }, 60s,
      "the snapshot"));
  ssh_run(box, key_, "echo after > /root/data/file && sync", &rc);
  auto copy = daemon_->post("/api/v1/disks", {{"name", "copy"}, {"from_snapshot", "before"}}, user_);
  ASSERT_EQ(copy.status, 202) << copy.body;
  std::string copy_id(copy.json().at("id").as_string());
  EXPECT_EQ(copy.json().at("host").as_string(), disk(id).at("host").as_string());
  wait_disk(copy_id, "available");
  stop("box");
  auto attach = daemon_->post("/api/v1/disks/copy/attach", {{"instance", "box"}, {"mount_path", "/root/old"}}, user_);
  ASSERT_EQ(attach.status, 200) << attach.body;
  auto running = start_instance("box");
  std::string both = ssh_run(running, key_, "cat /root/old/file /root/data/file", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(both, "before\nafter\n");
}

TEST_F(DisksTest, DOCKER_ROOT_ADeletedDiskIsRestoredWithItsDataAndGoneAfterThePeriod) {
  auto box = create_instance("box", json::array{json::object{{"size_gib", 1}}});
  ASSERT_EQ(box.at("state").as_string(), "running") << json::serialize(box);
  std::string id = first_disk_of(box);
  int rc = -1;
  ssh_run(box, key_, "echo precious > /root/data/file && sync", &rc);
  stop("box");
  ASSERT_EQ(daemon_->post("/api/v1/disks/" + id + "/detach", json::object{}, user_).status, 200);
  auto del = daemon_->request("DELETE", "/api/v1/disks/" + id, "", user_);
  ASSERT_EQ(del.status, 202) << del.body;
  EXPECT_EQ(del.json().at("state").as_string(), "deleted");
  auto binned = daemon_->get("/api/v1/disks?state=deleted", user_).json();
  ASSERT_EQ(binned.at("items").as_array().size(), 1u) << json::serialize(binned);
  {
    // The bin says when it is destroyed: deleted_at + recycle_days (2 here).
    const auto& item = binned.at("items").as_array()[0];
    auto deleted_at = parse_rfc3339(item.at("deleted_at").as_string());
    auto purge_at = parse_rfc3339(item.at("purge_at").as_string());
    ASSERT_TRUE(deleted_at && purge_at) << json::serialize(item);
    EXPECT_EQ(*purge_at - *deleted_at, std::chrono::hours(48)) << json::serialize(item);
  }
  EXPECT_TRUE(daemon_->get("/api/v1/disks", user_).json().at("items").as_array().empty());
  auto restored = daemon_->post("/api/v1/disks/" + id + "/restore", json::object{}, user_);
  ASSERT_EQ(restored.status, 200) << restored.body;
  EXPECT_TRUE(restored.json().at("purge_at").is_null()) << restored.body;
  ASSERT_EQ(daemon_->post("/api/v1/disks/" + id + "/attach", {{"instance", "box"}, {"mount_path", "/root/data"}}, user_).status,
            200);
  auto running = start_instance("box");
  EXPECT_EQ(ssh_run(running, key_, "cat /root/data/file", &rc), "precious\n");
  stop("box");
  ASSERT_EQ(daemon_->post("/api/v1/disks/" + id + "/detach", json::object{}, user_).status, 200);
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/disks/" + id, "", user_).status, 202);
  auto clock = daemon_->post("/api/v1/admin/clock", {{"advance_seconds", 2 * 86400 + 60}}, daemon_->admin_token());
  ASSERT_EQ(clock.status, 200) << clock.body;
  EXPECT_TRUE(has_event(id, "disk.purge_warning"));
  EXPECT_TRUE(wait_until([&] { return daemon_->get("/api/v1/disks/" + id, user_).status == 404; }, 30s, "the disk to be gone"));
  EXPECT_EQ(daemon_->post("/api/v1/disks/" + id + "/restore", json::object{}, user_).status, 404);
}

TEST_F(DisksTest, DOCKER_ROOT_BadRequestsAreRefusedWithTheirCodeAndChangeNothing) {
  auto box = create_instance("box", json::array{json::object{{"size_gib", 1}}});
  ASSERT_EQ(box.at("state").as_string(), "running") << json::serialize(box);
  std::string attached = first_disk_of(box);
  auto spare = daemon_->post("/api/v1/disks", {{"name", "spare"}, {"size_gib", 2}, {"host", box.at("host")}}, user_);
  ASSERT_EQ(spare.status, 202) << spare.body;
  wait_disk("spare", "available");
  std::string other_host = box.at("host").as_string() == "node-1" ? "node-2" : "node-1";
  auto far = daemon_->post("/api/v1/disks", {{"name", "far"}, {"size_gib", 1}, {"host", other_host}}, user_);
  ASSERT_EQ(far.status, 202) << far.body;
  wait_disk("far", "available");
  // What must not change: each disk's id, state, size and attachment.
  auto shape = [&] {
    std::string out;
    json::value list = daemon_->get("/api/v1/disks", user_).json();  // named: a range-for over a temporary dangles
    for (const auto& d : list.at("items").as_array())
      out += json::serialize(json::object{{"id", d.at("id")}, {"state", d.at("state")}, {"size_gib", d.at("size_gib")},
                                          {"instance", d.at("instance")}, {"mount_path", d.at("mount_path")}}) + "\n";
    return out;
  };
  auto before = shape();

  EXPECT_EQ(daemon_->post("/api/v1/disks/spare/attach", {{"instance", "box"}}, user_).status, 409) << "a running instance";
  EXPECT_EQ(daemon_->request("DELETE", "/api/v1/disks/" + attached, "", user_).status, 409) << "an attached disk";
  EXPECT_EQ(daemon_->post("/api/v1/disks/spare/resize", {{"size_gib", 0}}, user_).status, 400);
  auto shrink = daemon_->post("/api/v1/disks/spare/resize", {{"size_gib", 1}}, user_);
  EXPECT_EQ(shrink.status, 400) << "disks only grow: " << shrink.body;
  auto bob = daemon_->register_and_login("bob");
  EXPECT_EQ(daemon_->get("/api/v1/disks/spare", bob).status, 404);
  EXPECT_EQ(daemon_->request("DELETE", "/api/v1/disks/" + attached, "", bob).status, 404);
  EXPECT_EQ(daemon_->post("/api/v1/disks/" + attached + "/detach", json::object{}, bob).status, 404);
  EXPECT_EQ(daemon_->post("/api/v1/disks", {{"name", "huge"}, {"size_gib", 100}}, user_).status, 403) << "disk_gib quota";
  stop("box");
  EXPECT_EQ(daemon_->post("/api/v1/disks/far/attach", {{"instance", "box"}}, user_).status, 409) << "a disk on another host";
  for (const char* path : {"data", "/", "/etc", "/usr", "/proc", "/dev", "/sys", "/usr/lib/x", "/root/../etc"}) {
    auto r = daemon_->post("/api/v1/disks/spare/attach", {{"instance", "box"}, {"mount_path", path}}, user_);
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_EQ(r.json().at("code").as_string(), "invalid_argument") << path;
  }
  auto taken = daemon_->post("/api/v1/disks/spare/attach", {{"instance", "box"}, {"mount_path", "/root/data"}}, user_);
  EXPECT_EQ(taken.status, 409) << "the path is another disk's: " << taken.body;
  EXPECT_EQ(daemon_->post("/api/v1/disks/spare/resize", {{"size_gib", 2}}, user_).status, 202) << "the same size: a no-op";
  // Creating an instance with another user's disk or an unknown one.
  auto with_theirs = daemon_->post("/api/v1/instances",
                                   {{"name", "thief"}, {"gpu_count", 0}, {"data_disks", json::array{json::object{{"id", "spare"}}}}},
                                   bob);
  EXPECT_EQ(with_theirs.status, 400) << with_theirs.body;
  EXPECT_EQ(shape(), before) << "nothing changed";
}

// kill -9 at each disk step and a Docker Engine restart: disk_crash_test.cpp.

}  // namespace
}  // namespace gpucloud::testing
