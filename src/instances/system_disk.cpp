#include "instances/system_disk.h"

#include "market/disk_pool.h"

#include <boost/json.hpp>

#include "events/events.h"

namespace gpucloud::instances {
namespace json = boost::json;

bool system_disk_overrun(std::optional<std::int64_t> used, std::int64_t gib) {
  return used && gib > 0 && *used > gib * kGiBBytes;
}

namespace {

// A host's engine started or stopped enforcing system disk sizes (its first report, or a
// storage driver changed): its live instances' system disks start or stop counting in its
// pool. Instances already there count whatever the pool's capacity (they exist; the pool may
// go over, and then refuses new takes). Each instance moves once (conditional on what it
// holds), so two replicas recording the same report count nothing twice.
Status recount_system_disks(store::Database& db, const std::string& host_id, bool enforced) {
  auto rows = db.all("SELECT id, system_disk_gib, disk_pool_bytes FROM instances WHERE host_id = ? AND "
                     "state != 'released'",
                     {host_id});
  if (!rows) return fail(rows.error());
  std::int64_t moved = 0;
  for (const auto& row : *rows) {
    const std::string id = row.text(0);
    const std::int64_t bytes = row.int64(1) * kGiBBytes, held = row.int64(2);
    if (enforced && held == 0 && bytes > 0) {
      if (auto s = db.run("UPDATE instances SET disk_pool_bytes = ? WHERE id = ? AND disk_pool_bytes = 0", {bytes, id}); !s)
        return s;
      if (db.changes() == 1) moved += bytes;
    } else if (!enforced && held > 0) {
      if (auto s = db.run("UPDATE instances SET disk_pool_bytes = 0 WHERE id = ? AND disk_pool_bytes = ?", {id, held}); !s)
        return s;
      if (db.changes() == 1) moved -= held;
    }
  }
  if (moved == 0) return ok();
  return db.run("UPDATE hosts SET disk_pool_provisioned_bytes = MAX(0, disk_pool_provisioned_bytes + ?) WHERE id = ?",
                {moved, host_id});
}

}  // namespace

Status record_system_disk_report(store::Database& db, const std::string& host_name, const json::object& observed,
                                 SysTime now) {
  if (const auto* sd = observed.if_contains("system_disk"); sd && sd->is_object()) {
    const auto& o = sd->as_object();
    const auto* enforced = o.if_contains("enforced");
    const auto* reason = o.if_contains("reason");
    if (enforced && enforced->is_bool()) {
      std::string why = reason && reason->is_string() ? std::string(reason->as_string()) : std::string();
      auto host = db.one("SELECT id, system_disk_enforced FROM hosts WHERE name = ?", {host_name});
      if (!host) return fail(host.error());
      if (auto s = db.run("UPDATE hosts SET system_disk_enforced = ?, system_disk_reason = ? WHERE name = ?",
                          {enforced->as_bool(), why, host_name});
          !s)
        return s;
      const bool was = *host && (*host)->opt_int64(1).value_or(0) != 0;
      if (*host && was != enforced->as_bool())
        if (auto s = recount_system_disks(db, (*host)->text(0), enforced->as_bool()); !s) return s;
    }
  }
  const auto* instances = observed.if_contains("instances");
  if (instances == nullptr || !instances->is_array()) return ok();
  for (const auto& v : instances->as_array()) {
    const auto* o = v.if_object();
    if (o == nullptr) continue;
    const auto* id = o->if_contains("instance_id");
    const auto* used = o->if_contains("system_disk_used_bytes");
    if (id == nullptr || !id->is_string() || used == nullptr || !used->is_int64()) continue;
    auto row = db.one("SELECT owner, name, system_disk_gib, system_disk_used_bytes FROM instances WHERE id = ? AND "
                      "state != 'released'",
                      {std::string(id->as_string())});
    if (!row) return fail(row.error());
    if (!*row) continue;
    const std::int64_t gib = (*row)->int64(2);
    const std::optional<std::int64_t> before = (*row)->opt_int64(3);
    const std::int64_t now_used = used->as_int64();
    if (before == now_used) continue;
    if (auto s = db.run("UPDATE instances SET system_disk_used_bytes = ? WHERE id = ?",
                        {now_used, std::string(id->as_string())});
        !s)
      return s;
    if (system_disk_overrun(now_used, gib) && !system_disk_overrun(before, gib)) {
      const std::string name = (*row)->text(1);
      if (auto s = events::record(db, now, "instance.system_disk_overrun", std::string(id->as_string()), (*row)->text(0),
                                  "instance " + name + "'s system disk holds " + std::to_string(now_used / (1 << 20)) +
                                      " MiB, more than its " + std::to_string(gib) +
                                      " GiB (this host cannot enforce the size)",
                                  json::object{{"used_bytes", now_used}, {"system_disk_gib", gib}, {"host", host_name}});
          !s)
        return s;
    }
  }
  return ok();
}

Status take_system_disk(store::Database& db, const std::string& instance_id, const std::string& instance_name,
                        const std::string& host_id, std::int64_t gib) {
  auto enforced = db.one("SELECT system_disk_enforced FROM hosts WHERE id = ?", {host_id});
  if (!enforced) return fail(enforced.error());
  if (!*enforced || (*enforced)->opt_int64(0).value_or(0) == 0) return ok();
  const std::int64_t bytes = gib * kGiBBytes;
  if (auto s = market::take_disk_pool(db, host_id, bytes,
                                      "instance " + instance_name + "'s system disk (" + std::to_string(gib) + " GiB)");
      !s)
    return s;
  return db.run("UPDATE instances SET disk_pool_bytes = ? WHERE id = ?", {bytes, instance_id});
}

Status free_system_disk(store::Database& db, const std::string& instance_id) {
  auto row = db.one("SELECT host_id, disk_pool_bytes FROM instances WHERE id = ?", {instance_id});
  if (!row) return fail(row.error());
  if (!*row || (*row)->int64(1) == 0 || !(*row)->opt_text(0)) return ok();
  if (auto s = market::take_disk_pool(db, *(*row)->opt_text(0), -(*row)->int64(1), "a released system disk"); !s) return s;
  return db.run("UPDATE instances SET disk_pool_bytes = 0 WHERE id = ?", {instance_id});
}

}  // namespace gpucloud::instances
