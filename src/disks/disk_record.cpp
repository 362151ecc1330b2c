#include "disks/disk_record.h"

#include "billing/resource_meters.h"

#include "events/events.h"
#include "market/disk_pool.h"

namespace gpucloud::disks {
namespace json = boost::json;

namespace {

// Billing follows every write (spec "Billing"): a disk by provisioned size while it is being
// made, available or attached; a snapshot by its used bytes once taken. The recycle bin
// does not bill.
std::optional<std::int64_t> billed_gib(const Disk& d) {
  if (d.state == DiskState::creating || d.state == DiskState::available || d.state == DiskState::attached)
    return d.size_gib;
  return std::nullopt;
}
std::optional<std::int64_t> billed_bytes(const Snapshot& s) {
  if (s.state == SnapshotState::available) return s.used_bytes;
  return std::nullopt;
}

// The host's disk pool counts a disk or snapshot by its provisioned size from its insert
// until it is destroyed (the recycle bin's still hold their bytes).
std::int64_t pool_bytes(const Disk& d) { return d.state == DiskState::destroyed ? 0 : d.size_gib * market::kGiB; }
std::int64_t pool_bytes(const Snapshot& s) {
  return s.state == SnapshotState::destroyed ? 0 : s.size_gib * market::kGiB;
}

std::optional<std::int64_t> micros(const std::optional<SysTime>& t) {
  return t ? std::optional(to_unix_micros(*t)) : std::nullopt;
}
std::optional<SysTime> time_of(const std::optional<std::int64_t>& v) {
  return v ? std::optional(from_unix_micros(*v)) : std::nullopt;
}

constexpr const char* kDiskColumns =
    "SELECT d.id, d.owner, d.name, d.zone, d.host_id, h.name, d.size_gib, d.applied_size_gib, d.used_bytes, d.state, "
    "d.state_reason, d.instance_id, d.mount_path, d.delete_on_release, d.from_snapshot, d.generation, d.created_at, "
    "d.deleted_at, d.purge_warned, d.first_deleted_at FROM disks d LEFT JOIN hosts h ON h.id = d.host_id ";

Disk disk_from(const store::Row& r) {
  Disk d;
  d.id = r.text(0);
  d.owner = r.text(1);
  d.name = r.text(2);
  d.zone = r.text(3);
  d.host_id = r.text(4);
  d.host_name = r.text(5);
  d.size_gib = r.int64(6);
  d.applied_size_gib = r.int64(7);
  d.used_bytes = r.int64(8);
  d.state = parse_disk_state(r.text(9)).value_or(DiskState::error);
  d.state_reason = r.text(10);
  d.instance_id = r.opt_text(11);
  d.mount_path = r.opt_text(12);
  d.delete_on_release = r.int64(13) != 0;
  d.from_snapshot = r.opt_text(14);
  d.generation = r.int64(15);
  d.created_at = from_unix_micros(r.int64(16));
  d.deleted_at = time_of(r.opt_int64(17));
  d.purge_warned = r.int64(18) != 0;
  d.first_deleted_at = time_of(r.opt_int64(19));
  return d;
}

constexpr const char* kSnapshotColumns =
    "SELECT s.id, s.owner, s.name, s.disk_id, s.host_id, h.name, s.zone, s.size_gib, s.used_bytes, s.state, "
    "s.state_reason, s.generation, s.created_at, s.deleted_at, s.purge_warned, s.first_deleted_at FROM snapshots s "
    "LEFT JOIN hosts h ON h.id = s.host_id ";

// Columns, then the rest of the query: appended, because g++ 12 at -O3 misreads
// operator+ on a temporary string here (false -Warray-bounds / -Wstringop-overflow).
std::string with_columns(std::string_view columns, std::string_view rest) {
  std::string sql;
  sql.reserve(columns.size() + rest.size());
  sql.append(columns).append(rest);
  return sql;
}

Snapshot snapshot_from(const store::Row& r) {
  Snapshot s;
  s.id = r.text(0);
  s.owner = r.text(1);
  s.name = r.text(2);
  s.disk_id = r.text(3);
  s.host_id = r.text(4);
  s.host_name = r.text(5);
  s.zone = r.text(6);
  s.size_gib = r.int64(7);
  s.used_bytes = r.int64(8);
  s.state = parse_snapshot_state(r.text(9)).value_or(SnapshotState::error);
  s.state_reason = r.text(10);
  s.generation = r.int64(11);
  s.created_at = from_unix_micros(r.int64(12));
  s.deleted_at = time_of(r.opt_int64(13));
  s.purge_warned = r.int64(14) != 0;
  s.first_deleted_at = time_of(r.opt_int64(15));
  return s;
}

template <class T, class From>
Result<std::vector<T>> load_all(store::Database& db, const std::string& sql, std::initializer_list<store::Arg> args,
                                From from) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<T> out;
  out.reserve(rows->size());
  for (const auto& r : *rows) out.push_back(from(r));
  return out;
}

// The recycle bin's deadline is fixed at a resource's FIRST deletion: a deletion after a
// restore takes the first one's time (so delete -> restore -> delete cannot restart the
// clock), and the first deletion's time is kept through restores.
void keep_first_deletion(const std::optional<SysTime>& first_before, std::optional<SysTime>& deleted_at,
                         std::optional<SysTime>& first_deleted_at) {
  if (deleted_at && first_before) deleted_at = first_before;
  first_deleted_at = first_before ? first_before : deleted_at;
}

Status record_change(store::Database& db, const std::string& resource, const std::string& owner, const Change& change,
                     SysTime now) {
  if (change.event.empty()) return ok();
  return events::record(db, now, change.event, resource, owner, change.message, change.data);
}

}  // namespace

Status insert_disk(store::Database& db, const Disk& d, const Change& change, SysTime now) {
  auto s = db.run(
      "INSERT INTO disks (id, owner, name, zone, host_id, size_gib, applied_size_gib, used_bytes, state, state_reason, "
      "instance_id, mount_path, delete_on_release, from_snapshot, generation, created_at, deleted_at, purge_warned, "
      "first_deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {d.id, d.owner, d.name, d.zone, d.host_id, d.size_gib, d.applied_size_gib, d.used_bytes,
       std::string(to_string(d.state)), d.state_reason, d.instance_id, d.mount_path, d.delete_on_release,
       d.from_snapshot, d.generation, to_unix_micros(d.created_at), micros(d.deleted_at), d.purge_warned,
       micros(d.deleted_at)});
  if (!s) {
    // The unique indexes are the last word on names and mount paths, also between writers.
    if (s.error().detail.find("UNIQUE") != std::string::npos)
      return fail(ErrorCode::conflict, "a disk named " + d.name + " or at " + d.mount_path.value_or("that path") +
                                           " already exists");
    return s;
  }
  if (auto p = market::take_disk_pool(db, d.host_id, pool_bytes(d),
                                      "disk " + d.name + " (" + std::to_string(d.size_gib) + " GiB)");
      !p)
    return p;
  if (auto b = billing::follow_data_disk(db, d.id, d.owner, billed_gib(d), now); !b) return b;
  return record_change(db, d.id, d.owner, change, now);
}

Result<std::optional<Disk>> load_disk(store::Database& db, const std::string& id) {
  auto many = load_all<Disk>(db, with_columns(kDiskColumns, "WHERE d.id = ?"), {id}, disk_from);
  if (!many) return fail(many.error());
  if (many->empty()) return std::optional<Disk>{};
  return std::optional<Disk>{std::move(many->front())};
}

Result<Disk> find_owned_disk(store::Database& db, const std::string& owner, const std::string& id_or_name,
                             bool deleted_too) {
  auto by_id = load_all<Disk>(db, with_columns(kDiskColumns, "WHERE d.id = ? AND d.owner = ? AND d.state != 'destroyed'"),
                              {id_or_name, owner}, disk_from);
  if (!by_id) return fail(by_id.error());
  if (!by_id->empty()) return std::move(by_id->front());
  auto by_name = load_all<Disk>(db,
                                with_columns(kDiskColumns,
                                    "WHERE d.owner = ? AND d.name = ? AND d.state NOT IN ('deleted', 'deleting', 'destroyed')"),
                                {owner, id_or_name}, disk_from);
  if (!by_name) return fail(by_name.error());
  if (!by_name->empty()) return std::move(by_name->front());
  if (deleted_too) {
    auto binned = load_all<Disk>(db,
                                 with_columns(kDiskColumns,
                                     "WHERE d.owner = ? AND d.name = ? AND d.state = 'deleted' "
                                     "ORDER BY d.deleted_at DESC, d.id DESC"),
                                 {owner, id_or_name}, disk_from);
    if (!binned) return fail(binned.error());
    if (!binned->empty()) return std::move(binned->front());
  }
  return fail(ErrorCode::not_found, "no disk " + id_or_name);
}

Result<std::vector<Disk>> list_disks(store::Database& db, const std::optional<std::string>& owner,
                                     const std::optional<DiskState>& state) {
  std::string sql = with_columns(kDiskColumns, "WHERE (? IS NULL OR d.owner = ?) AND ");
  sql += state ? "d.state = ?" : "d.state NOT IN ('deleted', 'destroyed') AND ? IS NULL";
  sql += " ORDER BY d.created_at DESC, d.id DESC";
  std::optional<std::string> state_text = state ? std::optional(std::string(to_string(*state))) : std::nullopt;
  return load_all<Disk>(db, sql, {owner, owner, state_text}, disk_from);
}

Result<std::vector<Disk>> disks_of_instance(store::Database& db, const std::string& instance_id) {
  return load_all<Disk>(db,
                        with_columns(kDiskColumns,
                            "WHERE d.instance_id = ? AND d.state != 'destroyed' ORDER BY d.mount_path, d.id"),
                        {instance_id}, disk_from);
}

Result<std::vector<Disk>> disks_with_pending_work(store::Database& db) {
  return load_all<Disk>(db,
                        with_columns(kDiskColumns,
                            "WHERE d.state IN ('creating', 'deleting') OR "
                            "(d.state IN ('available', 'attached') AND d.applied_size_gib < d.size_gib) "
                            "ORDER BY d.created_at, d.id"),
                        {}, disk_from);
}

Result<std::vector<Disk>> deleted_disks_before(store::Database& db, SysTime cutoff) {
  return load_all<Disk>(db,
                        with_columns(kDiskColumns,
                            "WHERE d.state = 'deleted' AND d.deleted_at <= ? ORDER BY d.deleted_at, d.id"),
                        {to_unix_micros(cutoff)}, disk_from);
}

Result<bool> live_disk_name_taken(store::Database& db, const std::string& owner, const std::string& name) {
  auto row = db.one("SELECT 1 FROM disks WHERE owner = ? AND name = ? AND state NOT IN ('deleted', 'deleting', 'destroyed')",
                    {owner, name});
  if (!row) return fail(row.error());
  return row->has_value();
}

Result<std::int64_t> disk_gib_used(store::Database& db, const std::string& owner) {
  auto row = db.one("SELECT COALESCE(SUM(size_gib), 0) FROM disks WHERE owner = ? AND state != 'destroyed'", {owner});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

Status update_disk(store::Database& db, const Disk& loaded, Disk& next, const Change& change, SysTime now) {
  next.generation = loaded.generation + 1;
  keep_first_deletion(loaded.first_deleted_at, next.deleted_at, next.first_deleted_at);
  auto s = db.run(
      "UPDATE disks SET name = ?, size_gib = ?, applied_size_gib = ?, used_bytes = ?, state = ?, state_reason = ?, "
      "instance_id = ?, mount_path = ?, delete_on_release = ?, generation = ?, deleted_at = ?, purge_warned = ?, "
      "first_deleted_at = ? WHERE id = ? AND generation = ?",
      {next.name, next.size_gib, next.applied_size_gib, next.used_bytes, std::string(to_string(next.state)),
       next.state_reason, next.instance_id, next.mount_path, next.delete_on_release, next.generation,
       micros(next.deleted_at), next.purge_warned, micros(next.first_deleted_at), loaded.id, loaded.generation});
  if (!s) {
    if (s.error().detail.find("UNIQUE") != std::string::npos)
      return fail(ErrorCode::conflict, "a disk named " + next.name + " already exists, or " +
                                           next.mount_path.value_or("that mount path") + " is taken on the instance");
    return s;
  }
  if (db.changes() == 0) {
    auto now_row = load_disk(db, loaded.id);
    std::string state = now_row && *now_row ? std::string(to_string((*now_row)->state)) : "gone";
    return fail(ErrorCode::conflict, "the disk changed meanwhile (it is " + state + "); try again");
  }
  if (auto p = market::take_disk_pool(db, loaded.host_id, pool_bytes(next) - pool_bytes(loaded),
                                      "disk " + loaded.name + " (" + std::to_string(loaded.size_gib) + " to " +
                                          std::to_string(next.size_gib) + " GiB)");
      !p)
    return p;
  if (auto b = billing::follow_data_disk(db, loaded.id, loaded.owner, billed_gib(next), now); !b) return b;
  return record_change(db, loaded.id, loaded.owner, change, now);
}

json::object disk_json(const Disk& d) {
  json::object o;
  o["id"] = d.id;
  o["name"] = d.name;
  o["owner"] = d.owner;
  o["zone"] = d.zone;
  o["host"] = d.host_name;
  o["size_gib"] = d.size_gib;
  o["used_bytes"] = d.used_bytes;
  o["state"] = to_string(d.state);
  if (d.state_reason.empty()) o["state_reason"] = nullptr;
  else o["state_reason"] = d.state_reason;
  if (d.instance_id) o["instance"] = *d.instance_id;
  else o["instance"] = nullptr;
  if (d.mount_path) o["mount_path"] = *d.mount_path;
  else o["mount_path"] = nullptr;
  o["delete_on_release"] = d.delete_on_release;
  if (d.from_snapshot) o["from_snapshot"] = *d.from_snapshot;
  else o["from_snapshot"] = nullptr;
  o["created_at"] = format_rfc3339(d.created_at);
  if (d.deleted_at) o["deleted_at"] = format_rfc3339(*d.deleted_at);
  else o["deleted_at"] = nullptr;
  return o;
}

Status insert_snapshot(store::Database& db, const Snapshot& s, const Change& change, SysTime now) {
  auto r = db.run(
      "INSERT INTO snapshots (id, owner, name, disk_id, host_id, zone, size_gib, used_bytes, state, state_reason, "
      "generation, created_at, deleted_at, purge_warned, first_deleted_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {s.id, s.owner, s.name, s.disk_id, s.host_id, s.zone, s.size_gib, s.used_bytes, std::string(to_string(s.state)),
       s.state_reason, s.generation, to_unix_micros(s.created_at), micros(s.deleted_at), s.purge_warned,
       micros(s.deleted_at)});
  if (!r) {
    if (r.error().detail.find("UNIQUE") != std::string::npos)
      return fail(ErrorCode::conflict, "you already have a snapshot named " + s.name);
    return r;
  }
  if (auto p = market::take_disk_pool(db, s.host_id, pool_bytes(s),
                                      "snapshot " + s.name + " (" + std::to_string(s.size_gib) + " GiB)");
      !p)
    return p;
  if (auto b = billing::follow_snapshot(db, s.id, s.owner, billed_bytes(s), now); !b) return b;
  return record_change(db, s.id, s.owner, change, now);
}

Result<std::optional<Snapshot>> load_snapshot(store::Database& db, const std::string& id) {
  auto many = load_all<Snapshot>(db, with_columns(kSnapshotColumns, "WHERE s.id = ?"), {id}, snapshot_from);
  if (!many) return fail(many.error());
  if (many->empty()) return std::optional<Snapshot>{};
  return std::optional<Snapshot>{std::move(many->front())};
}

Result<Snapshot> find_owned_snapshot(store::Database& db, const std::string& owner, const std::string& id_or_name,
                                     bool deleted_too) {
  auto by_id = load_all<Snapshot>(
      db, with_columns(kSnapshotColumns, "WHERE s.id = ? AND s.owner = ? AND s.state != 'destroyed'"), {id_or_name, owner},
      snapshot_from);
  if (!by_id) return fail(by_id.error());
  if (!by_id->empty()) return std::move(by_id->front());
  auto by_name = load_all<Snapshot>(
      db,
      with_columns(kSnapshotColumns,
          "WHERE s.owner = ? AND s.name = ? AND s.state NOT IN ('deleted', 'deleting', 'destroyed')"),
      {owner, id_or_name}, snapshot_from);
  if (!by_name) return fail(by_name.error());
  if (!by_name->empty()) return std::move(by_name->front());
  if (deleted_too) {
    auto binned = load_all<Snapshot>(db,
                                     with_columns(kSnapshotColumns,
                                         "WHERE s.owner = ? AND s.name = ? AND s.state = 'deleted' "
                                         "ORDER BY s.deleted_at DESC, s.id DESC"),
                                     {owner, id_or_name}, snapshot_from);
    if (!binned) return fail(binned.error());
    if (!binned->empty()) return std::move(binned->front());
  }
  return fail(ErrorCode::not_found, "no snapshot " + id_or_name);
}

Result<std::vector<Snapshot>> list_snapshots(store::Database& db, const std::optional<std::string>& owner,
                                             const std::optional<SnapshotState>& state) {
  std::string sql = with_columns(kSnapshotColumns, "WHERE (? IS NULL OR s.owner = ?) AND ");
  sql += state ? "s.state = ?" : "s.state NOT IN ('deleted', 'destroyed') AND ? IS NULL";
  sql += " ORDER BY s.created_at DESC, s.id DESC";
  std::optional<std::string> state_text = state ? std::optional(std::string(to_string(*state))) : std::nullopt;
  return load_all<Snapshot>(db, sql, {owner, owner, state_text}, snapshot_from);
}

Result<std::vector<Snapshot>> snapshots_of_disk(store::Database& db, const std::string& disk_id) {
  return load_all<Snapshot>(db,
                            with_columns(kSnapshotColumns,
                                "WHERE s.disk_id = ? AND s.state != 'destroyed' ORDER BY s.created_at, s.id"),
                            {disk_id}, snapshot_from);
}

Result<std::vector<Snapshot>> snapshots_with_pending_work(store::Database& db) {
  return load_all<Snapshot>(
      db, with_columns(kSnapshotColumns, "WHERE s.state IN ('creating', 'deleting') ORDER BY s.created_at, s.id"), {},
      snapshot_from);
}

Result<std::vector<Snapshot>> deleted_snapshots_before(store::Database& db, SysTime cutoff) {
  return load_all<Snapshot>(db,
                            with_columns(kSnapshotColumns,
                                "WHERE s.state = 'deleted' AND s.deleted_at <= ? ORDER BY s.deleted_at, s.id"),
                            {to_unix_micros(cutoff)}, snapshot_from);
}

Result<bool> live_snapshot_name_taken(store::Database& db, const std::string& owner, const std::string& name) {
  auto row = db.one(
      "SELECT 1 FROM snapshots WHERE owner = ? AND name = ? AND state NOT IN ('deleted', 'deleting', 'destroyed')",
      {owner, name});
  if (!row) return fail(row.error());
  return row->has_value();
}

Result<std::int64_t> snapshot_count(store::Database& db, const std::string& owner) {
  auto row = db.one("SELECT COUNT(*) FROM snapshots WHERE owner = ? AND state != 'destroyed'", {owner});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

Status update_snapshot(store::Database& db, const Snapshot& loaded, Snapshot& next, const Change& change, SysTime now) {
  next.generation = loaded.generation + 1;
  keep_first_deletion(loaded.first_deleted_at, next.deleted_at, next.first_deleted_at);
  auto s = db.run(
      "UPDATE snapshots SET name = ?, size_gib = ?, used_bytes = ?, state = ?, state_reason = ?, generation = ?, "
      "deleted_at = ?, purge_warned = ?, first_deleted_at = ? WHERE id = ? AND generation = ?",
      {next.name, next.size_gib, next.used_bytes, std::string(to_string(next.state)), next.state_reason,
       next.generation, micros(next.deleted_at), next.purge_warned, micros(next.first_deleted_at), loaded.id,
       loaded.generation});
  if (!s) {
    if (s.error().detail.find("UNIQUE") != std::string::npos)
      return fail(ErrorCode::conflict, "you already have a snapshot named " + next.name);
    return s;
  }
  if (db.changes() == 0) return fail(ErrorCode::conflict, "the snapshot changed meanwhile; try again");
  if (auto p = market::take_disk_pool(db, loaded.host_id, pool_bytes(next) - pool_bytes(loaded),
                                      "snapshot " + loaded.name);
      !p)
    return p;
  if (auto b = billing::follow_snapshot(db, loaded.id, loaded.owner, billed_bytes(next), now); !b) return b;
  return record_change(db, loaded.id, loaded.owner, change, now);
}

json::object snapshot_json(const Snapshot& s) {
  json::object o;
  o["id"] = s.id;
  o["name"] = s.name;
  o["owner"] = s.owner;
  o["disk"] = s.disk_id;
  o["zone"] = s.zone;
  o["host"] = s.host_name;
  o["size_gib"] = s.size_gib;
  o["used_bytes"] = s.used_bytes;
  o["state"] = to_string(s.state);
  if (s.state_reason.empty()) o["state_reason"] = nullptr;
  else o["state_reason"] = s.state_reason;
  o["created_at"] = format_rfc3339(s.created_at);
  if (s.deleted_at) o["deleted_at"] = format_rfc3339(*s.deleted_at);
  else o["deleted_at"] = nullptr;
  return o;
}

Status release_instance_disks(store::Database& db, const std::string& instance_id, SysTime now) {
  auto attached = disks_of_instance(db, instance_id);
  if (!attached) return fail(attached.error());
  for (const auto& d : *attached) {
    Disk next = d;
    next.instance_id.reset();
    next.mount_path.reset();
    Change c;
    if (d.delete_on_release) {
      // Into the recycle bin; the retention timer destroys it when the bin's period ends
      // (at once when recycle_days is 0).
      next.state = d.state == DiskState::creating || d.state == DiskState::error ? DiskState::deleting : DiskState::deleted;
      next.deleted_at = now;
      next.delete_on_release = false;
      c = Change{"disk.deleted", "disk " + d.name + " deleted with its instance (delete_on_release)",
                 json::object{{"instance", instance_id}}};
    } else {
      if (d.state == DiskState::attached) next.state = DiskState::available;
      c = Change{"disk.detached", "disk " + d.name + " detached: its instance was released, the disk is kept",
                 json::object{{"instance", instance_id}}};
    }
    if (auto s = update_disk(db, d, next, c, now); !s) return s;
  }
  return ok();
}

}  // namespace gpucloud::disks
