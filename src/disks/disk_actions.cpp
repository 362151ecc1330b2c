#include "disks/disk_actions.h"

#include <algorithm>
#include <array>
#include <set>

#include "auth/user_quotas.h"
#include "billing/affordability.h"
#include "core/ids.h"
#include "instances/instance_record.h"
#include "market/hosts.h"
#include "market/prices.h"

namespace gpucloud::disks {
namespace json = boost::json;

namespace {

using S = DiskState;
using SS = SnapshotState;

constexpr std::int64_t kMaxDiskGib = 64 * 1024;  // 64 TiB: past it a typo, not a disk

std::string state_name(S s) { return std::string(to_string(s)); }

Status check_size(std::int64_t size_gib, const std::string& field) {
  if (size_gib < 1 || size_gib > kMaxDiskGib)
    return fail(ErrorCode::invalid_argument, field + ": must be between 1 and " + std::to_string(kMaxDiskGib) + " GiB");
  return ok();
}

// The disk_gib quota: `adding` more GiB on top of what the owner's disks hold.
Status check_disk_quota(store::Database& db, const config::Config& config, const std::string& owner, std::int64_t adding) {
  if (adding <= 0) return ok();
  auto limits = auth::effective_quotas(db, config.quotas, owner);
  if (!limits) return fail(limits.error());
  auto used = disk_gib_used(db, owner);
  if (!used) return fail(used.error());
  if (*used + adding > limits->disk_gib)
    return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(limits->disk_gib) +
                                               " GiB of data disks (deleted ones in the recycle bin count); you have " +
                                               std::to_string(*used) + " GiB, this needs " + std::to_string(adding) + " more");
  return ok();
}

// Storage needs money (issue 23): `gib` more GiB of data disk need a day of their price in the
// balance, and nothing is made or grown in arrears (402).
Status check_disk_affordable(store::Database& db, const config::Config& config, const std::string& owner,
                             std::int64_t gib, const std::string& what) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  return billing::check_storage_affordable(db, owner, gib, prices->data_disk_per_gib_hour_micros, what, config.currency);
}

Result<Disk> reload_disk(store::Database& db, const std::string& id) {
  auto d = load_disk(db, id);
  if (!d) return fail(d.error());
  if (!*d) return fail(ErrorCode::internal, "disk " + id + " not recorded");
  return std::move(**d);
}
Result<Snapshot> reload_snapshot(store::Database& db, const std::string& id) {
  auto s = load_snapshot(db, id);
  if (!s) return fail(s.error());
  if (!*s) return fail(ErrorCode::internal, "snapshot " + id + " not recorded");
  return std::move(**s);
}

bool under(const std::string& path, std::string_view dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// The free GPUs of a host (present, healthy, unreserved): disks go where instances can run.
int free_gpus(const market::HostRecord& h) {
  return static_cast<int>(std::count_if(h.gpus.begin(), h.gpus.end(), [](const market::GpuRecord& g) {
    return g.present && !g.reserved_by && g.health != market::kGpuMissing;
  }));
}

Result<market::HostRecord> choose_host(store::Database& db, const config::Config& config,
                                       const std::optional<std::string>& zone, const std::optional<std::string>& host) {
  if (host) {
    auto found = market::find_host(db, *host);
    if (!found) return fail(found.error());
    if (!*found) return fail(ErrorCode::invalid_argument, "host: no host " + *host);
    if (zone && (*found)->zone != *zone)
      return fail(ErrorCode::invalid_argument, "host: " + (*found)->name + " is in zone " + (*found)->zone + ", not " + *zone);
    if ((*found)->state != "ready")
      return fail(ErrorCode::conflict, "host " + (*found)->name + " is " + (*found)->state);
    return std::move(**found);
  }
  std::string z;
  if (zone) z = *zone;
  else if (config.zones.size() == 1) z = config.zones.front().name;
  else return fail(ErrorCode::invalid_argument, "zone: required (there is more than one zone)");
  if (!config.find_zone(z)) return fail(ErrorCode::invalid_argument, "zone: no zone " + z);
  auto hosts = market::list_hosts(db);
  if (!hosts) return fail(hosts.error());
  const market::HostRecord* best = nullptr;
  for (const auto& h : *hosts) {
    if (h.zone != z || h.state != "ready") continue;
    if (!best || free_gpus(h) > free_gpus(*best) || (free_gpus(h) == free_gpus(*best) && h.name < best->name)) best = &h;
  }
  if (!best) return fail(ErrorCode::no_capacity, "zone " + z + " has no ready host for a disk");
  return *best;
}

Status check_name(store::Database& db, const std::string& owner, const std::string& name) {
  if (!is_valid_resource_name(name))
    return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  auto taken = live_disk_name_taken(db, owner, name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you already have a disk named " + name);
  return ok();
}

}  // namespace

Status validate_mount_path(const std::string& path, const std::string& field) {
  if (path.empty() || path.front() != '/') return fail(ErrorCode::invalid_argument, field + ": must be an absolute path");
  if (path.size() > 255) return fail(ErrorCode::invalid_argument, field + ": at most 255 characters");
  for (char c : path)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '-' || c == '_' || c == '.'))
      return fail(ErrorCode::invalid_argument, field + ": only letters, digits, '/', '-', '_' and '.'");
  if (path == "/") return fail(ErrorCode::invalid_argument, field + ": cannot be /");
  if (path.back() == '/' || path.find("//") != std::string::npos)
    return fail(ErrorCode::invalid_argument, field + ": must be normalised (no trailing or double '/')");
  for (std::size_t at = 0; at < path.size();) {
    std::size_t next = path.find('/', at + 1);
    std::string part = path.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (part == "." || part == "..") return fail(ErrorCode::invalid_argument, field + ": no '.' or '..' parts");
    if (next == std::string::npos) break;
    at = next;
  }
  static constexpr std::array<std::string_view, 19> kSystem{
      "/etc", "/usr", "/proc", "/dev", "/sys", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
      "/boot", "/run", "/var/run", "/var/lib/dpkg", "/var/lib/apt", "/.gpucloud", "/root/.ssh", "/tmp/.X11-unix"};
  for (auto dir : kSystem)
    if (under(path, dir))
      return fail(ErrorCode::invalid_argument, field + ": " + path + " is a system directory (" + std::string(dir) + ")");
  if (path == "/root" || path == "/var" || path == "/home" || path == "/opt")
    return fail(ErrorCode::invalid_argument, field + ": " + path + " would hide the instance's own files; use a directory below it");
  return ok();
}

Result<Disk> create_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& id,
                         const CreateDiskRequest& r, SysTime now) {
  if (auto s = check_name(db, actor.user_id, r.name); !s) return fail(s.error());
  Disk d;
  d.id = id;
  d.owner = actor.user_id;
  d.name = r.name;
  d.created_at = now;
  if (r.from_snapshot) {
    auto snap = find_owned_snapshot(db, actor.user_id, *r.from_snapshot);
    if (!snap) return fail(ErrorCode::invalid_argument, "from_snapshot: " + snap.error().detail);
    if (snap->state != SS::available)
      return fail(ErrorCode::conflict, "snapshot " + snap->name + " is " + std::string(to_string(snap->state)));
    if (r.zone && *r.zone != snap->zone)
      return fail(ErrorCode::invalid_argument, "zone: snapshot " + snap->name + " is in zone " + snap->zone);
    if (r.host) {
      auto h = market::find_host(db, *r.host);
      if (!h) return fail(h.error());
      if (!*h || (*h)->id != snap->host_id)
        return fail(ErrorCode::invalid_argument, "host: snapshot " + snap->name + " is on host " + snap->host_name +
                                                     "; a disk from it lives there too");
    }
    d.size_gib = r.size_gib.value_or(snap->size_gib);
    if (auto s = check_size(d.size_gib, "size_gib"); !s) return fail(s.error());
    if (d.size_gib < snap->size_gib)
      return fail(ErrorCode::invalid_argument, "size_gib: at least the snapshot's size (" + std::to_string(snap->size_gib) + ")");
    d.zone = snap->zone;
    d.host_id = snap->host_id;
    d.from_snapshot = snap->id;
  } else {
    if (!r.size_gib) return fail(ErrorCode::invalid_argument, "size_gib: required");
    d.size_gib = *r.size_gib;
    if (auto s = check_size(d.size_gib, "size_gib"); !s) return fail(s.error());
    auto host = choose_host(db, config, r.zone, r.host);
    if (!host) return fail(host.error());
    d.zone = host->zone;
    d.host_id = host->id;
  }
  if (auto s = check_disk_quota(db, config, actor.user_id, d.size_gib); !s) return fail(s.error());
  if (auto s = check_disk_affordable(db, config, actor.user_id, d.size_gib, "disk " + d.name); !s) return fail(s.error());
  Change c{"disk.created", "disk " + d.name + " (" + std::to_string(d.size_gib) + " GiB) is being created",
           json::object{{"name", d.name}, {"size_gib", d.size_gib}}};
  if (auto s = insert_disk(db, d, c, now); !s) return fail(s.error());
  return reload_disk(db, id);
}

Result<Disk> attach_disk(store::Database& db, const Actor& actor, const std::string& disk_ref, const std::string& instance_ref,
                         const std::string& mount_path, SysTime now) {
  if (auto s = validate_mount_path(mount_path, "mount_path"); !s) return fail(s.error());
  auto d = find_owned_disk(db, actor.user_id, disk_ref);
  if (!d) return fail(d.error());
  auto i = instances::find_owned_instance(db, d->owner, instance_ref);
  if (!i) return fail(ErrorCode::not_found, "instance: " + i.error().detail);
  if (d->state == S::attached && d->instance_id == i->id && d->mount_path == mount_path) return *d;  // a repeat
  if (d->state != S::available)
    return fail(ErrorCode::conflict, "the disk is " + state_name(d->state) +
                                         (d->instance_id ? " (to " + *d->instance_id + ")" : std::string()) +
                                         "; only an available disk can be attached");
  if (i->state != instances::InstanceState::stopped)
    return fail(ErrorCode::conflict, "the instance is " + std::string(instances::to_string(i->state)) +
                                         "; stop it first (a disk is attached to a stopped instance, in use at its next start)");
  if (!i->host_id || *i->host_id != d->host_id)
    return fail(ErrorCode::conflict, "the disk lives on host " + d->host_name + " and the instance on " +
                                         i->host_name.value_or("no host") + "; a disk attaches only on its own host");
  auto others = disks_of_instance(db, i->id);
  if (!others) return fail(others.error());
  for (const auto& o : *others) {
    if (o.mount_path == mount_path)
      return fail(ErrorCode::conflict, mount_path + " is taken by disk " + o.name + " on this instance");
    if (o.mount_path && (under(mount_path, *o.mount_path) || under(*o.mount_path, mount_path)))
      return fail(ErrorCode::invalid_argument, "mount_path: " + mount_path + " and disk " + o.name + "'s " + *o.mount_path +
                                                   " would be one inside the other");
  }
  // The instance's generation goes up with the attach, so a racing start either sees the
  // disk or fails its compare-and-set.
  instances::Instance next_i = *i;
  if (auto s = instances::update_desired(db, *i, next_i); !s) return fail(s.error());
  Disk next = *d;
  next.state = S::attached;
  next.instance_id = i->id;
  next.mount_path = mount_path;
  Change c{"disk.attached", "disk " + d->name + " attached to " + i->name + " at " + mount_path,
           json::object{{"instance", i->id}, {"mount_path", mount_path}}};
  if (auto s = update_disk(db, *d, next, c, now); !s) return fail(s.error());
  return reload_disk(db, d->id);
}

Result<Disk> detach_disk(store::Database& db, const Actor& actor, const std::string& disk_ref, SysTime now) {
  auto d = find_owned_disk(db, actor.user_id, disk_ref);
  if (!d) return fail(d.error());
  if (d->state == S::available) return *d;  // a repeat
  if (d->state != S::attached || !d->instance_id)
    return fail(ErrorCode::conflict, "the disk is " + state_name(d->state) + "; only an attached disk can be detached");
  auto i = instances::load_instance(db, *d->instance_id);
  if (!i) return fail(i.error());
  if (*i) {
    const auto st = (*i)->state;
    if (st != instances::InstanceState::stopped && st != instances::InstanceState::error &&
        st != instances::InstanceState::released)
      return fail(ErrorCode::conflict, "the instance is " + std::string(instances::to_string(st)) +
                                           "; stop it first (a disk is detached from a stopped instance)");
    if (st != instances::InstanceState::released) {
      instances::Instance next_i = **i;
      if (auto s = instances::update_desired(db, **i, next_i); !s) return fail(s.error());
    }
  }
  Disk next = *d;
  next.state = S::available;
  next.instance_id.reset();
  next.mount_path.reset();
  next.delete_on_release = false;
  Change c{"disk.detached", "disk " + d->name + " detached from " + *d->instance_id,
           json::object{{"instance", *d->instance_id}}};
  if (auto s = update_disk(db, *d, next, c, now); !s) return fail(s.error());
  return reload_disk(db, d->id);
}

Result<Disk> resize_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& disk_ref,
                         std::int64_t size_gib, SysTime now) {
  if (auto s = check_size(size_gib, "size_gib"); !s) return fail(s.error());
  auto d = find_owned_disk(db, actor.user_id, disk_ref);
  if (!d) return fail(d.error());
  if (d->state != S::available && d->state != S::attached)
    return fail(ErrorCode::conflict, "the disk is " + state_name(d->state) + "; only an available or attached disk can grow");
  if (size_gib < d->size_gib)
    return fail(ErrorCode::invalid_argument, "size_gib: disks only grow (it has " + std::to_string(d->size_gib) + " GiB)");
  if (size_gib == d->size_gib) return *d;
  if (auto s = check_disk_quota(db, config, d->owner, size_gib - d->size_gib); !s) return fail(s.error());
  if (auto s = check_disk_affordable(db, config, d->owner, size_gib - d->size_gib, "growing disk " + d->name); !s)
    return fail(s.error());
  Disk next = *d;
  next.size_gib = size_gib;
  Change c{"disk.resizing", "disk " + d->name + " grows from " + std::to_string(d->size_gib) + " to " +
                                std::to_string(size_gib) + " GiB",
           json::object{{"from_gib", d->size_gib}, {"size_gib", size_gib}}};
  if (auto s = update_disk(db, *d, next, c, now); !s) return fail(s.error());
  return reload_disk(db, d->id);
}

Result<Disk> delete_disk(store::Database& db, const config::Config& config, const Actor& actor, const std::string& disk_ref,
                         SysTime now) {
  auto d = find_owned_disk(db, actor.user_id, disk_ref);
  if (!d) return fail(d.error());
  if (d->state == S::deleted || d->state == S::deleting) return *d;  // a repeat
  if (d->state == S::attached)
    return fail(ErrorCode::conflict, "the disk is attached to " + d->instance_id.value_or("an instance") + "; detach it first");
  if (d->state == S::creating)
    return fail(ErrorCode::conflict, "the disk is creating; delete it once it is available");
  Disk next = *d;
  const bool binned = config.policy.recycle_days > 0;
  next.state = binned ? S::deleted : S::deleting;
  next.deleted_at = now;
  next.purge_warned = false;
  Change c{"disk.deleted",
           binned ? "disk " + d->name + " moved to the recycle bin for " + std::to_string(config.policy.recycle_days) + " days"
                  : "disk " + d->name + " is being destroyed",
           json::object{{"recycle_days", config.policy.recycle_days}}};
  if (auto s = update_disk(db, *d, next, c, now); !s) return fail(s.error());
  return reload_disk(db, d->id);
}

Result<Disk> restore_disk(store::Database& db, const Actor& actor, const std::string& disk_ref, SysTime now) {
  auto d = find_owned_disk(db, actor.user_id, disk_ref, true);
  if (!d) return fail(d.error());
  if (d->state != S::deleted)
    return fail(ErrorCode::conflict, "the disk is " + state_name(d->state) + "; only a deleted disk can be restored");
  auto taken = live_disk_name_taken(db, d->owner, d->name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you have another disk named " + d->name + " now; rename or delete it first");
  Disk next = *d;
  next.state = S::available;
  next.deleted_at.reset();
  next.purge_warned = false;
  Change c{"disk.restored", "disk " + d->name + " restored from the recycle bin"};
  if (auto s = update_disk(db, *d, next, c, now); !s) return fail(s.error());
  return reload_disk(db, d->id);
}

Result<Snapshot> snapshot_disk(store::Database& db, const config::Config& config, const Actor& actor,
                               const std::string& disk_ref, const std::string& id, const std::string& name, SysTime now) {
  if (!is_valid_resource_name(name))
    return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  auto d = find_owned_disk(db, actor.user_id, disk_ref);
  if (!d) return fail(d.error());
  if (d->state != S::available && d->state != S::attached)
    return fail(ErrorCode::conflict, "the disk is " + state_name(d->state) + "; only an available or attached disk has snapshots");
  auto taken = live_snapshot_name_taken(db, d->owner, name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you already have a snapshot named " + name);
  auto limits = auth::effective_quotas(db, config.quotas, d->owner);
  if (!limits) return fail(limits.error());
  auto count = snapshot_count(db, d->owner);
  if (!count) return fail(count.error());
  if (*count + 1 > limits->snapshots)
    return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(limits->snapshots) +
                                               " snapshots (deleted ones in the recycle bin count); you have " +
                                               std::to_string(*count));
  {
    // A snapshot bills by what it holds: a day of the disk's use now (at least a GiB).
    auto prices = market::load_prices(db);
    if (!prices) return fail(prices.error());
    const std::int64_t gib = std::max<std::int64_t>(1, (d->used_bytes + (std::int64_t{1} << 30) - 1) >> 30);
    if (auto st = billing::check_storage_affordable(db, d->owner, gib, prices->snapshot_per_gib_hour_micros,
                                                    "snapshot " + name, config.currency);
        !st)
      return fail(st.error());
  }
  Snapshot s;
  s.id = id;
  s.owner = d->owner;
  s.name = name;
  s.disk_id = d->id;
  s.host_id = d->host_id;
  s.zone = d->zone;
  s.size_gib = d->size_gib;
  s.created_at = now;
  Change c{"snapshot.created", "snapshot " + name + " of disk " + d->name + " is being taken",
           json::object{{"disk", d->id}, {"name", name}}};
  if (auto st = insert_snapshot(db, s, c, now); !st) return fail(st.error());
  return reload_snapshot(db, id);
}

Result<Snapshot> delete_snapshot(store::Database& db, const config::Config& config, const Actor& actor,
                                 const std::string& snapshot_ref, SysTime now) {
  auto s = find_owned_snapshot(db, actor.user_id, snapshot_ref);
  if (!s) return fail(s.error());
  if (s->state == SS::deleted || s->state == SS::deleting) return *s;
  if (s->state == SS::creating) return fail(ErrorCode::conflict, "the snapshot is creating; delete it once it is available");
  Snapshot next = *s;
  const bool binned = config.policy.recycle_days > 0;
  next.state = binned ? SS::deleted : SS::deleting;
  next.deleted_at = now;
  next.purge_warned = false;
  Change c{"snapshot.deleted",
           binned ? "snapshot " + s->name + " moved to the recycle bin for " + std::to_string(config.policy.recycle_days) + " days"
                  : "snapshot " + s->name + " is being destroyed",
           json::object{{"recycle_days", config.policy.recycle_days}}};
  if (auto st = update_snapshot(db, *s, next, c, now); !st) return fail(st.error());
  return reload_snapshot(db, s->id);
}

Result<Snapshot> restore_snapshot(store::Database& db, const Actor& actor, const std::string& snapshot_ref, SysTime now) {
  auto s = find_owned_snapshot(db, actor.user_id, snapshot_ref, true);
  if (!s) return fail(s.error());
  if (s->state != SS::deleted)
    return fail(ErrorCode::conflict, "the snapshot is " + std::string(to_string(s->state)) +
                                         "; only a deleted snapshot can be restored");
  auto taken = live_snapshot_name_taken(db, s->owner, s->name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you have another snapshot named " + s->name + " now");
  Snapshot next = *s;
  // Only an error snapshot has a reason (a lost or failed one): it comes back as it went, in
  // error and not billing; its data was never there to restore.
  next.state = s->state_reason.empty() ? SS::available : SS::error;
  next.deleted_at.reset();
  next.purge_warned = false;
  Change c{"snapshot.restored", "snapshot " + s->name + " restored from the recycle bin"};
  if (auto st = update_snapshot(db, *s, next, c, now); !st) return fail(st.error());
  return reload_snapshot(db, s->id);
}

Status mark_snapshots_torn(store::Database& db, const std::string& host_id, const std::string& host_name,
                           const std::vector<std::string>& torn, SysTime now) {
  for (const auto& id : torn) {
    auto s = load_snapshot(db, id);
    if (!s) return fail(s.error());
    if (!*s || (*s)->host_id != host_id || (*s)->state != SS::available) continue;
    Snapshot next = **s;
    next.state = SS::error;
    next.state_reason = "lost: host " + host_name + " went down before the snapshot reached its disk";
    Change c{"snapshot.error",
             "snapshot " + next.name + " was lost: host " + host_name +
                 " went down before it reached the disk; it no longer bills, delete it",
             json::object{{"reason", "torn"}, {"host", host_name}}};
    if (auto st = update_snapshot(db, **s, next, c, now); !st) return st;
  }
  return ok();
}

Result<std::optional<std::string>> check_instance_disks(store::Database& db, const config::Config& config,
                                                        const Actor& actor, const std::vector<InstanceDataDisk>& disks) {
  std::set<std::string> paths, ids;
  std::optional<std::string> host;
  std::int64_t new_gib = 0;
  for (std::size_t n = 0; n < disks.size(); ++n) {
    const auto& want = disks[n];
    const std::string field = "data_disks[" + std::to_string(n) + "]";
    if (auto s = validate_mount_path(want.mount_path, field + ".mount_path"); !s) return fail(s.error());
    if (!paths.insert(want.mount_path).second)
      return fail(ErrorCode::invalid_argument, field + ".mount_path: " + want.mount_path + " is given twice");
    for (const auto& other : paths)
      if (other != want.mount_path && (under(want.mount_path, other) || under(other, want.mount_path)))
        return fail(ErrorCode::invalid_argument, field + ".mount_path: " + want.mount_path + " and " + other +
                                                     " would be one inside the other");
    if (want.existing) {
      auto d = find_owned_disk(db, actor.user_id, *want.existing);
      if (!d) return fail(ErrorCode::invalid_argument, field + ".id: " + d.error().detail);
      if (d->state != S::available)
        return fail(ErrorCode::conflict, field + ": disk " + d->name + " is " + state_name(d->state) +
                                             "; only an available disk can be attached");
      if (!ids.insert(d->id).second) return fail(ErrorCode::invalid_argument, field + ".id: disk " + d->name + " is given twice");
      if (host && *host != d->host_id)
        return fail(ErrorCode::invalid_argument, field + ".id: the disks live on different hosts; an instance runs on one");
      host = d->host_id;
    } else {
      if (auto s = check_size(want.size_gib, field + ".size_gib"); !s) return fail(s.error());
      new_gib += want.size_gib;
    }
  }
  if (auto s = check_disk_quota(db, config, actor.user_id, new_gib); !s) return fail(s.error());
  if (new_gib > 0)
    if (auto s = check_disk_affordable(db, config, actor.user_id, new_gib, "the instance's new data disks"); !s)
      return fail(s.error());
  return host;
}

Status attach_instance_disks(store::Database& db, const std::string& owner, const std::string& instance_id,
                             const std::string& host_id, const std::string& zone,
                             const std::vector<InstanceDataDisk>& disks, const std::vector<std::string>& new_ids,
                             SysTime now) {
  std::size_t next_new = 0;
  for (std::size_t n = 0; n < disks.size(); ++n) {
    const auto& want = disks[n];
    if (want.existing) {
      auto d = find_owned_disk(db, owner, *want.existing);
      if (!d) return fail(d.error());
      if (d->host_id != host_id) return fail(ErrorCode::internal, "disk " + d->id + " is not on the chosen host");
      Disk next = *d;
      next.state = S::attached;
      next.instance_id = instance_id;
      next.mount_path = want.mount_path;
      Change c{"disk.attached", "disk " + d->name + " attached to " + instance_id + " at " + want.mount_path,
               json::object{{"instance", instance_id}, {"mount_path", want.mount_path}}};
      if (auto s = update_disk(db, *d, next, c, now); !s) return s;
      continue;
    }
    if (next_new >= new_ids.size()) return fail(ErrorCode::internal, "too few ids for new disks");
    Disk d;
    d.id = new_ids[next_new++];
    d.owner = owner;
    // A new disk takes the instance's name and its mount path's last part, so it is told
    // apart later ("train-1-data"); a clash gets the id's tail.
    std::string tail = want.mount_path.substr(want.mount_path.rfind('/') + 1);
    std::string base = instance_id;
    auto inst = instances::load_instance(db, instance_id);
    if (inst && *inst) base = (*inst)->name;
    std::string name;
    for (char c : base + "-" + tail) name += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
    if (name.size() > 50) name.resize(50);
    auto taken = live_disk_name_taken(db, owner, name);
    if (!taken) return fail(taken.error());
    if (*taken || !is_valid_resource_name(name)) name = "disk-" + d.id.substr(d.id.find('-') + 1);
    d.name = name;
    d.zone = zone;
    d.host_id = host_id;
    d.size_gib = want.size_gib;
    d.instance_id = instance_id;
    d.mount_path = want.mount_path;
    d.delete_on_release = want.delete_on_release;
    d.created_at = now;
    Change c{"disk.created", "disk " + d.name + " (" + std::to_string(d.size_gib) + " GiB) is being created for " + base,
             json::object{{"name", d.name}, {"size_gib", d.size_gib}, {"instance", instance_id}}};
    if (auto s = insert_disk(db, d, c, now); !s) return s;
  }
  return ok();
}

}  // namespace gpucloud::disks
