#include "market/reservations.h"

#include "core/ids.h"
#include "market/hosts.h"

namespace gpucloud::market {

Result<Reservation> reserve(store::Database& db, const std::string& holder, const scheduler::PlacementRequest& request,
                            const std::optional<std::string>& only_host, SysTime now) {
  auto capacities = load_capacities(db);
  if (!capacities) return fail(capacities.error());
  if (only_host) {
    std::erase_if(*capacities, [&](const scheduler::HostCapacity& c) { return c.id != *only_host; });
    if (capacities->empty()) return fail(ErrorCode::no_capacity, "the instance's host is no longer registered");
  }
  auto decision = scheduler::place(*capacities, request);
  if (!decision) return fail(decision.error());
  if (auto* refused = std::get_if<scheduler::Unschedulable>(&*decision)) return fail(refused->to_error());
  const auto& placement = std::get<scheduler::Placement>(*decision);
  const scheduler::HostCapacity* host = nullptr;
  for (const auto& c : *capacities)
    if (c.id == placement.host_id) host = &c;

  Reservation r{new_id("rsv"), holder, placement.host_id, host ? host->name : "", request.cpu, request.memory_gib,
                request.gpu_model, placement.gpu_indices, {}};
  for (int index : placement.gpu_indices)
    for (const auto& g : host->gpus)
      if (g.index == index) r.gpu_uuids.push_back(g.uuid);
  std::optional<std::string> model;
  if (!request.gpu_model.empty()) model = request.gpu_model;
  if (auto s = db.run("INSERT INTO reservations (id, host_id, holder, cpu, memory_gib, gpu_model, active, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                      {r.id, r.host_id, holder, r.cpu, r.memory_gib, model, to_unix_micros(now)});
      !s)
    return fail(s.error().code == ErrorCode::conflict
                    ? Error{ErrorCode::conflict, holder + " already holds a reservation", {}, 0}
                    : s.error());
  for (int index : r.gpu_indices)
    if (auto s = db.run("INSERT INTO gpu_reservations (reservation_id, host_id, gpu_index, active) VALUES (?, ?, ?, 1)",
                        {r.id, r.host_id, index});
        !s)
      return fail(s.error());
  // Capacity changes only here, inside the deciding transaction; the CHECKs refuse overbooking.
  if (auto s = db.run("UPDATE hosts SET cpu_used = cpu_used + ?, memory_gib_used = memory_gib_used + ? WHERE id = ?",
                      {r.cpu, r.memory_gib, r.host_id});
      !s)
    return fail(s.error());
  return r;
}

Result<std::optional<Reservation>> active_reservation(store::Database& db, const std::string& holder) {
  auto row = db.one("SELECT r.id, r.host_id, h.name, r.cpu, r.memory_gib, COALESCE(r.gpu_model, '') FROM reservations r "
                    "JOIN hosts h ON h.id = r.host_id WHERE r.holder = ? AND r.active = 1",
                    {holder});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<Reservation>{};
  const auto& x = **row;
  Reservation r{x.text(0), holder, x.text(1), x.text(2), static_cast<int>(x.int64(3)), x.int64(4), x.text(5), {}, {}};
  auto gpus = db.all("SELECT gr.gpu_index, g.uuid FROM gpu_reservations gr JOIN gpus g ON g.host_id = gr.host_id AND "
                     "g.idx = gr.gpu_index WHERE gr.reservation_id = ? AND gr.active = 1 ORDER BY gr.gpu_index",
                     {r.id});
  if (!gpus) return fail(gpus.error());
  for (const auto& g : *gpus) {
    r.gpu_indices.push_back(static_cast<int>(g.int64(0)));
    r.gpu_uuids.push_back(g.text(1));
  }
  return std::optional<Reservation>{std::move(r)};
}

Result<bool> release_reservation(store::Database& db, const std::string& holder, SysTime now) {
  auto current = active_reservation(db, holder);
  if (!current) return fail(current.error());
  if (!*current) return false;
  const Reservation& r = **current;
  if (auto s = db.run("UPDATE gpu_reservations SET active = 0 WHERE reservation_id = ?", {r.id}); !s) return fail(s.error());
  if (auto s = db.run("UPDATE reservations SET active = 0, released_at = ? WHERE id = ?", {to_unix_micros(now), r.id}); !s)
    return fail(s.error());
  if (auto s = db.run("UPDATE hosts SET cpu_used = cpu_used - ?, memory_gib_used = memory_gib_used - ? WHERE id = ?",
                      {r.cpu, r.memory_gib, r.host_id});
      !s)
    return fail(s.error());
  return true;
}

Result<std::vector<std::string>> reservation_holders(store::Database& db) {
  auto rows = db.all("SELECT holder FROM reservations WHERE active = 1");
  if (!rows) return fail(rows.error());
  std::vector<std::string> out;
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

}  // namespace gpucloud::market
