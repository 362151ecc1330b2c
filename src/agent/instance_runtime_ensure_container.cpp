#include "agent/instance_runtime.h"

// instance.ensure's container steps (5-7; the command and steps 0-4 are in
// instance_runtime_ensure.cpp): the holder running, a stopped container resized or rebuilt
// when it no longer fits, data disks attached, the container created, started or stopped,
// then what the engine says, the host key, sshd listening, and the table.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disk_runtime.h"
#include "agent/instance_connection.h"
#include "agent/instance_runtime_internal.h"
#include "core/fault_points.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
using net::awaitable;
using net::use_awaitable;
using namespace boost::asio::experimental::awaitable_operators;
using namespace runtime_detail;

namespace {

constexpr int kHostKeyLogTail = 400;

}  // namespace

// Before the container is made or started: its holder runs, and a stopped container made for
// another size is resized, one made for another name, GPUs or data disks rebuilt.
awaitable<Status> InstanceRuntime::ensure_fits_spec(EnsureRun& run) {
  const InstanceSpec& spec = run.spec;
  const std::string& id = run.id;
  Instance& slot = run.slot;
  InstanceRecord& record = run.record;
  ContainerStatus& container = run.container;
  // A new name on a holder is set in the running container at once (the container is still
  // rebuilt at its next start, as any renamed one: created_with keeps the old name).
  run.renamed = run.on_holder && !record.created_with.hostname.empty() && record.created_with.hostname != spec.name;
  // The holder runs before its instance's container is made or started; one that died or
  // restarted under a running container took that container's network with it (restarted
  // below), and one made again (the old one was gone) needs the container made again.
  if (run.on_holder && (spec.state == "running" || !container.exists)) {
    const std::string holder_before = record.holder.id;
    auto h = co_await ensure_holder(record, spec.image);
    if (!h) co_return fail(std::move(h.error()));
    run.holder_now = std::move(*h);
    if (record.holder.id != holder_before) {
      if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
      slot.record = record;
    }
    run.holder_moved = container.exists && container.network_mode != "container:" + record.holder.id;
    if (container.exists && container.running && (run.holder_moved || run.holder_now->pid != record.holder.pid)) {
      spdlog::warn(R"({{"event":"network_holder_repair","instance":"{}","holder":"{}","action":"restarting the instance"}})",
                   id, record.holder.name);
      if (auto s = co_await driver_->stop(record.container_id, options_.stop_grace); !s) co_return fail(std::move(s.error()));
      container.running = false;
    }
  }
  const auto drift_before = drift_of(record.created_with, spec);
  Rebuild rebuild = Rebuild::none;
  if (container.exists && !container.running && spec.state == "running") {
    auto drift_now = drift_before;
    if (run.holder_moved) drift_now.emplace_back("gpu_uuids");  // made again, like a GPU change
    rebuild = rebuild_for(drift_now, 0, options_.max_system_image_layers);
    if (rebuild == Rebuild::commit) {
      const int layers = co_await system_image_layers(record, spec);
      rebuild = rebuild_for(drift_now, layers, options_.max_system_image_layers);
    }
  }
  if (rebuild == Rebuild::update) {
    // Another size only: the engine changes the limits of the stopped container in place,
    // so no image layer is added and the container (and its id) stays.
    auto applied = co_await driver_->update(record.container_id, spec.cpu, spec.memory_gib * kGiB);
    if (!applied) co_return fail(std::move(applied.error()));
    record.created_with.cpu = spec.cpu;
    record.created_with.memory_gib = spec.memory_gib;
    if (run.old_record) run.old_record->created_with = record.created_with;  // the container has them even if a later step fails
    // On the state thread, as every record write: an fsync never runs on the event loop.
    if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
    slot.record = record;
    spdlog::info(R"({{"event":"instance_resized","instance":"{}","cpus":{},"memory_gib":{}}})", id, *applied,
                 spec.memory_gib);
  }
  if (rebuild == Rebuild::commit || rebuild == Rebuild::flatten) {
    auto image = co_await commit_system_disk(record, rebuild == Rebuild::flatten);
    if (!image) co_return fail(std::move(image.error()));
    record.system_images.push_back(*image);
    if (run.old_record) run.old_record->system_images = record.system_images;  // kept even if a later step fails
    if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
    slot.record = record;
    fault_point("rebuild.after_commit");
    if (auto s = co_await remove_container(record.container_id); !s) co_return fail(std::move(s.error()));
    spdlog::info(R"({{"event":"instance_rebuilding","instance":"{}","system_image":{},"because":{},"flattened":{}}})",
                 id, q(*image), q(fmt::format("{}", fmt::join(drift_before, ","))), rebuild == Rebuild::flatten);
    container.exists = false;
    run.rebuilt = true;
  }
  co_return ok();
}

// The data disks attached, the container created when missing, then started or stopped as
// desired (the table applied while it starts).
awaitable<Status> InstanceRuntime::ensure_container(EnsureRun& run) {
  const InstanceSpec& spec = run.spec;
  const std::string& id = run.id;
  InstanceRecord& record = run.record;
  ContainerStatus& container = run.container;
  // The data disks, mounted on the host before a container that binds them is made or
  // started; detached again below (or by the revert) when it ends up not running.
  std::vector<Mount> disk_mounts;
  const bool container_starts = !container.exists || (spec.state == "running" && !container.running);
  if (!spec.data_disks.empty() || (disks_ && container_starts)) {
    if (!disks_) co_return fail(ErrorCode::unavailable, "data_disks: this agent has no data disks");
    if (container_starts) {
      auto attached = co_await disks_->attach(spec.host, id, spec.data_disks);
      if (!attached) co_return fail(std::move(attached.error()));
      disk_mounts = std::move(*attached);
      run.revert.add([this, id]() { return disks_->detach(id); });
    } else if (container.running) {
      // Running already (an agent restart that could not see it): the disks stay its own.
      co_await disks_->claim(spec.host, id, record.created_with.data_disks);
    }
  }
  if (!container.exists) {
    co_await detect_system_disk_limit();
    auto planned = instance_container_spec(record, spec, disk_mounts);
    if (!planned) co_return fail(std::move(planned.error()));
    ContainerSpec cs = std::move(*planned);
    ContainerSpec retry_spec = cs;
    Result<CreatedContainer> made = fail(ErrorCode::internal, "not created");
    if (run.key_with_create) {
      auto [keyed, created_now] = co_await (host_key_step(run) && driver_->create(std::move(cs)));
      (void)keyed;  // a key not made is logged; the init then makes one
      made = std::move(created_now);
    } else {
      made = co_await driver_->create(std::move(cs));
    }
    if (!made && made.error().code == ErrorCode::not_found && contains(made.error().detail, "network")) {
      // The network went away under us: make it again (same subnet) and retry once.
      network_checked_ = false;
      if (auto s = co_await ensure_network(); !s) co_return fail(std::move(s.error()));
      made = co_await driver_->create(std::move(retry_spec));
    }
    if (!made) co_return fail(std::move(made.error()));
    fault_point("agent.ensure.after_container_create");
    run.created = true;
    run.cpus_capped = made->cpus_capped;
    run.revert.add([this, cid = made->id]() { return remove_container_quietly(cid); });
    // overlay2: its system disk's filesystem, before anything can start it.
    if (auto s = co_await make_layer_filesystem(made->id, spec.system_disk_gib); !s) co_return fail(std::move(s.error()));
    record.container_id = made->id;
    record.driver_state = encode_driver_state(driver_state_for(record));
    if (!run.rebuilt) record.host_key = run.config_host_key;  // a new filesystem: "" = the init makes one
    record.created_with =
        CreatedWith{spec.image, spec.name, spec.cpu, spec.memory_gib, effective_gpus(spec), spec.data_disks};
    if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
    run.slot.record = record;
    container.exists = true;
    container.id = made->id;
    container.running = false;
    container.state = "created";
  }
  run.published = run.firewall_first;  // step 0 applied this record's table already
  if (spec.state == "running" && !container.running) {
    // 7 (early). The table is applied while the engine starts the container: its rules name
    // the instance's fixed address, so publishing a moment before sshd listens only means
    // an early connection is refused, and the two slowest steps overlap.
    fault_point("agent.ensure.before_firewall_apply");
    if (!run.created) {
      // A reboot unmounted its system disk's filesystem: mounted again before overlay uses the
      // layer. A container that never started and has none (the agent died between its create
      // and the make) gets it now.
      const std::int64_t make_gib = container.state == "created" ? spec.system_disk_gib : 0;
      if (auto s = co_await mount_layer_filesystem(record.container_id, make_gib); !s) co_return fail(std::move(s.error()));
    }
    auto [started, table] = co_await (driver_->start(record.container_id) && apply_firewall());
    if (!started) co_return fail(std::move(started.error()));
    run.booted = true;
    if (!run.created) {
      // A later failure must not leave running what the caller will believe is stopped.
      run.revert.add([this, cid = record.container_id]() { return stop_container_quietly(cid); });
    }
    if (!table) co_return fail(std::move(table.error()));
    fault_point("agent.ensure.after_firewall_apply");
    run.published = true;
  } else if (spec.state == "stopped" && container.running) {
    if (auto s = co_await driver_->stop(record.container_id, options_.stop_grace); !s) {
      co_return fail(std::move(s.error()));
    }
  }
  // Stopped: its loop disks are unmounted (kept; a disk.remove or another instance may follow).
  if (spec.state == "stopped" && disks_) co_await disks_->detach(id);
  co_return ok();
}

// What the engine says once the container is as desired, the host key, the keys, the wait
// for sshd, the last save and the table: the command's observed state.
awaitable<Result<json::object>> InstanceRuntime::ensure_observed(EnsureRun& run) {
  const InstanceSpec& spec = run.spec;
  const std::string& id = run.id;
  Instance& slot = run.slot;
  InstanceRecord& record = run.record;
  // 6. What the engine now says, and the host key the init printed at boot.
  auto now = co_await driver_->inspect(record.container_id);
  if (!now) co_return fail(std::move(now.error()));
  if (!now->exists) co_return fail(ErrorCode::conflict, "container " + record.container_id + " vanished");
  if (run.on_holder && now->running && (run.booted || run.renamed)) {
    if (auto s = co_await set_instance_hostname(now->pid, spec.name); !s)
      spdlog::warn(R"({{"event":"instance_hostname_not_set","instance":"{}","error":{}}})", id, error_text(s.error()));
  }
  if (run.on_holder && run.booted && run.holder_now) {
    // What the container joined: another pid later means the holder restarted under it.
    record.holder.pid = run.holder_now->pid;
    record.holder.started_at = run.holder_now->started_at;
    run.resave = true;
  }
  if (now->running) {
    const std::chrono::milliseconds wait = run.booted ? options_.host_key_wait : std::chrono::milliseconds(0);
    if (run.config_host_key.empty() && (run.booted || record.host_key.empty())) {
      std::string key = co_await read_host_key(record.container_id, wait);
      if (!key.empty()) record.host_key = key;
    }
  }
  // A running instance whose keys changed (the control plane sends the key set again when
  // a key is deleted) gets them now, by the init's own installer, not at its next boot.
  if (now->running && !run.booted && run.config_changed) {
    std::vector<std::string> argv{"/bin/sh", std::string(kInitPathInContainer), "keys"};
    const std::chrono::milliseconds keys_timeout(10'000);
    auto installed = co_await driver_->exec_run(record.container_id, std::move(argv), keys_timeout);
    if (!installed || installed->exit_code != 0)
      spdlog::warn(R"({{"event":"instance_keys_not_installed","instance":"{}","error":{}}})", id,
                   installed ? q(installed->err) : error_text(installed.error()));
  }
  // A container just booted with SSH published is `running` once its sshd accepts: the
  // user's first ssh then connects instead of meeting a closed port.
  const bool publishes_ssh = std::any_of(spec.ports.begin(), spec.ports.end(),
                                         [](const auto& p) { return p.container_port == 22 && p.protocol == "tcp"; });
  if (run.booted && now->running && publishes_ssh && options_.ssh_listen_wait.count() > 0) {
    if (!co_await wait_for_listener(now->pid, record.ipv4, 22, options_.ssh_listen_wait))
      spdlog::info(R"({{"event":"instance_ssh_not_listening","instance":"{}","waited_ms":{}}})", id,
                   options_.ssh_listen_wait.count());
  }
  // A container that died while it booted (its init missing or failing: the engine's init
  // process started, then exited) did not start, whatever the first look said: look again.
  if (run.booted && now->running) {
    auto after = co_await driver_->inspect(record.container_id);
    if (after && after->exists) now = std::move(after);
  }

  // Saved again only when the log gave a host key: everything else was saved above.
  if (!slot.record || slot.record->host_key != record.host_key || run.resave) {
    if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
    slot.record = record;
  }

  // 7. Publish: the whole table, from every running instance of this installation (done
  //    above, during the start, when this call booted the container).
  if (!run.published) {
    fault_point("agent.ensure.before_firewall_apply");
    if (auto s = co_await apply_firewall(); !s) co_return fail(std::move(s.error()));
    fault_point("agent.ensure.after_firewall_apply");
  }

  const double applied = static_cast<double>(now->nano_cpus) / 1e9;
  if (!run.created) run.cpus_capped = now->nano_cpus > 0 && applied + 1e-6 < record.created_with.cpu;
  json::array drift;
  for (const auto& d : drift_of(record.created_with, spec)) drift.emplace_back(d);
  json::array ports;
  for (const auto& p : spec.ports) {
    ports.push_back(json::object{{"container_port", p.container_port},
                                 {"host_port", p.host_port},
                                 {"protocol", p.protocol},
                                 {"published", spec.state == "running"}});
  }
  json::object observed{
      {"instance_id", id},
      {"container_id", record.container_id},
      {"container_name", container_name(id)},
      {"created", run.created},
      {"running", now->running},
      {"state", now->state},
      {"exit_code", now->exit_code},
      {"oom_killed", now->oom_killed},
      {"started_at", now->started_at},
      {"finished_at", now->finished_at},
      {"ipv4", record.ipv4},
      {"network", network_name_},
      {"host_key", nullable(record.host_key)},
      {"cpus", applied},
      {"cpus_capped", run.cpus_capped},
      {"memory_bytes", now->memory_bytes},
      {"config_changed", run.config_changed},
      {"ports", std::move(ports)},
      // Desired fields the existing container cannot take (it needs recreating).
      {"drift", std::move(drift)},
      {"rebuilt", run.rebuilt},
  };
  co_return observed;
}

// ---- waiting for the container -------------------------------------------------------------

awaitable<std::string> InstanceRuntime::read_host_key(std::string container_id,
                                                      std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto log = co_await driver_->logs(container_id, kHostKeyLogTail);
    if (log) {
      if (auto key = find_host_key(*log)) co_return *key;
    }
    if (std::chrono::steady_clock::now() >= deadline) co_return std::string();
    net::steady_timer timer(co_await net::this_coro::executor, std::chrono::milliseconds(25));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<bool> InstanceRuntime::wait_for_listener(int pid, std::string ip, int port, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    // A closed port answers at once (RST); a network not up yet would not answer at all,
    // hence the short timeout on each try. From inside the instance's namespace, as the
    // proxies' connections are (an agent's own namespace may have no route to its bridge).
    auto executor = co_await net::this_coro::executor;
    auto tried = co_await connect_to_instance(executor, connection_thread_, pid, ip, port, std::chrono::milliseconds(200));
    if (tried) co_return true;
    if (tried.error().code == ErrorCode::invalid_argument) co_return false;
    net::steady_timer pause(executor, std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await pause.async_wait(net::redirect_error(use_awaitable, ec));
  }
  co_return false;
}

}  // namespace gpucloud::agent
