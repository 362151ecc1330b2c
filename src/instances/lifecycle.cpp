#include "instances/lifecycle.h"

#include <exception>
#include <filesystem>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "auth/credentials.h"
#include "core/fault_points.h"
#include "core/ids.h"
#include "disks/disk_record.h"
#include "disks/disk_service.h"
#include "events/events.h"
#include "instances/images.h"
#include "instances/system_disk.h"
#include "instances/ssh_keys.h"
#include "instances/transition.h"
#include "market/hosts.h"
#include "market/reservations.h"

namespace gpucloud::instances {
namespace asio = boost::asio;
namespace json = boost::json;
using S = InstanceState;

InstanceService::InstanceService(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                                 PlatformClock& clock, agent::HostAgent& agent)
    : loop_(loop), config_(config), store_(store), clock_(clock), agent_(agent), reconcile_timer_(loop) {
  jupyter_key_ = auth::load_or_create_key((std::filesystem::path(config_.data_dir) / "jupyter.key").string());
}

std::string InstanceService::jupyter_token(const std::string& instance_id) const {
  return auth::keyed_hash(jupyter_key_, "jupyter\n" + instance_id).substr(0, 48);
}

InstanceService::~InstanceService() { reconcile_timer_.cancel(); }

std::int64_t InstanceService::run_seconds_now(const Instance& i) const {
  std::int64_t total = i.run_seconds;
  if (i.state == S::running && i.started_at)
    total += std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - *i.started_at).count());
  return total;
}

void InstanceService::kick(const std::string& id) { asio::co_spawn(loop_, converge(id), asio::detached); }

void InstanceService::refresh(const std::string& id) {
  refresh_wanted_.insert(id);
  kick(id);
}

asio::awaitable<Result<agent::CommandOutcome>> InstanceService::send(const std::string& host_name, const std::string& kind,
                                                                     json::object desired, std::string command_id) {
  agent::Command command{command_id.empty() ? new_id("cmd") : std::move(command_id), host_name, kind, std::move(desired)};
  co_return co_await agent_.execute(std::move(command));
}

namespace {
// The desired container as the agent needs it, resolved from the store at send time so
// changed keys reach the next boot.
struct EnsureInputs {
  std::string engine_image;
  std::string authorized_keys;
  json::array data_disks;  // [{"disk_id", "mount_path"}]: the disks the agent mounts
};

std::string observed_string(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : std::string();
}
bool observed_bool(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_bool() && it->value().as_bool();
}

// A command's id is stable for one (instance, generation, step): a retry after a crash is
// the same command, and the agent can refuse one older than what it has applied.
std::string command_id(const Instance& i, std::string_view step) {
  return "cmd-" + i.id + "-g" + std::to_string(i.generation) + "-" + std::string(step);
}
}  // namespace

asio::awaitable<Result<json::object>> InstanceService::ensure(const Instance& i, S state) {
  auto resolve = [i](store::Database& db) -> Result<EnsureInputs> {
    EnsureInputs in;
    auto image = find_image_by_id(db, i.image_id);
    if (!image) return fail(ErrorCode::internal, "image " + i.image_id + " is gone");
    in.engine_image = image->engine_image;
    for (const auto& key_id : i.ssh_keys) {
      auto key = find_ssh_key(db, i.owner, key_id);
      if (key) in.authorized_keys += key->public_key + "\n";
    }
    auto disks = disks::disks_of_instance(db, i.id);
    if (!disks) return fail(disks.error());
    for (const auto& d : *disks)
      if (d.state == disks::DiskState::attached && d.mount_path)
        in.data_disks.push_back(json::object{{"disk_id", d.id}, {"mount_path", *d.mount_path}});
    return in;
  };
  auto inputs = co_await store_.read(std::move(resolve));
  if (!inputs) co_return tl::unexpected(inputs.error());
  json::array gpus, ports;
  for (const auto& u : i.gpu_uuids) gpus.push_back(json::value(u));
  for (const auto& p : i.ports) {
    // The sources its security group lets in; none: only the host itself reaches the port.
    json::array allowed;
    for (const auto& s : port_sources_v4(i, p)) allowed.push_back(json::value(s));
    ports.push_back(json::object{{"container_port", p.container_port},
                                 {"host_port", p.host_port},
                                 {"protocol", p.protocol},
                                 {"allowed", std::move(allowed)}});
  }
  const std::string state_text(to_string(state));
  json::object desired{{"instance_id", i.id},
                       {"generation", i.generation},
                       {"name", i.name},
                       {"host", i.host_name.value_or("")},
                       {"state", state_text},
                       {"image", inputs->engine_image},
                       {"cpu", i.cpu},
                       {"memory_gib", i.memory_gib},
                       {"system_disk_gib", i.system_disk_gib},
                       {"gpu_uuids", std::move(gpus)},
                       {"gpus_simulated", i.gpus_simulated},
                       {"ports", std::move(ports)},
                       {"data_disks", std::move(inputs->data_disks)},
                       {"authorized_keys", inputs->authorized_keys},
                       {"password_hash", i.password_hash ? json::value(*i.password_hash) : json::value(nullptr)}};
  // Its image's Jupyter: the token and base URL the init starts it with.
  if (i.jupyter)
    desired["jupyter"] = json::object{{"token", jupyter_token(i.id)}, {"base_url", "/api/v1/instances/" + i.id + "/jupyter/"}};
  // Arguments are named locals: g++ 12 mishandles string literals inside co_await expressions.
  std::string host = i.host_name.value_or(""), kind = "instance.ensure", id = command_id(i, "ensure-" + state_text);
  auto outcome = co_await send(host, kind, std::move(desired), id);
  if (!outcome) co_return tl::unexpected(outcome.error());
  if (!outcome->ok) co_return tl::unexpected(agent::outcome_error(*outcome));
  co_return outcome->observed;
}

// ---- the per-instance queue -------------------------------------------------------------

asio::awaitable<void> InstanceService::converge(std::string id) {
  if (converging_.count(id)) {
    dirty_.insert(id);  // the running pass goes round once more
    co_return;
  }
  converging_.insert(id);
  do {
    dirty_.erase(id);
    Result<bool> again = false;
    try {
      again = co_await step(id);
    } catch (const std::exception& e) {  // a bug must not wedge the queue
      again = fail(ErrorCode::internal, std::string("converge: ") + e.what());
    }
    if (!again) {
      spdlog::warn(R"({{"event":"converge_failed","instance":"{}","detail":"{}"}})", id, again.error().detail);
      break;
    }
    if (*again) dirty_.insert(id);  // the new state may need another step (restart)
  } while (dirty_.count(id) && !stopped_);
  dirty_.erase(id);
  converging_.erase(id);
}

asio::awaitable<Result<bool>> InstanceService::step(const std::string& id) {
  auto load = [id](store::Database& db) { return load_instance(db, id); };
  auto loaded = co_await store_.read(std::move(load));
  if (!loaded) co_return fail(loaded.error());
  if (!*loaded) {
    observations_.erase(id);
    refresh_wanted_.erase(id);
    co_return false;
  }
  const Instance& i = **loaded;
  if (is_transitional(i.state)) co_return co_await converge_once(i);
  if (auto seen = observations_.find(id); seen != observations_.end()) {
    Observation o = seen->second;
    observations_.erase(seen);
    // Only a report about this very generation may repair it: a stop, start or restart since
    // the report came in makes it stale.
    if (o.generation == i.generation) {
      if (auto s = co_await apply_observation(i, o); !s) co_return fail(s.error());
    }
    co_return true;
  }
  if (refresh_wanted_.erase(id)) {
    if (auto s = co_await resend_desired(i); !s) co_return fail(s.error());
    co_return false;
  }
  co_return false;
}

asio::awaitable<Status> InstanceService::resend_desired(const Instance& i) {
  // The agent keeps the desired record of stopped instances too (their host ports): tell it
  // in whatever state the instance is in, so store and agent agree.
  if (i.state != S::running && i.state != S::stopped) co_return ok();
  auto observed = co_await ensure(i, i.state);
  if (!observed) co_return fail(observed.error());
  co_return ok();
}

asio::awaitable<Status> InstanceService::apply_observation(const Instance& i, const Observation& o) {
  const ContainerReport& r = o.report;
  if (i.state == S::running && !r.running) {
    const bool exists = r.exists;
    std::string reason = !exists ? "the container vanished" : (r.reason.empty() ? "exited" : r.reason);
    auto now = clock_.now();
    auto ended = r.finished_at;
    auto repair = [i, exists, reason, now, ended](store::Database& db) -> Status {
      auto current = load_instance(db, i.id);
      if (!current) return fail(current.error());
      if (!*current || (*current)->generation != i.generation) return ok();  // moved meanwhile
      Instance next = **current;
      return transition(db, **current, next, Transition{exists ? S::stopped : S::error, reason, ended}, now);
    };
    auto s = co_await store_.write(std::move(repair));
    if (s) spdlog::info(R"({{"event":"instance_{}","instance":"{}","reason":"{}"}})", exists ? "stopped" : "error", i.id, reason);
    co_return s;
  }
  if ((i.state == S::stopped || i.state == S::error) && r.running) {
    // Started behind the platform's back (docker start, an engine restart policy): it would
    // run unbilled, holding no reservation. Put it back as recorded.
    spdlog::warn(R"({{"event":"instance_unrecorded_run","instance":"{}","action":"stopping the container"}})", i.id);
    auto observed = co_await ensure(i, S::stopped);
    if (!observed) co_return fail(observed.error());
    auto report = [i, now = clock_.now()](store::Database& db) -> Status {
      return events::record(db, now, "instance.repaired", i.id, i.owner,
                            "instance " + i.name + " was found running while " + std::string(to_string(i.state)) +
                                "; its container was stopped",
                            json::object{{"name", i.name}, {"state", std::string(to_string(i.state))}});
    };
    co_return co_await store_.write(std::move(report));
  }
  co_return ok();
}

asio::awaitable<Result<bool>> InstanceService::converge_once(const Instance& i) {
  const S from = i.state;
  if (from == S::creating || from == S::starting) {
    // Its data disks first: a container must never start without the disks it was given.
    Status disks_ready = ok();
    if (disks_) disks_ready = co_await disks_->prepare_instance(i.id);
    Result<json::object> observed = fail(ErrorCode::internal, "not sent");
    if (disks_ready) observed = co_await ensure(i, S::running);
    else observed = fail(disks_ready.error());
    if (from == S::creating) fault_point("create.after_engine");
    else fault_point("start.after_engine");
    auto now = clock_.now();
    auto record = [i, from, observed, now](store::Database& db) -> Result<bool> {
      auto current = load_instance(db, i.id);
      if (!current) return fail(current.error());
      if (!*current) return fail(ErrorCode::not_found, "instance vanished");
      // Moved or changed meanwhile (a release, new ports): look again rather than overwrite.
      if ((*current)->generation != i.generation) return true;
      Instance next = **current;
      if (observed && observed_bool(*observed, "running")) {
        if (auto key = observed_string(*observed, "host_key"); !key.empty()) next.host_key = key;
        if (auto ip = observed_string(*observed, "ipv4"); !ip.empty()) next.ipv4 = ip;
        if (auto c = observed_string(*observed, "container_id"); !c.empty()) next.container_id = c;
        if (auto it = observed->find("cpus_capped"); it != observed->end() && it->value().is_bool())
          next.cpus_capped = it->value().as_bool();
        if (auto s = transition(db, **current, next, Transition{S::running, "", {}}, now); !s) return fail(s.error());
        return false;
      }
      // Creation failed: the record says why and holds nothing; a failed start stays stopped.
      std::string why = observed ? "the container did not start" : observed.error().detail;
      const bool creating = from == S::creating;
      Transition t{creating ? S::error : S::stopped, (creating ? "create failed: " : "start failed: ") + why, {}};
      if (auto s = transition(db, **current, next, t, now); !s) return fail(s.error());
      return false;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (from == S::stopping) {
    auto observed = co_await ensure(i, S::stopped);
    if (!observed) co_return fail(observed.error());
    fault_point("stop.before_state_commit");
    auto now = clock_.now();
    auto record = [i, now](store::Database& db) -> Result<bool> {
      auto current = load_instance(db, i.id);
      if (!current) return fail(current.error());
      if (!*current) return fail(ErrorCode::not_found, "instance vanished");
      if ((*current)->generation != i.generation) return true;
      Instance next = **current;
      // A restart keeps its reservation and goes straight on to start.
      const bool restart = next.state_reason == "restart";
      // A stop for a reason (arrears, autostop) keeps it on the stopped instance.
      if (auto s = transition(db, **current, next, Transition{restart ? S::starting : S::stopped,
                                                              restart ? std::string() : next.state_reason, {}},
                              now);
          !s)
        return fail(s.error());
      return restart;
    };
    co_return co_await store_.write(std::move(record));
  }
  if (from == S::releasing) {
    std::string host = i.host_name.value_or(""), kind = "instance.remove";
    json::object desired;
    desired["instance_id"] = i.id;
    desired["generation"] = i.generation;
    auto outcome = co_await send(host, kind, std::move(desired), command_id(i, "remove"));
    if (!outcome) co_return fail(outcome.error());
    if (!outcome->ok) co_return fail(agent::outcome_error(*outcome));
    fault_point("release.before_state_commit");
    auto now = clock_.now();
    auto record = [i, now](store::Database& db) -> Result<bool> {
      auto current = load_instance(db, i.id);
      if (!current) return fail(current.error());
      if (!*current) return fail(ErrorCode::not_found, "instance vanished");
      if ((*current)->generation != i.generation) return true;
      Instance next = **current;
      if (auto s = transition(db, **current, next, Transition{S::released, (*current)->state_reason, {}}, now); !s) return fail(s.error());
      return false;
    };
    auto released = co_await store_.write(std::move(record));
    if (released && disks_) co_await disks_->rearm_recycle_bin();  // delete_on_release disks went to the bin
    co_return released;
  }
  co_return false;
}

asio::awaitable<Status> InstanceService::record_system_disk(std::string host, json::object observed) {
  auto write = [host = std::move(host), observed = std::move(observed), now = clock_.now()](store::Database& db) {
    return record_system_disk_report(db, host, observed, now);
  };
  co_return co_await store_.write(std::move(write));
}

void InstanceService::start_background(std::chrono::seconds period) {
  period_ = period;
  asio::co_spawn(loop_, reconcile(), asio::detached);
}

void InstanceService::stop_background() {
  stopped_ = true;
  reconcile_timer_.cancel();
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
    pulling = pulling || (seen.is_object() && observed_bool(seen.as_object(), "pulling"));
  auto record = [images = *images, found = found->as_object(), host, event_time = clock_.now()](store::Database& db) -> Status {
    for (const auto& img : images) {
      const auto* o = found.if_contains(img.engine_image);
      if (o == nullptr || !o->is_object()) continue;
      const auto& seen_json = o->as_object();
      EngineImage seen;
      seen.present = observed_bool(seen_json, "present");
      if (const auto* s = seen_json.if_contains("size_bytes"); s && s->is_int64()) seen.size_bytes = s->as_int64();
      seen.pulling = observed_bool(seen_json, "pulling");
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
  if (stopped_) return;
  auto next = std::chrono::steady_clock::now() + period_;
  // A change reported while the pass ran may have come after it looked: one more, soon.
  if (pass_again_) next = last_pass_end_ + kNudgeSpacing;
  pass_again_ = false;
  arm_reconcile(next);
}

void InstanceService::arm_reconcile(std::chrono::steady_clock::time_point at) {
  reconcile_timer_.expires_at(at);  // a wait already armed ends with operation_aborted
  reconcile_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) asio::co_spawn(loop_, reconcile(), asio::detached);
  });
}

void InstanceService::nudge(const std::vector<std::string>& instance_ids) {
  if (stopped_) return;
  // The pass looks at every instance (level-triggered): the ids only say why it runs early.
  spdlog::debug(R"({{"event":"reconcile_nudged","instances":{}}})", instance_ids.size());
  if (reconciling_) {
    pass_again_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  const auto at = std::max(now + kNudgeDelay, last_pass_end_ + kNudgeSpacing);
  const auto armed = reconcile_timer_.expiry();
  if (armed > now && armed <= at) return;  // due sooner already
  arm_reconcile(at);
}

asio::awaitable<void> InstanceService::reconcile() {
  if (reconciling_) co_return;
  reconciling_ = true;
  try {
    co_await reconcile_pass();
  } catch (const std::exception& e) {  // never the end of reconciliation
    spdlog::error(R"({{"event":"reconcile_failed","detail":"{}"}})", e.what());
  }
  reconciling_ = false;
  last_pass_end_ = std::chrono::steady_clock::now();
  schedule_reconcile();
}

namespace {
// The engine reports RFC 3339 wall-clock times; runs are accounted on the platform clock.
// The real platform clock is the wall clock: the engine's time is taken as it is, exactly
// (the reconcile pass may take seconds on a loaded host; a mapping against a platform time
// read before the agent answered cut runs short by that much). A test clock is elsewhere in
// time: carry over how long ago the container exited, both clocks read now, together.
std::optional<SysTime> platform_time_of(const std::string& engine_time, const PlatformClock& clock) {
  if (engine_time.empty()) return std::nullopt;
  auto wall = parse_rfc3339(engine_time);
  if (!wall) return std::nullopt;
  if (!clock.test_mode()) return *wall;
  const SysTime platform_now = clock.now();
  auto ago = system_now() - *wall;
  if (ago < std::chrono::seconds(0)) ago = std::chrono::seconds(0);
  return platform_now - std::chrono::duration_cast<SysTime::duration>(ago);
}
}  // namespace

asio::awaitable<void> InstanceService::handle_unknown_container(std::string host, std::string container, bool running) {
  bool ok_stop = true;
  if (running) {
    spdlog::warn(R"({{"event":"unknown_container","host":"{}","container":"{}","action":"stopped"}})", host, container);
    std::string stop_kind = "instance.stop_unknown";
    json::object desired;
    desired["container_id"] = container;
    auto stopped = co_await send(host, stop_kind, std::move(desired));
    ok_stop = stopped && stopped->ok;
  }
  if (reported_unknown_.insert(container).second) {
    // An operator event (no user), once per container and daemon run.
    auto report = [host, container, ok_stop, now = clock_.now()](store::Database& db) -> Status {
      auto id = market::host_id_by_name(db, host);
      if (!id) return fail(id.error());
      std::string resource = id->value_or(host);
      return events::record(db, now, "host.unknown_container", resource, std::nullopt,
                            "container " + container.substr(0, 12) + " on " + host +
                                " carries this installation's label but no instance: " +
                                (ok_stop ? "stopped, not deleted" : "could not be stopped"),
                            json::object{{"host", host}, {"container_id", container}, {"stopped", ok_stop}});
    };
    if (auto s = co_await store_.write(std::move(report)); !s) spdlog::warn("reconcile report: {}", s.error().detail);
  }
  stopping_unknown_.erase(container);
}

asio::awaitable<void> InstanceService::reconcile_pass() {
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
    if (auto s = co_await record_system_disk(host, outcome->observed); !s)
      spdlog::warn("reconcile system disks: {}", s.error().detail);
    const auto* instances = outcome->observed.if_contains("instances");
    if (instances && instances->is_array()) {
      for (const auto& v : instances->as_array()) {
        const auto* o = v.if_object();
        if (o == nullptr || observed_string(*o, "instance_id").empty()) {
          // A reply we cannot read says nothing about any instance: repair nothing from it.
          spdlog::warn(R"({{"event":"agent_reply_malformed","host":"{}","kind":"instance.status"}})", host);
          complete = false;
          continue;
        }
        ContainerReport r;
        r.exists = observed_bool(*o, "exists");
        r.running = observed_bool(*o, "running");
        r.reason = observed_string(*o, "state_reason");
        r.finished_at = platform_time_of(observed_string(*o, "finished_at"), clock_);
        seen[observed_string(*o, "instance_id")] = r;
      }
    }
    const auto* unknown = outcome->observed.if_contains("unknown_containers");
    if (unknown && unknown->is_array()) {
      for (const auto& v : unknown->as_array()) {
        const auto* o = v.if_object();
        if (o == nullptr) continue;
        std::string container = observed_string(*o, "container_id");
        const bool running = observed_bool(*o, "running");
        // Ours by label but unrecorded: stopped and reported (once), never deleted.
        if (!running && reported_unknown_.contains(container)) continue;
        // Beside the pass, not in it: a stop waits out the container's grace period (10 s for
        // one that ignores SIGTERM), and the instances' repairs must not wait for it.
        if (!stopping_unknown_.insert(container).second) continue;
        asio::co_spawn(loop_, handle_unknown_container(host, container, running), asio::detached);
      }
    }
  }
  if (live) {
    for (const auto& i : *live) {
      if (is_transitional(i.state)) {
        kick(i.id);  // a crash left it half-way: finish the step
        continue;
      }
      if (!complete) continue;
      auto it = seen.find(i.id);
      ContainerReport r = it != seen.end() ? it->second : ContainerReport{};
      const bool needs_repair = (i.state == S::running && !r.running) ||
                                ((i.state == S::stopped || i.state == S::error) && r.running);
      if (!needs_repair) continue;
      // Repairs go through the instance's queue, behind whatever it is doing now, and apply
      // only if the instance is still at the generation this report describes.
      observations_[i.id] = Observation{i.generation, r};
      kick(i.id);
    }
  }
  // Reservations that no live instance explains are freed.
  auto free_orphans = [now = clock_.now()](store::Database& db) -> Status {
    auto holders = market::reservation_holders(db);
    if (!holders) return fail(holders.error());
    for (const auto& h : *holders) {
      auto loaded = load_instance(db, h);
      if (!loaded) return fail(loaded.error());
      const auto& instance = *loaded;
      // A subscription stopped inside its paid term keeps its GPUs (transition.cpp): that
      // reservation is explained too.
      const bool kept_by_subscription = instance &&
                                        (instance->state == S::stopping || instance->state == S::stopped) &&
                                        instance->expires_at && instance->in_paid_term(now);
      if (!instance || (!holds_reservation(instance->state) && !kept_by_subscription)) {
        if (auto r = market::release_reservation(db, h, now); !r) return fail(r.error());
        spdlog::warn(R"({{"event":"reservation_freed","holder":"{}","state":"{}"}})", h,
                     instance ? std::string(to_string(instance->state)) : std::string());
      }
    }
    return ok();
  };
  if (auto s = co_await store_.write(std::move(free_orphans)); !s) spdlog::warn("reconcile reservations: {}", s.error().detail);
  co_await refresh_images();
}

}  // namespace gpucloud::instances
