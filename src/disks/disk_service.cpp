#include "disks/disk_service.h"

#include "billing/resource_meters.h"
#include "disks/disk_actions.h"

#include <exception>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "core/fault_points.h"
#include "core/units.h"
#include "market/hosts.h"

namespace gpucloud::disks {
namespace asio = boost::asio;
namespace json = boost::json;
using S = DiskState;
using SS = SnapshotState;

namespace {


std::int64_t observed_int(const json::object& o, const char* key, std::int64_t fallback) {
  auto it = o.find(key);
  if (it == o.end()) return fallback;
  if (it->value().is_int64()) return it->value().as_int64();
  if (it->value().is_uint64()) return static_cast<std::int64_t>(it->value().as_uint64());
  return fallback;
}

std::string disk_command_id(const Disk& d, std::string_view step) {
  return "cmd-" + d.id + "-g" + std::to_string(d.generation) + "-" + std::string(step);
}
std::string snapshot_command_id(const Snapshot& s, std::string_view step) {
  return "cmd-" + s.id + "-g" + std::to_string(s.generation) + "-" + std::string(step);
}

std::chrono::microseconds days(int n) { return std::chrono::hours(24) * n; }

}  // namespace

DiskService::DiskService(asio::any_io_executor loop, const config::Config& config, store::Store& store, PlatformClock& clock,
                         agent::HostAgent& agent)
    : loop_(loop), config_(config), store_(store), clock_(clock), agent_(agent), reconcile_timer_(loop) {}

DiskService::~DiskService() {
  reconcile_timer_.cancel();
  if (retention_timer_) clock_.cancel(*retention_timer_);
}

void DiskService::kick_disk(const std::string& id) {
  // The handlers kick after an action's commit: a crash here is one after the commit whose
  // answer never left and whose effect (a grow, the bin's timer) was not started.
  fault_point("disk.before_converge");
  asio::co_spawn(loop_, converge_disk(id), asio::detached);
}
void DiskService::kick_snapshot(const std::string& id) { asio::co_spawn(loop_, converge_snapshot(id), asio::detached); }

asio::awaitable<void> DiskService::rearm_recycle_bin() { co_await schedule_retention(); }

asio::awaitable<Result<agent::CommandOutcome>> DiskService::send(std::string host, std::string kind, json::object desired,
                                                                 std::string command_id) {
  agent::Command command{std::move(command_id), std::move(host), std::move(kind), std::move(desired)};
  co_return co_await agent_.execute(std::move(command));
}

// ---- the per-disk queue -----------------------------------------------------------------

asio::awaitable<void> DiskService::converge_disk(std::string id) {
  if (disk_queue_.count(id)) {
    disk_dirty_.insert(id);
    co_return;
  }
  disk_queue_.insert(id);
  do {
    disk_dirty_.erase(id);
    Result<bool> again = false;
    try {
      again = co_await disk_step(id);
    } catch (const std::exception& e) {
      again = fail(ErrorCode::internal, std::string("disk step: ") + e.what());
    }
    if (!again) {
      spdlog::warn(R"({{"event":"disk_converge_failed","disk":"{}","detail":"{}"}})", id, again.error().detail);
      break;
    }
    if (*again) disk_dirty_.insert(id);
  } while (disk_dirty_.count(id) && !stopped_);
  disk_dirty_.erase(id);
  disk_queue_.erase(id);
}

asio::awaitable<void> DiskService::converge_snapshot(std::string id) {
  if (snapshot_queue_.count(id)) {
    snapshot_dirty_.insert(id);
    co_return;
  }
  snapshot_queue_.insert(id);
  do {
    snapshot_dirty_.erase(id);
    Result<bool> again = false;
    try {
      again = co_await snapshot_step(id);
    } catch (const std::exception& e) {
      again = fail(ErrorCode::internal, std::string("snapshot step: ") + e.what());
    }
    if (!again) {
      spdlog::warn(R"({{"event":"snapshot_converge_failed","snapshot":"{}","detail":"{}"}})", id, again.error().detail);
      break;
    }
    if (*again) snapshot_dirty_.insert(id);
  } while (snapshot_dirty_.count(id) && !stopped_);
  snapshot_dirty_.erase(id);
  snapshot_queue_.erase(id);
}

asio::awaitable<Result<bool>> DiskService::disk_step(const std::string& id) {
  auto load = [id](store::Database& db) { return load_disk(db, id); };
  auto loaded = co_await store_.read(std::move(load));
  if (!loaded) co_return fail(loaded.error());
  if (!*loaded) co_return false;
  const Disk d = **loaded;
  const bool make = d.state == S::creating;
  const bool grow = (d.state == S::available || d.state == S::attached) && d.applied_size_gib < d.size_gib;
  if (make || grow) {
    json::object desired{{"disk_id", d.id}, {"size_gib", d.size_gib}, {"generation", d.generation}};
    if (d.from_snapshot) desired["from_snapshot"] = *d.from_snapshot;
    std::string kind = "disk.ensure";
    std::string step = make ? "create" : "grow";
    auto outcome = co_await send(d.host_name, kind, std::move(desired), disk_command_id(d, step));
    if (!outcome) co_return fail(outcome.error());  // the agent is unreachable: the next pass retries
    fault_point("disk.after_agent");
    const bool done = outcome->ok;
    const std::string why = done ? std::string() : agent::outcome_error(*outcome).detail;
    const std::int64_t used = done ? observed_int(outcome->observed, "used_bytes", d.used_bytes) : d.used_bytes;
    auto now = clock_.now();
    auto record = [d, make, done, why, used, now](store::Database& db) -> Result<bool> {
      auto current = load_disk(db, d.id);
      if (!current) return fail(current.error());
      if (!*current) return false;
      if ((*current)->generation != d.generation) return true;  // changed meanwhile: look again
      Disk next = **current;
      next.used_bytes = used;
      Change c;
      if (make && done) {
        next.state = next.instance_id ? S::attached : S::available;
        next.applied_size_gib = d.size_gib;
        next.state_reason.clear();
        c = Change{"disk.available", "disk " + d.name + " is ready (" + std::to_string(d.size_gib) + " GiB)"};
      } else if (make) {
        next.state = S::error;
        next.state_reason = "create failed: " + why;
        c = Change{"disk.error", "disk " + d.name + " could not be made: " + why};
      } else if (done) {
        next.applied_size_gib = d.size_gib;
        c = Change{"disk.resized", "disk " + d.name + " now has " + std::to_string(d.size_gib) + " GiB",
                   json::object{{"size_gib", d.size_gib}}};
      } else {
        // A grow the host cannot make is undone in the record: the disk keeps what it has.
        next.size_gib = next.applied_size_gib;
        c = Change{"disk.resize_failed", "disk " + d.name + " could not grow: " + why,
                   json::object{{"size_gib", next.applied_size_gib}}};
      }
      if (auto s = update_disk(db, **current, next, c, now); !s) return fail(s.error());
      return false;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (d.state == S::deleting) {
    json::object desired{{"disk_id", d.id}, {"generation", d.generation}};
    std::string kind = "disk.remove";
    auto outcome = co_await send(d.host_name, kind, std::move(desired), disk_command_id(d, "remove"));
    if (!outcome) co_return fail(outcome.error());
    if (!outcome->ok) {
      Error e = agent::outcome_error(*outcome);
      auto note = [d, e, now = clock_.now()](store::Database& db) -> Status {
        auto current = load_disk(db, d.id);
        if (!current || !*current || (*current)->generation != d.generation) return ok();
        if ((*current)->state_reason == "destroy failed: " + e.detail) return ok();
        Disk next = **current;
        next.state_reason = "destroy failed: " + e.detail;
        return update_disk(db, **current, next, Change{"disk.error", "disk " + d.name + " could not be destroyed: " + e.detail}, now);
      };
      (void)co_await store_.write(std::move(note));
      co_return fail(e);
    }
    fault_point("disk.destroy.before_state_commit");
    auto now = clock_.now();
    auto record = [d, now](store::Database& db) -> Result<bool> {
      auto current = load_disk(db, d.id);
      if (!current) return fail(current.error());
      if (!*current || (*current)->state != S::deleting) return false;
      Disk next = **current;
      next.state = S::destroyed;
      next.state_reason.clear();
      next.used_bytes = 0;
      if (auto s = update_disk(db, **current, next, Change{"disk.destroyed", "disk " + d.name + " and its data are gone"}, now);
          !s)
        return fail(s.error());
      return false;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (d.state == S::deleted) co_await schedule_retention();
  co_return false;
}

asio::awaitable<Result<bool>> DiskService::snapshot_step(const std::string& id) {
  auto load = [id](store::Database& db) -> Result<std::pair<std::optional<Snapshot>, std::optional<Disk>>> {
    auto s = load_snapshot(db, id);
    if (!s) return fail(s.error());
    if (!*s) return std::pair<std::optional<Snapshot>, std::optional<Disk>>{};
    auto d = load_disk(db, (*s)->disk_id);
    if (!d) return fail(d.error());
    return std::pair{*s, *d};
  };
  auto loaded = co_await store_.read(std::move(load));
  if (!loaded) co_return fail(loaded.error());
  if (!loaded->first) co_return false;
  const Snapshot s = *loaded->first;
  if (s.state == SS::creating) {
    json::object desired{{"disk_id", s.disk_id}, {"snapshot_id", s.id}, {"generation", s.generation}};
    std::string kind = "disk.snapshot";
    auto outcome = co_await send(s.host_name, kind, std::move(desired), snapshot_command_id(s, "take"));
    if (!outcome) co_return fail(outcome.error());
    fault_point("snapshot.after_agent");
    const bool done = outcome->ok;
    const std::string why = done ? std::string() : agent::outcome_error(*outcome).detail;
    const std::int64_t used = done ? observed_int(outcome->observed, "used_bytes", 0) : 0;
    const std::int64_t size_gib = done ? observed_int(outcome->observed, "size_gib", s.size_gib) : s.size_gib;
    auto now = clock_.now();
    auto record = [s, done, why, used, size_gib, now](store::Database& db) -> Result<bool> {
      auto current = load_snapshot(db, s.id);
      if (!current) return fail(current.error());
      if (!*current) return false;
      if ((*current)->generation != s.generation) return true;
      Snapshot next = **current;
      Change c;
      if (done) {
        next.state = SS::available;
        next.used_bytes = used;
        next.size_gib = std::max<std::int64_t>(1, size_gib);
        c = Change{"snapshot.available", "snapshot " + s.name + " is ready"};
      } else {
        next.state = SS::error;
        next.state_reason = "snapshot failed: " + why;
        c = Change{"snapshot.error", "snapshot " + s.name + " could not be taken: " + why};
      }
      if (auto st = update_snapshot(db, **current, next, c, now); !st) return fail(st.error());
      return false;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (s.state == SS::deleting) {
    json::object desired{{"snapshot_id", s.id}, {"generation", s.generation}};
    std::string kind = "snapshot.remove";
    auto outcome = co_await send(s.host_name, kind, std::move(desired), snapshot_command_id(s, "remove"));
    if (!outcome) co_return fail(outcome.error());
    if (!outcome->ok) co_return fail(agent::outcome_error(*outcome));
    auto now = clock_.now();
    auto record = [s, now](store::Database& db) -> Result<bool> {
      auto current = load_snapshot(db, s.id);
      if (!current) return fail(current.error());
      if (!*current || (*current)->state != SS::deleting) return false;
      Snapshot next = **current;
      next.state = SS::destroyed;
      next.used_bytes = 0;
      if (auto st = update_snapshot(db, **current, next, Change{"snapshot.destroyed", "snapshot " + s.name + " is gone"}, now);
          !st)
        return fail(st.error());
      return false;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (s.state == SS::deleted) co_await schedule_retention();
  co_return false;
}

asio::awaitable<Status> DiskService::prepare_instance(std::string instance_id) {
  for (int round = 0; round < 8; ++round) {
    auto load = [instance_id](store::Database& db) { return disks_of_instance(db, instance_id); };
    auto disks = co_await store_.read(std::move(load));
    if (!disks) co_return fail(disks.error());
    bool pending = false;
    for (const auto& d : *disks) {
      if (d.state == S::error)
        co_return fail(ErrorCode::conflict, "data disk " + d.name + " is in error: " + d.state_reason);
      if (d.state == S::creating || d.applied_size_gib < d.size_gib) {
        pending = true;
        auto stepped = co_await disk_step(d.id);
        if (!stepped) co_return fail(stepped.error().code, "data disk " + d.name + ": " + stepped.error().detail);
      }
    }
    if (!pending) co_return ok();
  }
  co_return fail(ErrorCode::internal, "data disks of " + instance_id + " did not settle");
}

// ---- reconcile ----------------------------------------------------------------------------

void DiskService::start_background(std::chrono::seconds period) {
  period_ = period;
  background_ = true;
  asio::co_spawn(loop_, reconcile(), asio::detached);
}

void DiskService::stop_background() {
  stopped_ = true;
  reconcile_timer_.cancel();
}

void DiskService::schedule_reconcile() {
  if (stopped_) return;
  reconcile_timer_.expires_after(period_);
  reconcile_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopped_) asio::co_spawn(loop_, reconcile(), asio::detached);
  });
}

asio::awaitable<void> DiskService::reconcile() {
  if (reconciling_) co_return;
  reconciling_ = true;
  try {
    co_await reconcile_pass();
  } catch (const std::exception& e) {
    spdlog::error(R"({{"event":"disk_reconcile_failed","detail":"{}"}})", e.what());
  }
  reconciling_ = false;
  schedule_reconcile();
}

asio::awaitable<void> DiskService::reconcile_pass() {
  auto load = [](store::Database& db) -> Result<std::pair<std::vector<Disk>, std::vector<Snapshot>>> {
    auto d = disks_with_pending_work(db);
    if (!d) return fail(d.error());
    auto s = snapshots_with_pending_work(db);
    if (!s) return fail(s.error());
    return std::pair{std::move(*d), std::move(*s)};
  };
  auto pending = co_await store_.read(std::move(load));
  if (pending) {
    // A disk being made for an instance is made by that instance's converge (it waits for it).
    for (const auto& d : pending->first)
      if (!(d.state == S::creating && d.instance_id)) kick_disk(d.id);
    for (const auto& s : pending->second) kick_snapshot(s.id);
  }
  co_await refresh_usage();
  co_await schedule_retention();
}

asio::awaitable<void> DiskService::refresh_usage() {
  auto load = [](store::Database& db) { return market::reachable_hosts(db); };
  auto hosts = co_await store_.read(std::move(load));
  if (!hosts) co_return;
  for (const auto& [host_id, host_name] : *hosts) {
    std::string kind = "disk.status";
    auto outcome = co_await send(host_name, kind, json::object{}, "");
    if (!outcome || !outcome->ok) continue;
    std::map<std::string, std::int64_t> disk_used, snapshot_used;
    if (auto* a = outcome->observed.if_contains("disks"); a && a->is_array())
      for (const auto& v : a->as_array())
        if (v.is_object())
          if (auto* id = v.as_object().if_contains("disk_id"); id && id->is_string())
            disk_used[std::string(id->as_string())] = observed_int(v.as_object(), "used_bytes", 0);
    if (auto* a = outcome->observed.if_contains("snapshots"); a && a->is_array())
      for (const auto& v : a->as_array())
        if (v.is_object())
          if (auto* id = v.as_object().if_contains("snapshot_id"); id && id->is_string())
            snapshot_used[std::string(id->as_string())] = observed_int(v.as_object(), "used_bytes", 0);
    std::vector<std::string> torn;
    if (auto* a = outcome->observed.if_contains("torn_snapshots"); a && a->is_array())
      for (const auto& v : a->as_array())
        if (v.is_string()) torn.emplace_back(v.as_string());
    if (disk_used.empty() && snapshot_used.empty() && torn.empty()) continue;
    // Only a number that changed is written, without an event and without moving the
    // generation (usage is an observation, not a change the agent must follow).
    const SysTime now = clock_.now();
    // Init-captures: clang 14 cannot capture a structured binding.
    auto record = [disk_used, snapshot_used, torn, host_id = host_id, host_name = host_name,
                   now](store::Database& db) -> Status {
      if (auto s = mark_snapshots_torn(db, host_id, host_name, torn, now); !s) return s;
      for (const auto& [id, used] : disk_used)
        if (auto s = db.run("UPDATE disks SET used_bytes = ? WHERE id = ? AND used_bytes != ? AND state != 'destroyed'",
                            {used, id, used});
            !s)
          return s;
      for (const auto& [id, used] : snapshot_used) {
        if (auto s = db.run("UPDATE snapshots SET used_bytes = ? WHERE id = ? AND used_bytes != ? AND state != 'destroyed'",
                            {used, id, used});
            !s)
          return s;
        if (db.changes() == 0) continue;
        // A snapshot bills by what it holds: its meter follows the new size.
        auto snap = load_snapshot(db, id);
        if (!snap) return fail(snap.error());
        if (*snap && (*snap)->state == SnapshotState::available)
          if (auto b = billing::follow_snapshot(db, id, (*snap)->owner, used, now); !b) return b;
      }
      return ok();
    };
    (void)co_await store_.write(std::move(record));
  }
}

// ---- the recycle bin ----------------------------------------------------------------------

asio::awaitable<Status> DiskService::retention_due() {
  const int keep_days = config_.policy.recycle_days;
  auto now = clock_.now();
  // Everything deleted at or before this is destroyed now; what was deleted a day later is warned.
  const SysTime purge_before = now - days(keep_days);
  const SysTime warn_before = now - days(std::max(0, keep_days - 1));
  auto sweep = [purge_before, warn_before, keep_days, now](store::Database& db)
      -> Result<std::pair<std::vector<std::string>, std::vector<std::string>>> {
    std::vector<std::string> disks_out, snapshots_out;
    auto ds = deleted_disks_before(db, warn_before);
    if (!ds) return fail(ds.error());
    for (const auto& d : *ds) {
      Disk next = d;
      if (d.deleted_at && *d.deleted_at <= purge_before) {
        next.state = S::deleting;
        if (auto s = update_disk(db, d, next,
                                 Change{"disk.purging", "disk " + d.name + " leaves the recycle bin and is destroyed"}, now);
            !s)
          return fail(s.error());
        disks_out.push_back(d.id);
      } else if (!d.purge_warned && keep_days >= 1) {
        next.purge_warned = true;
        if (auto s = update_disk(db, d, next,
                                 Change{"disk.purge_warning", "disk " + d.name + " will be destroyed in a day unless restored",
                                        json::object{{"purge_at", format_rfc3339(*d.deleted_at + days(keep_days))}}},
                                 now);
            !s)
          return fail(s.error());
      }
    }
    auto ss = deleted_snapshots_before(db, warn_before);
    if (!ss) return fail(ss.error());
    for (const auto& s : *ss) {
      Snapshot next = s;
      if (s.deleted_at && *s.deleted_at <= purge_before) {
        next.state = SS::deleting;
        if (auto st = update_snapshot(db, s, next, Change{"snapshot.purging", "snapshot " + s.name + " is destroyed"}, now); !st)
          return fail(st.error());
        snapshots_out.push_back(s.id);
      } else if (!s.purge_warned && keep_days >= 1) {
        next.purge_warned = true;
        if (auto st = update_snapshot(
                db, s, next,
                Change{"snapshot.purge_warning", "snapshot " + s.name + " will be destroyed in a day unless restored",
                       json::object{{"purge_at", format_rfc3339(*s.deleted_at + days(keep_days))}}},
                now);
            !st)
          return fail(st.error());
      }
    }
    return std::pair{std::move(disks_out), std::move(snapshots_out)};
  };
  auto due = co_await store_.write(std::move(sweep));
  if (!due) co_return fail(due.error());
  if (!due->first.empty()) fault_point("disk.purge.after_sweep_commit");
  // Destroyed before the timer returns, so an advance of the test clock sees them gone.
  for (const auto& id : due->first) {
    auto s = co_await disk_step(id);
    if (!s) spdlog::warn(R"({{"event":"disk_purge_failed","disk":"{}","detail":"{}"}})", id, s.error().detail);
  }
  for (const auto& id : due->second) {
    auto s = co_await snapshot_step(id);
    if (!s) spdlog::warn(R"({{"event":"snapshot_purge_failed","snapshot":"{}","detail":"{}"}})", id, s.error().detail);
  }
  co_return ok();
}

asio::awaitable<void> DiskService::schedule_retention() {
  if (stopped_ || !background_) co_return;
  const int keep_days = config_.policy.recycle_days;
  // The next moment something in the bin is due: a warning or a purge.
  auto next_due = [keep_days](store::Database& db) -> Result<std::optional<SysTime>> {
    auto row = db.one(
        "SELECT MIN(deleted_at + CASE WHEN purge_warned = 0 AND ? >= 1 THEN ? ELSE ? END) FROM ("
        "SELECT deleted_at, purge_warned FROM disks WHERE state = 'deleted' UNION ALL "
        "SELECT deleted_at, purge_warned FROM snapshots WHERE state = 'deleted') AS binned",
        {keep_days, std::chrono::duration_cast<std::chrono::microseconds>(days(std::max(0, keep_days - 1))).count(),
         std::chrono::duration_cast<std::chrono::microseconds>(days(keep_days)).count()});
    if (!row) return fail(row.error());
    if (!*row || (*row)->is_null(0)) return std::optional<SysTime>{};
    return std::optional<SysTime>{from_unix_micros((*row)->int64(0))};
  };
  auto due = co_await store_.read(std::move(next_due));
  if (!due || !*due) co_return;
  if (retention_at_ && *retention_at_ <= **due) co_return;  // an earlier (or the same) timer is set
  if (retention_timer_) clock_.cancel(*retention_timer_);
  retention_at_ = **due;
  retention_timer_ = clock_.schedule_at(**due, "recycle-bin", [this]() -> asio::awaitable<void> {
    co_await retention_timer_fired();
  });
}

asio::awaitable<void> DiskService::retention_timer_fired() {
  retention_timer_.reset();
  retention_at_.reset();
  try {
    auto s = co_await retention_due();
    if (!s) spdlog::warn(R"({{"event":"recycle_bin_failed","detail":"{}"}})", s.error().detail);
  } catch (const std::exception& e) {
    spdlog::error(R"({{"event":"recycle_bin_failed","detail":"{}"}})", e.what());
  }
  co_await schedule_retention();
}

}  // namespace gpucloud::disks
