#pragma once
// "btrfs": one btrfs filesystem in a sparse pool file, loop-mounted while the agent runs (and
// left mounted when it stops: running instances hold bind mounts into it), with quotas on.
// A disk is a subvolume whose qgroup limit is its size (a write past it fails with EDQUOT);
// a snapshot is a read-only snapshot of it (instant, copy-on-write); a disk from a snapshot is
// a writable snapshot of that, with its own limit. The host path of a disk is its subvolume:
// nothing is mounted per disk.
//
//   AGENT_DIR/disks/btrfs/pool.img                        the pool (grows as disks need)
//   AGENT_DIR/disks/btrfs/mnt/                            where it is mounted
//   AGENT_DIR/disks/btrfs/mnt/disks/<disk id>             a disk
//   AGENT_DIR/disks/btrfs/mnt/snapshots/<snap id>         a snapshot (read-only)
//   AGENT_DIR/disks/btrfs/mnt/snapshots/<snap id>.json    {"disk_id","size_bytes"}
//   AGENT_DIR/disks/btrfs/mnt/.tmp/                       subvolumes being made (removed at start)
//
// Usage comes from the qgroup's referenced bytes (after a filesystem sync, so it includes
// what was written a moment ago). Quotas are enabled on an empty filesystem, so no rescan is
// ever needed (a rescan walks every extent: seconds per GiB of data).
#include <map>
#include <mutex>
#include <vector>

#include "agent/disks/disk_driver.h"

namespace gpucloud::agent::disks {

// One row of `btrfs qgroup show --raw -r`: level-0 qgroups by subvolume id.
struct QgroupRow {
  std::uint64_t subvolume_id = 0;
  std::int64_t referenced = 0;
  std::int64_t exclusive = 0;
  std::int64_t max_referenced = 0;  // 0: no limit
};
// Pure, for tests: the rows of level-0 qgroups ("0/ID ...").
std::map<std::uint64_t, QgroupRow> parse_qgroup_show(std::string_view text);
// Pure, for tests: `btrfs subvolume list` → path relative to the pool → subvolume id.
std::map<std::string, std::uint64_t> parse_subvolume_list(std::string_view text);
// Level-0 qgroups no live subvolume has (the top level's 5 aside): left by subvolumes deleted
// while the kernel could not destroy their qgroup yet (the cleaner still held the tree).
std::vector<std::uint64_t> stale_qgroups(const std::map<std::string, std::uint64_t>& subvolumes,
                                         const std::map<std::uint64_t, QgroupRow>& qgroups);

class BtrfsDriver : public DiskDriver {
 public:
  explicit BtrfsDriver(const DiskDriverOptions& options);

  std::string_view name() const override { return "btrfs"; }
  bool enforces_size() const override { return true; }
  Status start() override;
  Status unmount_all_except(const std::set<std::string>& keep) override;
  Result<std::optional<DiskInfo>> inspect(const std::string& disk_id) override;
  Status create(const std::string& disk_id, std::int64_t size_bytes) override;
  Status create_from_snapshot(const std::string& disk_id, const std::string& snapshot_id,
                              std::int64_t size_bytes) override;
  Status grow(const std::string& disk_id, std::int64_t size_bytes) override;
  Status remove(const std::string& disk_id) override;
  Result<std::string> mount(const std::string& disk_id) override;
  Status unmount(const std::string& disk_id) override;
  Result<std::optional<SnapshotInfo>> inspect_snapshot(const std::string& snapshot_id) override;
  Result<SnapshotInfo> snapshot(const std::string& disk_id, const std::string& snapshot_id) override;
  Status remove_snapshot(const std::string& snapshot_id) override;
  Result<std::vector<DiskInfo>> list_disks() override;
  Result<std::vector<SnapshotInfo>> list_snapshots() override;

  std::string disk_path(const std::string& disk_id) const { return mnt_ + "/disks/" + disk_id; }
  std::string snapshot_path(const std::string& snapshot_id) const { return mnt_ + "/snapshots/" + snapshot_id; }
  const std::string& pool_path() const { return pool_; }
  const std::string& mount_point() const { return mnt_; }

 private:
  std::string snapshot_meta_path(const std::string& snapshot_id) const { return snapshot_path(snapshot_id) + ".json"; }
  std::string temp_path(const std::string& id) const { return mnt_ + "/.tmp/" + id; }
  // Subvolume ids by path ("disks/ID") and the qgroups, read together.
  struct Accounting {
    std::map<std::string, std::uint64_t> ids;
    std::map<std::uint64_t, QgroupRow> qgroups;
    const QgroupRow* row(const std::string& relative) const;
  };
  Result<Accounting> accounting(bool sync) const;
  Status ensure_mounted();
  // Grows the pool file and the filesystem so that every disk could be full at once.
  // `known`: a listing just taken (saves two forks).
  Status ensure_pool_room(std::int64_t extra_bytes, const Accounting* known = nullptr);
  Status set_limit(const std::string& path, std::int64_t size_bytes);
  Status delete_subvolume(const std::string& path);

  std::string root_, pool_, mnt_;
  std::int64_t pool_initial_bytes_;
  std::mutex pool_mutex_;  // growing the pool (calls for different disks run concurrently)
};

}  // namespace gpucloud::agent::disks
