#include "instances/lifecycle.h"

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "core/ids.h"
#include "events/events.h"
#include "core/fault_points.h"
#include "instances/images.h"
#include "instances/ssh_keys.h"
#include "market/reservations.h"

namespace gpucloud::instances {
namespace asio = boost::asio;
namespace json = boost::json;

InstanceService::InstanceService(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                                 PlatformClock& clock, agent::HostAgent& agent)
    : loop_(loop), config_(config), store_(store), clock_(clock), agent_(agent), reconcile_timer_(loop) {}

InstanceService::~InstanceService() { reconcile_timer_.cancel(); }

std::int64_t InstanceService::run_seconds_now(const Instance& i) const {
  std::int64_t total = i.run_seconds;
  if (i.state == "running" && i.started_at)
    total += std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - *i.started_at).count());
  return total;
}

void InstanceService::kick(const std::string& id) { asio::co_spawn(loop_, converge(id), asio::detached); }

void InstanceService::refresh_running(const std::string& id) { asio::co_spawn(loop_, refresh(id), asio::detached); }

asio::awaitable<void> InstanceService::refresh(std::string id) {
  auto load = [id](store::Database& db) { return load_instance(db, id); };
  auto instance = co_await store_.read(std::move(load));
  if (!instance || !*instance || (*instance)->state != "running") co_return;
  auto observed = co_await ensure(**instance, "running");
  if (!observed) spdlog::warn(R"({{"event":"refresh_failed","instance":"{}","detail":"{}"}})", id, observed.error().detail);
}

asio::awaitable<Result<agent::CommandOutcome>> InstanceService::send(const std::string& host_name, const std::string& kind,
                                                                     json::object desired) {
  agent::Command command{new_id("cmd"), host_name, kind, std::move(desired)};
  co_return co_await agent_.execute(std::move(command));
}

namespace {
// The desired container as the agent needs it, resolved from the store at send time so
// changed keys reach the next boot.
struct EnsureInputs {
  std::string engine_image;
  std::string authorized_keys;
};
}  // namespace

asio::awaitable<Result<json::object>> InstanceService::ensure(const Instance& i, const std::string& state) {
  auto resolve = [i](store::Database& db) -> Result<EnsureInputs> {
    EnsureInputs in;
    auto image = db.one("SELECT engine_image FROM images WHERE id = ?", {i.image_id});
    if (!image || !*image) return fail(ErrorCode::internal, "image " + i.image_id + " is gone");
    in.engine_image = (*image)->text(0);
    for (const auto& key_id : i.ssh_keys) {
      auto key = db.one("SELECT public_key FROM ssh_keys WHERE id = ?", {key_id});
      if (key && *key) in.authorized_keys += (*key)->text(0) + "\n";
    }
    return in;
  };
  auto inputs = co_await store_.read(std::move(resolve));
  if (!inputs) co_return tl::unexpected(inputs.error());
  json::array gpus, ports;
  for (const auto& u : i.gpu_uuids) gpus.push_back(json::value(u));
  for (const auto& p : i.ports)
    ports.push_back(json::object{{"container_port", p.container_port},
                                 {"host_port", p.host_port},
                                 {"protocol", p.protocol},
                                 {"allowed", json::array{"0.0.0.0/0"}}});  // until security groups exist
  json::object desired{{"instance_id", i.id},
                       {"name", i.name},
                       {"host", i.host_name.value_or("")},
                       {"state", state},
                       {"image", inputs->engine_image},
                       {"cpu", i.cpu},
                       {"memory_gib", i.memory_gib},
                       {"gpu_uuids", std::move(gpus)},
                       {"gpus_simulated", i.gpus_simulated},
                       {"ports", std::move(ports)},
                       {"authorized_keys", inputs->authorized_keys},
                       {"password_hash", i.password_hash ? json::value(*i.password_hash) : json::value(nullptr)}};
  // Arguments are named locals: g++ 12 mishandles string literals inside co_await expressions.
  std::string host = i.host_name.value_or(""), kind = "instance.ensure";
  auto outcome = co_await send(host, kind, std::move(desired));
  if (!outcome) co_return tl::unexpected(outcome.error());
  if (!outcome->ok) co_return tl::unexpected(agent::outcome_error(*outcome));
  co_return outcome->observed;
}

asio::awaitable<void> InstanceService::converge(std::string id) {
  if (converging_.count(id)) {
    dirty_.insert(id);  // the running pass goes round once more
    co_return;
  }
  converging_.insert(id);
  do {
    dirty_.erase(id);
    auto load = [id](store::Database& db) { return load_instance(db, id); };
    auto instance = co_await store_.read(std::move(load));
    if (!instance || !*instance) break;
    if (!is_transitional((*instance)->state)) break;
    auto done = co_await converge_once(**instance);
    if (!done) {
      spdlog::warn(R"({{"event":"converge_failed","instance":"{}","detail":"{}"}})", id, done.error().detail);
      break;
    }
    dirty_.insert(id);  // look again: the new state may need another step (restart)
  } while (dirty_.count(id));
  dirty_.erase(id);
  converging_.erase(id);
}

namespace {
std::string observed_string(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : std::string();
}
bool observed_running(const json::object& o) {
  auto it = o.find("running");
  return it != o.end() && it->value().is_bool() && it->value().as_bool();
}
}  // namespace

asio::awaitable<Status> InstanceService::converge_once(const Instance& i) {
  const std::string from = i.state;
  if (from == "creating" || from == "starting") {
    auto observed = co_await ensure(i, "running");
    if (from == "creating") fault_point("create.after_engine");
    else fault_point("start.after_engine");
    auto now = clock_.now();
    auto record = [i, from, observed, now](store::Database& db) -> Status {
      auto current = load_instance(db, i.id);
      if (!current || !*current) return fail(ErrorCode::not_found, "instance vanished");
      Instance next = **current;
      if (next.state != from) return ok();  // someone moved it meanwhile (e.g. release): their turn
      if (observed && observed_running(*observed)) {
        next.state = "running";
        next.state_reason.clear();
        next.started_at = now;
        if (auto key = observed_string(*observed, "host_key"); !key.empty()) next.host_key = key;
        if (auto ip = observed_string(*observed, "ipv4"); !ip.empty()) next.ipv4 = ip;
        if (auto c = observed_string(*observed, "container_id"); !c.empty()) next.container_id = c;
        if (auto it = observed->find("cpus_capped"); it != observed->end() && it->value().is_bool())
          next.cpus_capped = it->value().as_bool();
      } else {
        // Creation failed: the record says why and holds nothing; a failed start stays stopped.
        std::string why = observed ? "the container did not start" : observed.error().detail;
        next.state = from == "creating" ? "error" : "stopped";
        next.state_reason = (from == "creating" ? "create failed: " : "start failed: ") + why;
        next.stopped_at = now;
        if (auto r = market::release_reservation(db, i.id, now); !r) return fail(r.error());
      }
      return update_and_record(db, from, next, now);
    };
    co_return co_await store_.write(std::move(record));
  }
  if (from == "stopping") {
    auto observed = co_await ensure(i, "stopped");
    if (!observed) co_return tl::unexpected(observed.error());
    fault_point("stop.before_state_commit");
    auto now = clock_.now();
    auto record = [this, i, now](store::Database& db) -> Status {
      auto current = load_instance(db, i.id);
      if (!current || !*current) return fail(ErrorCode::not_found, "instance vanished");
      Instance next = **current;
      if (next.state != "stopping") return ok();
      if (next.started_at)
        next.run_seconds += std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(now - *next.started_at).count());
      next.started_at.reset();
      next.stopped_at = now;
      if (next.state_reason == "restart") {
        next.state = "starting";  // keeps its reservation across a restart
      } else {
        next.state = "stopped";
        // Pay-as-you-go gives its GPUs, CPU and memory back; someone else may take them.
        if (auto r = market::release_reservation(db, i.id, now); !r) return fail(r.error());
      }
      (void)this;
      return update_and_record(db, "stopping", next, now);
    };
    co_return co_await store_.write(std::move(record));
  }
  if (from == "releasing") {
    std::string host = i.host_name.value_or(""), kind = "instance.remove";
    json::object desired;
    desired["instance_id"] = i.id;
    auto outcome = co_await send(host, kind, std::move(desired));
    if (!outcome) co_return tl::unexpected(outcome.error());
    if (!outcome->ok) co_return tl::unexpected(agent::outcome_error(*outcome));
    fault_point("release.before_state_commit");
    auto now = clock_.now();
    auto record = [i, now](store::Database& db) -> Status {
      auto current = load_instance(db, i.id);
      if (!current || !*current) return fail(ErrorCode::not_found, "instance vanished");
      Instance next = **current;
      if (next.state != "releasing") return ok();
      if (next.started_at)
        next.run_seconds += std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(now - *next.started_at).count());
      next.started_at.reset();
      next.state = "released";
      next.state_reason.clear();
      next.released_at = now;
      if (auto r = market::release_reservation(db, i.id, now); !r) return fail(r.error());
      if (auto s = free_ports(db, i.id); !s) return s;
      return update_and_record(db, "releasing", next, now);
    };
    co_return co_await store_.write(std::move(record));
  }
  co_return ok();
}

void InstanceService::start_background(std::chrono::seconds period) {
  period_ = period;
  asio::co_spawn(loop_, reconcile(), asio::detached);
}

asio::awaitable<void> InstanceService::refresh_images() {
  // All-in-one hosts share one engine: the first host's agent speaks for it.
  if (config_.hosts.empty()) co_return;
  std::string host = config_.hosts.front().name;
  auto load = [](store::Database& db) { return public_images(db); };
  auto images = co_await store_.read(std::move(load));
  if (!images || images->empty()) co_return;
  json::array refs, pull;
  for (const auto& img : *images) {
    refs.emplace_back(img.engine_image);
    // The base image is built here, never fetched: a registry could hold another by that name.
    if (img.engine_image != kBaseEngineImage) pull.emplace_back(img.engine_image);
  }
  std::string kind = "image.inspect";
  json::object desired;
  desired["images"] = std::move(refs);
  desired["pull"] = std::move(pull);
  auto outcome = co_await send(host, kind, std::move(desired));
  if (!outcome || !outcome->ok) co_return;  // the engine is away: keep what we knew
  const auto* found = outcome->observed.if_contains("images");
  if (found == nullptr || !found->is_object()) co_return;
  bool pulling = false;
  for (const auto& [ref, seen] : found->as_object())
    pulling = pulling || (seen.is_object() && seen.as_object().contains("pulling") && seen.as_object().at("pulling").as_bool());
  auto record = [images = *images, found = found->as_object(), host, event_time = clock_.now()](store::Database& db) -> Status {
    for (const auto& img : images) {
      const auto* o = found.if_contains(img.engine_image);
      if (o == nullptr || !o->is_object()) continue;
      const auto& seen_json = o->as_object();
      EngineImage seen;
      seen.present = seen_json.contains("present") && seen_json.at("present").as_bool();
      if (const auto* s = seen_json.if_contains("size_bytes"); s && s->is_int64()) seen.size_bytes = s->as_int64();
      seen.pulling = seen_json.contains("pulling") && seen_json.at("pulling").as_bool();
      seen.pull_error = observed_string(seen_json, "pull_error");
      std::string before = img.state + "|" + img.state_reason + "|" + std::to_string(img.size_bytes);
      if (auto s = record_engine_image(db, img, seen, host); !s) return s;
      auto now = db.one("SELECT state || '|' || state_reason || '|' || size_bytes FROM images WHERE id = ?", {img.id});
      if (now && *now && (*now)->text(0) != before) {
        spdlog::log(seen.present ? spdlog::level::info : spdlog::level::warn,
                    R"({{"event":"image_state","image":"{}","engine_image":"{}","now":"{}"}})", img.name, img.engine_image,
                    (*now)->text(0));
        auto after = find_image_by_id(db, img.id);
        if (after && after->state != img.state) {
          std::string type = after->state == "creating" ? "image.pulling" : "image." + after->state;
          std::string message = "image " + img.name + " is " + (after->state == "creating" ? "being pulled" : after->state) +
                                (after->state_reason.empty() ? "" : ": " + after->state_reason);
          if (auto s = events::record(db, event_time, type, img.id, img.owner, message,
                                      json::object{{"name", img.name}, {"state", after->state}, {"size_bytes", after->size_bytes}});
              !s)
            return s;
        }
      }
    }
    return ok();
  };
  if (auto s = co_await store_.write(std::move(record)); !s) spdlog::warn("refresh images: {}", s.error().detail);
  // While a pull runs, look again sooner than the next reconcile so its end shows quickly.
  if (pulling && !images_followup_) {
    images_followup_ = true;
    asio::co_spawn(loop_, follow_up_images(), asio::detached);
  }
}

asio::awaitable<void> InstanceService::follow_up_images() {
  asio::steady_timer wait(loop_, std::chrono::seconds(2));
  auto [ec] = co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
  images_followup_ = false;
  if (!ec) co_await refresh_images();
}

void InstanceService::schedule_reconcile() {
  reconcile_timer_.expires_after(period_);
  reconcile_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) asio::co_spawn(loop_, reconcile(), asio::detached);
  });
}

namespace {
struct ContainerReport {
  bool exists = false, running = false;
  std::string reason;
};
}  // namespace

asio::awaitable<void> InstanceService::reconcile() {
  if (reconciling_) co_return;
  reconciling_ = true;
  auto load = [](store::Database& db) { return live_instances(db); };
  auto live = co_await store_.read(std::move(load));
  std::set<std::string> hosts;
  for (const auto& h : config_.hosts) hosts.insert(h.name);
  if (live) {
    for (const auto& i : *live) if (i.host_name) hosts.insert(*i.host_name);
  }
  std::map<std::string, ContainerReport> seen;
  bool complete = true;
  for (const auto& host : hosts) {
    std::string kind = "instance.status";
    auto outcome = co_await send(host, kind, json::object());
    if (!outcome || !outcome->ok) {
      complete = false;
      continue;
    }
    auto instances = outcome->observed.find("instances");
    if (instances != outcome->observed.end() && instances->value().is_array()) {
      for (const auto& v : instances->value().as_array()) {
        const auto& o = v.as_object();
        ContainerReport r;
        r.exists = o.contains("exists") && o.at("exists").as_bool();
        r.running = o.contains("running") && o.at("running").as_bool();
        r.reason = observed_string(o, "state_reason");
        seen[observed_string(o, "instance_id")] = r;
      }
    }
    auto unknown = outcome->observed.find("unknown_containers");
    if (unknown != outcome->observed.end() && unknown->value().is_array()) {
      for (const auto& v : unknown->value().as_array()) {
        std::string container = observed_string(v.as_object(), "container_id");
        const bool running = v.as_object().contains("running") && v.as_object().at("running").as_bool();
        // Ours by label but unrecorded: stopped and reported (once), never deleted.
        if (!running && reported_unknown_.contains(container)) continue;
        bool ok_stop = true;
        if (running) {
          spdlog::warn(R"({{"event":"unknown_container","host":"{}","container":"{}","action":"stopped"}})", host, container);
          std::string stop_kind = "instance.stop_unknown";
          json::object desired;
          desired["container_id"] = container;
          auto stopped = co_await send(host, stop_kind, std::move(desired));
          ok_stop = stopped && stopped->ok;
        }
        if (!reported_unknown_.insert(container).second) continue;
        // An operator event (no user), once per container and daemon run.
        auto report = [host, container, ok_stop, now = clock_.now()](store::Database& db) -> Status {
          auto id = db.one("SELECT id FROM hosts WHERE name = ?", {host});
          if (!id) return fail(id.error());
          std::string resource = *id ? (*id)->text(0) : host;
          return events::record(db, now, "host.unknown_container", resource, std::nullopt,
                                "container " + container.substr(0, 12) + " on " + host +
                                    " carries this installation's label but no instance: " +
                                    (ok_stop ? "stopped, not deleted" : "could not be stopped"),
                                json::object{{"host", host}, {"container_id", container}, {"stopped", ok_stop}});
        };
        if (auto s = co_await store_.write(std::move(report)); !s) spdlog::warn("reconcile report: {}", s.error().detail);
      }
    }
  }
  if (live) {
    for (const auto& i : *live) {
      if (is_transitional(i.state)) {
        kick(i.id);  // a crash left it half-way: finish the step
        continue;
      }
      if (i.state != "running" || !complete || converging_.count(i.id)) continue;
      auto it = seen.find(i.id);
      bool exists = it != seen.end() && it->second.exists;
      bool running = exists && it->second.running;
      if (running) continue;
      std::string reason = !exists ? "the container vanished" : (it->second.reason.empty() ? "exited" : it->second.reason);
      auto now = clock_.now();
      auto repair = [i, exists, reason, now](store::Database& db) -> Status {
        auto current = load_instance(db, i.id);
        if (!current || !*current || (*current)->state != "running") return ok();
        Instance next = **current;
        if (next.started_at)
          next.run_seconds += std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(now - *next.started_at).count());
        next.started_at.reset();
        next.stopped_at = now;
        next.state = exists ? "stopped" : "error";
        next.state_reason = reason;
        if (auto r = market::release_reservation(db, i.id, now); !r) return fail(r.error());
        return update_and_record(db, "running", next, now);
      };
      if (auto s = co_await store_.write(std::move(repair)); !s)
        spdlog::warn("reconcile {}: {}", i.id, s.error().detail);
      else
        spdlog::info(R"({{"event":"instance_{}","instance":"{}","reason":"{}"}})", exists ? "stopped" : "error", i.id, reason);
    }
  }
  // Reservations that no live instance explains are freed.
  auto free_orphans = [now = clock_.now()](store::Database& db) -> Status {
    auto holders = market::reservation_holders(db);
    if (!holders) return fail(holders.error());
    for (const auto& h : *holders) {
      auto row = db.one("SELECT state FROM instances WHERE id = ?", {h});
      if (!row) return fail(row.error());
      std::string state = *row ? (*row)->text(0) : "";
      bool explained = state == "creating" || state == "starting" || state == "running" || state == "stopping" ||
                       state == "releasing";
      if (!explained) {
        if (auto r = market::release_reservation(db, h, now); !r) return fail(r.error());
        spdlog::warn(R"({{"event":"reservation_freed","holder":"{}","state":"{}"}})", h, state);
      }
    }
    return ok();
  };
  if (auto s = co_await store_.write(std::move(free_orphans)); !s) spdlog::warn("reconcile reservations: {}", s.error().detail);
  co_await refresh_images();
  reconciling_ = false;
  schedule_reconcile();
}

}  // namespace gpucloud::instances
