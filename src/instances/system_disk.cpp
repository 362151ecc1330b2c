#include "instances/system_disk.h"

#include "market/disk_pool.h"

#include <boost/json.hpp>

#include "events/events.h"

namespace gpucloud::instances {
namespace json = boost::json;

bool system_disk_overrun(std::optional<std::int64_t> used, std::int64_t gib) {
  return used && gib > 0 && *used > gib * kGiBBytes;
}

Status record_system_disk_report(store::Database& db, const std::string& host_name, const json::object& observed,
                                 SysTime now) {
  if (const auto* sd = observed.if_contains("system_disk"); sd && sd->is_object()) {
    const auto& o = sd->as_object();
    const auto* enforced = o.if_contains("enforced");
    const auto* reason = o.if_contains("reason");
    if (enforced && enforced->is_bool()) {
      std::string why = reason && reason->is_string() ? std::string(reason->as_string()) : std::string();
      if (auto s = db.run("UPDATE hosts SET system_disk_enforced = ?, system_disk_reason = ? WHERE name = ?",
                          {enforced->as_bool(), why, host_name});
          !s)
        return s;
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
