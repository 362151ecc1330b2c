#include "market/host_admin.h"

#include <boost/json.hpp>

#include "events/events.h"

namespace gpucloud::market {
namespace json = boost::json;

namespace {

Result<HostRecord> host_named(store::Database& db, const std::string& id_or_name, bool removed_too) {
  auto host = find_host(db, id_or_name);
  if (!host) return fail(host.error());
  if (!*host || (!removed_too && (*host)->admin_state == kHostRemoved))
    return fail(ErrorCode::not_found, "no host " + id_or_name);
  return std::move(**host);
}

Result<HostRecord> reload(store::Database& db, const std::string& id) {
  auto host = find_host(db, id);
  if (!host) return fail(host.error());
  if (!*host) return fail(ErrorCode::internal, "host " + id + " vanished");
  return std::move(**host);
}

// admin_state from -> to, compare-and-set, with its event.
Result<HostAdminChange> move_admin_state(store::Database& db, HostRecord host, const char* to, const std::string& event,
                                         const std::string& message, SysTime now) {
  if (host.admin_state == to) return HostAdminChange{std::move(host), false};
  if (auto s = db.run("UPDATE hosts SET admin_state = ? WHERE id = ? AND admin_state = ?", {std::string(to), host.id,
                                                                                             host.admin_state});
      !s)
    return fail(s.error());
  if (db.changes() != 1) return fail(ErrorCode::conflict, "host " + host.name + " changed meanwhile; try again");
  const std::string before = host.admin_state;
  if (auto s = events::record(db, now, event, host.id, std::nullopt, message,
                              json::object{{"name", host.name}, {"admin_state", to}, {"was", before}});
      !s)
    return fail(s.error());
  auto after = reload(db, host.id);
  if (!after) return fail(after.error());
  return HostAdminChange{std::move(*after), true};
}

Result<std::vector<std::string>> ids_of(store::Database& db, const std::string& sql, const std::string& host_id) {
  auto rows = db.all(sql, {host_id});
  if (!rows) return fail(rows.error());
  std::vector<std::string> out;
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

// "instances i-1, i-2 and 3 more"
std::string named(const std::string& what, const std::vector<std::string>& ids) {
  std::string out = std::to_string(ids.size()) + " " + what + " (";
  for (std::size_t n = 0; n < ids.size() && n < 5; ++n) out += (n ? ", " : "") + ids[n];
  if (ids.size() > 5) out += ", ...";
  return out + ")";
}

}  // namespace

Result<HostAdminChange> drain_host(store::Database& db, const std::string& id_or_name, SysTime now) {
  auto host = host_named(db, id_or_name, false);
  if (!host) return fail(host.error());
  const std::string message = "host " + host->name + " is draining: no new instances or disks are placed there; " +
                              "what runs there stays";
  return move_admin_state(db, std::move(*host), kHostDraining, "host.drained", message, now);
}

Result<HostAdminChange> undrain_host(store::Database& db, const std::string& id_or_name, SysTime now) {
  auto host = host_named(db, id_or_name, false);
  if (!host) return fail(host.error());
  const std::string message = "host " + host->name + " takes new placements again";
  return move_admin_state(db, std::move(*host), kHostActive, "host.undrained", message, now);
}

Result<HostResidents> host_residents(store::Database& db, const std::string& host_id) {
  HostResidents r;
  auto instances = ids_of(db, "SELECT id FROM instances WHERE host_id = ? AND state != 'released' ORDER BY id", host_id);
  if (!instances) return fail(instances.error());
  r.instances = std::move(*instances);
  auto disks = ids_of(db, "SELECT id FROM disks WHERE host_id = ? AND state != 'destroyed' ORDER BY id", host_id);
  if (!disks) return fail(disks.error());
  r.data_disks = std::move(*disks);
  auto snapshots = ids_of(db, "SELECT id FROM snapshots WHERE host_id = ? AND state != 'destroyed' ORDER BY id", host_id);
  if (!snapshots) return fail(snapshots.error());
  r.snapshots = std::move(*snapshots);
  auto images = ids_of(db, "SELECT id FROM images WHERE host_id = ? AND purged_at IS NULL ORDER BY id", host_id);
  if (!images) return fail(images.error());
  r.images = std::move(*images);
  auto held = ids_of(db, "SELECT holder FROM reservations WHERE host_id = ? AND active = 1 ORDER BY holder", host_id);
  if (!held) return fail(held.error());
  r.reservations = std::move(*held);
  return r;
}

Result<HostAdminChange> remove_host(store::Database& db, const std::string& id_or_name, SysTime now) {
  auto host = host_named(db, id_or_name, true);
  if (!host) return fail(host.error());
  if (host->admin_state == kHostRemoved) return HostAdminChange{std::move(*host), false};
  auto residents = host_residents(db, host->id);
  if (!residents) return fail(residents.error());
  if (!residents->empty()) {
    std::vector<std::string> parts;
    if (!residents->instances.empty()) parts.push_back(named("instances not released", residents->instances));
    if (!residents->data_disks.empty()) parts.push_back(named("data disks", residents->data_disks));
    if (!residents->snapshots.empty()) parts.push_back(named("snapshots", residents->snapshots));
    if (!residents->images.empty()) parts.push_back(named("custom images", residents->images));
    if (!residents->reservations.empty()) parts.push_back(named("active reservations", residents->reservations));
    std::string detail = "host " + host->name + " still holds ";
    for (std::size_t n = 0; n < parts.size(); ++n) detail += (n ? "; " : "") + parts[n];
    detail += "; release or delete them first (drain the host to keep new ones away)";
    Error e{ErrorCode::conflict, detail, {}, 0};
    e.numbers = {{"instances", static_cast<std::int64_t>(residents->instances.size())},
                 {"data_disks", static_cast<std::int64_t>(residents->data_disks.size())},
                 {"snapshots", static_cast<std::int64_t>(residents->snapshots.size())},
                 {"images", static_cast<std::int64_t>(residents->images.size())},
                 {"reservations", static_cast<std::int64_t>(residents->reservations.size())}};
    return fail(std::move(e));
  }
  const std::string message = "host " + host->name + " was removed: nothing is placed there; its name may join again";
  return move_admin_state(db, std::move(*host), kHostRemoved, "host.removed", message, now);
}

}  // namespace gpucloud::market
