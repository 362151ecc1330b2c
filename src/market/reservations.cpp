#include "market/reservations.h"

#include "market/watches.h"

#include "core/ids.h"
#include "market/hosts.h"

namespace gpucloud::market {

namespace {
// The GPUs of the holder's latest reservation (active or not): what a start prefers.
Result<std::vector<std::string>> previous_gpus(store::Database& db, const std::string& holder) {
  auto last = db.one("SELECT id FROM reservations WHERE holder = ? ORDER BY created_at DESC, id DESC LIMIT 1", {holder});
  if (!last) return fail(last.error());
  std::vector<std::string> out;
  if (!*last) return out;
  auto rows = db.all("SELECT gr.gpu_uuid FROM gpu_reservations gr JOIN gpus g ON g.uuid = gr.gpu_uuid "
                     "WHERE gr.reservation_id = ? ORDER BY g.idx, g.uuid",
                     {(*last)->text(0)});
  if (!rows) return fail(rows.error());
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

// "GPU-x (last seen as GPU 1) is missing from host node-1": why the holder cannot have its
// GPUs back; empty when they are all still there.
Result<std::string> missing_gpus_note(store::Database& db, const std::vector<std::string>& uuids) {
  std::string note;
  for (const auto& uuid : uuids) {
    auto row = db.one("SELECT g.idx, h.name, g.present, g.health FROM gpus g JOIN hosts h ON h.id = g.host_id WHERE g.uuid = ?",
                      {uuid});
    if (!row) return fail(row.error());
    if (!*row) continue;
    const auto& r = **row;
    std::string why;
    if (r.int64(2) == 0) why = " is missing from host " + r.text(1);
    else if (r.text(3) != "ok") why = " on host " + r.text(1) + " is unhealthy (" + r.text(3) + ")";
    else continue;
    note += (note.empty() ? "" : "; ") + std::string("GPU ") + uuid + " (last seen as GPU " + std::to_string(r.int64(0)) +
            ")" + why;
  }
  return note;
}
}  // namespace

Result<Reservation> reserve(store::Database& db, const std::string& holder, const scheduler::PlacementRequest& request_in,
                            const std::optional<std::string>& only_host, SysTime now) {
  Result<std::vector<scheduler::HostCapacity>> capacities = std::vector<scheduler::HostCapacity>{};
  if (only_host) {
    auto host = find_host(db, *only_host);
    if (!host) return fail(host.error());
    if (!*host || (*host)->admin_state == kHostRemoved)
      return fail(ErrorCode::no_capacity, "the instance's host is no longer registered");
    // A holder that had a reservation there before lives there (a start): no new placement,
    // so a draining host takes it back. A new instance pinned there (by its data disks) is one.
    auto lived = db.one("SELECT 1 FROM reservations WHERE holder = ? AND host_id = ? LIMIT 1", {holder, *only_host});
    if (!lived) return fail(lived.error());
    capacities->push_back(to_capacity(**host, /*own_host=*/lived->has_value()));
  } else {
    capacities = load_capacities(db);
    if (!capacities) return fail(capacities.error());
  }
  scheduler::PlacementRequest request = request_in;
  auto previous = previous_gpus(db, holder);
  if (!previous) return fail(previous.error());
  // The GPUs it had, when free: a plain stop/start keeps its GPUs and needs no rebuild.
  if (request.preferred_gpu_uuids.empty()) request.preferred_gpu_uuids = *previous;
  auto decision = scheduler::place(*capacities, request);
  if (!decision) return fail(decision.error());
  if (auto* refused = std::get_if<scheduler::Unschedulable>(&*decision)) {
    Error e = refused->to_error();
    if (request.gpu_count > 0) {
      auto note = missing_gpus_note(db, *previous);
      if (!note) return fail(note.error());
      if (!note->empty()) e.detail += " (" + *note + ")";
    }
    return fail(std::move(e));
  }
  const auto& placement = std::get<scheduler::Placement>(*decision);
  const scheduler::HostCapacity* host = nullptr;
  for (const auto& c : *capacities)
    if (c.id == placement.host_id) host = &c;
  if (host == nullptr) return fail(ErrorCode::internal, "placement chose host " + placement.host_id + ", which was not offered");

  Reservation r{new_id("rsv"), holder, placement.host_id, host->name, request.cpu, request.memory_gib,
                request.gpu_model, placement.gpu_indices, {}};
  // The free GPU at each placed index: an unusable one may still be listed at the same index.
  for (int index : placement.gpu_indices)
    for (const auto& g : host->gpus)
      if (g.index == index && g.free) r.gpu_uuids.push_back(g.uuid);
  if (r.gpu_uuids.size() != r.gpu_indices.size())
    return fail(ErrorCode::internal, "host " + host->name + " reports two GPUs at one index");
  std::optional<std::string> model;
  if (!request.gpu_model.empty()) model = request.gpu_model;
  if (auto s = db.run("INSERT INTO reservations (id, host_id, holder, cpu, memory_gib, gpu_model, active, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                      {r.id, r.host_id, holder, r.cpu, r.memory_gib, model, to_unix_micros(now)});
      !s)
    return fail(s.error().code == ErrorCode::conflict
                    ? Error{ErrorCode::conflict, holder + " already holds a reservation", {}, 0}
                    : s.error());
  for (const auto& uuid : r.gpu_uuids)
    if (auto s = db.run("INSERT INTO gpu_reservations (reservation_id, gpu_uuid, active) VALUES (?, ?, 1)", {r.id, uuid}); !s)
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
  auto gpus = db.all("SELECT g.idx, g.uuid FROM gpu_reservations gr JOIN gpus g ON g.uuid = gr.gpu_uuid "
                     "WHERE gr.reservation_id = ? AND gr.active = 1 ORDER BY g.idx, g.uuid",
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
  // Its GPUs are free again: whoever asked to be told about their model hears of it.
  if (auto s = fire_watches_for_reservation(db, r.id, now); !s) return fail(s.error());
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
