#include "server/host_registry.h"

#include <algorithm>
#include <set>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "billing/meters.h"
#include "events/events.h"
#include "instances/instance_record.h"
#include "market/host_agents.h"
#include "market/hosts.h"
#include "market/prices.h"

namespace gpucloud::server {
namespace asio = boost::asio;

namespace {
// The operator's warning when a host's disk pool crosses 80 % or 95 % of real use: one event
// (no user: only the operator sees it) and one log line per crossing.
Status warn_disk_pool(store::Database& db, const std::string& host_id, const std::string& host_name,
                      const market::DiskPoolCrossing& c, SysTime now) {
  const std::int64_t percent_now = c.size_bytes > 0 ? c.used_bytes * 100 / c.size_bytes : 0;
  spdlog::warn(R"({{"event":"host_disk_pool_high","host":"{}","level_percent":{},"used_bytes":{},"size_bytes":{}}})",
               host_name, c.percent, c.used_bytes, c.size_bytes);
  return events::record(db, now, "host.disk_pool_high", host_id, std::nullopt,
                        "host " + host_name + "'s disk pool is " + std::to_string(percent_now) + " % full (past " +
                            std::to_string(c.percent) + " %): " + std::to_string(c.used_bytes >> 20) + " MiB of " +
                            std::to_string(c.size_bytes >> 20) + " MiB used",
                        boost::json::object{{"name", host_name},
                                            {"level_percent", c.percent},
                                            {"used_bytes", c.used_bytes},
                                            {"size_bytes", c.size_bytes}});
}
}  // namespace

HostRegistry::HostRegistry(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                           PlatformClock& clock, std::unique_ptr<agent::HostAgent> agent,
                           std::chrono::milliseconds unreachable_after, std::chrono::milliseconds check_every)
    : loop_(loop), config_(config), store_(store), clock_(clock), agent_(std::move(agent)), unreachable_after_(unreachable_after),
      check_every_(check_every), check_timer_(loop) {}

HostRegistry::~HostRegistry() {
  *alive_ = false;
  check_timer_.cancel();
}

// One host's registration in the store: its record, who serves it, the event, the GPUs
// gone or back since its last registration, and its disk pool's warning.
Status HostRegistry::record_registration(store::Database& db, const config::Config& config,
                                         const agent::HostInventory& inventory, const std::string& agent_kind,
                                         const std::string& agent_version, const std::optional<std::string>& address,
                                         SysTime now, const std::optional<std::string>& replica) {
  auto registered = market::register_host(db, inventory, config, system_now());
  if (!registered) return tl::unexpected(registered.error());
  const market::HostRecord* host = &registered->host;
  if (auto s = market::record_agent_connected(db, inventory.name, agent_kind, agent_version, address, system_now(), replica);
      !s)
    return s;
  std::string message = "host " + inventory.name + " registered in " + inventory.zone + ": " +
                        std::to_string(inventory.gpus.size()) + (inventory.simulated ? " simulated" : "") + " GPUs, " +
                        std::to_string(inventory.cpu) + " CPU cores, " + std::to_string(inventory.memory_gib) + " GiB";
  if (!inventory.inventory_error.empty()) message += " (" + inventory.inventory_error + ")";
  if (address) message += " (remote agent at " + *address + ")";
  boost::json::object data{{"name", inventory.name},
                           {"zone", inventory.zone},
                           {"gpus", inventory.gpus.size()},
                           {"simulated", inventory.simulated},
                           {"inventory", inventory.inventory_source},
                           {"agent", agent_kind}};
  // Operator events: no user, so only the operator sees them.
  if (auto s = events::record(db, now, "host.registered", host->id, std::nullopt, message, std::move(data)); !s) return s;
  // GPUs gone or unhealthy since the last registration, or back: recorded with the GPUs.
  if (auto s = instances::record_gpu_changes(db, host->id, host->name, registered->changes, now); !s) return s;
  if (registered->disk_pool_crossing)
    if (auto s = warn_disk_pool(db, host->id, host->name, *registered->disk_pool_crossing, now); !s) return s;
  return ok();
}

asio::awaitable<Status> HostRegistry::start() {
  agent_->on_heartbeat([this](agent::Heartbeat beat) { on_heartbeat(std::move(beat)); });
  agent_->on_registration([this](agent::LateRegistration r) { return register_remote(std::move(r)); });
  agent_->on_link_change([this](const std::string& host, bool connected) { on_link_change(host, connected); });
  auto hosts = co_await agent_->register_hosts();
  if (!hosts) co_return tl::unexpected(hosts.error());
  // Hosts of remote agents are never in [[hosts]]: with the agents' listener on, one the store
  // knows but that is not in-process gets a grace period to reconnect after this start
  // rather than an "unreachable" at once (no mass false alarm after a control-plane restart).
  std::set<std::string> awaited;
  auto record = [this, hosts = *hosts, now = clock_.now(), &awaited](store::Database& db) -> Status {
    awaited.clear();
    if (auto s = market::seed_prices(db, config_); !s) return s;
    for (const auto& inventory : hosts)
      if (auto s = record_registration(db, config_, inventory, market::kAgentInProcess, GPUCLOUD_VERSION, std::nullopt,
                                       now);
          !s)
        return s;
    // A host the store knows but no agent registered now (taken out of the config, or its
    // agent gone): unreachable, so nothing is placed on it and the market does not count it.
    // Its record stays: instances may still name it.
    auto known = market::reachable_hosts(db);
    if (!known) return tl::unexpected(known.error());
    for (const auto& [known_id, name] : *known) {
      bool registered = std::any_of(hosts.begin(), hosts.end(),
                                    [&name = name](const agent::HostInventory& h) { return h.name == name; });
      if (registered) continue;
      if (config_.agents.enabled()) {
        awaited.insert(name);
        continue;
      }
      if (auto s = market::set_host_state(db, name, "unreachable", std::nullopt); !s) return s;
      if (auto s = events::record(db, now, "host.unreachable", known_id, std::nullopt,
                                  "host " + name + " was not registered at this start (no longer in the configuration?)",
                                  boost::json::object{{"name", name}, {"state", "unreachable"}});
          !s)
        return s;
      spdlog::warn(R"({{"event":"host_not_registered","host":"{}","state":"unreachable"}})", name);
    }
    return ok();
  };
  if (auto s = co_await store_.write(std::move(record)); !s) co_return s;
  auto now = std::chrono::steady_clock::now();
  for (const auto& name : awaited) {
    // Alive until the grace and the usual silence have both passed without its agent.
    last_heartbeat_[name] = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.agents.reconnect_grace);
    reachable_[name] = true;
  }
  for (const auto& h : *hosts) {
    last_heartbeat_[h.name] = now;
    (*reported_gpus_)[h.name] = h.gpus;
    reachable_[h.name] = true;
    spdlog::info(R"({{"event":"host_registered","host":"{}","zone":"{}","gpus":{},"inventory":"{}"}})", h.name, h.zone,
                 h.gpus.size(), h.inventory_source);
  }
  schedule_check();
  co_return ok();
}

asio::awaitable<Status> HostRegistry::register_remote(agent::LateRegistration r) {
  const std::shared_ptr<bool> live = alive_;
  auto record = [this, r, now = clock_.now()](store::Database& db) -> Status {
    if (std::any_of(config_.hosts.begin(), config_.hosts.end(), [&](const config::Host& h) { return h.name == r.inventory.name; }))
      return fail(ErrorCode::conflict, "host " + r.inventory.name + " is an in-process host of this control plane");
    return record_registration(db, config_, r.inventory, market::kAgentRemote, r.agent_version, r.address, now, replica_);
  };
  if (auto s = co_await store_.write(std::move(record)); !s) co_return s;
  if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
  const std::string& name = r.inventory.name;
  last_heartbeat_[name] = std::chrono::steady_clock::now();
  (*reported_gpus_)[name] = r.inventory.gpus;
  if (!reachable_.contains(name)) reachable_[name] = false;  // the next check says "ready" (with its event)
  spdlog::info(R"({{"event":"host_registered","host":"{}","zone":"{}","gpus":{},"inventory":"{}","agent":"remote","address":"{}"}})",
               name, r.inventory.zone, r.inventory.gpus.size(), r.inventory.inventory_source, r.address);
  // Ready at once rather than at the next check: a create may wait on it.
  check_timer_.cancel();
  schedule_check_soon();
  co_return ok();
}

void HostRegistry::on_link_change(const std::string& host, bool connected) {
  if (connected) return;  // the registration recorded it
  auto write = [host, replica = replica_](store::Database& db) {
    return market::record_agent_disconnected(db, host, system_now(), replica);
  };
  asio::co_spawn(
      loop_,
      [](store::Store& store, decltype(write) w, std::string host) -> asio::awaitable<void> {
        if (auto s = co_await store.write(std::move(w)); !s)
          spdlog::warn("host {}: agent disconnection not recorded: {}", host, s.error().detail);
      }(store_, std::move(write), host),
      asio::detached);
}

void HostRegistry::on_heartbeat(agent::Heartbeat beat) {
  last_heartbeat_[beat.host_name] = std::chrono::steady_clock::now();
  unwritten_beats_[beat.host_name] = system_now();
  follow_disk_pool(beat);
  follow_gpu_health(std::move(beat));
}

void HostRegistry::follow_disk_pool(const agent::Heartbeat& beat) {
  // Written when the capacity or the warning level changed, else at most once a minute: the
  // use moves with every write on the host, and the warnings only need the crossings.
  if (!beat.disk_pool || !reported_gpus_->contains(beat.host_name)) return;
  const auto& pool = *beat.disk_pool;
  const auto now = std::chrono::steady_clock::now();
  const int level = market::disk_pool_level(pool.used_bytes, pool.size_bytes);
  auto& last = (*reported_pools_)[beat.host_name];
  if (last.written && last.capacity_bytes == pool.capacity_bytes && last.level == level &&
      now - *last.written < std::chrono::minutes(1))
    return;
  last = ReportedPool{now, pool.capacity_bytes, level};
  auto record = [pool, name = beat.host_name, now = clock_.now()](store::Database& db) -> Status {
    auto id = market::host_id_by_name(db, name);
    if (!id) return fail(id.error());
    if (!*id) return ok();
    auto crossed = market::record_disk_pool(db, **id, pool);
    if (!crossed) return fail(crossed.error());
    if (*crossed) return warn_disk_pool(db, **id, name, **crossed, now);
    return ok();
  };
  asio::co_spawn(
      loop_,
      [](store::Store& store, decltype(record) write, std::shared_ptr<ReportedPools> reported,
         std::string name) -> asio::awaitable<void> {
        if (auto s = co_await store.write(std::move(write)); !s) {
          spdlog::warn("host {}: disk pool not recorded: {}", name, s.error().detail);
          reported->erase(name);
        }
      }(store_, std::move(record), reported_pools_, beat.host_name),
      asio::detached);
}

namespace {
// What a beat says that the store keeps: which GPU is at which index, in what health.
bool same_gpus(const std::vector<agent::GpuInfo>& a, const std::vector<agent::GpuInfo>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const agent::GpuInfo& x, const agent::GpuInfo& y) {
    return x.uuid == y.uuid && x.index == y.index && x.health == y.health;
  });
}
}  // namespace

void HostRegistry::follow_gpu_health(agent::Heartbeat beat) {
  // Only a registered host's beats count; an empty one says nothing (a GPU the beat leaves
  // out keeps its record). The same GPUs in the same health as the last report: no write.
  auto known = reported_gpus_->find(beat.host_name);
  if (known == reported_gpus_->end() || beat.gpus.empty() || same_gpus(known->second, beat.gpus)) return;
  known->second = beat.gpus;
  auto record = [this, gpus = beat.gpus, name = beat.host_name, now = clock_.now()](store::Database& db) -> Status {
    auto changes = market::record_gpu_health(db, name, gpus, config_, system_now());
    if (!changes) return fail(changes.error());
    if (changes->empty()) return ok();
    auto id = market::host_id_by_name(db, name);
    if (!id) return fail(id.error());
    if (!*id) return ok();
    return instances::record_gpu_changes(db, **id, name, *changes, now);
  };
  // The write outlives nothing of the registry but this map (shared with it): on failure the
  // next beat with this list writes again.
  asio::co_spawn(
      loop_,
      [](store::Store& store, decltype(record) write, std::shared_ptr<ReportedGpus> reported,
         std::string name) -> asio::awaitable<void> {
        if (auto s = co_await store.write(std::move(write)); !s) {
          spdlog::warn("host {}: GPU health not recorded: {}", name, s.error().detail);
          (*reported)[name].clear();
        }
      }(store_, std::move(record), reported_gpus_, beat.host_name),
      asio::detached);
}

void HostRegistry::schedule_check_soon() {
  check_timer_.expires_after(std::chrono::milliseconds(0));
  check_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    asio::co_spawn(loop_, check_liveness(), asio::detached);
  });
}

void HostRegistry::schedule_check() {
  check_timer_.expires_after(check_every_);
  check_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    asio::co_spawn(loop_, check_liveness(), asio::detached);
  });
}

void HostRegistry::begin_leading() {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(config_.agents.reconnect_grace);
  for (auto& [name, seen] : last_heartbeat_)
    if (!std::any_of(config_.hosts.begin(), config_.hosts.end(),
                     [&name = name](const config::Host& h) { return h.name == name; }))
      seen = std::max(seen, until);
}

asio::awaitable<void> HostRegistry::merge_stored_heartbeats() {
  auto read = [](store::Database& db) -> Result<std::vector<store::Row>> {
    return db.all("SELECT name, last_heartbeat_at, state FROM hosts WHERE agent_kind = 'remote' AND admin_state != 'removed'");
  };
  const std::shared_ptr<bool> live = alive_;
  auto rows = co_await store_.read(std::move(read));
  if (!*live || !rows) co_return;
  const auto steady_now = std::chrono::steady_clock::now();
  const auto wall_now = system_now();
  for (const auto& r : *rows) {
    const std::string name = r.text(0);
    if (!reachable_.contains(name)) {
      // A host whose agent joined through another replica: followed from here on, with the
      // reconnect grace as after a start.
      reachable_[name] = r.text(2) == "ready";
      last_heartbeat_[name] = steady_now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               config_.agents.reconnect_grace);
    }
    if (r.is_null(1)) continue;
    const auto age = std::max(SysTime::duration::zero(), wall_now - from_unix_micros(r.int64(1)));
    const auto seen = steady_now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(age);
    auto& known = last_heartbeat_[name];
    known = std::max(known, seen);
  }
}

asio::awaitable<void> HostRegistry::check_liveness() {
  const std::shared_ptr<bool> live = alive_;
  const bool deciding = !leading_ || leading_();
  if (deciding && leading_ && config_.agents.enabled()) {
    co_await merge_stored_heartbeats();
    if (!*live) co_return;
  }
  // What changed is decided before the next await: the registry may be destroyed while a
  // write is in flight, so nothing of it (its maps, their nodes) is touched after one unless
  // `live` says it still exists.
  auto now = std::chrono::steady_clock::now();
  struct Change {
    std::string name;
    bool alive = false;
    SysTime last_alive;  // on the platform clock: when its last heartbeat came
  };
  std::vector<Change> changed;
  for (const auto& [name, seen] : last_heartbeat_) {
    if (!deciding) break;  // a standby: the leader decides
    const bool alive = now - seen < unreachable_after_;
    if (alive == reachable_[name]) continue;
    reachable_[name] = alive;
    const auto silent = std::max(std::chrono::steady_clock::duration::zero(), now - seen);
    changed.push_back(Change{name, alive, clock_.now() - std::chrono::duration_cast<SysTime::duration>(silent)});
  }
  if (!unwritten_beats_.empty()) {
    auto beats = [beats = std::vector<std::pair<std::string, SysTime>>(unwritten_beats_.begin(), unwritten_beats_.end())](
                     store::Database& db) { return market::record_heartbeats(db, beats); };
    unwritten_beats_.clear();
    const auto written = co_await store_.write(std::move(beats));
    if (!*live) co_return;
    if (!written) spdlog::warn("hosts' heartbeats not recorded: {}", written.error().detail);
  }
  for (const auto& [name, alive, last_alive] : changed) {
    // `name = name`: clang 14 cannot capture a structured binding by name (C++20 allows it).
    auto update = [name = name, alive = alive, last_alive = last_alive, now = clock_.now()](store::Database& db) -> Status {
      if (auto s = market::set_host_state(db, name, alive ? "ready" : "unreachable", alive ? std::optional(system_now()) : std::nullopt);
          !s)
        return s;
      // No compute is charged for a host nobody hears from: its running instances' meters are
      // held from its last heartbeat until it answers again; then the container's own times
      // settle the gap (ran on: charged; ended: closed at its FinishedAt by the reconcile).
      auto running = instances::running_on_host(db, name);
      if (!running) return fail(running.error());
      std::vector<std::string> ids;
      for (const auto& r : *running) ids.push_back(r.id);
      if (auto s = alive ? billing::release_compute_meters(db, ids) : billing::hold_compute_meters(db, ids, last_alive); !s)
        return s;
      auto id = market::host_id_by_name(db, name);
      if (!id || !*id) return ok();
      std::string state = alive ? "ready" : "unreachable";
      return events::record(db, now, "host." + state, **id, std::nullopt,
                            "host " + name + (alive ? " answers again" : " stopped answering: its heartbeats ceased"),
                            boost::json::object{{"name", name}, {"state", state}});
    };
    const auto written = co_await store_.write(std::move(update));
    if (!*live) co_return;
    if (!written) spdlog::warn("host {}: {}", name, written.error().detail);
    spdlog::info(R"({{"event":"host_{}","host":"{}"}})", alive ? "ready" : "unreachable", name);
  }
  schedule_check();
}

}  // namespace gpucloud::server
