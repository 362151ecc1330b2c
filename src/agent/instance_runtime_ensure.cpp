#include "agent/instance_runtime.h"

// instance.ensure: makes an instance's whole desired state true on this host, in named steps
// that each register how to undo what they changed (their state: EnsureRun, in
// instance_runtime_internal.h). Here the command, its inputs and steps 0-4 (ports first,
// container found, address, record, the init's inputs); the container's steps (5-7) are in
// instance_runtime_ensure_container.cpp.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/instance_runtime_internal.h"
#include "core/fault_points.h"
#include "core/offload.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

// ---- instance.ensure ---------------------------------------------------------------------

namespace {

bool jupyter_text_ok(std::string_view s, std::string_view extra) {
  return !s.empty() && s.size() <= 256 && std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

// The init's Jupyter files (0600 token, 0644 base URL), or neither.
Status write_jupyter_files(const std::string& dir, const std::optional<std::pair<std::string, std::string>>& jupyter) {
  const std::string token_path = dir + "/jupyter_token", base_path = dir + "/jupyter_base_url";
  std::error_code ec;
  if (!jupyter) {
    fs::remove(token_path, ec);
    fs::remove(base_path, ec);
    return ok();
  }
  auto same = [](const std::string& path, const std::string& content) {
    std::ifstream in(path);
    std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return static_cast<bool>(in) && now == content;
  };
  if (!same(token_path, jupyter->first + "\n"))
    if (auto s = write_file_atomic(token_path, jupyter->first + "\n", 0600); !s) return s;
  if (!same(base_path, jupyter->second + "\n"))
    if (auto s = write_file_atomic(base_path, jupyter->second + "\n", 0644); !s) return s;
  return ok();
}

Result<Secrets> secrets_from_json(const json::object& desired) {
  Secrets s;
  if (const auto* keys = desired.if_contains("authorized_keys"); keys && !keys->is_null()) {
    if (!keys->is_string()) return invalid("authorized_keys must be a string");
    s.authorized_keys = std::string(keys->as_string());
    if (s.authorized_keys.size() > 256 * 1024) return invalid("authorized_keys is larger than 256 KiB");
    if (s.authorized_keys.find('\0') != std::string::npos) return invalid("authorized_keys holds a NUL byte");
  }
  if (const auto* hash = desired.if_contains("password_hash"); hash && !hash->is_null()) {
    if (!hash->is_string()) return invalid("password_hash must be a string or null");
    std::string h(hash->as_string());
    if (h.empty() || h.size() > 1024 || h.find_first_of(std::string("\n\r\0", 3)) != std::string::npos ||
        h.front() != '$') {
      return invalid("password_hash must be one crypt(3) hash, e.g. \"$6$...\"");
    }
    s.password_hash = std::move(h);
  }
  if (const auto* j = desired.if_contains("jupyter"); j && !j->is_null()) {
    const auto* o = j->if_object();
    const auto* token = o ? o->if_contains("token") : nullptr;
    const auto* base = o ? o->if_contains("base_url") : nullptr;
    if (!token || !token->is_string() || !base || !base->is_string() ||
        !jupyter_text_ok(token->as_string(), "") || !jupyter_text_ok(base->as_string(), "/-_.") ||
        !base->as_string().starts_with("/") || !base->as_string().ends_with("/"))
      return invalid("jupyter must be null or {token: alphanumeric, base_url: \"/.../\"}");
    s.jupyter.emplace(std::string(token->as_string()), std::string(base->as_string()));
  }
  return s;
}

}  // namespace

awaitable<Result<json::object>> InstanceRuntime::ensure(json::object desired) {
  auto parsed = instance_spec_from_json(desired);
  if (!parsed) co_return fail(std::move(parsed.error()));
  const InstanceSpec spec = std::move(*parsed);
  auto secrets = secrets_from_json(desired);
  if (!secrets) co_return fail(std::move(secrets.error()));
  auto generation = command_generation(desired);
  if (!generation) co_return fail(std::move(generation.error()));
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  const std::string id = spec.instance_id;
  // Checked again below, atomically with taking the ports; this early check only answers a
  // clash before any engine call.
  if (auto s = check_ports_free(spec); !s) co_return fail(std::move(s.error()));

  Instance& slot = instance_slot(id);
  co_await slot.lock->lock();
  Unlocker guard(*slot.lock);
  // Fenced before anything is touched: an older command (a retry that lost a race, a
  // reordered delivery) must not undo what a newer one did.
  if (auto s = co_await check_fence(slot, id, *generation); !s) co_return fail(std::move(s.error()));

  // 0. Only the published ports or their sources changed (a security-group change, ports
  //    added to a running instance): the table needs nothing from the engine, so it is
  //    applied first, from the saved record, and holds even while the engine is away. The
  //    steps below still run and may fail at the engine; the new rules stay either way.
  const bool firewall_first = slot.record && only_ports_differ(slot.record->desired, spec);
  if (firewall_first) {
    if (auto s = co_await apply_ports_change(slot, spec, *generation); !s) co_return fail(std::move(s.error()));
  }

  if (auto s = co_await ensure_network(); !s) co_return fail(std::move(s.error()));

  EnsureRun run(spec, id, *secrets, *generation, slot, firewall_first);
  // (The steps are member coroutines taking `run` by reference, not a lambda written inside
  // the co_await: g++ 12 can destroy such a temporary twice. `run` and what it refers to
  // outlive them.)
  auto result = co_await ensure_steps(run);
  // A holder taken is replaced once this command is done, so the refill's engine work never
  // competes with the create it served.
  schedule_refill();
  if (!result) {
    co_await run.revert.undo();
    // The table may have been applied with this call's record: bring it back in line.
    auto reapplied = co_await apply_firewall();
    if (!reapplied) {
      spdlog::warn(R"({{"event":"instance_firewall_reapply_failed","error":{}}})",
                   error_text(reapplied.error()));
    }
    co_return fail(std::move(result.error()));
  }
  run.revert.success();
  spdlog::info(R"({{"event":"instance_ensured","instance":"{}","state":"{}","container":"{}"}})", id,
               spec.state, run.record.container_id);
  co_return result;
}

// The steps; each registers its undo in `run.revert`, run by ensure() if a later step fails.
awaitable<Result<json::object>> InstanceRuntime::ensure_steps(EnsureRun& run) {
  if (auto s = co_await ensure_record(run); !s) co_return fail(std::move(s.error()));
  if (auto s = co_await ensure_init_inputs(run); !s) co_return fail(std::move(s.error()));
  // 5. The container: create when missing, then start or stop as desired. A stopped
  //    container that cannot take the new hostname, GPUs or size is rebuilt first: its
  //    filesystem (the system disk) becomes an image and a new container is made from it.
  if (auto s = co_await ensure_fits_spec(run); !s) co_return fail(std::move(s.error()));
  if (auto s = co_await ensure_container(run); !s) co_return fail(std::move(s.error()));
  co_return co_await ensure_observed(run);
}

awaitable<Status> InstanceRuntime::ensure_record(EnsureRun& run) {
  const InstanceSpec& spec = run.spec;
  const std::string& id = run.id;
  Instance& slot = run.slot;
  InstanceRecord& record = run.record;
  // 1. The container, if it exists: by recorded id, else by name, else by labels.
  auto found = co_await driver_->recover(driver_state_for(record));
  if (!found) co_return fail(std::move(found.error()));
  run.container = std::move(*found);
  const ContainerStatus& container = run.container;

  // 2. The address: kept for the instance's life; a container found without a record
  //    keeps the address it has when that is free.
  //    A new instance on network holders takes one (its address is the holder's); when
  //    none can be had it goes on the bridge itself, as without holders.
  if (!run.had_record && options_.network_holders && !container.exists) {
    auto holder = co_await take_holder(spec.image);
    if (holder) {
      record.ipv4 = holder->ipv4;
      record.holder = InstanceRecord::Holder{holder->id, holder->name, 0, ""};
      run.revert.add_sync([this, ip = holder->ipv4] { reserved_ips_.erase(ip); });
      run.revert.add([this, hid = holder->id]() { return remove_container_quietly(hid); });
    } else {
      spdlog::warn(R"({{"event":"network_holder_unavailable","instance":"{}","error":{},"action":"on the bridge"}})",
                   id, error_text(holder.error()));
    }
  }
  if (!run.had_record && record.ipv4.empty()) {
    std::string preferred = container.exists ? container.ipv4 : std::string();
    auto ip = co_await allocate_ip(id, std::move(preferred));
    if (!ip) co_return fail(std::move(ip.error()));
    record.ipv4 = *ip;
    run.revert.add_sync([this, ip = *ip] { reserved_ips_.erase(ip); });
  }

  // 3. The record, before the engine is asked for anything new (a crash after this finds
  //    the container again by name and labels). Host ports are checked here, with no
  //    suspension between the check and the record taking them.
  if (auto s = check_ports_free(spec); !s) co_return fail(std::move(s.error()));
  record.desired = spec;
  record.generation = std::max(record.generation, run.generation);
  if (container.exists) {
    record.container_id = container.id;
    record.driver_state = encode_driver_state(driver_state_for(record));
    if (record.created_with.image.empty()) {
      // Adopted without a record: what the engine says it was created with.
      record.created_with.image = container.image;
      record.created_with.cpu = spec.cpu;
      record.created_with.memory_gib = container.memory_bytes / kGiB;
      record.created_with.hostname = spec.name;
      record.created_with.gpu_uuids = effective_gpus(spec);
      record.created_with.data_disks = spec.data_disks;
    }
  }
  if (!run.had_record) {
    run.revert.add([this, &slot, id]() { return forget_record(slot, id); });
  } else {
    // By reference: a rebuild below updates the system images the old record must keep.
    run.revert.add([this, &slot, &old_record = run.old_record]() { return restore_record(slot, *old_record); });
  }
  if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
  slot.record = record;
  reserved_ips_.erase(record.ipv4);
  fault_point("agent.ensure.after_record_saved");
  run.on_holder = !record.holder.id.empty();
  if (run.on_holder && !run.had_record) fault_point("agent.ensure.after_holder_recorded");
  co_return ok();
}

awaitable<Status> InstanceRuntime::ensure_init_inputs(EnsureRun& run) {
  const std::string& id = run.id;
  // 4. The init's inputs (read at every boot; the directory must exist before the engine
  //    is asked to bind-mount it), and the SSH host key in the config directory: made
  //    before a new filesystem first boots, so it is known without reading the container's
  //    log and sshd starts at once. An instance whose key lives on its system disk (made by
  //    an older init, or adopted) keeps that one; so does any instance on a host without
  //    ssh-keygen. A container still to be made gets its key while the engine creates it
  //    (only the start needs it).
  auto config_changed = co_await write_init_config(id, run.secrets.authorized_keys, run.secrets.password_hash);
  if (!config_changed) co_return fail(std::move(config_changed.error()));
  run.config_changed = *config_changed;
  // On a holder the engine names the instance after the holder: the init writes this name
  // into /etc/hostname and /etc/hosts (the holder's files, which the instance shares) and
  // the agent sets it in the instance's UTS namespace once it runs (below).
  if (run.on_holder) {
    if (auto s = co_await write_hostname_file(id, run.spec.name); !s) co_return fail(std::move(s.error()));
  }
  {
    auto jupyter_job = [dir = store_.config_dir(id), jupyter = run.secrets.jupyter]() { return write_jupyter_files(dir, jupyter); };
    if (auto s = co_await offload<Status>(state_thread_.get_executor(), std::move(jupyter_job)); !s)
      co_return fail(std::move(s.error()));
  }
  run.new_filesystem = !run.container.exists && run.record.system_images.empty();
  run.key_with_create = !run.container.exists;
  if (!run.key_with_create) {
    (void)co_await host_key_step(run);
    if (!run.config_host_key.empty()) run.record.host_key = run.config_host_key;
  }
  co_return ok();
}

// The host key in the config directory into run.config_host_key (made for a new filesystem).
// A key not made is logged (the init then makes one); never fails.
awaitable<Status> InstanceRuntime::host_key_step(EnsureRun& run) {
  const std::string key_comment = "root@" + run.spec.name;  // (a named local: g++ 12, see architecture.md)
  if (auto key = co_await instance_host_key(run.id, key_comment, run.new_filesystem)) {
    run.config_host_key = *key;
  } else {
    spdlog::warn(R"({{"event":"instance_host_key_not_made","instance":"{}","error":{}}})", run.id,
                 error_text(key.error()));
  }
  co_return ok();
}

}  // namespace gpucloud::agent
