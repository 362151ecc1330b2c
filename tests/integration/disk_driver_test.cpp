// The data-disk drivers (src/agent/disks/) with real loop devices, ext4 and btrfs, and the
// disk commands of DiskRuntime through LocalAgent. Every test runs for each driver
// ("loop-ext4", "btrfs"); ROOT_* skip without root (mount, losetup) or without the tools
// (e2fsprogs, util-linux, btrfs-progs).
//
// Each test works in its own directory under /tmp (a unique name from the test allocator),
// recorded in a ResourceLease ("disk-dir"): a test that dies leaves mounts and loop devices
// that the next run's sweep removes; TearDown removes them itself.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/disk_runtime.h"
#include "agent/disks/disk_driver_registry.h"
#include "agent/disks/disk_tools.h"
#include "agent/local_agent.h"
#include "config/config.h"
#include "support/capabilities.h"
#include "support/test_resources.h"

namespace {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using gpucloud::ErrorCode;
using gpucloud::agent::Command;
using gpucloud::agent::CommandOutcome;
using gpucloud::agent::DiskRuntime;
using gpucloud::agent::LocalAgent;
namespace disks = gpucloud::agent::disks;
using gpucloud::kMiB;

std::string random_alnum(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* chars = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(chars[rng() % 36]);
  return out;
}
std::string new_disk_id() { return "disk-" + random_alnum(12); }
std::string new_snapshot_id() { return "snap-" + random_alnum(12); }

// Bytes that differ per call (so a copy cannot pass by chance).
std::string random_bytes(std::size_t n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out(n, '\0');
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
  out.close();
  ASSERT_TRUE(out.good()) << "writing " << p;
}

// Writes 1 MiB chunks into `path` until a write (or the final fsync) fails or `limit` bytes
// are written. Answers the bytes written and the errno that stopped it (0: none).
std::pair<std::int64_t, int> fill(const fs::path& path, std::int64_t limit) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return {0, errno};
  const std::string chunk = random_bytes(static_cast<std::size_t>(kMiB));
  std::int64_t written = 0;
  int error = 0;
  while (written < limit) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n < 0) {
      error = errno;
      break;
    }
    written += n;
    if (n < static_cast<ssize_t>(chunk.size())) {
      // A short write is the filesystem running out: the next one says why.
      continue;
    }
  }
  if (::fsync(fd) != 0 && error == 0) error = errno;
  ::close(fd);
  return {written, error};
}

bool space_error(int e) { return e == ENOSPC || e == EDQUOT; }

std::int64_t fs_size(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.f_blocks * st.f_frsize);
}

bool tool_present(const char* name) { return static_cast<bool>(disks::find_tool(name, "")); }

// Loop devices and mounts under `dir`.
int loop_devices_under(const std::string& dir) {
  int n = 0;
  for (const auto& d : disks::list_loop_devices()) n += disks::path_is_under(d.backing_file, dir) ? 1 : 0;
  return n;
}
int mounts_under(const std::string& dir) {
  auto table = disks::read_mount_table();
  int n = 0;
  if (table) {
    for (const auto& m : *table) n += disks::path_is_under(m.mount_point, dir) ? 1 : 0;
  }
  return n;
}

class DiskDriverTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED("root", ::geteuid() == 0, "needs root (mount, losetup)");
    const bool tools = GetParam() == "btrfs" ? tool_present("btrfs") && tool_present("mkfs.btrfs")
                                             : tool_present("mkfs.ext4") && tool_present("resize2fs");
    GPUCLOUD_NEED("root", tools && tool_present("losetup") && tool_present("fsfreeze"),
                  "needs e2fsprogs, util-linux and btrfs-progs (./dev installs them)");
    dir_ = fs::path("/tmp") / gpucloud::testing::unique_name("gpucloud-disk-");
    fs::create_directories(dir_);
    lease_ = std::make_unique<gpucloud::testing::ResourceLease>();
    lease_->add("disk-dir", dir_.string());
    options_.agent_dir = (dir_ / "agent").string();
    options_.btrfs_pool_initial_bytes = 1024 * kMiB;
    driver_ = make();
    ASSERT_TRUE(driver_);
    auto started = driver_->start();
    ASSERT_TRUE(started) << started.error().detail;
  }

  void TearDown() override {
    driver_.reset();
    if (lease_) lease_->clean();  // mounts, loop devices, the directory
    lease_.reset();
  }

  std::unique_ptr<disks::DiskDriver> make() {
    auto d = disks::make_disk_driver(GetParam(), options_);
    EXPECT_TRUE(d) << d.error().detail;
    return d ? std::move(*d) : nullptr;
  }

  std::string mount(const std::string& id) {
    auto path = driver_->mount(id);
    EXPECT_TRUE(path) << path.error().detail;
    return path ? *path : std::string();
  }

  fs::path dir_;
  disks::DiskDriverOptions options_;
  std::unique_ptr<gpucloud::testing::ResourceLease> lease_;
  std::unique_ptr<disks::DiskDriver> driver_;
};

TEST_P(DiskDriverTest, ROOT_WritesStopAtTheSizeAndGrowingGivesRoom) {
  const std::string id = new_disk_id();
  ASSERT_TRUE(driver_->create(id, 64 * kMiB));
  auto created = driver_->create(id, 64 * kMiB);
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code, ErrorCode::conflict);
  const std::string path = mount(id);
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(mount(id), path) << "mounting again is the same mount";

  auto [written, error] = fill(fs::path(path) / "fill", 200 * kMiB);
  EXPECT_TRUE(space_error(error)) << "stopped by " << std::strerror(error) << " after " << written / kMiB << " MiB";
  EXPECT_GE(written, 40 * kMiB);
  EXPECT_LE(written, 64 * kMiB);
  auto info = driver_->inspect(id);
  ASSERT_TRUE(info && *info);
  EXPECT_EQ((*info)->size_bytes, 64 * kMiB);
  EXPECT_GE((*info)->used_bytes, 40 * kMiB);

  auto shrink = driver_->grow(id, 32 * kMiB);
  ASSERT_FALSE(shrink);
  EXPECT_EQ(shrink.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(shrink.error().detail.find("only grow"), std::string::npos) << shrink.error().detail;

  // Online (mounted) growth: room for about 64 MiB more. A kernel that refuses online
  // resizing (root without CAP_SYS_RESOURCE, as in some sandboxes) gets it at the next mount.
  const std::int64_t size_before = fs_size(path);
  auto grown = driver_->grow(id, 128 * kMiB);
  ASSERT_TRUE(grown) << grown.error().detail;
  if (GetParam() == "loop-ext4" && fs_size(path) == size_before) {
    std::printf("(no online resize here: remounting)\n");
    ASSERT_TRUE(driver_->unmount(id));
    ASSERT_EQ(mount(id), path);
    EXPECT_GT(fs_size(path), size_before + 48 * kMiB);
  }
  auto [more, more_error] = fill(fs::path(path) / "more", 200 * kMiB);
  EXPECT_TRUE(space_error(more_error)) << std::strerror(more_error);
  EXPECT_GE(more, 48 * kMiB);
  EXPECT_LE(more, 80 * kMiB);

  // Offline growth of an unmounted disk.
  ASSERT_TRUE(driver_->unmount(id));
  ASSERT_TRUE(driver_->grow(id, 192 * kMiB));
  info = driver_->inspect(id);
  ASSERT_TRUE(info && *info);
  EXPECT_EQ((*info)->size_bytes, 192 * kMiB);
  EXPECT_FALSE((*info)->mounted);
  EXPECT_GE((*info)->used_bytes, 100 * kMiB) << "usage is known without mounting";
  const std::string again = mount(id);
  if (GetParam() == "loop-ext4") {
    EXPECT_GE(fs_size(again), 170 * kMiB);
  }
  auto [last, last_error] = fill(fs::path(again) / "last", 200 * kMiB);
  EXPECT_TRUE(space_error(last_error));
  EXPECT_GE(last, 48 * kMiB);
  ASSERT_TRUE(driver_->unmount(id));
}

TEST_P(DiskDriverTest, ROOT_DiskFromSnapshotHoldsTheSnapshotsContentExactly) {
  const std::string id = new_disk_id(), snap = new_snapshot_id();
  ASSERT_TRUE(driver_->create(id, 64 * kMiB));
  const std::string path = mount(id);
  const std::string before = random_bytes(8 * kMiB);
  write_all(fs::path(path) / "data.bin", before);
  fs::create_directories(fs::path(path) / "dir");
  write_all(fs::path(path) / "dir" / "small.txt", "hello");

  // Taken while mounted (frozen for the copy, thawed after: the next write works).
  auto taken = driver_->snapshot(id, snap);
  ASSERT_TRUE(taken) << taken.error().detail;
  EXPECT_EQ(taken->disk_id, id);
  EXPECT_EQ(taken->size_bytes, 64 * kMiB);
  EXPECT_GE(taken->used_bytes, 8 * kMiB);
  auto repeat = driver_->snapshot(id, snap);
  ASSERT_TRUE(repeat) << "the same snapshot again is success";
  EXPECT_EQ(repeat->disk_id, id);

  write_all(fs::path(path) / "data.bin", random_bytes(8 * kMiB));
  write_all(fs::path(path) / "after.txt", "later");

  const std::string copy = new_disk_id();
  auto too_small = driver_->create_from_snapshot(copy, snap, 32 * kMiB);
  ASSERT_FALSE(too_small);
  EXPECT_EQ(too_small.error().code, ErrorCode::invalid_argument);
  auto missing = driver_->create_from_snapshot(copy, new_snapshot_id(), 64 * kMiB);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  auto made = driver_->create_from_snapshot(copy, snap, 128 * kMiB);
  ASSERT_TRUE(made) << made.error().detail;
  const std::string copy_path = mount(copy);
  EXPECT_TRUE(read_all(fs::path(copy_path) / "data.bin") == before) << "the snapshot's bytes, not today's";
  EXPECT_EQ(read_all(fs::path(copy_path) / "dir" / "small.txt"), "hello");
  EXPECT_FALSE(fs::exists(fs::path(copy_path) / "after.txt"));
  auto info = driver_->inspect(copy);
  ASSERT_TRUE(info && *info);
  EXPECT_EQ((*info)->size_bytes, 128 * kMiB);
  if (GetParam() == "loop-ext4") {
    EXPECT_GE(fs_size(copy_path), 110 * kMiB) << "grown to the asked size";
  }
  auto [room, error] = fill(fs::path(copy_path) / "fill", 200 * kMiB);
  EXPECT_TRUE(space_error(error));
  EXPECT_GE(room, 80 * kMiB);
  // The source is untouched by writes to the copy.
  EXPECT_EQ(read_all(fs::path(path) / "after.txt"), "later");

  // Another disk cannot take the same snapshot id.
  auto clash = driver_->snapshot(copy, snap);
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().code, ErrorCode::conflict);

  auto listed = driver_->list_snapshots();
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().snapshot_id, snap);
  ASSERT_TRUE(driver_->remove_snapshot(snap));
  ASSERT_TRUE(driver_->remove_snapshot(snap)) << "absent is success";
  auto gone = driver_->inspect_snapshot(snap);
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
  ASSERT_TRUE(driver_->unmount(id));
  ASSERT_TRUE(driver_->unmount(copy));
}

// loop-ext4's snapshot metadata (loop_ext4_driver.h), parsed; an empty object when absent.
json::object snapshot_meta(const std::string& agent_dir, const std::string& snap) {
  const std::string text = read_all(fs::path(agent_dir) / "disks/loop-ext4/snapshots" / (snap + ".json"));
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  return !ec && v.is_object() ? v.as_object() : json::object{};
}

// Whether two files hold the same bytes (cmp: an image is up to 1 GiB, mostly holes).
bool same_bytes(const std::string& a, const std::string& b) {
  return static_cast<bool>(disks::run_tool({"cmp", "-s", "--", a, b}, "diffutils"));
}

std::string this_boot_id() {
  std::string id = read_all("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

TEST_P(DiskDriverTest, ROOT_SnapshotAnswersBeforeItIsDurableAndIsMadeDurableAfter) {
  const std::string id = new_disk_id(), snap = new_snapshot_id(), cold = new_snapshot_id();
  ASSERT_TRUE(driver_->create(id, 64 * kMiB));
  const std::string path = mount(id);
  write_all(fs::path(path) / "data.bin", random_bytes(4 * kMiB));

  // Mounted (frozen for the copy).
  auto taken = driver_->snapshot(id, snap);
  ASSERT_TRUE(taken) << taken.error().detail;
  if (GetParam() == "btrfs") {
    EXPECT_TRUE(taken->durable) << "a btrfs snapshot is durable when it answers";
    EXPECT_TRUE(driver_->make_snapshot_durable(snap)) << "nothing to do";
    ASSERT_TRUE(driver_->unmount(id));
    return;
  }
  EXPECT_FALSE(taken->durable) << "loop-ext4 answers before the copy is written back";
  auto meta = snapshot_meta(options_.agent_dir, snap);
  EXPECT_EQ(meta["durable"], json::value(false)) << json::serialize(meta);
  EXPECT_EQ(meta["boot_id"], json::value(this_boot_id().c_str()));
  EXPECT_EQ(meta["disk_id"], json::value(id.c_str()));
  auto listed = driver_->list_snapshots();
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u) << "usable at once";
  ASSERT_TRUE(driver_->make_snapshot_durable(snap));
  meta = snapshot_meta(options_.agent_dir, snap);
  EXPECT_EQ(meta["durable"], json::value(true)) << json::serialize(meta);
  EXPECT_EQ(meta["disk_id"], json::value(id.c_str()));
  EXPECT_EQ(meta["size_bytes"], json::value(64 * kMiB));
  auto info = driver_->inspect_snapshot(snap);
  ASSERT_TRUE(info && *info);
  EXPECT_TRUE((*info)->durable);
  EXPECT_TRUE(driver_->make_snapshot_durable(snap)) << "durable already: nothing to do";
  EXPECT_TRUE(driver_->make_snapshot_durable(new_snapshot_id())) << "absent: nothing to do";

  // Not mounted: nothing changes the image between the copy and the check, so the snapshot
  // file is byte for byte the disk's image.
  ASSERT_TRUE(driver_->unmount(id));
  ASSERT_TRUE(driver_->snapshot(id, cold));
  EXPECT_EQ(snapshot_meta(options_.agent_dir, cold)["durable"], json::value(false));
  ASSERT_TRUE(driver_->make_snapshot_durable(cold));
  EXPECT_EQ(snapshot_meta(options_.agent_dir, cold)["durable"], json::value(true));
  const std::string disks_dir = options_.agent_dir + "/disks/loop-ext4";
  EXPECT_EQ(fs::file_size(disks_dir + "/" + id + ".img"), static_cast<std::uintmax_t>(64 * kMiB));
  EXPECT_TRUE(same_bytes(disks_dir + "/snapshots/" + cold + ".img", disks_dir + "/" + id + ".img"))
      << "the copy is exactly the disk";
}

TEST_P(DiskDriverTest, ROOT_StartMakesDurableASnapshotOfThisBootAndSetsAsideOneOfAnother) {
  if (GetParam() == "btrfs") GTEST_SKIP() << "btrfs snapshots are durable when they answer";
  const std::string id = new_disk_id(), same = new_snapshot_id(), other = new_snapshot_id(), old = new_snapshot_id();
  ASSERT_TRUE(driver_->create(id, 64 * kMiB));
  const std::string path = mount(id);
  const std::string data = random_bytes(4 * kMiB);
  write_all(fs::path(path) / "data.bin", data);
  for (const auto* s : {&same, &other, &old}) ASSERT_TRUE(driver_->snapshot(id, *s));
  const std::string snaps_dir = options_.agent_dir + "/disks/loop-ext4/snapshots/";
  // `other`: as if the host had crashed (and booted again) before its durable step.
  write_all(snaps_dir + other + ".json",
            json::serialize(json::object{{"disk_id", id}, {"size_bytes", 64 * kMiB}, {"durable", false},
                                         {"boot_id", "00000000-0000-4000-8000-000000000000"}}));
  // `old`: metadata from before the field existed (such snapshots were fsynced before they answered).
  write_all(snaps_dir + old + ".json", json::serialize(json::object{{"disk_id", id}, {"size_bytes", 64 * kMiB}}));

  driver_ = make();  // the agent again, after a kill -9 between the answer and the durable step
  auto started = driver_->start();
  ASSERT_TRUE(started) << started.error().detail;

  EXPECT_EQ(snapshot_meta(options_.agent_dir, same)["durable"], json::value(true)) << "made durable at the start";
  auto s = driver_->inspect_snapshot(same);
  ASSERT_TRUE(s && *s);
  EXPECT_TRUE((*s)->durable);
  auto o = driver_->inspect_snapshot(old);
  ASSERT_TRUE(o && *o) << "a snapshot without the field is durable";
  EXPECT_TRUE((*o)->durable);

  auto torn = driver_->inspect_snapshot(other);
  ASSERT_TRUE(torn);
  EXPECT_FALSE(*torn) << "a snapshot another boot left not durable is not offered";
  EXPECT_FALSE(fs::exists(snaps_dir + other + ".img"));
  EXPECT_TRUE(fs::exists(snaps_dir + other + ".img.torn")) << "set aside, not deleted";
  EXPECT_TRUE(fs::exists(snaps_dir + other + ".json.torn"));
  auto listed = driver_->list_snapshots();
  ASSERT_TRUE(listed);
  std::set<std::string> ids;
  for (const auto& i : *listed) ids.insert(i.snapshot_id);
  EXPECT_EQ(ids, (std::set<std::string>{same, old}));
  EXPECT_EQ(driver_->torn_snapshots(), std::vector<std::string>{other}) << "reported, for the control plane";
  auto from_torn = driver_->create_from_snapshot(new_disk_id(), other, 64 * kMiB);
  ASSERT_FALSE(from_torn);
  EXPECT_EQ(from_torn.error().code, ErrorCode::not_found);

  // A second start leaves both as they are.
  driver_ = make();
  ASSERT_TRUE(driver_->start());
  EXPECT_TRUE(fs::exists(snaps_dir + other + ".img.torn"));
  auto again = driver_->list_snapshots();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->size(), 2u);

  // The durable one still holds the data; removing the torn one deletes what was set aside.
  const std::string copy = new_disk_id();
  ASSERT_TRUE(driver_->create_from_snapshot(copy, same, 64 * kMiB));
  EXPECT_TRUE(read_all(fs::path(mount(copy)) / "data.bin") == data);
  ASSERT_TRUE(driver_->remove_snapshot(other));
  EXPECT_TRUE(driver_->torn_snapshots().empty());
  EXPECT_FALSE(fs::exists(snaps_dir + other + ".img.torn"));
  EXPECT_FALSE(fs::exists(snaps_dir + other + ".json.torn"));
  ASSERT_TRUE(driver_->unmount(copy));
  ASSERT_TRUE(driver_->unmount(id));
}

TEST_P(DiskDriverTest, ROOT_RemoveLeavesNoLoopDeviceMountOrFile) {
  const std::string id = new_disk_id();
  const std::string disks_dir = options_.agent_dir + "/disks/" + GetParam();
  const int loops_before = loop_devices_under(options_.agent_dir);  // btrfs: the pool's own
  const int mounts_before = mounts_under(options_.agent_dir);
  ASSERT_TRUE(driver_->create(id, 64 * kMiB));
  const std::string path = mount(id);
  write_all(fs::path(path) / "f", "x");
  ASSERT_TRUE(driver_->snapshot(id, new_snapshot_id()));
  auto removed = driver_->remove(id);  // mounted: unmounted first
  ASSERT_TRUE(removed) << removed.error().detail;
  EXPECT_FALSE(fs::exists(path));
  auto info = driver_->inspect(id);
  ASSERT_TRUE(info);
  EXPECT_FALSE(*info);
  EXPECT_EQ(loop_devices_under(options_.agent_dir), loops_before);
  EXPECT_EQ(mounts_under(options_.agent_dir), mounts_before);
  if (GetParam() == "loop-ext4") {
    EXPECT_FALSE(fs::exists(disks_dir + "/" + id + ".img"));
    EXPECT_FALSE(fs::exists(options_.agent_dir + "/mounts/" + id));
  } else {
    EXPECT_FALSE(fs::exists(disks_dir + "/mnt/disks/" + id));
  }
  ASSERT_TRUE(driver_->remove(id)) << "absent is success";
  auto all = driver_->list_disks();
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
  auto snaps = driver_->list_snapshots();
  ASSERT_TRUE(snaps);
  EXPECT_EQ(snaps->size(), 1u) << "a snapshot outlives its disk";
}

TEST_P(DiskDriverTest, ROOT_StartRemovesACrashsLeftoversButNoDisk) {
  const std::string kept = new_disk_id(), stale = new_disk_id();
  ASSERT_TRUE(driver_->create(kept, 64 * kMiB));
  ASSERT_TRUE(driver_->create(stale, 64 * kMiB));
  const std::string kept_path = mount(kept);
  const std::string stale_path = mount(stale);
  write_all(fs::path(stale_path) / "f", "still here");
  // What a kill -9 in the middle of a create leaves.
  std::string half;
  if (GetParam() == "loop-ext4") {
    half = options_.agent_dir + "/disks/loop-ext4/.tmp/" + new_disk_id() + ".img";
    write_all(half, "half an image");
  } else {
    half = options_.agent_dir + "/disks/btrfs/mnt/.tmp/" + new_disk_id();
    ASSERT_TRUE(disks::run_tool({"btrfs", "subvolume", "create", half}, "btrfs-progs"));
  }

  driver_ = make();  // the agent again, after a restart
  auto started = driver_->start();
  ASSERT_TRUE(started) << started.error().detail;
  EXPECT_FALSE(fs::exists(half));
  auto cleaned = driver_->unmount_all_except({kept});
  ASSERT_TRUE(cleaned) << cleaned.error().detail;
  auto k = driver_->inspect(kept);
  auto s = driver_->inspect(stale);
  ASSERT_TRUE(k && *k && s && *s) << "no disk is deleted";
  if (GetParam() == "loop-ext4") {
    EXPECT_TRUE((*k)->mounted) << "a running instance's disk stays mounted";
    EXPECT_FALSE((*s)->mounted) << "a stale mount is removed";
  }
  EXPECT_EQ(read_all(fs::path(mount(stale)) / "f"), "still here");
  ASSERT_TRUE(driver_->unmount(stale));
  ASSERT_TRUE(driver_->unmount(kept));
}

// ---- DiskRuntime: the disk commands as the control plane sends them --------------------------

template <class T>
net::awaitable<std::optional<T>> optional_result(net::awaitable<T> work) {
  co_return co_await std::move(work);
}

template <class T>
T run(net::io_context& ioc, net::awaitable<T> work) {
  auto future = net::co_spawn(ioc, optional_result(std::move(work)), net::use_future);
  ioc.restart();
  while (future.wait_for(0s) != std::future_status::ready) ioc.run_one_for(20ms);
  return *future.get();
}

gpucloud::config::Config one_host(const std::string& driver) {
  gpucloud::config::Config config;
  gpucloud::config::Host host;
  host.name = "disk-host";
  host.zone = "zone-a";
  host.cpu = 2;
  host.memory_gib = 4;
  host.simulated_gpus = {{"RTX 4090", 24, 1}};
  host.disk_driver = driver;
  config.hosts = {host};
  return config;
}

TEST_P(DiskDriverTest, ROOT_DiskCommandsAreIdempotentAndFenced) {
  driver_.reset();
  net::io_context ioc;
  DiskRuntime::Options options;
  options.btrfs_pool_initial_bytes = options_.btrfs_pool_initial_bytes;
  DiskRuntime runtime(ioc.get_executor(), options_.agent_dir, {{"disk-host", GetParam()}}, options);
  LocalAgent agent(ioc.get_executor(), one_host(GetParam()));
  runtime.register_handlers(agent);
  auto started = run(ioc, runtime.start());
  ASSERT_TRUE(started) << started.error().detail;
  auto execute = [&](const std::string& kind, json::object desired) {
    Command c{"cmd-" + random_alnum(10), "disk-host", kind, std::move(desired)};
    auto outcome = run(ioc, agent.execute(std::move(c)));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : CommandOutcome{};
  };
  auto must = [&](const std::string& kind, json::object desired) {
    auto o = execute(kind, std::move(desired));
    EXPECT_TRUE(o.ok) << kind << ": " << o.error_code << ": " << o.error_detail;
    return o.observed;
  };
  auto refused = [&](const std::string& kind, json::object desired, const std::string& code, const std::string& says) {
    auto o = execute(kind, std::move(desired));
    EXPECT_FALSE(o.ok) << kind;
    EXPECT_EQ(o.error_code, code) << o.error_detail;
    EXPECT_NE(o.error_detail.find(says), std::string::npos) << o.error_detail;
  };

  const std::string id = new_disk_id(), snap = new_snapshot_id();
  auto made = must("disk.ensure", {{"disk_id", id}, {"size_gib", 1}});
  EXPECT_EQ(made["size_gib"].as_int64(), 1);
  EXPECT_EQ(made["driver"].as_string(), GetParam());
  EXPECT_TRUE(made["created"].as_bool());
  auto again = must("disk.ensure", {{"disk_id", id}, {"size_gib", 1}});
  EXPECT_FALSE(again["created"].as_bool());
  auto grown = must("disk.ensure", {{"disk_id", id}, {"size_gib", 2}});
  EXPECT_EQ(grown["size_gib"].as_int64(), 2);
  refused("disk.ensure", {{"disk_id", id}, {"size_gib", 1}}, "invalid_argument", "size_gib: disks only grow");
  refused("disk.ensure", {{"disk_id", "../etc"}, {"size_gib", 1}}, "invalid_argument", "disk_id");
  refused("disk.ensure", {{"disk_id", id}, {"size_gib", 0}}, "invalid_argument", "size_gib");
  refused("disk.ensure", {{"disk_id", id}, {"size_gib", "big"}}, "invalid_argument", "size_gib");
  refused("disk.ensure", {{"disk_id", new_disk_id()}, {"size_gib", 1}, {"from_snapshot", new_snapshot_id()}},
          "not_found", "from_snapshot");
  refused("disk.snapshot", {{"disk_id", new_disk_id()}, {"snapshot_id", snap}}, "not_found", "disk");
  refused("disk.snapshot", {{"disk_id", id}}, "invalid_argument", "snapshot_id");

  auto taken = must("disk.snapshot", {{"disk_id", id}, {"snapshot_id", snap}});
  EXPECT_EQ(taken["snapshot_id"].as_string(), snap);
  EXPECT_EQ(taken["disk_id"].as_string(), id);
  EXPECT_EQ(taken["size_gib"].as_int64(), 2);
  must("disk.snapshot", {{"disk_id", id}, {"snapshot_id", snap}});
  if (GetParam() == "loop-ext4") {
    // The repeat waited for the snapshot's lock, which the durable step held: it ran.
    EXPECT_EQ(snapshot_meta(options_.agent_dir, snap)["durable"], json::value(true));
  }
  const std::string copy = new_disk_id();
  refused("disk.ensure", {{"disk_id", copy}, {"size_gib", 1}, {"from_snapshot", snap}}, "invalid_argument", "size_gib");
  auto from = must("disk.ensure", {{"disk_id", copy}, {"size_gib", 3}, {"from_snapshot", snap}});
  EXPECT_EQ(from["size_gib"].as_int64(), 3);

  auto status = must("disk.status", {});
  EXPECT_EQ(status["driver"].as_string(), GetParam());
  EXPECT_TRUE(status["enforces_size"].as_bool());
  ASSERT_EQ(status["disks"].as_array().size(), 2u);
  ASSERT_EQ(status["snapshots"].as_array().size(), 1u);
  for (const auto& d : status["disks"].as_array()) {
    EXPECT_FALSE(d.at("mounted").as_bool());
    EXPECT_GE(d.at("used_bytes").as_int64(), 0);
  }
  EXPECT_EQ(status["snapshots"].as_array()[0].at("disk_id").as_string(), id);

  // Removal is fenced by generation: a stale ensure cannot bring the disk back.
  auto removed = must("disk.remove", {{"disk_id", copy}, {"generation", 5}});
  EXPECT_TRUE(removed["existed"].as_bool());
  EXPECT_FALSE(must("disk.remove", {{"disk_id", copy}, {"generation", 5}})["existed"].as_bool());
  refused("disk.ensure", {{"disk_id", copy}, {"size_gib", 3}, {"generation", 4}}, "conflict", "stale command");
  must("disk.ensure", {{"disk_id", copy}, {"size_gib", 3}, {"generation", 6}});
  must("disk.remove", {{"disk_id", copy}});
  must("disk.remove", {{"disk_id", id}});
  EXPECT_TRUE(must("snapshot.remove", {{"snapshot_id", snap}})["existed"].as_bool());
  EXPECT_FALSE(must("snapshot.remove", {{"snapshot_id", snap}})["existed"].as_bool());
  auto empty = must("disk.status", {});
  EXPECT_TRUE(empty["disks"].as_array().empty());
  EXPECT_TRUE(empty["snapshots"].as_array().empty());

  Command elsewhere{"cmd-" + random_alnum(8), "no-such-host", "disk.status", {}};
  auto wrong_host = run(ioc, agent.execute(elsewhere));
  ASSERT_TRUE(wrong_host);
  EXPECT_EQ(wrong_host->error_code, "invalid_argument");
  EXPECT_NE(wrong_host->error_detail.find("host_name"), std::string::npos);
}

// The runtime goes (a kill -9 of gpucloudd, or a shutdown) right after a snapshot answered:
// its durable step may not have run. Nothing of the gone runtime is touched (ASan), and the
// driver's next start makes the snapshot durable, with the disk's content.
TEST_P(DiskDriverTest, ROOT_ASnapshotAnsweredJustBeforeTheRuntimeWentIsDurableAfterTheNextStart) {
  driver_.reset();
  const std::string id = new_disk_id(), snap = new_snapshot_id();
  {
    net::io_context ioc;
    DiskRuntime::Options options;
    options.btrfs_pool_initial_bytes = options_.btrfs_pool_initial_bytes;
    DiskRuntime runtime(ioc.get_executor(), options_.agent_dir, {{"disk-host", GetParam()}}, options);
    LocalAgent agent(ioc.get_executor(), one_host(GetParam()));
    runtime.register_handlers(agent);
    ASSERT_TRUE(run(ioc, runtime.start()));
    auto execute = [&](const std::string& kind, json::object desired) {
      Command c{"cmd-" + random_alnum(10), "disk-host", kind, std::move(desired)};
      auto outcome = run(ioc, agent.execute(std::move(c)));
      EXPECT_TRUE(outcome && outcome->ok) << kind << ": " << (outcome ? outcome->error_detail : "");
    };
    execute("disk.ensure", {{"disk_id", id}, {"size_gib", 1}});
    execute("disk.snapshot", {{"disk_id", id}, {"snapshot_id", snap}});
  }  // the runtime and its loop go now, whatever the durable step was doing
  driver_ = make();
  auto started = driver_->start();
  ASSERT_TRUE(started) << started.error().detail;
  auto info = driver_->inspect_snapshot(snap);
  ASSERT_TRUE(info && *info);
  EXPECT_TRUE((*info)->durable);
  if (GetParam() == "loop-ext4") {
    EXPECT_EQ(snapshot_meta(options_.agent_dir, snap)["durable"], json::value(true));
    const std::string dir = options_.agent_dir + "/disks/loop-ext4";
    // A whole filesystem (a byte compare of 1 GiB, mostly holes, takes seconds here; the
    // 64 MiB test above compares bytes).
    auto checked = disks::run_tool_exit({"e2fsck", "-f", "-n", dir + "/snapshots/" + snap + ".img"}, "e2fsprogs");
    ASSERT_TRUE(checked);
    EXPECT_EQ(checked->exit_code, 0) << checked->out << checked->err;
  }
}

INSTANTIATE_TEST_SUITE_P(Drivers, DiskDriverTest, ::testing::Values("loop-ext4", "btrfs"),
                         [](const auto& info) { return info.param == "loop-ext4" ? std::string("loop_ext4") : info.param; });

}  // namespace
