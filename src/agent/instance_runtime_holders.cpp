#include "agent/instance_runtime.h"

// Network holders: the pool of started, unassigned holders, adoption after a restart, an
// instance's holder kept running (and repaired), and the instance's hostname on its holder.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "agent/disk_runtime.h"
#include "agent/instance_runtime_internal.h"
#include "core/child_process.h"
#include "core/fault_points.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

// ---- network holders -----------------------------------------------------------------------
// A holder is a container that only holds a network namespace on the bridge with a fixed
// address ("sleep infinity", 16 MiB, CapDrop ALL, restart policy no: the agent repairs). An
// instance's container joins it (NetworkMode container:HOLDER), so the engine does no network
// setup on the create's path. Pool holders are unassigned; which instance holds one is only in
// that instance's record (saved before its container is created).

namespace {
constexpr std::int64_t kHolderMemoryBytes = 16 * 1024 * 1024;

std::string holder_suffix() {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < 10; ++i) out.push_back("0123456789abcdef"[rng() % 16]);
  return out;
}
}  // namespace

std::vector<std::string> InstanceRuntime::pooled_holders() const {
  std::vector<std::string> out;
  for (const auto& h : pool_) out.push_back(h.id);
  return out;
}

awaitable<Result<InstanceRuntime::PoolHolder>> InstanceRuntime::make_holder(std::string ip, std::string image) {
  if (auto s = co_await ensure_network(); !s) co_return fail(std::move(s.error()));
  bool reserved_here = false;
  if (ip.empty()) {
    auto allocated = co_await allocate_ip("", "");
    if (!allocated) co_return fail(std::move(allocated.error()));
    ip = *allocated;
    reserved_here = true;
  }
  auto release_ip = [&] {
    if (reserved_here) reserved_ips_.erase(ip);
  };
  ContainerSpec cs;
  cs.name = "gpucloud-" + installation_id_ + "-holder-" + holder_suffix();
  cs.image = image;
  cs.labels = {{std::string(kInstallationLabel), installation_id_}, {std::string(kNetworkHolderLabel), "1"}};
  cs.command = {"sleep", "infinity"};
  cs.network_holder = true;
  cs.cpus = 0.1;
  cs.memory_bytes = kHolderMemoryBytes;
  cs.pids_limit = 16;
  cs.network = network_name_;
  cs.ipv4 = ip;
  auto made = co_await driver_->create(cs);
  if (!made) {
    release_ip();
    co_return fail(std::move(made.error()));
  }
  fault_point("agent.holder.after_create");
  if (auto s = co_await driver_->start(made->id); !s) {
    co_await remove_container_quietly(made->id);
    release_ip();
    co_return fail(std::move(s.error()));
  }
  auto now = co_await driver_->inspect(made->id);
  if (!now || !now->exists || !now->running) {
    co_await remove_container_quietly(made->id);
    release_ip();
    if (!now) co_return fail(std::move(now.error()));
    co_return fail(ErrorCode::unavailable, "network holder " + cs.name + " did not stay running");
  }
  // The caller takes over the address (a record or the pool); until then it stays reserved.
  PoolHolder h{made->id, cs.name, ip, now->pid, now->started_at};
  spdlog::info(R"({{"event":"network_holder_made","holder":"{}","ipv4":"{}"}})", h.name, ip);
  co_return h;
}

awaitable<Result<InstanceRuntime::PoolHolder>> InstanceRuntime::take_holder(std::string fallback_image) {
  if (auto s = co_await adopt_holders(); !s) co_return fail(std::move(s.error()));
  while (!pool_.empty()) {
    PoolHolder h = std::move(pool_.front());
    pool_.pop_front();
    // It may have died or been removed since it was made: a dead one is dropped.
    auto c = co_await driver_->inspect(h.id);
    if (c && c->exists && c->running && c->pid == h.pid) {
      reserved_ips_.insert(h.ipv4);  // until the instance's record holds it
      co_return h;
    }
    spdlog::warn(R"({{"event":"network_holder_dropped","holder":"{}","why":"not running as made"}})", h.name);
    if (c && c->exists) co_await remove_container_quietly(h.id);
  }
  // The pool is empty: one now, on the create's path.
  std::string image = options_.holder_image;
  auto present = co_await driver_->image_present(image);
  if (!present || !*present) image = std::move(fallback_image);
  spdlog::info("{}", R"({"event":"network_pool_empty","action":"holder made inline"})");
  co_return co_await make_holder("", std::move(image));
}

void InstanceRuntime::schedule_refill() {
  if (refilling_ || !options_.network_holders) return;
  if (static_cast<int>(pool_.size()) >= options_.network_pool_size) return;
  refilling_ = true;
  net::co_spawn(strand_, refill_pool(), net::detached);
}

awaitable<void> InstanceRuntime::refill_pool() {
  // One at a time: a refill competes with creates for the engine.
  while (options_.network_holders && static_cast<int>(pool_.size()) < options_.network_pool_size) {
    auto present = co_await driver_->image_present(options_.holder_image);
    Result<PoolHolder> made = fail(ErrorCode::unavailable, "holder image " + options_.holder_image + " is not present");
    if (present && *present) made = co_await make_holder("", options_.holder_image);
    if (!made) {
      if (holder_image_failed_ != made.error().detail) {
        spdlog::warn(R"({{"event":"network_pool_refill_failed","error":{}}})", error_text(made.error()));
        holder_image_failed_ = made.error().detail;
      }
      break;  // tried again at the next take or status
    }
    holder_image_failed_.clear();
    reserved_ips_.erase(made->ipv4);
    pool_.push_back(std::move(*made));
  }
  refilling_ = false;
}

awaitable<Status> InstanceRuntime::adopt_holders() {
  if (holders_adopted_) co_return ok();
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_},
                                            {std::string(kNetworkHolderLabel), "1"}};
  auto listed = co_await driver_->list(std::move(filter));
  if (!listed) co_return fail(std::move(listed.error()));
  if (holders_adopted_) co_return ok();  // another call did it meanwhile
  std::set<std::string> assigned, recorded_ips;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record) continue;
    recorded_ips.insert(slot->record->ipv4);
    if (!slot->record->holder.id.empty()) {
      assigned.insert(slot->record->holder.id);
      assigned.insert(slot->record->holder.name);
    }
  }
  std::set<std::string> pooled;
  for (const auto& h : pool_) pooled.insert(h.id);
  std::vector<std::string> orphans;
  for (const auto& c : *listed) {
    if (assigned.contains(c.id) || assigned.contains(c.name) || pooled.contains(c.id)) continue;
    const bool usable = options_.network_holders && c.running && !c.ipv4.empty() && !recorded_ips.contains(c.ipv4) &&
                        static_cast<int>(pool_.size()) < options_.network_pool_size;
    if (usable) {
      pool_.push_back(PoolHolder{c.id, c.name, c.ipv4, c.pid, c.started_at});
      recorded_ips.insert(c.ipv4);
    } else {
      orphans.push_back(c.id);
    }
  }
  holders_adopted_ = true;
  for (const auto& id : orphans) co_await remove_container_quietly(id);
  if (!listed->empty()) {
    spdlog::info(R"({{"event":"network_holders_adopted","pooled":{},"removed":{}}})", pool_.size(), orphans.size());
  }
  co_return ok();
}

awaitable<Result<ContainerStatus>> InstanceRuntime::ensure_holder(InstanceRecord& record, std::string image) {
  auto c = co_await driver_->inspect(record.holder.id);
  if (!c) co_return fail(std::move(c.error()));
  if (c->exists && !c->running) {
    if (auto s = co_await driver_->start(c->id); !s) co_return fail(std::move(s.error()));
    c = co_await driver_->inspect(record.holder.id);
    if (!c) co_return fail(std::move(c.error()));
  }
  if (!c->exists) {
    // Gone (removed by hand, a lost engine state): a new one at the instance's address.
    spdlog::warn(R"({{"event":"network_holder_missing","instance":"{}","holder":"{}"}})", record.desired.instance_id,
                 record.holder.name);
    std::string holder_image = options_.holder_image;
    auto present = co_await driver_->image_present(holder_image);
    if (!present || !*present) holder_image = std::move(image);
    auto made = co_await make_holder(record.ipv4, std::move(holder_image));
    if (!made) co_return fail(std::move(made.error()));
    record.holder.id = made->id;
    record.holder.name = made->name;
    c = co_await driver_->inspect(made->id);
    if (!c) co_return fail(std::move(c.error()));
  }
  if (!c->running) co_return fail(ErrorCode::unavailable, "network holder " + record.holder.name + " is not running");
  co_return std::move(*c);
}

awaitable<Status> InstanceRuntime::set_instance_hostname(int pid, std::string hostname) {
  if (pid <= 0) co_return invalid("no process to set the hostname of");
  auto job = [this, pid, hostname = std::move(hostname)]() -> Status {
    if (options_.set_hostname) return options_.set_hostname(pid, hostname);
    const std::vector<std::string> argv{"/usr/bin/nsenter", "--uts=/proc/" + std::to_string(pid) + "/ns/uts",
                                        "/bin/hostname", hostname};
    auto r = run_process(argv, "", std::chrono::milliseconds(5000));
    if (!r) return fail(std::move(r.error()));
    if (r->exit_code != 0) return fail(ErrorCode::unavailable, "nsenter hostname: " + r->err);
    return ok();
  };
  co_return co_await offload<Status>(state_thread_.get_executor(), std::move(job));
}

awaitable<Status> InstanceRuntime::write_hostname_file(std::string id, std::string hostname) {
  auto job = [dir = store_.config_dir(id), hostname = std::move(hostname)]() -> Status {
    const std::string path = dir + "/hostname";
    std::error_code ec;
    if (fs::exists(path, ec)) {
      std::ifstream in(path);
      std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (now == hostname + "\n") return ok();
    }
    return write_file_atomic(path, hostname + "\n", 0644);
  };
  co_return co_await offload<Status>(state_thread_.get_executor(), std::move(job));
}

awaitable<Status> InstanceRuntime::repair_holder(std::string id) {
  Instance& slot = instance_slot(id);
  co_await slot.lock->lock();
  Unlocker guard(*slot.lock);
  if (!slot.record || slot.record->holder.id.empty() || slot.record->desired.state != "running" ||
      slot.record->container_id.empty())
    co_return ok();
  InstanceRecord record = *slot.record;
  auto container = co_await driver_->inspect(record.container_id);
  if (!container) co_return fail(std::move(container.error()));
  if (!container->exists || !container->running) co_return ok();  // reported as it is; a start repairs
  auto holder = co_await ensure_holder(record, record.desired.image);
  if (!holder) co_return fail(std::move(holder.error()));
  if (holder->id == record.holder.id && holder->pid == record.holder.pid && container->network_mode == "container:" + holder->id)
    co_return ok();  // healthy after all
  fault_point("agent.holder.repair.after_holder_start");
  spdlog::warn(R"({{"event":"network_holder_repair","instance":"{}","holder":"{}","action":"restarting the instance"}})",
               id, record.holder.name);
  const bool same_holder = container->network_mode == "container:" + holder->id;
  if (auto s = co_await driver_->stop(record.container_id, options_.stop_grace); !s) co_return s;
  if (!same_holder) {
    // A new holder (the old one was gone): the container names the old one by id, so it is
    // made again from its filesystem, like a rebuild, joining the new one.
    auto image = co_await commit_system_disk(record, false);
    if (!image) co_return fail(std::move(image.error()));
    record.system_images.push_back(*image);
    if (auto s = co_await save_record(record); !s) co_return s;
    slot.record = record;
    std::vector<Mount> mounts;
    if (disks_ && !record.created_with.data_disks.empty()) {
      auto attached = co_await disks_->attach(record.desired.host, id, record.created_with.data_disks);
      if (!attached) co_return fail(std::move(attached.error()));
      mounts = std::move(*attached);
    }
    if (auto s = co_await remove_container(record.container_id); !s) co_return s;
    auto recreated = instance_container_spec(record, record.desired, std::move(mounts));
    if (!recreated) co_return fail(std::move(recreated.error()));
    auto made = co_await driver_->create(std::move(*recreated));
    if (!made) co_return fail(std::move(made.error()));
    if (auto s = co_await make_layer_filesystem(made->id, record.desired.system_disk_gib); !s) co_return s;
    record.container_id = made->id;
    record.driver_state = encode_driver_state(driver_state_for(record));
    if (auto s = co_await save_record(record); !s) co_return s;
    slot.record = record;
  }
  if (auto s = co_await mount_layer_filesystem(record.container_id); !s) co_return s;
  if (auto s = co_await driver_->start(record.container_id); !s) co_return s;
  record.holder.pid = holder->pid;
  record.holder.started_at = holder->started_at;
  auto now = co_await driver_->inspect(record.container_id);
  if (now && now->running) {
    if (auto s = co_await set_instance_hostname(now->pid, record.desired.name); !s)
      spdlog::warn(R"({{"event":"instance_hostname_not_set","instance":"{}","error":{}}})", id, error_text(s.error()));
  }
  if (auto s = co_await save_record(record); !s) co_return s;
  slot.record = record;
  co_return ok();
}

}  // namespace gpucloud::agent
