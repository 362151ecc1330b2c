// Data-disk timings (docs/benchmarks.md, "Data disks"): a 10 GiB disk holding 2 GiB,
//   - loop-ext4: the driver's snapshot of the mounted disk (fsfreeze, cp --sparse=always,
//     thaw, metadata written durably, rename: what the user waits for) against a bare
//     `cp --sparse=always` of the same image, and that cp followed by an fsync, alternated in
//     the same run (target: snapshot <= 1.1x cp); and, apart, the durable step that
//     DiskRuntime runs after the answer (make_snapshot_durable: fsync of the copy, metadata).
//     An untimed `sync` before each measurement, so one side's writeback does not slow the
//     next; odd runs take the snapshot first;
//   - btrfs: the driver's snapshot (target <= 50 ms) and the bare `btrfs subvolume snapshot -r`;
//   - loop-ext4 create of a 100 GiB disk against a 1 GiB one (truncate + mkfs.ext4 + rename;
//     target: <= 100 ms more), and mount + unmount.
// Needs root; prints "skipped" otherwise. Not a Google Benchmark: each step takes seconds.
//   disk_snapshot_bench [--runs N] [--data-gib N] [--size-gib N] [--dir /tmp/DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "agent/disks/disk_driver_registry.h"
#include "agent/disks/disk_tools.h"
#include "core/units.h"

namespace disks = gpucloud::agent::disks;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

bool check(const gpucloud::Status& s, const char* what) {
  if (!s) std::fprintf(stderr, "disk_snapshot_bench: %s: %s\n", what, s.error().detail.c_str());
  return static_cast<bool>(s);
}

// `gib` GiB of incompressible data in 256 MiB files, synced.
bool write_data(const std::string& dir, int gib) {
  std::mt19937_64 rng{42};
  std::string chunk(1 << 20, '\0');
  for (int f = 0; f < gib * 4; ++f) {
    const std::string path = dir + "/data-" + std::to_string(f);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    for (int m = 0; m < 256; ++m) {
      for (std::size_t i = 0; i + 8 <= chunk.size(); i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(chunk.data() + i, &v, 8);
      }
      if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
        ::close(fd);
        return false;
      }
    }
    ::fsync(fd);
    ::close(fd);
  }
  return true;
}

bool fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3, data_gib = 2, size_gib = 10;
  std::string dir = "/tmp/gpucloud-bench-disk-" + std::to_string(::getpid());
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--data-gib") data_gib = std::atoi(argv[i + 1]);
    else if (a == "--size-gib") size_gib = std::atoi(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
  }
  if (::geteuid() != 0) {
    std::printf("disk_snapshot_bench: skipped (needs root: mount, losetup)\n");
    return 0;
  }
  disks::DiskDriverOptions options;
  options.agent_dir = dir + "/agent";
  options.btrfs_pool_initial_bytes = std::int64_t{size_gib + 4} * gpucloud::kGiB;
  int status = 0;
  std::printf("disk_snapshot_bench: %d GiB disk holding %d GiB, median of %d runs, in %s\n", size_gib, data_gib, runs,
              dir.c_str());

  // ---- loop-ext4 ----
  {
    auto driver = std::move(*disks::make_disk_driver("loop-ext4", options));
    if (!check(driver->start(), "loop-ext4 start")) return 1;
    const std::string id = "disk-bench1";
    if (!check(driver->create(id, std::int64_t{size_gib} * gpucloud::kGiB), "create")) return 1;
    auto path = driver->mount(id);
    if (!path || !write_data(*path, data_gib)) return 1;
    const std::string image = options.agent_dir + "/disks/loop-ext4/" + id + ".img";
    const std::string copy = options.agent_dir + "/disks/loop-ext4/.tmp/bench-copy.img";
    // Every measurement starts with nothing dirty: the previous one's writeback (the copy
    // left in the page cache, the durable step's) is finished first, untimed.
    auto settle = [] { ::sync(); };
    auto cp = [&](bool sync) {
      settle();
      const auto t0 = Clock::now();
      (void)disks::run_tool({"cp", "--sparse=always", "--", image, copy}, "coreutils", std::chrono::hours(1));
      if (sync) fsync_path(copy);
      const double ms = ms_since(t0);
      ::unlink(copy.c_str());
      settle();  // what the kernel had begun writing back of the copy ends here, untimed
      return ms;
    };
    cp(false);  // warm the page cache for every contender alike
    std::vector<double> t_cp, t_cp_sync, t_snap, t_durable;
    for (int r = 0; r < runs; ++r) {
      // Odd runs take the snapshot first, so neither side always follows the other.
      if (r % 2 == 0) {
        t_cp.push_back(cp(false));
        t_cp_sync.push_back(cp(true));
      }
      const std::string snap = "snap-bench" + std::to_string(r);
      settle();
      const auto t0 = Clock::now();
      auto made = driver->snapshot(id, snap);
      t_snap.push_back(ms_since(t0));
      if (!made) {
        std::fprintf(stderr, "snapshot: %s\n", made.error().detail.c_str());
        status = 1;
      } else if (made->durable) {
        std::fprintf(stderr, "snapshot: answered durable; expected the durable step apart\n");
        status = 1;
      }
      // What DiskRuntime runs right after the answer.
      const auto t1 = Clock::now();
      if (!check(driver->make_snapshot_durable(snap), "make_snapshot_durable")) status = 1;
      t_durable.push_back(ms_since(t1));
      auto after = driver->inspect_snapshot(snap);
      if (!after || !*after || !(*after)->durable) {
        std::fprintf(stderr, "make_snapshot_durable: the snapshot does not say durable\n");
        status = 1;
      }
      (void)driver->remove_snapshot(snap);
      settle();
      if (r % 2 == 1) {
        t_cp.push_back(cp(false));
        t_cp_sync.push_back(cp(true));
      }
      std::printf("  run %d: snapshot %.0f ms, cp %.0f ms, cp+fsync %.0f ms, durable step %.0f ms\n", r + 1, t_snap.back(),
                  t_cp.back(), t_cp_sync.back(), t_durable.back());
    }
    const double cp_ms = median(t_cp), cp_sync_ms = median(t_cp_sync), snap_ms = median(t_snap),
                 durable_ms = median(t_durable);
    std::vector<double> paired;  // each run's snapshot against the cp of the same run
    for (std::size_t i = 0; i < t_snap.size() && i < t_cp.size(); ++i) paired.push_back(t_snap[i] / t_cp[i]);
    std::printf("loop-ext4 snapshot (mounted, frozen)  %9.0f ms   (the answer; not yet durable)\n", snap_ms);
    std::printf("cp --sparse=always of the image       %9.0f ms   snapshot/cp = %.2f (target <= 1.10)\n", cp_ms,
                snap_ms / cp_ms);
    std::printf("                                                 median of the runs' own snapshot/cp = %.2f\n",
                median(paired));
    std::printf("cp --sparse=always + fsync            %9.0f ms   snapshot/(cp+fsync) = %.2f\n", cp_sync_ms,
                snap_ms / cp_sync_ms);
    std::printf("make_snapshot_durable (after answer)  %9.0f ms   snapshot + durable = %.0f ms\n", durable_ms,
                snap_ms + durable_ms);

    // create: 100 GiB against 1 GiB, and mount + unmount
    std::vector<double> t_big, t_small, t_mount;
    for (int r = 0; r < runs; ++r) {
      for (auto [gib, into] : {std::pair{100, &t_big}, std::pair{1, &t_small}}) {
        const std::string d = "disk-mk" + std::to_string(gib) + "r" + std::to_string(r);
        const auto t0 = Clock::now();
        if (!check(driver->create(d, std::int64_t{gib} * gpucloud::kGiB), "create")) status = 1;
        into->push_back(ms_since(t0));
        if (gib == 100) {
          const auto t1 = Clock::now();
          (void)driver->mount(d);
          (void)driver->unmount(d);
          t_mount.push_back(ms_since(t1));
        }
        (void)driver->remove(d);
      }
    }
    std::printf("loop-ext4 create 100 GiB              %9.1f ms\n", median(t_big));
    std::printf("loop-ext4 create 1 GiB                %9.1f ms   100 GiB costs %.1f ms more (target <= 100)\n",
                median(t_small), median(t_big) - median(t_small));
    std::printf("loop-ext4 mount + unmount (100 GiB)   %9.1f ms\n", median(t_mount));
    (void)driver->unmount(id);
    (void)driver->remove(id);
  }

  // ---- btrfs ----
  if (disks::find_tool("btrfs", "btrfs-progs")) {
    auto driver = std::move(*disks::make_disk_driver("btrfs", options));
    if (!check(driver->start(), "btrfs start")) return 1;
    const std::string id = "disk-bench2";
    if (!check(driver->create(id, std::int64_t{size_gib} * gpucloud::kGiB), "create")) return 1;
    auto path = driver->mount(id);
    if (!path || !write_data(*path, data_gib)) return 1;
    std::vector<double> t_snap, t_raw;
    for (int r = 0; r < runs; ++r) {
      const std::string snap = "snap-bench" + std::to_string(r);
      const auto t0 = Clock::now();
      auto made = driver->snapshot(id, snap);
      t_snap.push_back(ms_since(t0));
      if (!made) {
        std::fprintf(stderr, "snapshot: %s\n", made.error().detail.c_str());
        status = 1;
      }
      (void)driver->remove_snapshot(snap);
      const std::string raw = options.agent_dir + "/disks/btrfs/mnt/.tmp/raw" + std::to_string(r);
      const auto t1 = Clock::now();
      (void)disks::run_tool({"btrfs", "subvolume", "snapshot", "-r", *path, raw}, "btrfs-progs");
      t_raw.push_back(ms_since(t1));
      (void)disks::run_tool({"btrfs", "subvolume", "delete", raw}, "btrfs-progs");
    }
    std::printf("btrfs snapshot (driver)               %9.1f ms   (target <= 50)\n", median(t_snap));
    std::printf("btrfs subvolume snapshot -r (bare)    %9.1f ms\n", median(t_raw));
    (void)driver->remove(id);
    (void)disks::run_tool({"umount", options.agent_dir + "/disks/btrfs/mnt"}, "util-linux");
  } else {
    std::printf("btrfs: skipped (btrfs-progs not installed)\n");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return status;
}
