#pragma once
// Data disks and snapshots as the store keeps them (the disk repository), and their API
// views. Every write is a compare-and-set on (id, generation) and records its event in the
// same transaction: update_disk / update_snapshot are the one path by which a row changes.
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "disks/disk_state.h"
#include "store/database.h"

namespace gpucloud::disks {

struct Disk {
  std::string id, owner, name, zone, host_id;
  std::string host_name;  // read only (joined from hosts)
  std::int64_t size_gib = 0;
  std::int64_t applied_size_gib = 0;  // what the agent last confirmed (0: not made yet)
  std::int64_t used_bytes = 0;
  DiskState state = DiskState::creating;
  std::string state_reason;
  std::optional<std::string> instance_id, mount_path;
  bool delete_on_release = false;
  std::optional<std::string> from_snapshot;
  std::int64_t generation = 1;
  SysTime created_at;
  std::optional<SysTime> deleted_at;  // the recycle bin's clock: the FIRST deletion's time
  std::optional<SysTime> first_deleted_at;  // kept through restores; update_* keeps deleted_at to it
  bool purge_warned = false;
};

struct Snapshot {
  std::string id, owner, name, disk_id, host_id, zone;
  std::string host_name;  // read only
  std::int64_t size_gib = 0, used_bytes = 0;
  SnapshotState state = SnapshotState::creating;
  std::string state_reason;
  std::int64_t generation = 1;
  SysTime created_at;
  std::optional<SysTime> deleted_at;  // the recycle bin's clock: the FIRST deletion's time
  std::optional<SysTime> first_deleted_at;  // kept through restores; update_* keeps deleted_at to it
  bool purge_warned = false;
};

// What a row change says in the event log ("disk.attached", a sentence, extra data).
struct Change {
  std::string event;  // "" records no event
  std::string message;
  boost::json::object data = {};
};

Status insert_disk(store::Database& db, const Disk& disk, const Change& change, SysTime now);
Result<std::optional<Disk>> load_disk(store::Database& db, const std::string& id);
// The owner's disk by id or name. Names match disks that are not deleted; with
// `deleted_too` a name also matches the newest one in the recycle bin. Destroyed disks and
// other users' disks are not_found.
Result<Disk> find_owned_disk(store::Database& db, const std::string& owner, const std::string& id_or_name,
                             bool deleted_too = false);
// Newest first. No state filter: every disk but deleted and destroyed ones.
Result<std::vector<Disk>> list_disks(store::Database& db, const std::optional<std::string>& owner,
                                     const std::optional<DiskState>& state);
// The disks attached to an instance (any state but destroyed), by mount path.
Result<std::vector<Disk>> disks_of_instance(store::Database& db, const std::string& instance_id);
// Disks the agent still has to act on: creating, deleting, or grown past what it applied.
Result<std::vector<Disk>> disks_with_pending_work(store::Database& db);
// Deleted disks whose deletion is at or before `cutoff` (purge), or, with warn, whose
// warning is due and not yet given.
Result<std::vector<Disk>> deleted_disks_before(store::Database& db, SysTime cutoff);
Result<bool> live_disk_name_taken(store::Database& db, const std::string& owner, const std::string& name);
// GiB of data disks counting against the owner's disk_gib quota: every disk not destroyed
// (deleted ones in the recycle bin count, as the spec says).
Result<std::int64_t> disk_gib_used(store::Database& db, const std::string& owner);
// Writes every mutable field of `next` if the row is still at `loaded.generation`
// (`conflict` naming its state otherwise); the generation goes up; the change's event is
// recorded. On success `next` holds what was written.
Status update_disk(store::Database& db, const Disk& loaded, Disk& next, const Change& change, SysTime now);
boost::json::object disk_json(const Disk& disk);

Status insert_snapshot(store::Database& db, const Snapshot& snapshot, const Change& change, SysTime now);
Result<std::optional<Snapshot>> load_snapshot(store::Database& db, const std::string& id);
Result<Snapshot> find_owned_snapshot(store::Database& db, const std::string& owner, const std::string& id_or_name,
                                     bool deleted_too = false);
Result<std::vector<Snapshot>> list_snapshots(store::Database& db, const std::optional<std::string>& owner,
                                             const std::optional<SnapshotState>& state);
// Snapshots of a disk that still exist (not destroyed).
Result<std::vector<Snapshot>> snapshots_of_disk(store::Database& db, const std::string& disk_id);
Result<std::vector<Snapshot>> snapshots_with_pending_work(store::Database& db);
Result<std::vector<Snapshot>> deleted_snapshots_before(store::Database& db, SysTime cutoff);
// Snapshots counting against the owner's snapshots quota: every one not destroyed (the
// recycle bin's count, as disks' GiB do).
Result<std::int64_t> snapshot_count(store::Database& db, const std::string& owner);
Result<bool> live_snapshot_name_taken(store::Database& db, const std::string& owner, const std::string& name);
Status update_snapshot(store::Database& db, const Snapshot& loaded, Snapshot& next, const Change& change, SysTime now);
boost::json::object snapshot_json(const Snapshot& snapshot);

// A record step of an instance's release, in the transaction of its `released` transition
// (instances/transition.cpp; not an action: it changes no state a user asked for): its disks
// are detached and kept (`available`), or, when made with delete_on_release, moved to the
// recycle bin (destroyed when the bin's period ends).
Status release_instance_disks(store::Database& db, const std::string& instance_id, SysTime now);

}  // namespace gpucloud::disks
