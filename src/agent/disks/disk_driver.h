#pragma once
// The agent's data-disk drivers: where a data disk's bytes live on a host, how it is made,
// grown, snapshotted, mounted and destroyed. Shaped like Incus' storage drivers
// (lxd/storage/drivers/driver_interface.go), much smaller. Two exist (see
// disk_driver_registry.h): "loop-ext4" (an ext4 image file per disk, loop-mounted while an
// instance uses it) and "btrfs" (one btrfs pool, a subvolume per disk with a qgroup limit,
// copy-on-write snapshots).
//
// Every call is BLOCKING (it forks mkfs, mount, cp, btrfs, waits on fsync): the caller runs
// it off the event loop. DiskRuntime (agent/disk_runtime.h) does, on its own thread pool, and
// never runs two calls for the same disk or snapshot at once; calls for different disks may
// run concurrently, so a driver keeps no per-call state outside the filesystem (start() runs
// alone, before any other call).
//
// Crash safety: every create, copy and snapshot is made under a temporary name and renamed
// into place, so a kill -9 at any step leaves either nothing or a whole disk; start() removes
// what such a crash left (temporary files, orphaned loop devices, frozen filesystems). A
// driver never deletes a disk or a snapshot except through remove / remove_snapshot.
//
// Durability: a disk (create, create_from_snapshot, grow) is on stable storage when the call
// answers. A snapshot may answer before it is (loop-ext4: its copy is still in the page
// cache, which a kill -9 of the agent or a dockerd restart does not lose); the caller then
// runs make_snapshot_durable, and start() finishes what a crash left undone. A snapshot a
// host crash caught before it was durable is set aside, never listed as good.
//
// Errors are values: invalid_argument (a bad id, a shrink), not_found (no such snapshot),
// conflict (in use), internal (a tool failed: its stderr in the detail), unavailable (a tool
// is missing, not root).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/units.h"

namespace gpucloud::agent::disks {

struct DiskInfo {
  std::string disk_id;
  std::int64_t size_bytes = 0;  // the provisioned size (what a write stops at)
  std::int64_t used_bytes = 0;  // what the files on it take
  bool mounted = false;         // loop-ext4: mounted on the host; btrfs: always false
};

struct SnapshotInfo {
  std::string snapshot_id;
  std::string disk_id;          // the disk it was taken of ("" when that was lost)
  std::int64_t size_bytes = 0;  // the disk's size when taken (a disk made from it is at least this)
  std::int64_t used_bytes = 0;
  // On stable storage (a host crash keeps it). false: consistent and usable (a disk can be
  // made from it), durable once make_snapshot_durable has run.
  bool durable = true;
};

struct DiskDriverOptions {
  // DATA_DIR/agent: a driver keeps its files under disks/<driver name>/ and mounts disks
  // under mounts/<disk id>.
  std::string agent_dir;
  // btrfs: the pool file's first size (sparse); it grows as disks are made or grown.
  std::int64_t btrfs_pool_initial_bytes = 16 * kGiB;
};

class DiskDriver {
 public:
  virtual ~DiskDriver() = default;

  virtual std::string_view name() const = 0;
  // Whether a write past a disk's size fails (ENOSPC/EDQUOT). Both drivers: true.
  virtual bool enforces_size() const = 0;

  // Makes the driver's directories (and the btrfs pool, mounted), then removes a crash's
  // leftovers: temporary files and subvolumes, orphaned loop devices of its images, frozen
  // filesystems of its mounts. Touches no whole disk. Snapshots not yet durable are made
  // durable (same boot) or set aside as torn (the host went down since).
  virtual Status start() = 0;
  // Unmounts every disk of this driver that is mounted and not in `keep` (the disks of
  // running instances, after an agent restart). btrfs: nothing to do.
  virtual Status unmount_all_except(const std::set<std::string>& keep) = 0;

  // nullopt when the disk does not exist.
  virtual Result<std::optional<DiskInfo>> inspect(const std::string& disk_id) = 0;
  // An empty disk of `size_bytes` (conflict if it exists).
  virtual Status create(const std::string& disk_id, std::int64_t size_bytes) = 0;
  // A disk holding the snapshot's content, of `size_bytes` (>= the snapshot's size).
  virtual Status create_from_snapshot(const std::string& disk_id, const std::string& snapshot_id,
                                      std::int64_t size_bytes) = 0;
  // Grows the disk to `size_bytes` (online when mounted); smaller is invalid_argument, equal
  // does nothing.
  virtual Status grow(const std::string& disk_id, std::int64_t size_bytes) = 0;
  // Destroys the disk; absent = ok. A mounted disk is unmounted first; conflict when it is
  // still in use (a container holds it).
  virtual Status remove(const std::string& disk_id) = 0;

  // Mounts the disk on the host (mounted already = ok) and answers the host path to
  // bind-mount into a container. btrfs: the subvolume's path.
  virtual Result<std::string> mount(const std::string& disk_id) = 0;
  // Not mounted = ok. The mount directory goes too, so a container started behind the
  // agent's back fails instead of writing into the host's own disk. btrfs: nothing to do.
  virtual Status unmount(const std::string& disk_id) = 0;

  virtual Result<std::optional<SnapshotInfo>> inspect_snapshot(const std::string& snapshot_id) = 0;
  // A consistent snapshot (a mounted disk is frozen while it is taken, and always thawed);
  // conflict when the snapshot id exists for another disk; existing for this disk = ok.
  virtual Result<SnapshotInfo> snapshot(const std::string& disk_id, const std::string& snapshot_id) = 0;
  virtual Status remove_snapshot(const std::string& snapshot_id) = 0;  // absent = ok
  // Puts a snapshot that answered before it was durable on stable storage (loop-ext4: fsync
  // of the copy, then its metadata says so). Absent or durable already = ok. Blocking for as
  // long as the writeback takes. The default: a driver whose snapshots are durable at once
  // (btrfs) has nothing to do.
  virtual Status make_snapshot_durable(const std::string& snapshot_id) {
    (void)snapshot_id;
    return ok();
  }

  // What exists, for disk.status and reconcile.
  virtual Result<std::vector<DiskInfo>> list_disks() = 0;
  virtual Result<std::vector<SnapshotInfo>> list_snapshots() = 0;
  // Snapshots set aside at a start because the host went down before they were durable
  // (never listed above): the control plane marks them lost. Default: none.
  virtual std::vector<std::string> torn_snapshots() { return {}; }
};

// Disk and snapshot ids name files and subvolumes: a lowercase prefix, '-', then letters and
// digits ("disk-3kq9x2m7c4v8", "snap-..."), at most 80 characters.
bool is_valid_disk_id(std::string_view id);

}  // namespace gpucloud::agent::disks
