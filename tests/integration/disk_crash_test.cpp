// Data disks through crashes: gpucloudd killed with SIGKILL at every step of create, grow,
// snapshot, delete, restore, purge, attach and detach (the control plane's steps and the
// agent's, core/fault_points.cpp), and the Docker Engine restarted while an instance uses a
// disk that grows and is snapshotted. After each: the disk settles where its step leads,
// exactly once, a file of known checksum written before is intact, and nothing is left
// behind (loop devices, mounts, half-made images); reconciliation deletes no disk.
//
// Data is put on a disk that is not mounted with debugfs (e2fsprogs), straight into its
// image, and read back the same way (or over SSH when an instance mounts the disk), so the
// cases without an instance stay fast.
#include <algorithm>

#include <gtest/gtest.h>

#include "support/ssh_client.h"
#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

std::string one_host_config() {
  static const std::string ports = port_range();
  return R"(
[[hosts]]
name = "node-1"
cpu = 4
memory_gib = 16
port_range = ")" + ports + R"("
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

int count_lines(const std::string& command) {
  const std::string out = shell(command + " | wc -l");
  return out.empty() ? -1 : std::stoi(out);
}

// A daemon per test: each kills it with -9 at a step or restarts dockerd under it.
class DiskStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    GPUCLOUD_NEED("root", shell("command -v debugfs dumpe2fs >/dev/null && echo yes") == "yes\n",
                  "needs debugfs and dumpe2fs (e2fsprogs) to put data on a disk image");
    DaemonOptions o{one_host_config()};
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

  // ---- where the loop-ext4 driver keeps things (agent/disks/loop_ext4_driver.h) ----
  std::string agent_dir() const { return daemon_->data_dir() + "/agent"; }
  std::string image(const std::string& disk_id) const { return agent_dir() + "/disks/loop-ext4/" + disk_id + ".img"; }
  std::string snapshot_image(const std::string& id) const {
    return agent_dir() + "/disks/loop-ext4/snapshots/" + id + ".img";
  }
  bool exists(const std::string& path) const { return shell("test -f '" + path + "' && echo yes") == "yes\n"; }

  // Writes 3 MiB of random bytes as /blob into an unmounted disk's image; its sha256.
  std::string put_blob(const std::string& img) {
    const std::string src = daemon_->dir() + "/blob.src";
    return shell("head -c 3145728 /dev/urandom > '" + src + "' && debugfs -w -R 'write " + src + " blob' '" + img +
                 "' >/dev/null 2>&1 && sha256sum '" + src + "' | cut -c1-64 | tr -d '\\n'");
  }
  // The sha256 of /blob in an image that is not mounted ("" when it has none).
  std::string blob_sum(const std::string& img) {
    const std::string out = daemon_->dir() + "/blob.out";
    return shell("rm -f '" + out + "'; debugfs -R 'dump /blob " + out + "' '" + img + "' >/dev/null 2>&1; test -s '" + out +
                 "' && sha256sum '" + out + "' | cut -c1-64 | tr -d '\\n'");
  }
  // What the ext4 filesystem in an image spans (block count x block size); -1 when unreadable.
  long long fs_bytes(const std::string& img) {
    std::string out = shell("dumpe2fs -h '" + img + "' 2>/dev/null | awk -F: '/^Block count/{c=$2} /^Block size/{s=$2} "
                            "END{if (c && s) printf \"%.0f\", c*s; else print -1}'");
    return out.empty() ? -1 : std::stoll(out);
  }

  // ---- what must not be left behind ----
  // Loop devices backed by files of this daemon's data dir.
  int our_loop_devices() { return count_lines("losetup -a | grep -F '" + daemon_->data_dir() + "/'"); }
  // Mounts of this daemon's data dir as the host sees them (a container's bind is in its own namespace).
  int our_mounts() { return count_lines("grep -F ' " + daemon_->data_dir() + "/' /proc/self/mountinfo"); }
  // Images being made and files being written under a temporary name.
  std::string half_made() {
    return shell("find '" + agent_dir() + "/disks/loop-ext4/.tmp' -mindepth 1 2>/dev/null; find '" + agent_dir() +
                 "' -name '*.tmp-*' 2>/dev/null");
  }
  // `in_use`: a running instance holds one disk (one loop device, one host mount).
  void expect_nothing_leaked(int in_use) {
    EXPECT_EQ(our_loop_devices(), in_use) << shell("losetup -a");
    EXPECT_EQ(our_mounts(), in_use) << shell("grep -F '" + daemon_->data_dir() + "' /proc/self/mountinfo");
    EXPECT_EQ(half_made(), "");
  }

  // ---- the API ----
  json::value disk(const std::string& id) { return daemon_->get("/api/v1/disks/" + id, user_).json(); }
  std::string state_of(const json::value& v) {
    return v.is_object() && v.as_object().contains("state") ? std::string(v.at("state").as_string()) : std::string();
  }
  ::testing::AssertionResult wait_disk(const std::string& id, const std::string& state, std::chrono::seconds limit = 60s) {
    return wait_until([&] { return state_of(disk(id)) == state; }, limit, "disk " + id + " to be " + state);
  }
  ::testing::AssertionResult wait_snapshot(const std::string& id, const std::string& state) {
    return wait_until([&] { return state_of(daemon_->get("/api/v1/snapshots/" + id, user_).json()) == state; }, 60s,
                      "snapshot " + id + " to be " + state);
  }
  std::string make_disk(const std::string& name, int gib) {
    auto made = daemon_->post("/api/v1/disks", {{"name", name}, {"size_gib", gib}}, user_);
    EXPECT_EQ(made.status, 202) << made.body;
    if (made.status != 202) return "";
    std::string id(made.json().at("id").as_string());
    EXPECT_TRUE(wait_disk(id, "available"));
    return id;
  }
  std::string take_snapshot(const std::string& disk_id, const std::string& name) {
    auto snap = daemon_->post("/api/v1/disks/" + disk_id + "/snapshots", {{"name", name}}, user_);
    EXPECT_EQ(snap.status, 202) << snap.body;
    if (snap.status != 202) return "";
    std::string id(snap.json().at("id").as_string());
    EXPECT_TRUE(wait_snapshot(id, "available"));
    return id;
  }
  int events(const std::string& resource, const std::string& type) {
    auto list = daemon_->get("/api/v1/events?resource=" + resource + "&limit=1000", user_).json();
    int n = 0;
    if (list.is_object())
      for (const auto& e : list.at("items").as_array()) n += e.at("type").as_string() == type;
    return n;
  }
  // The size the newest applied grow reached (0: none applied yet).
  std::int64_t grown_to(const std::string& disk_id) {
    auto list = daemon_->get("/api/v1/events?resource=" + disk_id + "&limit=1000", user_).json();
    std::int64_t size = 0;
    if (list.is_object())
      for (const auto& e : list.at("items").as_array())
        if (e.at("type").as_string() == "disk.resized" && e.at("data").is_object())
          if (auto* g = e.at("data").as_object().if_contains("size_gib"); g && g->is_int64()) size = std::max(size, g->as_int64());
    return size;
  }
  // Every disk of the user, the recycle bin's too.
  std::size_t all_disks() {
    auto live = daemon_->get("/api/v1/disks", user_).json();
    auto binned = daemon_->get("/api/v1/disks?state=deleted", user_).json();
    return live.at("items").as_array().size() + binned.at("items").as_array().size();
  }
  void advance_clock(int seconds) {
    auto r = daemon_->post("/api/v1/admin/clock", {{"advance_seconds", seconds}}, daemon_->admin_token());
    EXPECT_EQ(r.status, 200) << r.body;
  }

  // ---- instances ----
  json::value create_instance(const std::string& name, json::array data_disks) {
    json::object body{{"name", name}, {"gpu_count", 0}, {"ssh_keys", json::array{"laptop"}}, {"data_disks", data_disks}};
    auto r = daemon_->post("/api/v1/instances", body, user_);
    EXPECT_EQ(r.status, 202) << r.body;
    auto running = daemon_->wait_for_state(name, "running", user_);
    if (state_of(running) == "running") wait_ssh(running);
    return running;
  }
  void wait_ssh(const json::value& instance) {
    int rc = -1;
    EXPECT_TRUE(wait_until([&] { ssh_run(instance, key_, "true", &rc); return rc == 0; }, 30s, "ssh to answer", 200ms));
  }
  void stop(const std::string& name) {
    ASSERT_EQ(daemon_->post("/api/v1/instances/" + name + "/stop", json::object{}, user_).status, 202);
    ASSERT_EQ(state_of(daemon_->wait_for_state(name, "stopped", user_)), "stopped");
  }
  json::value start_instance(const std::string& name) {
    EXPECT_EQ(daemon_->post("/api/v1/instances/" + name + "/start", json::object{}, user_).status, 202);
    auto running = daemon_->wait_for_state(name, "running", user_);
    if (state_of(running) == "running") wait_ssh(running);
    return running;
  }
  std::string remote_sum(const json::value& instance, const std::string& path) {
    int rc = -1;
    std::string out = ssh_run(instance, key_, "sha256sum " + path + " | cut -c1-64 | tr -d \"\\n\"", &rc);
    return rc == 0 ? out : "ssh failed (" + std::to_string(rc) + "): " + out;
  }
  // The size the instance sees at `path`, in MiB (-1 when unreadable).
  long long remote_mib(const json::value& instance, const std::string& path) {
    int rc = -1;
    std::string out = ssh_run(instance, key_, "df -B1M --output=size " + path + " | tail -1", &rc);
    return rc == 0 && !out.empty() ? std::stoll(out) : -1;
  }
  // A write to the disk finishes (a filesystem left frozen would block it).
  bool remote_write(const json::value& instance, const std::string& path) {
    int rc = -1;
    std::string out = ssh_run(instance, key_, "timeout 10 sh -c \"echo fresh > " + path + " && sync\" && cat " + path, &rc);
    return rc == 0 && out == "fresh\n";
  }
  // The instance sees the grown size: online when this root may resize ext4 online
  // (CAP_SYS_RESOURCE); else at the disk's next mount, so after a stop and a start.
  json::value expect_sees_grown(json::value box, const std::string& path, long long above_mib) {
    if (remote_mib(box, path) <= above_mib && daemon_->log().find("disk_online_resize_refused") != std::string::npos) {
      const std::string name(box.at("name").as_string());
      stop(name);
      box = start_instance(name);
    }
    EXPECT_GT(remote_mib(box, path), above_mib) << "the instance sees the grown disk";
    return box;
  }

  std::unique_ptr<TestDaemon> daemon_;
  std::string user_;
  KeyPair key_;
};

// ---- kill -9 at each step ----------------------------------------------------------------------

struct CrashCase {
  const char* fault;      // core/fault_points.cpp
  const char* action;     // what the armed daemon is asked to do (see the test)
  const char* leaves = "";  // what the crash leaves for the restart to clean: half-made | mount
};

class DiskCrashTest : public DiskStepsTest, public ::testing::WithParamInterface<CrashCase> {};

TEST_P(DiskCrashTest, DOCKER_ROOT_KillNineAtTheStepThenRestartSettles) {
  const CrashCase& c = GetParam();
  const std::string action = c.action;
  const bool online = action == "grow_online" || action == "snapshot_online";
  const bool with_box = online || action == "attach" || action == "detach" || action == "start" || action == "stop";
  const json::object at_data{{"mount_path", "/root/data"}};

  // Before: the disk with a file of known checksum (unless the step makes the disk), and
  // what the step needs.
  std::string disk_id, sum, snap_id;
  if (action != "create") {
    disk_id = make_disk("vault", 1);
    ASSERT_FALSE(disk_id.empty());
    sum = put_blob(image(disk_id));
    ASSERT_EQ(sum.size(), 64u) << "debugfs wrote the file: " << sum;
  }
  if (action == "create_from_snapshot") snap_id = take_snapshot(disk_id, "before");
  if (action == "restore" || action == "purge") {
    ASSERT_EQ(daemon_->request("DELETE", "/api/v1/disks/" + disk_id, "", user_).status, 202);
  }
  json::value box;
  if (with_box) {
    json::array disks;
    if (action != "attach") disks.push_back(json::object{{"id", disk_id}, {"mount_path", "/root/data"}});
    box = create_instance("box", disks);
    ASSERT_EQ(state_of(box), "running") << json::serialize(box);
    if (action != "attach") {
      ASSERT_EQ(remote_sum(box, "/root/data/blob"), sum) << "the instance sees the file";
    }
    if (action == "attach" || action == "detach" || action == "start") stop("box");
  }
  const std::size_t disks_before = all_disks();

  daemon_->stop();
  daemon_->start(c.fault);
  try {
    if (action == "create") {
      daemon_->post("/api/v1/disks", {{"name", "vault"}, {"size_gib", 1}}, user_);
    } else if (action == "create_from_snapshot") {
      daemon_->post("/api/v1/disks", {{"name", "copy"}, {"from_snapshot", "before"}}, user_);
    } else if (action == "snapshot" || action == "snapshot_online") {
      daemon_->post("/api/v1/disks/vault/snapshots", {{"name", "snap"}}, user_);
    } else if (action == "grow" || action == "grow_online") {
      daemon_->post("/api/v1/disks/vault/resize", {{"size_gib", 2}}, user_);
    } else if (action == "delete") {
      daemon_->request("DELETE", "/api/v1/disks/vault", "", user_);
    } else if (action == "restore") {
      daemon_->post("/api/v1/disks/vault/restore", json::object{}, user_);
    } else if (action == "purge") {
      daemon_->post("/api/v1/admin/clock", {{"advance_seconds", 3 * 86400}}, daemon_->admin_token());
    } else if (action == "attach") {
      daemon_->post("/api/v1/disks/vault/attach", {{"instance", "box"}, {"mount_path", "/root/data"}}, user_);
    } else if (action == "detach") {
      daemon_->post("/api/v1/disks/vault/detach", json::object{}, user_);
    } else if (action == "start") {
      daemon_->post("/api/v1/instances/box/start", json::object{}, user_);
    } else if (action == "stop") {
      daemon_->post("/api/v1/instances/box/stop", json::object{}, user_);
    } else {
      FAIL() << "unknown action " << action;
    }
  } catch (...) {
    // The connection may die with the daemon.
  }
  ASSERT_TRUE(daemon_->killed_at(c.fault));
  // The crash left something behind (so the checks after the restart are not vacuous).
  const std::string leaves = c.leaves;
  if (leaves == "half-made") {
    EXPECT_NE(half_made(), "");
  } else if (leaves == "mount") {
    EXPECT_EQ(our_mounts(), 1);
  }
  daemon_->start();

  int in_use = 0;  // disks a running instance holds at the end
  if (action == "create") {
    auto list = daemon_->get("/api/v1/disks", user_).json().at("items").as_array();
    ASSERT_EQ(list.size(), 1u) << "made once";
    disk_id = std::string(list[0].at("id").as_string());
    ASSERT_TRUE(wait_disk(disk_id, "available"));
    EXPECT_EQ(events(disk_id, "disk.available"), 1);
    EXPECT_GT(fs_bytes(image(disk_id)), 1000LL << 20) << "a whole ext4 filesystem of 1 GiB";
    EXPECT_EQ(all_disks(), disks_before + 1);
  } else if (action == "create_from_snapshot") {
    auto copy = disk("copy");
    ASSERT_TRUE(copy.is_object() && copy.as_object().contains("id")) << json::serialize(copy);
    const std::string copy_id(copy.at("id").as_string());
    ASSERT_TRUE(wait_disk(copy_id, "available"));
    EXPECT_EQ(events(copy_id, "disk.created"), 1);
    EXPECT_EQ(events(copy_id, "disk.available"), 1);
    EXPECT_EQ(blob_sum(image(copy_id)), sum) << "the copy holds the snapshot's content";
    EXPECT_EQ(all_disks(), disks_before + 1);
  } else if (action == "snapshot" || action == "snapshot_online") {
    json::array snaps;
    ASSERT_TRUE(wait_until(
        [&] {
          snaps = daemon_->get("/api/v1/snapshots", user_).json().at("items").as_array();
          return snaps.size() == 1 && state_of(snaps[0]) == "available";
        },
        60s, "one snapshot, available"))
        << json::serialize(snaps);
    const std::string id(snaps[0].at("id").as_string());
    EXPECT_EQ(events(id, "snapshot.available"), 1);
    EXPECT_EQ(blob_sum(snapshot_image(id)), sum) << "the snapshot holds the file";
    // Answered before its fsync; the agent's durable step (or, after the kill, its start) ran.
    const std::string meta = agent_dir() + "/disks/loop-ext4/snapshots/" + id + ".json";
    EXPECT_TRUE(wait_until([&] { return shell("grep -c '\"durable\":true' '" + meta + "'") == "1\n"; }, 30s,
                           "the snapshot to be durable"))
        << shell("cat '" + meta + "'");
    if (online) {
      EXPECT_TRUE(remote_write(box, "/root/data/after")) << "the disk is not left frozen";
      EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
      in_use = 1;
    }
  } else if (action == "grow" || action == "grow_online") {
    ASSERT_TRUE(wait_until([&] { return events(disk_id, "disk.resized") >= 1; }, 60s, "the grow to be applied"));
    EXPECT_EQ(events(disk_id, "disk.resized"), 1);
    EXPECT_EQ(disk(disk_id).at("size_gib").as_int64(), 2);
    if (online) {
      box = expect_sees_grown(box, "/root/data", 1500);
      EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
      in_use = 1;
    } else {
      EXPECT_GT(fs_bytes(image(disk_id)), 2000LL << 20) << "the filesystem grew with its file";
    }
  } else if (action == "delete") {
    ASSERT_TRUE(wait_disk(disk_id, "deleted"));
    EXPECT_EQ(events(disk_id, "disk.deleted"), 1);
    // In the bin, whole, restorable; restored, the bin's clock no longer touches it.
    ASSERT_EQ(daemon_->post("/api/v1/disks/" + disk_id + "/restore", json::object{}, user_).status, 200);
    advance_clock(3 * 86400);
    EXPECT_EQ(state_of(disk(disk_id)), "available");
  } else if (action == "restore") {
    ASSERT_TRUE(wait_disk(disk_id, "available"));
    EXPECT_EQ(events(disk_id, "disk.restored"), 1);
    advance_clock(3 * 86400);
    EXPECT_EQ(state_of(disk(disk_id)), "available") << "a restored disk outlives the bin's period";
    EXPECT_EQ(events(disk_id, "disk.purging"), 0);
  } else if (action == "purge") {
    ASSERT_TRUE(wait_until([&] { return daemon_->get("/api/v1/disks/" + disk_id, user_).status == 404; }, 60s,
                           "the disk to be destroyed"));
    EXPECT_FALSE(exists(image(disk_id)));
    EXPECT_EQ(shell("find '" + agent_dir() + "' -name '*" + disk_id + "*' -not -path '*/removed/*'"), "")
        << "only the removal's tombstone stays (it fences late commands)";
    EXPECT_EQ(all_disks(), disks_before - 1);
  } else if (action == "attach") {
    ASSERT_TRUE(wait_disk(disk_id, "attached"));
    EXPECT_EQ(events(disk_id, "disk.attached"), 1);
    box = start_instance("box");
    ASSERT_EQ(state_of(box), "running");
    EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
    in_use = 1;
  } else if (action == "detach") {
    ASSERT_TRUE(wait_disk(disk_id, "available"));
    EXPECT_EQ(events(disk_id, "disk.detached"), 1);
    EXPECT_EQ(state_of(daemon_->get("/api/v1/instances/box", user_).json()), "stopped");
  } else if (action == "start") {
    box = daemon_->wait_for_state("box", "running", user_);
    ASSERT_EQ(state_of(box), "running");
    wait_ssh(box);
    EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
    EXPECT_TRUE(remote_write(box, "/root/data/after"));
    in_use = 1;
  } else if (action == "stop") {
    ASSERT_EQ(state_of(daemon_->wait_for_state("box", "stopped", user_)), "stopped");
    EXPECT_EQ(state_of(disk(disk_id)), "attached") << "a stop keeps the disk attached";
  }
  // The disk's data, where no instance holds it: read from its image.
  if (action != "create" && action != "purge" && in_use == 0) {
    EXPECT_EQ(blob_sum(image(disk_id)), sum);
  }
  if (action != "create" && action != "create_from_snapshot" && action != "purge") {
    EXPECT_EQ(all_disks(), disks_before) << "no disk made or deleted by the restart";
    EXPECT_TRUE(exists(image(disk_id)));
  }
  if (!disk_id.empty()) {
    EXPECT_EQ(events(disk_id, "disk.created"), 1);
  }
  expect_nothing_leaked(in_use);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, DiskCrashTest,
    ::testing::Values(CrashCase{"disk.after_create_commit", "create"}, CrashCase{"disk.after_agent", "create"},
                      CrashCase{"agent.disk.create.before_rename", "create", "half-made"},
                      CrashCase{"agent.disk.create.before_rename", "create_from_snapshot", "half-made"},
                      CrashCase{"snapshot.after_agent", "snapshot"},
                      CrashCase{"agent.disk.snapshot.after_copy", "snapshot", "half-made"},
                      CrashCase{"agent.disk.snapshot.after_copy", "snapshot_online", "half-made"},
                      CrashCase{"disk.before_converge", "grow"}, CrashCase{"agent.disk.grow.before_resize2fs", "grow"},
                      CrashCase{"disk.after_agent", "grow"}, CrashCase{"agent.disk.grow.before_resize2fs", "grow_online"},
                      CrashCase{"disk.before_converge", "delete"}, CrashCase{"disk.before_converge", "restore"},
                      CrashCase{"disk.purge.after_sweep_commit", "purge"},
                      CrashCase{"agent.disk.remove.after_tombstone", "purge"},
                      CrashCase{"disk.destroy.before_state_commit", "purge"}, CrashCase{"disk.before_converge", "attach"},
                      CrashCase{"disk.before_converge", "detach"},
                      CrashCase{"agent.disk.attach.after_mount", "start", "mount"},
                      CrashCase{"agent.disk.detach.before_unmount", "stop", "mount"}),
    [](const auto& info) {
      std::string name = std::string(info.param.fault) + "_at_" + info.param.action;
      for (char& ch : name)
        if (ch == '.') ch = '_';
      return name;
    });

// ---- a Docker Engine restart -------------------------------------------------------------------

// Restarts the engine scripts/start-dockerd.sh started, with the storage it runs on now (so
// "auto" cannot pick another data root), and starts it again at the end of the scope in any
// case: a failed assertion must not leave the machine without its engine.
class EngineRestarts {
 public:
  EngineRestarts()
      : storage_(shell("tr '\\0' ' ' < /proc/$(cat /var/run/gpucloud/dockerd.pid)/cmdline").find("--storage-driver btrfs") !=
                         std::string::npos
                     ? "btrfs"
                     : "default") {}
  ~EngineRestarts() { up(); }
  void down() { shell("sh " + script("stop-dockerd.sh") + " >/dev/null 2>&1"); }
  void up() {
    shell("GPUCLOUD_ENGINE_STORAGE=" + storage_ + " sh " + script("start-dockerd.sh") + " >/dev/null 2>&1");
  }
  static bool answers() { return docker_api("GET", "/_ping") == "OK"; }

 private:
  static std::string script(const char* name) { return std::string(GPUCLOUD_SOURCE_DIR) + "/scripts/" + name; }
  std::string storage_;
};

// SERIAL_: it restarts dockerd, so no other test may run meanwhile (tests/ctest_properties.cmake).
TEST_F(DiskStepsTest, DOCKER_ROOT_SERIAL_DockerdRestartWhileADiskGrowsAndSnapshotsKeepsItMountedWithItsData) {
  GPUCLOUD_NEED("dockerd-restart", shell("test -f /var/run/gpucloud/dockerd.pid && echo ours") == "ours\n",
                "dockerd was not started by scripts/start-dockerd.sh; not restarting someone else's engine");
  const std::string disk_id = make_disk("vault", 1);
  ASSERT_FALSE(disk_id.empty());
  const std::string sum = put_blob(image(disk_id));
  ASSERT_EQ(sum.size(), 64u) << sum;
  auto box = create_instance("box", json::array{json::object{{"id", disk_id}, {"mount_path", "/root/data"}}});
  ASSERT_EQ(state_of(box), "running") << json::serialize(box);
  ASSERT_EQ(remote_sum(box, "/root/data/blob"), sum);

  EngineRestarts engine;
  // A grow and a snapshot asked for just before the engine goes: they run while it stops.
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/resize", {{"size_gib", 2}}, user_).status, 202);
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/snapshots", {{"name", "going"}}, user_).status, 202);
  engine.down();
  ASSERT_FALSE(EngineRestarts::answers());
  // Asked for while it is down: disks need no engine, so both settle before it is back.
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/resize", {{"size_gib", 3}}, user_).status, 202);
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/snapshots", {{"name", "down"}}, user_).status, 202);
  EXPECT_TRUE(wait_until([&] { return grown_to(disk_id) == 3; }, 60s, "the grows, engine down"));
  EXPECT_TRUE(wait_snapshot("going", "available"));
  EXPECT_TRUE(wait_snapshot("down", "available"));
  engine.up();
  ASSERT_TRUE(wait_until(EngineRestarts::answers, 30s, "dockerd to answer again", 100ms));
  // And one more of each while it restarts again.
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/resize", {{"size_gib", 4}}, user_).status, 202);
  ASSERT_EQ(daemon_->post("/api/v1/disks/vault/snapshots", {{"name", "restarting"}}, user_).status, 202);
  engine.down();
  engine.up();
  ASSERT_TRUE(wait_until(EngineRestarts::answers, 30s, "dockerd to answer again", 100ms));
  EXPECT_TRUE(wait_until([&] { return grown_to(disk_id) == 4; }, 60s, "the last grow"));
  EXPECT_TRUE(wait_snapshot("restarting", "available"));

  // A reconcile pass after the restarts: it stops a labelled container that has no record, so
  // once this one is stopped a pass has looked at the instance and its disk too.
  const std::string probe = "gpucloud-it-probe-" + random_suffix();
  docker_api("POST", "/containers/create?name=" + probe,
             R"({"Image":"gpucloud/base:bookworm-2","Cmd":["sleep","300"],"Labels":{"gpucloud.installation":")" +
                 daemon_->installation_id() + R"("}})");
  docker_api("POST", "/containers/" + probe + "/start");
  EXPECT_TRUE(wait_until(
      [&] { return docker_api("GET", "/containers/" + probe + "/json").find("\"Running\":false") != std::string::npos; },
      30s, "a reconcile pass to stop the probe container"));
  docker_api("DELETE", "/containers/" + probe + "?force=1");
  // The instance ran through it (--live-restore) with its disk mounted, whole and writable.
  EXPECT_EQ(state_of(daemon_->get("/api/v1/instances/box", user_).json()), "running");
  EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
  EXPECT_TRUE(remote_write(box, "/root/data/after")) << "written after the restarts (not frozen)";
  for (const char* name : {"going", "down", "restarting"}) {
    auto snap = daemon_->get("/api/v1/snapshots/" + std::string(name), user_).json();
    ASSERT_TRUE(snap.is_object() && snap.as_object().contains("id")) << name;
    EXPECT_EQ(blob_sum(snapshot_image(std::string(snap.at("id").as_string()))), sum) << "snapshot " << name;
    EXPECT_EQ(events(std::string(snap.at("id").as_string()), "snapshot.available"), 1) << name;
  }
  EXPECT_EQ(disk(disk_id).at("size_gib").as_int64(), 4);
  EXPECT_EQ(events(disk_id, "disk.resize_failed"), 0);
  expect_nothing_leaked(1);
  // The grown disk reaches the instance (online, or at its next mount), data and all.
  box = expect_sees_grown(box, "/root/data", 3500);
  EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
  EXPECT_EQ(all_disks(), 1u);
  expect_nothing_leaked(1);
}

// SERIAL_: it stops dockerd.
TEST_F(DiskStepsTest, DOCKER_ROOT_SERIAL_StartAndCreateWhileDockerdIsDownLeakNoMountAndLoseNoDisk) {
  GPUCLOUD_NEED("dockerd-restart", shell("test -f /var/run/gpucloud/dockerd.pid && echo ours") == "ours\n",
                "dockerd was not started by scripts/start-dockerd.sh; not restarting someone else's engine");
  const std::string disk_id = make_disk("vault", 1);
  ASSERT_FALSE(disk_id.empty());
  const std::string sum = put_blob(image(disk_id));
  ASSERT_EQ(sum.size(), 64u) << sum;
  auto box = create_instance("box", json::array{json::object{{"id", disk_id}, {"mount_path", "/root/data"}}});
  ASSERT_EQ(state_of(box), "running") << json::serialize(box);
  stop("box");
  expect_nothing_leaked(0);

  EngineRestarts engine;
  engine.down();
  ASSERT_FALSE(EngineRestarts::answers());
  // The start fails at the engine; whatever the attach mounted for it is let go again.
  ASSERT_EQ(daemon_->post("/api/v1/instances/box/start", json::object{}, user_).status, 202);
  auto failed = daemon_->wait_for_state("box", "stopped", user_);
  EXPECT_NE(json::serialize(failed).find("start failed"), std::string::npos) << json::serialize(failed);
  expect_nothing_leaked(0);
  EXPECT_EQ(state_of(disk(disk_id)), "attached");
  // A create with a new disk: the disk is made (no engine needed), the container is not.
  auto fresh = daemon_->post("/api/v1/instances", {{"name", "fresh"}, {"gpu_count", 0}, {"ssh_keys", json::array{"laptop"}},
                                                   {"data_disks", json::array{json::object{{"size_gib", 1}}}}},
                             user_);
  ASSERT_EQ(fresh.status, 202) << fresh.body;
  auto errored = daemon_->wait_for_state("fresh", "error", user_);
  ASSERT_EQ(state_of(errored), "error") << json::serialize(errored);
  const std::string fresh_disk = std::string(errored.at("data_disks").as_array().at(0).at("id").as_string());
  EXPECT_TRUE(exists(image(fresh_disk)));
  expect_nothing_leaked(0);
  engine.up();
  ASSERT_TRUE(wait_until(EngineRestarts::answers, 30s, "dockerd to answer again", 100ms));
  // Released, the failed instance hands its new disk back, kept.
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/fresh", "", user_).status, 202);
  daemon_->wait_for_state("fresh", "released", user_);
  EXPECT_TRUE(wait_disk(fresh_disk, "available"));
  EXPECT_TRUE(exists(image(fresh_disk)));

  box = start_instance("box");
  ASSERT_EQ(state_of(box), "running") << json::serialize(box);
  EXPECT_EQ(remote_sum(box, "/root/data/blob"), sum);
  EXPECT_TRUE(remote_write(box, "/root/data/after"));
  expect_nothing_leaked(1);
  EXPECT_EQ(all_disks(), 2u);
}

}  // namespace
}  // namespace gpucloud::testing
