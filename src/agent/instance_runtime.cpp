#include "agent/instance_runtime.h"

// The instance runtime's construction, command dispatch, start / re-attach, the state
// directory's writes and command fencing. The rest is in instance_runtime_*.cpp by concern
// (docs/architecture.md lists them); what they share is in instance_runtime_internal.h.
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disk_runtime.h"
#include "agent/host_key.h"
#include "agent/image_saver.h"
#include "agent/instance_runtime_internal.h"
#include "agent/local_agent.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
// (runtime_detail's helpers are named in full here: this file is compiled in a unity batch,
// where a using-directive would reach the files after it.)

namespace {

bool valid_installation_id(std::string_view id) {
  return id.size() <= 40 && is_valid_instance_id(id);
}

}  // namespace

// ---- construction ------------------------------------------------------------------------

InstanceRuntime::InstanceRuntime(net::any_io_executor loop, std::string installation_id,
                                 std::string state_dir, std::unique_ptr<RuntimeDriver> driver,
                                 std::string init_script_path, std::string firewall_table)
    : InstanceRuntime(std::move(loop), std::move(installation_id), std::move(state_dir),
                      std::move(driver), std::move(init_script_path), std::move(firewall_table),
                      Options{}) {}

InstanceRuntime::InstanceRuntime(net::any_io_executor loop, std::string installation_id,
                                 std::string state_dir, std::unique_ptr<RuntimeDriver> driver,
                                 std::string init_script_path, std::string firewall_table,
                                 Options options)
    : strand_(net::make_strand(loop)),
      installation_id_(std::move(installation_id)),
      network_name_("gpucloud-" + installation_id_),
      // Absolute: the config directory is a bind-mount source.
      store_(state_dir.empty() ? std::string() : fs::absolute(state_dir).lexically_normal().string()),
      driver_(std::move(driver)),
      init_script_path_(std::move(init_script_path)),
      firewall_(std::move(firewall_table)),
      options_(options),
      start_lock_(std::make_shared<AsyncLock>()),
      network_lock_(std::make_shared<AsyncLock>()),
      images_(std::make_unique<ImageSaver>(*driver_, installation_id_)) {
  if (options_.state_write_observer) store_.set_write_observer(options_.state_write_observer);
}

InstanceRuntime::~InstanceRuntime() {
  firewall_thread_.stop();
  firewall_thread_.join();
  state_thread_.join();  // a write already asked for still lands (its waiter is gone)
}

void InstanceRuntime::register_handlers(LocalAgent& agent) {
  for (const char* kind : {"instance.ensure", "instance.remove", "instance.status",
                           "instance.stop_unknown", "instance.exec", "image.inspect", "image.save",
                           "image.remove"}) {
    agent.add_command_handler(kind, [this](const Command& command) { return handle(command); });
  }
}

awaitable<Result<CommandOutcome>> InstanceRuntime::handle(Command command) {
  // Every piece of this runtime's state is touched only on its strand.
  co_return co_await net::co_spawn(strand_, dispatch(std::move(command)), use_awaitable);
}

awaitable<Result<CommandOutcome>> InstanceRuntime::dispatch(Command command) {
  Result<json::object> observed = fail(ErrorCode::internal, "not run");
  std::string exception_text;
  try {
    if (command.kind == "instance.ensure") {
      observed = co_await ensure(command.desired);
    } else if (command.kind == "instance.remove") {
      observed = co_await remove(command.desired);
    } else if (command.kind == "instance.status") {
      observed = co_await status();
    } else if (command.kind == "instance.stop_unknown") {
      observed = co_await stop_unknown(command.desired);
    } else if (command.kind == "instance.exec") {
      observed = co_await exec(command.desired);
    } else if (command.kind == "image.inspect") {
      observed = co_await inspect_images(command.desired);
    } else if (command.kind == "image.save") {
      observed = co_await save_image(command.desired);
    } else if (command.kind == "image.remove") {
      observed = co_await images_->remove(command.desired);
    } else {
      observed = invalid("unknown command " + command.kind);
    }
  } catch (const std::exception& e) {
    exception_text = e.what();
  } catch (...) {
    exception_text = "unknown exception";
  }
  if (!exception_text.empty()) {
    observed = fail(ErrorCode::internal, command.kind + ": " + exception_text);
  }
  if (!observed) {
    spdlog::warn(R"({{"event":"instance_command_failed","kind":{},"command":{},"error":{}}})",
                 q(command.kind), q(command.id), runtime_detail::error_text(observed.error()));
    co_return fail(std::move(observed.error()));
  }
  CommandOutcome outcome;
  outcome.command_id = command.id;
  outcome.ok = true;
  outcome.observed = std::move(*observed);
  co_return outcome;
}

// ---- start / re-attach -------------------------------------------------------------------

awaitable<Status> InstanceRuntime::ensure_started() {
  if (started_) co_return ok();
  // A standby replica's runtime (issue 27): the leader may be using the same agent directory.
  if (start_held_)
    co_return fail(ErrorCode::unavailable, "this control-plane replica stands by: the leader serves the in-process hosts");
  co_await start_lock_->lock();
  runtime_detail::Unlocker guard(*start_lock_);
  co_return co_await start_locked();
}

awaitable<Status> InstanceRuntime::start_locked() {
  if (started_) co_return ok();
  if (!valid_installation_id(installation_id_)) {
    co_return invalid("installation id must be 1-40 of [A-Za-z0-9_.-], starting with a letter or digit");
  }
  if (!init_script_path_.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(init_script_path_, ec)) {
      co_return fail(ErrorCode::unavailable, "instance init script not found at " + init_script_path_);
    }
  }
  struct Loaded {
    std::optional<NetworkRecord> network;
    std::vector<InstanceRecord> records;
    std::vector<std::string> problems;
  };
  auto load = [this]() -> Result<Loaded> {
    Loaded out;
    if (auto s = store_.prepare(); !s) return fail(std::move(s.error()));
    auto network = store_.load_network();
    if (!network) return fail(std::move(network.error()));
    out.network = std::move(*network);
    auto records = store_.load_instances(&out.problems);
    if (!records) return fail(std::move(records.error()));
    out.records = std::move(*records);
    return out;
  };
  auto loaded_state = co_await offload<Result<Loaded>>(state_thread_.get_executor(), std::move(load));
  if (!loaded_state) co_return fail(std::move(loaded_state.error()));
  network_ = std::move(loaded_state->network);
  std::vector<std::string> problems = std::move(loaded_state->problems);
  auto records = &loaded_state->records;
  for (const auto& p : problems) {
    spdlog::warn(R"({{"event":"instance_record_unreadable","problem":{}}})", q(p));
  }
  load_problems_ = std::move(problems);
  const std::size_t loaded = records->size();
  for (auto& record : *records) {
    const std::string id = record.desired.instance_id;
    instance_slot(id).record = std::move(record);
  }
  started_ = true;
  spdlog::info(R"({{"event":"instance_runtime_loaded","installation":"{}","instances":{}}})",
               installation_id_, loaded);
  co_return ok();
}

awaitable<Status> InstanceRuntime::start() {
  start_held_ = false;
  co_return co_await net::co_spawn(strand_, start_on_strand(), use_awaitable);
}

awaitable<Status> InstanceRuntime::start_on_strand() {
  if (auto s = co_await ensure_started(); !s) co_return s;
  co_await detect_system_disk_limit();
  if (auto s = co_await ensure_network(); !s) co_return s;
  // Re-attach: find each recorded container again (only inspects; nothing is started or
  // stopped) and remember a changed id.
  std::map<std::string, DiskRuntime::RunningInstance> with_disks;  // running containers' data disks
  for (auto& [id, slot] : instances_) {
    if (!slot->record) continue;
    co_await slot->lock->lock();
    runtime_detail::Unlocker guard(*slot->lock);
    if (!slot->record) continue;
    auto found = co_await driver_->recover(driver_state_for(*slot->record));
    if (!found || (found->exists && found->running)) {
      // Unseen counts as running: its disks must not be taken for stale mounts.
      const auto& disks = slot->record->created_with.data_disks;
      if (!disks.empty()) with_disks[id] = DiskRuntime::RunningInstance{slot->record->desired.host, disks};
    }
    if (!found) {
      spdlog::warn(R"({{"event":"instance_reattach_failed","instance":"{}","error":{}}})", id,
                   runtime_detail::error_text(found.error()));
      continue;
    }
    if (!found->exists) {
      spdlog::warn(R"({{"event":"instance_container_missing","instance":"{}"}})", id);
      continue;
    }
    if (found->id != slot->record->container_id) {
      InstanceRecord updated = *slot->record;
      updated.container_id = found->id;
      updated.driver_state = encode_driver_state(driver_state_for(updated));
      if (auto s = co_await save_record(updated); s) slot->record = std::move(updated);
    }
  }
  // System disk filesystems whose containers are gone (a crash between a removal and the
  // file's deletion, or during a make).
  if (options_.layer_filesystems) {
    std::map<std::string, std::string> ours{{std::string(kInstallationLabel), installation_id_}};
    auto all = co_await driver_->list(std::move(ours));
    if (all) {
      std::set<std::string> existing;
      for (const auto& c : *all) existing.insert(c.id);
      auto sweep = [filesystems = options_.layer_filesystems, existing]() { return filesystems->sweep(existing); };
      if (auto s = co_await offload<Status>(layer_fs_pool_.get_executor(), std::move(sweep)); !s)
        spdlog::warn(R"({{"event":"system_disk_filesystems_not_swept","error":{}}})", runtime_detail::error_text(s.error()));
    }
  }
  // Disks of running instances stay mounted; every other mount of ours goes.
  if (disks_) co_await disks_->adopt(std::move(with_disks));
  // Network holders: the records' stay theirs, other running ones fill the pool, the rest go.
  if (auto s = co_await adopt_holders(); !s) {
    spdlog::warn(R"({{"event":"network_holders_not_adopted","error":{}}})", runtime_detail::error_text(s.error()));
  }
  schedule_refill();
  // What saves of an earlier run left (one killed at any step): raw copies hold secrets.
  if (saves_in_flight_ == 0) {
    if (auto s = co_await images_->sweep(); !s)
      spdlog::warn(R"({{"event":"image_save_leftovers","error":{}}})", runtime_detail::error_text(s.error()));
  }
  co_return co_await apply_firewall();
}

// ---- the state directory, off the event loop ------------------------------------------------
// Every write is fsynced (file and directory): milliseconds on a busy disk. They run on the
// state thread, one at a time in the order asked, while the strand waits for each.

awaitable<Status> InstanceRuntime::save_record(InstanceRecord record) {
  auto job = [this, record = std::move(record)]() -> Status { return store_.save_instance(record); };
  co_return co_await offload<Status>(state_thread_.get_executor(), std::move(job));
}

awaitable<Status> InstanceRuntime::drop_record(std::string id) {
  auto job = [this, id = std::move(id)]() -> Status { return store_.remove_instance(id); };
  co_return co_await offload<Status>(state_thread_.get_executor(), std::move(job));
}

awaitable<Status> InstanceRuntime::save_network_record(NetworkRecord network) {
  auto job = [this, network = std::move(network)]() -> Status { return store_.save_network(network); };
  co_return co_await offload<Status>(state_thread_.get_executor(), std::move(job));
}

awaitable<Result<bool>> InstanceRuntime::write_init_config(std::string id, std::string authorized_keys,
                                                           std::optional<std::string> password_hash) {
  auto job = [this, id = std::move(id), keys = std::move(authorized_keys),
              hash = std::move(password_hash)]() -> Result<bool> { return store_.write_config(id, keys, hash); };
  co_return co_await offload<Result<bool>>(state_thread_.get_executor(), std::move(job));
}

awaitable<Result<std::string>> InstanceRuntime::instance_host_key(std::string id, std::string comment, bool make) {
  auto job = [dir = store_.config_dir(id), comment = std::move(comment), make]() -> Result<std::string> {
    return make ? ensure_config_host_key(dir, comment) : read_config_host_key(dir);
  };
  co_return co_await offload<Result<std::string>>(state_thread_.get_executor(), std::move(job));
}

awaitable<void> InstanceRuntime::forget_record(Instance& slot, std::string id) {
  slot.record.reset();
  if (auto s = co_await drop_record(id); !s) {
    spdlog::warn(R"({{"event":"instance_revert_failed","instance":"{}","error":{}}})", id,
                 runtime_detail::error_text(s.error()));
  }
}

awaitable<void> InstanceRuntime::restore_record(Instance& slot, InstanceRecord old) {
  slot.record = old;
  (void)co_await save_record(std::move(old));
}

// ---- command fencing ---------------------------------------------------------------------

awaitable<Status> InstanceRuntime::check_fence(Instance& slot, std::string id, std::int64_t generation) {
  if (generation <= 0) co_return ok();
  std::int64_t applied = 0;
  if (slot.record) {
    applied = slot.record->generation;
  } else {
    auto read = [this, id]() { return store_.load_removed_generation(id); };
    auto removed = co_await offload<Result<std::int64_t>>(state_thread_.get_executor(), std::move(read));
    if (!removed) co_return fail(std::move(removed.error()));
    applied = *removed;
  }
  co_return check_generation(id, applied, generation);
}

// ---- small helpers ---------------------------------------------------------------------

std::string InstanceRuntime::container_name(const std::string& instance_id) const {
  return "gpucloud-" + installation_id_ + "-" + instance_id;
}

DriverState InstanceRuntime::driver_state_for(const InstanceRecord& record) const {
  DriverState state;
  state.container_id = record.container_id;
  state.container_name = container_name(record.desired.instance_id);
  state.labels = {{std::string(kInstallationLabel), installation_id_},
                  {std::string(kInstanceLabel), record.desired.instance_id}};
  return state;
}

InstanceRuntime::Instance& InstanceRuntime::instance_slot(const std::string& instance_id) {
  auto& slot = instances_[instance_id];
  if (!slot) slot = std::make_unique<Instance>();
  return *slot;
}

awaitable<void> InstanceRuntime::remove_container_quietly(std::string container_id) {
  auto removed = co_await remove_container(container_id);
  if (!removed) {
    spdlog::warn(R"({{"event":"instance_revert_failed","container":"{}","error":{}}})", container_id,
                 runtime_detail::error_text(removed.error()));
  }
}

awaitable<void> InstanceRuntime::stop_container_quietly(std::string container_id) {
  auto stopped = co_await driver_->stop(container_id, options_.stop_grace);
  if (!stopped) {
    spdlog::warn(R"({{"event":"instance_revert_failed","container":"{}","error":{}}})", container_id,
                 runtime_detail::error_text(stopped.error()));
  }
}

}  // namespace gpucloud::agent
