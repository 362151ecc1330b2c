#pragma once
// "loop-ext4": each data disk is a sparse ext4 image file, loop-mounted on the host only
// while an instance uses it (the container gets a bind mount of the mount directory).
//
//   AGENT_DIR/disks/loop-ext4/<disk id>.img              the disk (its size = the file's)
//   AGENT_DIR/disks/loop-ext4/snapshots/<snap id>.img    a snapshot: a sparse copy
//   AGENT_DIR/disks/loop-ext4/snapshots/<snap id>.json   {"disk_id","size_bytes","durable","boot_id"}
//   AGENT_DIR/disks/loop-ext4/snapshots/<snap id>.{img,json}.torn   set aside at a start (below)
//   AGENT_DIR/disks/loop-ext4/.tmp/                      images being made (removed at start)
//   AGENT_DIR/mounts/<disk id>                           the mount, while used
//
// mkfs.ext4 with lazy inode-table and journal init and no reserved blocks (a 100 GiB disk is
// made in tens of milliseconds). Grow: a bigger file, then resize2fs (online, after
// losetup -c, when mounted; where the kernel refuses that, at the next mount). A disk is
// mounted nodev,nosuid. ext4 has no reflink: a snapshot and a disk made from one are full
// (sparse) copies.
//
// Snapshot: cp --sparse=always, between fsfreeze -f and -u when mounted, into .tmp/; then the
// metadata written durably with "durable": false and this boot's id
// (/proc/sys/kernel/random/boot_id), then the copy renamed into place (fsync of the
// directory). What each moment guarantees:
//   - when snapshot() answers, the snapshot is consistent (one moment of the filesystem) and
//     usable: a disk can be made from it at once (the page cache serves the copy). A kill -9
//     of the agent or a dockerd restart loses nothing (the page cache is the kernel's).
//   - make_snapshot_durable (DiskRuntime runs it right after the answer, under the
//     snapshot's lock) fsyncs the copy, then rewrites the metadata with "durable": true:
//     from then on a host crash keeps it too. The writeback (seconds for GiBs) is thus off
//     the answer; the instance's freeze never held it (the thaw comes right after the cp).
//   - start() finds every snapshot still "durable": false. Same boot id: the agent went down
//     before that step; the copy is whole in the page cache, so it is made durable there.
//     Another boot id: the host went down before the copy reached the disk, so it may be
//     torn: it is renamed to <id>.img.torn / <id>.json.torn, logged (disk_snapshot_torn),
//     and no longer listed (inspect_snapshot answers absent; remove_snapshot deletes it).
//   Metadata without the field (snapshots made before it existed, fsynced before they
//   answered) counts as durable. Where the boot id cannot be read, the copy is fsynced
//   before the answer (durable at once, as before).
#include "agent/disks/disk_driver.h"

namespace gpucloud::agent::disks {

class LoopExt4Driver : public DiskDriver {
 public:
  explicit LoopExt4Driver(const DiskDriverOptions& options);

  std::string_view name() const override { return "loop-ext4"; }
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
  Status make_snapshot_durable(const std::string& snapshot_id) override;
  Result<std::vector<DiskInfo>> list_disks() override;
  Result<std::vector<SnapshotInfo>> list_snapshots() override;
  std::vector<std::string> torn_snapshots() override;

  std::string image_path(const std::string& disk_id) const { return root_ + "/" + disk_id + ".img"; }
  std::string mount_path(const std::string& disk_id) const { return mounts_ + "/" + disk_id; }
  std::string snapshot_image_path(const std::string& snapshot_id) const { return snapshots_ + "/" + snapshot_id + ".img"; }

 private:
  std::string snapshot_meta_path(const std::string& snapshot_id) const { return snapshots_ + "/" + snapshot_id + ".json"; }
  std::string temp_path(const std::string& id) const { return tmp_ + "/" + id + ".img"; }
  // The loop device the disk is mounted from ("" when not mounted).
  Result<std::string> mounted_device(const std::string& disk_id) const;
  Result<DiskInfo> describe(const std::string& disk_id, const std::string& device) const;
  // The filesystem of an unmounted image made as big as its file (after a bigger file).
  Status resize_offline(const std::string& image) const;
  Status copy_sparse(const std::string& from, const std::string& to) const;
  // start(): snapshots not yet durable made durable (this boot) or set aside as torn.
  void sweep_snapshots_not_durable();
  // A mounted disk's filesystem grown to its file's new size; where the kernel refuses an
  // online resize (no CAP_SYS_RESOURCE) it is left to the next mount, and this is ok.
  Status resize_online(const std::string& disk_id, const std::string& device) const;

  std::string root_, snapshots_, tmp_, mounts_;
};

}  // namespace gpucloud::agent::disks
