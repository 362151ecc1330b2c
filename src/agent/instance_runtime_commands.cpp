#include "agent/instance_runtime.h"

// The commands besides instance.ensure: instance.remove, instance.status,
// instance.stop_unknown, instance.exec, the terminal, image.inspect (with background pulls)
// and image.save.
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disk_runtime.h"
#include "agent/image_saver.h"
#include "agent/instance_connection.h"
#include "agent/instance_runtime_internal.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

namespace {

constexpr std::chrono::minutes kPullTimeout{30};
constexpr std::chrono::minutes kPullRetry{10};  // after a failed pull

std::string state_reason(const ContainerStatus& c, const std::string& desired_state) {
  if (!c.exists) return "container missing";
  if (c.running) return "running";
  if (c.oom_killed) return "killed (out of memory?)";
  if (desired_state == "stopped") return "stopped";
  if (c.state == "created") return "created, never started";
  // 137 = SIGKILL; the kernel's OOM killer is the usual sender (OOMKilled is unreliable).
  if (c.exit_code == 137) return "killed (out of memory?)";
  return "exited " + std::to_string(c.exit_code);
}

}  // namespace

// ---- instance.remove ---------------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::remove(json::object desired) {
  const auto* idv = desired.if_contains("instance_id");
  if (!idv || !idv->is_string() || !is_valid_instance_id(idv->as_string())) {
    co_return invalid("instance_id is required: 1-64 of [A-Za-z0-9_.-]");
  }
  const std::string id(idv->as_string());
  auto generation = command_generation(desired);
  if (!generation) co_return fail(std::move(generation.error()));
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  Instance& slot = instance_slot(id);
  co_await slot.lock->lock();
  Unlocker guard(*slot.lock);
  if (auto s = co_await check_fence(slot, id, *generation); !s) co_return fail(std::move(s.error()));
  const std::int64_t removed_at = std::max(*generation, slot.record ? slot.record->generation : 0);

  json::array removed;
  if (slot.record && !slot.record->container_id.empty()) {
    if (auto s = co_await remove_container(slot.record->container_id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(slot.record->container_id);
  }
  // Any other container of this instance (a crash between create and record, a copy made by
  // hand with our labels).
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_},
                                            {std::string(kInstanceLabel), id}};
  auto others = co_await driver_->list(std::move(filter));
  if (!others) co_return fail(std::move(others.error()));
  for (const auto& c : *others) {
    if (auto s = co_await remove_container(c.id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(c.id);
  }
  auto by_name = co_await driver_->inspect(container_name(id));
  if (by_name && by_name->exists && by_name->name == container_name(id)) {
    if (auto s = co_await remove_container(by_name->id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(by_name->id);
  }

  // Then its network holder (the address returns to the pool with the record).
  if (slot.record && !slot.record->holder.id.empty()) {
    if (auto s = co_await driver_->remove(slot.record->holder.id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(slot.record->holder.id);
  }

  // Its containers are gone: so is its hold on its data disks (they are never deleted here).
  if (disks_) co_await disks_->detach(id);

  const bool had_record = slot.record.has_value();
  std::optional<InstanceRecord> old = std::move(slot.record);
  slot.record.reset();
  if (auto s = co_await apply_firewall(); !s) {
    slot.record = std::move(old);  // the record stays until its ports are gone
    co_return fail(std::move(s.error()));
  }
  // The system disk's images from rebuilds, newest first (each is the parent of the next).
  if (old) {
    for (auto it = old->system_images.rbegin(); it != old->system_images.rend(); ++it) {
      if (auto s = co_await driver_->remove_image(*it); !s)
        spdlog::warn(R"({{"event":"system_image_not_removed","instance":"{}","image":{},"error":{}}})", id, q(*it),
                     error_text(s.error()));
    }
  }
  // Kept after the record is gone: a stale ensure must not bring the instance back.
  if (removed_at > 0) {
    auto tombstone = [this, id, removed_at]() { return store_.save_removed_generation(id, removed_at); };
    if (auto s = co_await offload<Status>(state_thread_.get_executor(), std::move(tombstone)); !s) {
      co_return fail(std::move(s.error()));
    }
  }
  if (auto s = co_await drop_record(id); !s) co_return fail(std::move(s.error()));
  spdlog::info(R"({{"event":"instance_removed","instance":"{}","containers":{}}})", id, removed.size());
  co_return json::object{{"instance_id", id},
                         {"existed", had_record || !removed.empty()},
                         {"removed_containers", std::move(removed)}};
}

// ---- instance.status ---------------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::status() {
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_}};
  auto listed = co_await driver_->list(filter);
  if (!listed) co_return fail(std::move(listed.error()));
  // Network holders first: a running instance whose holder is gone, stopped or restarted
  // (another pid than it joined) has lost its network without the engine saying so. It is
  // repaired now (holder started, the instance restarted into it) and reported after that.
  {
    std::map<std::string, const ContainerStatus*> by_id;
    for (const auto& c : *listed) by_id[c.id] = &c;
    std::vector<std::string> broken;
    for (const auto& [id, slot] : instances_) {
      if (!slot->record || slot->record->holder.id.empty() || slot->record->desired.state != "running") continue;
      const auto container = by_id.find(slot->record->container_id);
      if (container == by_id.end() || !container->second->running) continue;
      const auto holder = by_id.find(slot->record->holder.id);
      if (holder == by_id.end() || !holder->second->running || holder->second->pid != slot->record->holder.pid)
        broken.push_back(id);
    }
    for (const auto& id : broken) {
      if (auto s = co_await repair_holder(id); !s)
        spdlog::warn(R"({{"event":"network_holder_repair_failed","instance":"{}","error":{}}})", id, error_text(s.error()));
    }
    if (!broken.empty()) {
      listed = co_await driver_->list(filter);
      if (!listed) co_return fail(std::move(listed.error()));
    }
    if (auto s = co_await adopt_holders(); !s) co_return fail(std::move(s.error()));
    schedule_refill();
    // Holders are no instance's container and not unknown ones either.
    std::erase_if(*listed, [](const ContainerStatus& c) { return c.labels.contains(std::string(kNetworkHolderLabel)); });
  }
  std::vector<bool> matched(listed->size(), false);

  json::array instances;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record) continue;
    const InstanceRecord& r = *slot->record;
    const std::string name = container_name(id);
    ContainerStatus c;
    c.exists = false;
    for (std::size_t i = 0; i < listed->size(); ++i) {
      const auto& candidate = (*listed)[i];
      if ((!r.container_id.empty() && candidate.id == r.container_id) || candidate.name == name) {
        matched[i] = true;
        if (!c.exists || candidate.id == r.container_id) c = candidate;
      }
    }
    instances.push_back(json::object{
        {"instance_id", id},
        {"container_id", c.exists ? c.id : r.container_id},
        {"exists", c.exists},
        {"running", c.exists && c.running},
        {"state", c.exists ? c.state : std::string("missing")},
        {"exit_code", c.exists ? c.exit_code : 0},
        {"oom_killed", c.exists && c.oom_killed},
        {"started_at", c.started_at},
        {"finished_at", c.finished_at},
        {"desired_state", r.desired.state},
        {"ipv4", r.ipv4},
        {"host_key", nullable(r.host_key)},
        {"state_reason", state_reason(c, r.desired.state)},
        {"system_disk_gib", r.desired.system_disk_gib},
    });
    if (c.exists) {
      auto used = co_await driver_->system_disk_used(c.id);
      instances.back().as_object()["system_disk_used_bytes"] = used ? json::value(*used) : json::value(nullptr);
    }
  }
  json::array unknown;
  for (std::size_t i = 0; i < listed->size(); ++i) {
    if (matched[i]) continue;
    const auto& c = (*listed)[i];
    auto label = c.labels.find(std::string(kInstanceLabel));
    unknown.push_back(json::object{
        {"container_id", c.id},
        {"name", c.name},
        {"instance_label", label == c.labels.end() ? json::value(nullptr) : json::value(label->second)},
        {"running", c.running},
        {"state", c.state},
        {"exit_code", c.exit_code},
    });
  }
  co_await detect_system_disk_limit();
  json::object system_disk{{"enforced", system_disk_ && system_disk_->enforced},
                           {"how", system_disk_ ? system_disk_->how() : std::string("none")},
                           {"reason", system_disk_ ? system_disk_->reason : std::string("the engine is not reachable")},
                           {"storage_driver", storage_driver_}};
  co_return json::object{{"instances", std::move(instances)},
                         {"unknown_containers", std::move(unknown)},
                         {"system_disk", std::move(system_disk)}};
}

// ---- instance.stop_unknown ---------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::stop_unknown(json::object desired) {
  const auto* idv = desired.if_contains("container_id");
  if (!idv || !idv->is_string() || idv->as_string().empty() || idv->as_string().size() > 128) {
    co_return invalid("container_id is required");
  }
  const std::string requested(idv->as_string());
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  auto c = co_await driver_->inspect(requested);
  if (!c) co_return fail(std::move(c.error()));
  if (!c->exists) co_return fail(ErrorCode::not_found, "no container " + requested);
  auto label = c->labels.find(std::string(kInstallationLabel));
  if (label == c->labels.end() || label->second != installation_id_) {
    co_return fail(ErrorCode::forbidden, "container " + requested + " is not one of installation " + installation_id_ + "'s");
  }
  for (const auto& [id, slot] : instances_) {
    if (slot->record && (slot->record->container_id == c->id || container_name(id) == c->name)) {
      co_return fail(ErrorCode::conflict, "container " + requested + " is instance " + id +
                                              "'s; it is managed with instance.ensure");
    }
  }
  if (c->running) {
    if (auto s = co_await driver_->stop(c->id, options_.stop_grace); !s) co_return fail(std::move(s.error()));
  }
  auto after = co_await driver_->inspect(c->id);
  if (!after) co_return fail(std::move(after.error()));
  spdlog::warn(R"({{"event":"unknown_container_stopped","container":"{}","name":{}}})", c->id, q(c->name));
  co_return json::object{{"container_id", c->id},
                         {"name", c->name},
                         {"exists", after->exists},
                         {"running", after->exists && after->running},
                         {"state", after->state},
                         {"exit_code", after->exit_code}};
}

// ---- instance.exec -----------------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::exec(json::object desired) {
  const auto* idv = desired.if_contains("instance_id");
  if (!idv || !idv->is_string() || !is_valid_instance_id(idv->as_string())) {
    co_return invalid("instance_id is required");
  }
  const std::string id(idv->as_string());
  std::vector<std::string> argv;
  const auto* av = desired.if_contains("argv");
  if (!av || !av->is_array() || av->as_array().empty()) co_return invalid("argv must be a non-empty array of strings");
  for (const auto& a : av->as_array()) {
    if (!a.is_string()) co_return invalid("argv must be a non-empty array of strings");
    argv.emplace_back(a.as_string());
  }
  std::chrono::milliseconds timeout = options_.exec_timeout;
  if (const auto* t = desired.if_contains("timeout_ms"); t && !t->is_null()) {
    if (!t->is_int64() || t->as_int64() < 1 || t->as_int64() > 3'600'000) {
      co_return invalid("timeout_ms must be 1-3600000");
    }
    timeout = std::chrono::milliseconds(t->as_int64());
  }
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  auto it = instances_.find(id);
  if (it == instances_.end() || !it->second->record) co_return fail(ErrorCode::not_found, "no instance " + id);
  std::string container_id = it->second->record->container_id;
  if (container_id.empty()) co_return fail(ErrorCode::conflict, "instance " + id + " has no container yet");
  auto res = co_await driver_->exec_run(std::move(container_id), std::move(argv), timeout);
  if (!res) co_return fail(std::move(res.error()));
  co_return json::object{{"exit_code", res->exit_code}, {"stdout", res->out}, {"stderr", res->err}};
}

// ---- the terminal ------------------------------------------------------------------------

awaitable<Result<std::unique_ptr<TerminalSession>>> InstanceRuntime::open_terminal(std::string instance_id, int rows,
                                                                                 int cols) {
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  auto it = instances_.find(instance_id);
  if (it == instances_.end() || !it->second->record || it->second->record->container_id.empty())
    co_return fail(ErrorCode::not_found, "instance " + instance_id + " has no container on this host");
  std::string container = it->second->record->container_id;
  // bash when the image has it, else sh; a login shell so the profile (CUDA paths) applies.
  std::vector<std::string> argv{"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"};
  std::vector<std::string> env{"TERM=xterm-256color", "HOME=/root"};
  co_return co_await driver_->exec_tty(container, std::move(argv), rows, cols, std::move(env));
}

// ---- connections for the proxies ----------------------------------------------------------

awaitable<Result<std::unique_ptr<TerminalSession>>> InstanceRuntime::open_connection(std::string instance_id, int port) {
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  auto it = instances_.find(instance_id);
  if (it == instances_.end() || !it->second->record || it->second->record->container_id.empty())
    co_return fail(ErrorCode::not_found, "instance " + instance_id + " has no container on this host");
  std::string container = it->second->record->container_id;
  std::string ipv4 = it->second->record->ipv4;
  auto status = co_await driver_->inspect(container);
  if (!status) co_return fail(std::move(status.error()));
  if (!status->exists || !status->running || status->pid <= 0)
    co_return fail(ErrorCode::conflict, "instance " + instance_id + " is not running on this host");
  if (ipv4.empty()) ipv4 = status->ipv4;
  auto executor = co_await net::this_coro::executor;
  co_return co_await connect_to_instance(executor, connection_thread_, status->pid, std::move(ipv4), port,
                                         std::chrono::seconds(5));
}

// ---- image.inspect -----------------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::inspect_images(json::object desired) {
  const auto* refs = desired.if_contains("images");
  if (refs == nullptr || !refs->is_array()) co_return invalid("image.inspect: images must be a list of references");
  // Only the references listed under "pull" may be fetched from a registry (never, say, the
  // locally built base image, whose name someone else could publish).
  std::set<std::string> pullable;
  if (const auto* pull = desired.if_contains("pull"); pull && pull->is_array())
    for (const auto& ref : pull->as_array())
      if (ref.is_string()) pullable.emplace(ref.as_string());
  json::object found;
  for (const auto& ref : refs->as_array()) {
    if (!ref.is_string()) co_return invalid("image.inspect: images must be a list of references");
    std::string name(ref.as_string());
    auto info = co_await driver_->image_inspect(name);
    if (!info) co_return fail(std::move(info.error()));
    json::object o{{"present", info->has_value()}};
    if (*info) {
      o["id"] = (*info)->id;
      o["size_bytes"] = (*info)->size_bytes;
      pulls_.erase(name);
    } else if (pullable.contains(name)) {
      PullState& p = pulls_[name];
      auto now = std::chrono::steady_clock::now();
      if (!p.running && (p.last_try == std::chrono::steady_clock::time_point{} || now - p.last_try > kPullRetry)) {
        p.running = true;
        p.last_try = now;
        net::co_spawn(strand_, pull_one(name), net::detached);
      }
      o["pulling"] = p.running;
      if (!p.error.empty()) o["pull_error"] = p.error;
    }
    found[name] = std::move(o);
  }
  co_return json::object{{"images", std::move(found)}};
}

awaitable<void> InstanceRuntime::pull_one(std::string ref) {
  spdlog::info(R"({{"event":"image_pull_started","image":{}}})", q(ref));
  auto pulled = co_await driver_->pull_image(ref, kPullTimeout);
  PullState& p = pulls_[ref];
  p.running = false;
  p.error = pulled ? "" : pulled.error().detail;
  if (pulled) spdlog::info(R"({{"event":"image_pulled","image":{}}})", q(ref));
  else spdlog::warn(R"({{"event":"image_pull_failed","image":{},"error":{}}})", q(ref), q(p.error));
}

// ---- image.save --------------------------------------------------------------------------

awaitable<Result<json::object>> InstanceRuntime::save_image(json::object desired) {
  auto request = save_request_from_json(desired, installation_id_);
  if (!request) co_return fail(std::move(request.error()));
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  const std::string id = request->instance_id;
  Instance& slot = instance_slot(id);
  // Under the instance's lock: no stop, start or rebuild moves the container meanwhile.
  co_await slot.lock->lock();
  Unlocker guard(*slot.lock);
  if (!slot.record || slot.record->container_id.empty())
    co_return fail(ErrorCode::not_found, "instance " + id + " has no container on this host");
  if (request->base.empty()) request->base = slot.record->desired.image;
  std::string container = slot.record->container_id;
  ++saves_in_flight_;
  auto saved = co_await images_->save(std::move(container), std::move(*request));
  --saves_in_flight_;
  co_return saved;
}

}  // namespace gpucloud::agent
