#pragma once
// What a user can do with data disks and snapshots. Each action runs inside the caller's
// write transaction, checks everything before it changes anything, writes through
// update_disk / update_snapshot (compare-and-set + event), and leaves the agent's work to
// DiskService::kick after the commit. Handlers parse, authorize and answer.
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "disks/disk_record.h"
#include "instances/actor.h"
#include "store/database.h"

namespace gpucloud::disks {

using instances::Actor;

inline constexpr const char* kDefaultMountPath = "/root/data";

// An absolute, normalised path that hides nothing the instance needs: not "/", not /root
// itself or its .ssh, not a system directory or under one (/etc, /usr, /proc, /dev, /sys, ...).
Status validate_mount_path(const std::string& path, const std::string& field);

struct CreateDiskRequest {
  std::string name;
  std::optional<std::string> zone, host;  // host: by name or id; else chosen in the zone
  std::optional<std::int64_t> size_gib;    // from a snapshot: defaults to the snapshot's size
  std::optional<std::string> from_snapshot;
};
Result<Disk> create_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& id,
                         const CreateDiskRequest& request, SysTime now);
// The instance must be stopped, on the disk's host, with `mount_path` free; the disk available.
Result<Disk> attach_disk(store::Database& db, const Actor& actor, const std::string& disk, const std::string& instance,
                         const std::string& mount_path, SysTime now);
Result<Disk> detach_disk(store::Database& db, const Actor& actor, const std::string& disk, SysTime now);
// Grow only; binds the disk_gib quota. Effect: the agent grows it (online when mounted).
Result<Disk> resize_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& disk,
                         std::int64_t size_gib, SysTime now);
// Only a detached disk. With recycle_days > 0 it goes to the recycle bin (`deleted`),
// restorable; with 0 it is destroyed (`deleting`, then gone).
Result<Disk> delete_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& disk,
                         SysTime now);
Result<Disk> restore_disk(store::Database& db, const Actor& actor, const std::string& disk, SysTime now);

// Binds the snapshots quota; needs a day of the snapshot's storage in the balance (402 in
// arrears), as a create or grow needs a day of the disk's.
Result<Snapshot> snapshot_disk(store::Database& db, const config::Config& config, const Actor& actor,
                               const std::string& disk, const std::string& id, const std::string& name, SysTime now);
Result<Snapshot> delete_snapshot(store::Database& db, const config::Config& config, const Actor& actor,
                                 const std::string& snapshot, SysTime now);
Result<Snapshot> restore_snapshot(store::Database& db, const Actor& actor, const std::string& snapshot, SysTime now);
// Snapshots their host set aside as torn (it went down before the copy reached its disk; see
// agent/disks/loop_ext4_driver.h): each of `host_id` that is still `available` goes to
// `error` with the reason, which stops its billing and tells its owner (`snapshot.error`);
// deleting it removes the host's copy. Unknown ids, other hosts' and other states: nothing.
Status mark_snapshots_torn(store::Database& db, const std::string& host_id, const std::string& host_name,
                           const std::vector<std::string>& torn, SysTime now);

// ---- with instances ---------------------------------------------------------------------
// POST /instances "data_disks": new disks made with the instance, or existing ones attached.
struct InstanceDataDisk {
  std::optional<std::string> existing;  // id or name of an available disk
  std::int64_t size_gib = 0;            // a new disk's size
  std::string mount_path = kDefaultMountPath;
  bool delete_on_release = false;
};
// Checks the list before placement: paths valid and distinct, existing disks the actor's,
// available, all on one host (returned: the instance must be placed there), the disk_gib
// quota for the new ones.
Result<std::optional<std::string>> check_instance_disks(store::Database& db, const config::Config& config,
                                                        const Actor& actor, const std::vector<InstanceDataDisk>& disks);
// After placement: new disks are recorded `creating` on the instance's host, attached to it;
// existing ones are attached. `new_ids` gives the ids of the new ones, in order.
Status attach_instance_disks(store::Database& db, const std::string& owner, const std::string& instance_id,
                             const std::string& host_id, const std::string& zone,
                             const std::vector<InstanceDataDisk>& disks, const std::vector<std::string>& new_ids,
                             SysTime now);
}  // namespace gpucloud::disks
