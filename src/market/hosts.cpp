#include "market/hosts.h"

#include <algorithm>

#include <boost/json.hpp>

#include <map>

#include "core/ids.h"

namespace gpucloud::market {
namespace json = boost::json;

namespace {
std::string offer_model_for(const config::Config& config, const agent::GpuInfo& gpu) {
  if (const auto* offer = config.offer_for_nvml_name(gpu.model)) return offer->gpu_model;
  return gpu.model;  // no offer names it: listed under its own name, not in the market
}

// One GPU of a report as it is recorded: the UUID that keys it, and its health once the
// report's own oddities are counted. A GPU the report does not tell apart from another (no
// UUID, a UUID given twice, two UUIDs at one index) is unhealthy: a reservation on it could
// reach the wrong device, and the index is what placement hands out.
struct ReportedGpu {
  const agent::GpuInfo* info = nullptr;
  std::string uuid;
  std::string health;
};

std::vector<ReportedGpu> read_report(const std::string& host_id, const std::vector<agent::GpuInfo>& gpus) {
  std::vector<ReportedGpu> out;
  std::map<std::string, std::size_t> by_uuid;               // uuid -> its entry in out
  std::map<int, std::vector<std::size_t>> at_index;         // index -> entries reported there
  for (const auto& g : gpus) {
    ReportedGpu r{&g, g.uuid, g.health.empty() ? std::string("no health reported") : g.health};
    if (r.uuid.empty()) {
      // NVML could not say which GPU this is: recorded per host and index, never placed.
      r.uuid = "unidentified-" + host_id + "-" + std::to_string(g.index);
      if (r.health == "ok") r.health = "no UUID reported";
    }
    if (auto seen = by_uuid.find(r.uuid); seen != by_uuid.end()) {
      auto& first = out[seen->second];
      first.health = "the host reported this UUID twice (GPU " + std::to_string(first.info->index) + " and GPU " +
                     std::to_string(g.index) + ")";
      continue;
    }
    by_uuid[r.uuid] = out.size();
    // A missing GPU's index is only where it was last seen: NVML may have given it to another.
    if (r.health != kGpuMissing) at_index[g.index].push_back(out.size());
    out.push_back(std::move(r));
  }
  for (const auto& [index, entries] : at_index) {
    if (entries.size() < 2) continue;
    std::string names;
    for (auto n : entries) names += (names.empty() ? "" : ", ") + out[n].uuid;
    for (auto n : entries) out[n].health = "the host reported several GPUs as GPU " + std::to_string(index) + " (" + names + ")";
  }
  return out;
}

// Finds the GPUs of the host that became unusable or usable again, and records each change
// once: `lost_at` is compare-and-set (NULL -> now, now -> NULL), so a writer that finds it
// already moved (an earlier report, another process) records nothing.
Result<std::vector<GpuChange>> settle_gpu_losses(store::Database& db, const std::string& host_id, SysTime now) {
  auto rows = db.all(
      "SELECT g.uuid, g.model, g.idx, g.present, g.health, g.lost_at, r.holder FROM gpus g "
      "LEFT JOIN gpu_reservations gr ON gr.gpu_uuid = g.uuid AND gr.active = 1 "
      "LEFT JOIN reservations r ON r.id = gr.reservation_id "
      "WHERE g.host_id = ? ORDER BY g.idx, g.uuid",
      {host_id});
  if (!rows) return fail(rows.error());
  std::vector<GpuChange> changes;
  for (const auto& r : *rows) {
    const bool present = r.int64(3) != 0;
    const std::string health = present ? r.text(4) : std::string(kGpuMissing);
    const bool usable = health == "ok";
    const auto lost_at = r.opt_int64(5);
    GpuChange change{GpuChange::Kind::lost, r.text(0), r.text(1), static_cast<int>(r.int64(2)), health, r.opt_text(6), {}};
    if (!usable && !lost_at) {
      if (auto s = db.run("UPDATE gpus SET lost_at = ? WHERE uuid = ? AND lost_at IS NULL", {to_unix_micros(now), change.uuid});
          !s)
        return fail(s.error());
      if (db.changes() == 1) changes.push_back(std::move(change));
    } else if (usable && lost_at) {
      if (auto s = db.run("UPDATE gpus SET lost_at = NULL WHERE uuid = ? AND lost_at = ?", {change.uuid, *lost_at}); !s)
        return fail(s.error());
      if (db.changes() == 1) {
        change.kind = GpuChange::Kind::recovered;
        change.lost_at = from_unix_micros(*lost_at);
        changes.push_back(std::move(change));
      }
    }
  }
  return changes;
}
}  // namespace

Result<HostRegistration> register_host(store::Database& db, const agent::HostInventory& inv, const config::Config& config,
                                       SysTime now) {
  auto existing = db.one("SELECT id FROM hosts WHERE name = ?", {inv.name});
  if (!existing) return fail(existing.error());
  std::string id = *existing ? (*existing)->text(0) : new_id("h");
  auto now_us = to_unix_micros(now);
  if (*existing) {
    // Capacity may shrink below what is reserved; the CHECK would refuse that, so clamp
    // capacity at the reserved amount and let the operator see the difference.
    // A drained host stays drained (a restart registers every host again); a removed one
    // whose name registers again is active again.
    if (auto s = db.run("UPDATE hosts SET zone = ?, state = 'ready', "
                        "admin_state = CASE WHEN admin_state = 'removed' THEN 'active' ELSE admin_state END, "
                        "simulated = ?, inventory_source = ?, "
                        "inventory_error = ?, engine = ?, cpu = MAX(?, cpu_used), memory_gib = MAX(?, memory_gib_used), "
                        "port_min = ?, port_max = ?, last_seen = ? WHERE id = ?",
                        {inv.zone, inv.simulated, inv.inventory_source, inv.inventory_error, inv.engine, inv.cpu,
                         inv.memory_gib, inv.port_min, inv.port_max, now_us, id});
        !s)
      return fail(s.error());
  } else {
    if (auto s = db.run("INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, inventory_error, engine, "
                        "cpu, memory_gib, port_min, port_max, last_seen, created_at) "
                        "VALUES (?, ?, ?, 'ready', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        {id, inv.name, inv.zone, inv.simulated, inv.inventory_source, inv.inventory_error, inv.engine,
                         inv.cpu, inv.memory_gib, inv.port_min, inv.port_max, now_us, now_us});
        !s)
      return fail(s.error());
  }
  // GPUs are matched by UUID: one that renumbered keeps its record (and its reservation),
  // one no longer reported stays recorded as missing, never placed, never deleted.
  if (auto s = db.run("UPDATE gpus SET present = 0 WHERE host_id = ?", {id}); !s) return fail(s.error());
  for (const auto& r : read_report(id, inv.gpus)) {
    const auto& g = *r.info;
    if (auto s = db.run("INSERT INTO gpus (uuid, host_id, idx, model, reported_name, memory_bytes, pci_bus_id, health, "
                        "simulated, present) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
                        "ON CONFLICT (uuid) DO UPDATE SET host_id = excluded.host_id, idx = excluded.idx, "
                        "model = excluded.model, reported_name = excluded.reported_name, "
                        "memory_bytes = excluded.memory_bytes, pci_bus_id = excluded.pci_bus_id, "
                        "health = excluded.health, simulated = excluded.simulated, present = 1",
                        {r.uuid, id, g.index, offer_model_for(config, g), g.model, g.memory_bytes, g.pci_bus_id, r.health,
                         g.simulated});
        !s)
      return fail(s.error());
  }
  if (auto s = db.run("UPDATE hosts SET public_address = ? WHERE id = ?", {inv.public_address, id}); !s)
    return fail(s.error());
  if (!inv.gpu_injection.empty() || inv.lxcfs_available) {
    std::optional<std::int64_t> lxcfs;
    if (inv.lxcfs_available) lxcfs = *inv.lxcfs_available ? 1 : 0;
    if (auto s = db.run("UPDATE hosts SET gpu_injection = ?, gpu_injection_reason = ?, driver_version = ?, "
                        "lxcfs_available = ?, lxcfs_reason = ? WHERE id = ?",
                        {inv.gpu_injection, inv.gpu_injection_reason, inv.driver_version, lxcfs, inv.lxcfs_reason, id});
        !s)
      return fail(s.error());
  }
  auto changes = settle_gpu_losses(db, id, now);
  if (!changes) return fail(changes.error());
  std::optional<DiskPoolCrossing> crossing;
  if (inv.disk_pool) {
    auto crossed = record_disk_pool(db, id, *inv.disk_pool);
    if (!crossed) return fail(crossed.error());
    crossing = *crossed;
  }
  auto host = find_host(db, id);
  if (!host) return fail(host.error());
  return HostRegistration{std::move(**host), std::move(*changes), crossing};
}

Result<HostRecord> upsert_host(store::Database& db, const agent::HostInventory& inv, const config::Config& config,
                               SysTime now) {
  auto registered = register_host(db, inv, config, now);
  if (!registered) return fail(registered.error());
  return std::move(registered->host);
}

Result<std::vector<GpuChange>> record_gpu_health(store::Database& db, const std::string& host_name,
                                                 const std::vector<agent::GpuInfo>& gpus, const config::Config& config,
                                                 SysTime now) {
  auto id = host_id_by_name(db, host_name);
  if (!id) return fail(id.error());
  if (!*id) return std::vector<GpuChange>{};
  std::vector<GpuChange> added;
  for (const auto& r : read_report(**id, gpus)) {
    const auto& g = *r.info;
    auto known = db.one("SELECT host_id FROM gpus WHERE uuid = ?", {r.uuid});
    if (!known) return fail(known.error());
    if (!*known) {
      // A GPU the host did not have when it registered (a replaced card): placeable from now,
      // if the report is clear: healthy, and at an index no recorded GPU the beat leaves
      // unnamed still holds (else it waits for the next registration, the full inventory).
      if (r.health != "ok") continue;
      auto holders = db.all("SELECT uuid FROM gpus WHERE host_id = ? AND idx = ? AND present = 1", {**id, g.index});
      if (!holders) return fail(holders.error());
      const bool taken = std::any_of(holders->begin(), holders->end(), [&](const store::Row& h) {
        return std::none_of(gpus.begin(), gpus.end(), [&](const agent::GpuInfo& b) { return b.uuid == h.text(0); });
      });
      if (taken) continue;
      const std::string model = offer_model_for(config, g);
      if (auto s = db.run("INSERT INTO gpus (uuid, host_id, idx, model, reported_name, memory_bytes, pci_bus_id, health, "
                          "simulated, present) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                          {r.uuid, **id, g.index, model, g.model, g.memory_bytes, g.pci_bus_id, r.health, g.simulated});
          !s)
        return fail(s.error());
      added.push_back(GpuChange{GpuChange::Kind::added, r.uuid, model, g.index, r.health, std::nullopt, std::nullopt});
      continue;
    }
    if ((*known)->text(0) != **id) continue;  // another host's GPU: only its own host speaks for it
    // Its health, and the index it has now (NVML renumbers after a GPU falls off the bus).
    if (auto s = db.run("UPDATE gpus SET health = ?, present = 1, idx = ? WHERE uuid = ? AND host_id = ?",
                        {r.health, g.index, r.uuid, **id});
        !s)
      return fail(s.error());
  }
  auto changes = settle_gpu_losses(db, **id, now);
  if (!changes) return fail(changes.error());
  added.insert(added.end(), std::make_move_iterator(changes->begin()), std::make_move_iterator(changes->end()));
  return added;
}

Status set_host_state(store::Database& db, const std::string& host_name, const std::string& state,
                      std::optional<SysTime> last_seen) {
  std::optional<std::int64_t> seen;
  if (last_seen) seen = to_unix_micros(*last_seen);
  return db.run("UPDATE hosts SET state = ?, last_seen = COALESCE(?, last_seen) WHERE name = ?",
                {state, seen, host_name});
}

namespace {
constexpr const char* kHostColumns =
    "id, name, zone, state, simulated, inventory_source, inventory_error, engine, cpu, cpu_used, memory_gib, "
    "memory_gib_used, port_min, port_max, last_seen, system_disk_enforced, system_disk_reason, "
    "disk_pool_capacity_bytes, disk_pool_provisioned_bytes, disk_pool_size_bytes, disk_pool_used_bytes, "
    "disk_pool_reserve_bytes, disk_pool_warned_percent, gpu_injection, gpu_injection_reason, driver_version, "
    "lxcfs_available, lxcfs_reason, admin_state, agent_kind, agent_version, agent_address, connected_at, "
    "last_heartbeat_at, "
    // The certificate the host's agent now holds: its newest one not revoked.
    "(SELECT c.not_after FROM host_certificates c WHERE c.host_name = hosts.name AND c.revoked_at IS NULL "
    "ORDER BY c.issued_at DESC LIMIT 1)";

std::optional<SysTime> time_at(const std::optional<std::int64_t>& micros) {
  if (!micros) return std::nullopt;
  return from_unix_micros(*micros);
}

HostRecord host_from(const store::Row& r) {
  HostRecord h;
  h.id = r.text(0);
  h.name = r.text(1);
  h.zone = r.text(2);
  h.liveness = r.text(3);
  h.simulated = r.int64(4) != 0;
  h.inventory_source = r.text(5);
  h.inventory_error = r.text(6);
  h.engine = r.text(7);
  h.cpu = static_cast<int>(r.int64(8));
  h.cpu_used = static_cast<int>(r.int64(9));
  h.memory_gib = r.int64(10);
  h.memory_gib_used = r.int64(11);
  h.port_min = static_cast<int>(r.int64(12));
  h.port_max = static_cast<int>(r.int64(13));
  if (auto seen = r.opt_int64(14)) h.last_seen = from_unix_micros(*seen);
  if (auto enforced = r.opt_int64(15)) h.system_disk_enforced = *enforced != 0;
  h.system_disk_reason = r.text(16);
  h.disk_pool.capacity_bytes = r.opt_int64(17);
  h.disk_pool.provisioned_bytes = r.int64(18);
  h.disk_pool.size_bytes = r.opt_int64(19);
  h.disk_pool.used_bytes = r.opt_int64(20);
  h.disk_pool.reserve_bytes = r.opt_int64(21);
  h.disk_pool.warned_percent = static_cast<int>(r.int64(22));
  h.gpu_injection = r.text(23);
  h.gpu_injection_reason = r.text(24);
  h.driver_version = r.text(25);
  if (auto lx = r.opt_int64(26)) h.lxcfs_available = *lx != 0;
  h.lxcfs_reason = r.text(27);
  h.admin_state = r.text(28);
  if (h.admin_state == kHostRemoved || h.admin_state == kHostDraining) h.state = h.admin_state;
  else h.state = h.liveness;
  h.agent.kind = r.opt_text(29);
  h.agent.version = r.opt_text(30);
  h.agent.address = r.opt_text(31);
  h.agent.connected_at = time_at(r.opt_int64(32));
  h.agent.last_heartbeat_at = time_at(r.opt_int64(33));
  h.agent.certificate_expires_at = time_at(r.opt_int64(34));
  return h;
}

Status attach_gpus(store::Database& db, std::vector<HostRecord>& hosts) {
  auto rows = db.all(
      "SELECT g.host_id, g.idx, g.uuid, g.model, g.reported_name, g.memory_bytes, g.pci_bus_id, g.health, g.simulated, "
      "g.present, r.holder, g.lost_at FROM gpus g "
      "LEFT JOIN gpu_reservations gr ON gr.gpu_uuid = g.uuid AND gr.active = 1 "
      "LEFT JOIN reservations r ON r.id = gr.reservation_id "
      "ORDER BY g.host_id, g.present DESC, g.idx, g.uuid");
  if (!rows) return fail(rows.error());
  std::map<std::string, HostRecord*> by_id;
  for (auto& h : hosts) by_id[h.id] = &h;
  for (const auto& r : *rows) {
    auto it = by_id.find(r.text(0));
    if (it == by_id.end()) continue;
    std::optional<SysTime> lost_at;
    if (auto lost = r.opt_int64(11)) lost_at = from_unix_micros(*lost);
    GpuRecord g{static_cast<int>(r.int64(1)), r.text(2), r.text(3), r.text(4), r.int64(5), r.text(6),
                r.text(7), r.int64(8) != 0, r.int64(9) != 0, r.opt_text(10), lost_at};
    it->second->gpus.push_back(std::move(g));
  }
  return ok();
}
}  // namespace

Result<std::vector<HostRecord>> list_hosts(store::Database& db, bool include_removed) {
  auto rows = db.all(std::string("SELECT ") + kHostColumns + " FROM hosts" +
                     (include_removed ? "" : " WHERE admin_state != 'removed'") + " ORDER BY name");
  if (!rows) return fail(rows.error());
  std::vector<HostRecord> hosts;
  for (const auto& r : *rows) hosts.push_back(host_from(r));
  if (auto s = attach_gpus(db, hosts); !s) return fail(s.error());
  return hosts;
}

Result<std::optional<HostRecord>> find_host(store::Database& db, const std::string& id_or_name) {
  auto row = db.one(std::string("SELECT ") + kHostColumns + " FROM hosts WHERE id = ? OR name = ?", {id_or_name, id_or_name});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<HostRecord>{};
  std::vector<HostRecord> one{host_from(**row)};
  if (auto s = attach_gpus(db, one); !s) return fail(s.error());
  return std::optional<HostRecord>{std::move(one.front())};
}

scheduler::HostCapacity to_capacity(const HostRecord& h, bool own_host) {
  scheduler::HostCapacity c;
  c.id = h.id;
  c.name = h.name;
  c.zone = h.zone;
  c.ready = h.liveness == "ready" &&
            (h.admin_state == kHostActive || (own_host && h.admin_state == kHostDraining));
  c.cpu_total = h.cpu;
  c.cpu_used = h.cpu_used;
  c.memory_gib_total = h.memory_gib;
  c.memory_gib_used = h.memory_gib_used;
  for (const auto& g : h.gpus) {
    if (!g.present) continue;
    // An unhealthy GPU is never offered; a reserved one is not free. A missing one is not
    // listed at all: its last index may now belong to another GPU.
    bool free = !g.reserved_by && g.health == "ok";
    c.gpus.push_back(scheduler::GpuSlot{g.index, g.uuid, g.model, free});
  }
  return c;
}

Result<std::vector<scheduler::HostCapacity>> load_capacities(store::Database& db) {
  auto hosts = list_hosts(db);
  if (!hosts) return fail(hosts.error());
  std::vector<scheduler::HostCapacity> out;
  out.reserve(hosts->size());
  for (const auto& h : *hosts) out.push_back(to_capacity(h));
  return out;
}

json::object host_json(const HostRecord& h) {
  json::array gpus;
  for (const auto& g : h.gpus) {
    json::object o{{"index", g.index},
                   {"uuid", g.uuid},
                   {"model", g.model},
                   {"reported_name", g.reported_name},
                   {"memory_gib", g.memory_bytes / (1LL << 30)},
                   {"pci_bus_id", g.pci_bus_id},
                   {"health", g.present ? g.health : std::string(kGpuMissing)},
                   {"simulated", g.simulated},
                   {"lost_at", g.lost_at ? json::value(format_rfc3339(*g.lost_at)) : json::value(nullptr)}};
    // The holder of the reservation; `instance` names it once it is an instance id.
    if (g.reserved_by) {
      o["reserved_by"] = *g.reserved_by;
      o["instance"] = g.reserved_by->starts_with("i-") ? json::value(*g.reserved_by) : json::value(nullptr);
    } else {
      o["reserved_by"] = nullptr;
      o["instance"] = nullptr;
    }
    gpus.push_back(std::move(o));
  }
  json::object o;
  o["id"] = h.id;
  o["name"] = h.name;
  o["zone"] = h.zone;
  o["state"] = h.state;
  o["liveness"] = h.liveness;
  o["admin_state"] = h.admin_state;
  o["simulated"] = h.simulated;
  o["inventory_source"] = h.inventory_source;
  o["inventory_error"] = h.inventory_error.empty() ? json::value(nullptr) : json::value(h.inventory_error);
  o["cpu"] = h.cpu;
  o["cpu_used"] = h.cpu_used;
  o["memory_gib"] = h.memory_gib;
  o["memory_gib_used"] = h.memory_gib_used;
  o["port_range"] = std::to_string(h.port_min) + "-" + std::to_string(h.port_max);
  o["gpus"] = std::move(gpus);
  o["last_seen"] = h.last_seen ? json::value(format_rfc3339(*h.last_seen)) : json::value(nullptr);
  o["system_disk_enforced"] = h.system_disk_enforced.value_or(false);
  o["system_disk_reason"] = h.system_disk_enforced.value_or(false)
                                ? json::value(nullptr)
                                : json::value(h.system_disk_enforced ? h.system_disk_reason
                                                                     : std::string("not reported by the host yet"));
  o["disk_pool"] = disk_pool_json(h.disk_pool);
  // null until the host's agent reports it (an agent from before issue 25).
  o["gpu_injection"] = h.gpu_injection.empty()
                           ? json::value(nullptr)
                           : json::value(json::object{{"mode", h.gpu_injection},
                                                      {"reason", h.gpu_injection_reason},
                                                      {"driver_version", h.driver_version.empty()
                                                                             ? json::value(nullptr)
                                                                             : json::value(h.driver_version)}});
  o["lxcfs"] = h.lxcfs_available ? json::value(json::object{{"available", *h.lxcfs_available}, {"reason", h.lxcfs_reason}})
                                 : json::value(nullptr);
  auto opt_text = [](const std::optional<std::string>& v) { return v ? json::value(*v) : json::value(nullptr); };
  auto opt_time = [](const std::optional<SysTime>& t) { return t ? json::value(format_rfc3339(*t)) : json::value(nullptr); };
  o["agent"] = json::object{{"kind", opt_text(h.agent.kind)},
                            {"version", opt_text(h.agent.version)},
                            {"address", opt_text(h.agent.address)},
                            {"connected_since", opt_time(h.agent.connected_at)},
                            {"last_heartbeat_at", opt_time(h.agent.last_heartbeat_at)},
                            {"certificate_expires_at", opt_time(h.agent.certificate_expires_at)}};
  return o;
}

Result<std::vector<std::pair<std::string, std::string>>> reachable_hosts(store::Database& db) {
  auto rows = db.all("SELECT id, name FROM hosts WHERE state != 'unreachable' AND admin_state != 'removed'");
  if (!rows) return fail(rows.error());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : *rows) out.emplace_back(r.text(0), r.text(1));
  return out;
}

Result<std::optional<std::string>> host_id_by_name(store::Database& db, const std::string& name) {
  auto row = db.one("SELECT id FROM hosts WHERE name = ?", {name});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<std::string>{};
  return std::optional<std::string>{(*row)->text(0)};
}

}  // namespace gpucloud::market
