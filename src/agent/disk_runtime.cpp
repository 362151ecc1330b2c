#include "agent/disk_runtime.h"

#include <cmath>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disks/disk_driver_registry.h"
#include "agent/disks/disk_tools.h"
#include "agent/local_agent.h"
#include "agent/log_text.h"
#include "core/fault_points.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
using disks::DataDiskAttachment;
using disks::DiskInfo;
using disks::SnapshotInfo;

// An awaitable mutex for coroutines on one strand (as InstanceRuntime's). Shared: a coroutine
// frame destroyed with the io_context after the runtime (a SIGTERM during start) still
// releases a live lock.
class DiskRuntime::AsyncLock : public std::enable_shared_from_this<DiskRuntime::AsyncLock> {
 public:
  awaitable<void> lock() {
    while (locked_) {
      auto timer = std::make_shared<net::steady_timer>(co_await net::this_coro::executor,
                                                       net::steady_timer::time_point::max());
      waiters_.push_back(timer);
      boost::system::error_code ec;
      co_await timer->async_wait(net::redirect_error(use_awaitable, ec));
    }
    locked_ = true;
  }
  void unlock() {
    locked_ = false;
    if (!waiters_.empty()) {
      waiters_.front()->cancel();
      waiters_.pop_front();
    }
  }

 private:
  bool locked_ = false;
  std::deque<std::shared_ptr<net::steady_timer>> waiters_;
};

namespace {

constexpr std::int64_t kMaxSizeGib = 1 << 20;

// Holds an AsyncLock from construction (after lock() was awaited) to the end of the scope.
class Held {
 public:
  template <class Lock>
  explicit Held(Lock& lock) : unlock_([held = lock.shared_from_this()] { held->unlock(); }) {}
  ~Held() {
    if (unlock_) unlock_();
  }
  // The lock stays held past this scope: whoever it is handed to unlocks it.
  void hand_off() { unlock_ = nullptr; }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  std::function<void()> unlock_;
};


Result<std::string> read_id(const json::object& o, std::string_view key, bool required) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return invalid(std::string(key) + " is required");
    return std::string();
  }
  if (!v->is_string() || !disks::is_valid_disk_id(v->as_string())) {
    return invalid(std::string(key) + " must be an id like disk-3kq9x2m7c4v8");
  }
  return std::string(v->as_string());
}

Result<std::int64_t> read_integer(const json::object& o, std::string_view key, bool required) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return invalid(std::string(key) + " is required");
    return 0;
  }
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(v->as_uint64());
  }
  if (v->is_double() && std::floor(v->as_double()) == v->as_double() && std::fabs(v->as_double()) < 1e15) {
    return static_cast<std::int64_t>(v->as_double());
  }
  return invalid(std::string(key) + " must be an integer");
}

std::int64_t gib(std::int64_t bytes) { return bytes / kGiB; }

json::object snapshot_json(const SnapshotInfo& s) {
  return json::object{{"snapshot_id", s.snapshot_id},
                      {"disk_id", s.disk_id.empty() ? json::value(nullptr) : json::value(s.disk_id)},
                      {"size_gib", gib(s.size_bytes)},
                      {"used_bytes", s.used_bytes}};
}

}  // namespace

DiskRuntime::DiskRuntime(net::any_io_executor loop, std::string agent_dir, std::vector<HostDriver> hosts)
    : DiskRuntime(std::move(loop), std::move(agent_dir), std::move(hosts), Options{}) {}

DiskRuntime::DiskRuntime(net::any_io_executor loop, std::string agent_dir, std::vector<HostDriver> hosts,
                         Options options)
    : strand_(net::make_strand(loop)),
      agent_dir_(fs::absolute(agent_dir).lexically_normal().string()),
      options_(options),
      hosts_(std::move(hosts)),
      start_lock_(std::make_shared<AsyncLock>()),
      pool_(static_cast<std::size_t>(std::max(1, options.threads))) {
  disks::DiskDriverOptions driver_options;
  driver_options.agent_dir = agent_dir_;
  driver_options.btrfs_pool_initial_bytes = options_.btrfs_pool_initial_bytes;
  for (auto& h : hosts_) {
    if (h.driver.empty()) h.driver = std::string(disks::kDefaultDiskDriver);
    if (drivers_.count(h.driver) != 0) continue;
    auto d = std::make_unique<Driver>();
    d->name = h.driver;
    auto made = disks::make_disk_driver(h.driver, driver_options);
    if (made) {
      d->impl = std::move(*made);
    } else {
      d->start_error = made.error();
    }
    drivers_[h.driver] = std::move(d);
  }
}

DiskRuntime::~DiskRuntime() {
  alive_->store(false);  // a background step that resumes after this touches nothing of ours
  pool_.join();          // a driver call under way finishes (its waiter is gone)
}

void DiskRuntime::register_handlers(LocalAgent& agent) {
  for (const char* kind : {"disk.ensure", "disk.remove", "disk.snapshot", "snapshot.remove", "disk.status"}) {
    agent.add_command_handler(kind, [this](const Command& command) { return handle(command); });
  }
}

DiskRuntime::AsyncLock& DiskRuntime::lock_for(const std::string& key) {
  auto& slot = locks_[key];
  if (!slot) slot = std::make_shared<AsyncLock>();
  return *slot;
}

std::string DiskRuntime::tombstone_path(const std::string& disk_id) const {
  return agent_dir_ + "/disks/removed/" + disk_id + ".json";
}

std::string DiskRuntime::attached_to(const std::string& disk_id) const {
  auto it = claims_.find(disk_id);
  return it == claims_.end() ? std::string() : it->second.instance_id;
}

// ---- start -----------------------------------------------------------------------------------

awaitable<Status> DiskRuntime::start() {
  co_return co_await net::co_spawn(strand_, start_on_strand(), use_awaitable);
}

awaitable<Status> DiskRuntime::start_on_strand() {
  std::string problems;
  for (auto& [name, driver] : drivers_) {
    auto s = co_await start_driver(*driver);
    if (!s) problems += (problems.empty() ? "" : "; ") + name + ": " + s.error().detail;
  }
  if (!problems.empty()) co_return fail(ErrorCode::unavailable, "disk drivers: " + problems);
  co_return ok();
}

awaitable<Status> DiskRuntime::start_driver(Driver& driver) {
  if (driver.started) co_return ok();
  if (!driver.impl) co_return fail(driver.start_error);
  co_await start_lock_->lock();
  Held held(*start_lock_);
  if (driver.started) co_return ok();
  disks::DiskDriver* impl = driver.impl.get();
  auto job = [impl]() -> Status { return impl->start(); };
  auto s = co_await offload<Status>(pool_.get_executor(), std::move(job));
  if (!s) {
    driver.start_error = s.error();
    spdlog::warn(R"({{"event":"disk_driver_unavailable","driver":"{}","error":{}}})", driver.name, q(s.error().detail));
    co_return s;
  }
  driver.started = true;
  spdlog::info(R"({{"event":"disk_driver_started","driver":"{}"}})", driver.name);
  co_return ok();
}

Result<DiskRuntime::Driver*> DiskRuntime::driver_for(const std::string& host_name) {
  const HostDriver* host = nullptr;
  if (host_name.empty()) {
    if (hosts_.size() != 1) return invalid("host_name is required (this agent serves several hosts)");
    host = &hosts_.front();
  } else {
    for (const auto& h : hosts_) {
      if (h.host_name == host_name) host = &h;
    }
    if (!host) return invalid("host_name: this agent does not serve host " + host_name);
  }
  return drivers_.at(host->driver).get();
}

// ---- commands --------------------------------------------------------------------------------

awaitable<Result<CommandOutcome>> DiskRuntime::handle(Command command) {
  co_return co_await net::co_spawn(strand_, dispatch(std::move(command)), use_awaitable);
}

awaitable<Result<CommandOutcome>> DiskRuntime::dispatch(Command command) {
  Result<json::object> observed = fail(ErrorCode::internal, "not run");
  std::string exception_text;
  try {
    auto driver = driver_for(command.host_name);
    if (!driver) {
      observed = fail(std::move(driver.error()));
    } else if (auto started = co_await start_driver(**driver); !started) {
      observed = fail(std::move(started.error()));
    } else if (command.kind == "disk.ensure") {
      observed = co_await ensure_disk(**driver, command.desired);
    } else if (command.kind == "disk.remove") {
      observed = co_await remove_disk(**driver, command.desired);
    } else if (command.kind == "disk.snapshot") {
      observed = co_await snapshot_disk(**driver, command.desired);
    } else if (command.kind == "snapshot.remove") {
      observed = co_await remove_snapshot(**driver, command.desired);
    } else if (command.kind == "disk.status") {
      observed = co_await status(**driver);
    } else {
      observed = invalid("unknown command " + command.kind);
    }
  } catch (const std::exception& e) {
    exception_text = e.what();
  } catch (...) {
    exception_text = "unknown exception";
  }
  if (!exception_text.empty()) observed = fail(ErrorCode::internal, command.kind + ": " + exception_text);
  if (!observed) {
    spdlog::warn(R"({{"event":"disk_command_failed","kind":{},"command":{},"error":{}}})", q(command.kind),
                 q(command.id), q(std::string(to_string(observed.error().code)) + ": " + observed.error().detail));
    co_return fail(std::move(observed.error()));
  }
  CommandOutcome outcome;
  outcome.command_id = command.id;
  outcome.ok = true;
  outcome.observed = std::move(*observed);
  co_return outcome;
}

awaitable<Result<json::object>> DiskRuntime::ensure_disk(Driver& driver, json::object desired) {
  auto disk_id = read_id(desired, "disk_id", true);
  if (!disk_id) co_return fail(std::move(disk_id.error()));
  auto size_gib = read_integer(desired, "size_gib", true);
  if (!size_gib) co_return fail(std::move(size_gib.error()));
  if (*size_gib < 1 || *size_gib > kMaxSizeGib) co_return invalid("size_gib must be 1-" + std::to_string(kMaxSizeGib));
  auto from = read_id(desired, "from_snapshot", false);
  if (!from) co_return fail(std::move(from.error()));
  auto generation = read_integer(desired, "generation", false);
  if (!generation) co_return fail(std::move(generation.error()));
  if (*generation < 0) co_return invalid("generation must be an integer >= 0");

  AsyncLock& disk_lock = lock_for("disk:" + *disk_id);
  co_await disk_lock.lock();
  Held disk_held(disk_lock);
  std::optional<Held> snap_held;
  if (!from->empty()) {
    AsyncLock& snap_lock = lock_for("snap:" + *from);  // disk before snapshot, always
    co_await snap_lock.lock();
    snap_held.emplace(snap_lock);
  }

  disks::DiskDriver* impl = driver.impl.get();
  const std::string id = *disk_id, snapshot = *from, tombstone = tombstone_path(id);
  const std::int64_t bytes = *size_gib * kGiB, fence = *generation;
  bool created = false;
  auto job = [impl, id, snapshot, tombstone, bytes, fence, &created]() -> Result<DiskInfo> {
    if (fence > 0) {
      if (auto text = disks::read_small_file(tombstone)) {
        boost::system::error_code ec;
        auto v = json::parse(*text, ec);
        const json::value* g = !ec && v.is_object() ? v.as_object().if_contains("generation") : nullptr;
        if (g && g->is_int64() && g->as_int64() >= fence) {
          return fail(ErrorCode::conflict, "stale command: disk " + id + " was removed at generation " +
                                               std::to_string(g->as_int64()) + "; this command carries generation " +
                                               std::to_string(fence));
        }
      }
    }
    auto found = impl->inspect(id);
    if (!found) return fail(std::move(found.error()));
    if (!*found) {
      Status made = snapshot.empty() ? impl->create(id, bytes) : impl->create_from_snapshot(id, snapshot, bytes);
      if (!made) return fail(std::move(made.error()));
      created = true;
    } else {
      if (bytes < (*found)->size_bytes) {
        return invalid("size_gib: disks only grow (disk " + id + " is " + std::to_string(gib((*found)->size_bytes)) +
                       " GiB)");
      }
      // Equal sizes too: a grow a crash interrupted is finished.
      if (auto s = impl->grow(id, bytes); !s) return fail(std::move(s.error()));
    }
    auto now = impl->inspect(id);
    if (!now) return fail(std::move(now.error()));
    if (!*now) return fail(ErrorCode::internal, "disk " + id + " vanished");
    return **now;
  };
  auto info = co_await offload<Result<DiskInfo>>(pool_.get_executor(), std::move(job));
  if (!info) co_return fail(std::move(info.error()));
  if (created) {
    spdlog::info(R"({{"event":"disk_created","disk":"{}","driver":"{}","size_gib":{},"from_snapshot":{}}})", id,
                 driver.name, *size_gib, q(snapshot));
  }
  co_return json::object{{"disk_id", id},
                         {"size_gib", gib(info->size_bytes)},
                         {"used_bytes", info->used_bytes},
                         {"driver", driver.name},
                         {"created", created}};
}

awaitable<Result<json::object>> DiskRuntime::remove_disk(Driver& driver, json::object desired) {
  auto disk_id = read_id(desired, "disk_id", true);
  if (!disk_id) co_return fail(std::move(disk_id.error()));
  auto generation = read_integer(desired, "generation", false);
  if (!generation) co_return fail(std::move(generation.error()));
  if (*generation < 0) co_return invalid("generation must be an integer >= 0");
  AsyncLock& disk_lock = lock_for("disk:" + *disk_id);
  co_await disk_lock.lock();
  Held held(disk_lock);
  if (auto user = attached_to(*disk_id); !user.empty()) {
    co_return fail(ErrorCode::conflict, "disk " + *disk_id + " is attached to instance " + user + ", which runs");
  }
  disks::DiskDriver* impl = driver.impl.get();
  const std::string id = *disk_id, tombstone = tombstone_path(id);
  const std::int64_t fence = *generation;
  auto job = [impl, id, tombstone, fence]() -> Result<bool> {
    if (fence > 0) {
      // First: once the disk is gone, a stale ensure must already find the tombstone.
      if (auto s = disks::make_directories(fs::path(tombstone).parent_path().string()); !s) return fail(std::move(s.error()));
      if (auto s = disks::write_file_durably(tombstone, json::serialize(json::object{{"generation", fence}})); !s) {
        return fail(std::move(s.error()));
      }
      fault_point("agent.disk.remove.after_tombstone");
    }
    auto found = impl->inspect(id);
    if (!found) return fail(std::move(found.error()));
    if (auto s = impl->remove(id); !s) return fail(std::move(s.error()));
    return found->has_value();
  };
  auto existed = co_await offload<Result<bool>>(pool_.get_executor(), std::move(job));
  if (!existed) co_return fail(std::move(existed.error()));
  if (*existed) spdlog::info(R"({{"event":"disk_removed","disk":"{}","driver":"{}"}})", id, driver.name);
  co_return json::object{{"disk_id", id}, {"existed", *existed}};
}

awaitable<Result<json::object>> DiskRuntime::snapshot_disk(Driver& driver, json::object desired) {
  auto disk_id = read_id(desired, "disk_id", true);
  if (!disk_id) co_return fail(std::move(disk_id.error()));
  auto snapshot_id = read_id(desired, "snapshot_id", true);
  if (!snapshot_id) co_return fail(std::move(snapshot_id.error()));
  AsyncLock& disk_lock = lock_for("disk:" + *disk_id);
  co_await disk_lock.lock();
  Held disk_held(disk_lock);
  AsyncLock& snap_lock = lock_for("snap:" + *snapshot_id);
  co_await snap_lock.lock();
  Held snap_held(snap_lock);
  disks::DiskDriver* impl = driver.impl.get();
  const std::string disk = *disk_id, snap = *snapshot_id;
  auto job = [impl, disk, snap]() -> Result<SnapshotInfo> { return impl->snapshot(disk, snap); };
  const auto started = std::chrono::steady_clock::now();
  auto made = co_await offload<Result<SnapshotInfo>>(pool_.get_executor(), std::move(job));
  if (!made) co_return fail(std::move(made.error()));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  spdlog::info(R"({{"event":"disk_snapshot","disk":"{}","snapshot":"{}","driver":"{}","ms":{},"durable":{}}})", disk,
               snap, driver.name, ms.count(), made->durable);
  if (!made->durable) {
    // Answered before it is durable: the durable step runs next, holding the snapshot's lock
    // from here on (no other call on this snapshot gets in between: a snapshot.remove or a
    // disk made from it waits for the fsync, and never races it on a deleted file).
    snap_held.hand_off();
    net::co_spawn(strand_, make_durable(&driver, snap), net::detached);
  }
  co_return snapshot_json(*made);
}

awaitable<void> DiskRuntime::make_durable(Driver* driver, std::string snapshot_id) {
  // The snapshot's lock is held (handed over by snapshot_disk); it is unlocked here. Nothing
  // here touches the runtime once it is gone: its destructor waits for the driver call.
  const auto alive = alive_;
  if (!alive->load()) co_return;
  disks::DiskDriver* impl = driver->impl.get();
  const std::string snap = snapshot_id, name = driver->name;
  auto job = [impl, snap]() -> Status { return impl->make_snapshot_durable(snap); };
  const auto started = std::chrono::steady_clock::now();
  Status done = ok();
  try {
    done = co_await offload<Status>(pool_.get_executor(), std::move(job));
  } catch (const std::exception& e) {
    done = fail(ErrorCode::internal, e.what());
  }
  if (!alive->load()) co_return;
  lock_for("snap:" + snap).unlock();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  if (!done) {
    // Left "durable": false: the driver's next start makes it durable (same boot).
    spdlog::warn(
        R"({{"event":"disk_snapshot_durable_failed","snapshot":"{}","driver":"{}","error":{},"note":"tried again at the next start"}})",
        snap, name, q(done.error().detail));
    co_return;
  }
  spdlog::info(R"({{"event":"disk_snapshot_durable","snapshot":"{}","driver":"{}","ms":{}}})", snap, name, ms.count());
}

awaitable<Result<json::object>> DiskRuntime::remove_snapshot(Driver& driver, json::object desired) {
  auto snapshot_id = read_id(desired, "snapshot_id", true);
  if (!snapshot_id) co_return fail(std::move(snapshot_id.error()));
  AsyncLock& snap_lock = lock_for("snap:" + *snapshot_id);
  co_await snap_lock.lock();
  Held held(snap_lock);
  disks::DiskDriver* impl = driver.impl.get();
  const std::string snap = *snapshot_id;
  auto job = [impl, snap]() -> Result<bool> {
    auto found = impl->inspect_snapshot(snap);
    if (!found) return fail(std::move(found.error()));
    if (auto s = impl->remove_snapshot(snap); !s) return fail(std::move(s.error()));
    return found->has_value();
  };
  auto existed = co_await offload<Result<bool>>(pool_.get_executor(), std::move(job));
  if (!existed) co_return fail(std::move(existed.error()));
  co_return json::object{{"snapshot_id", snap}, {"existed", *existed}};
}

awaitable<Result<json::object>> DiskRuntime::status(Driver& driver) {
  disks::DiskDriver* impl = driver.impl.get();
  struct Listing {
    std::vector<DiskInfo> disks;
    std::vector<SnapshotInfo> snapshots;
    std::vector<std::string> torn;
  };
  auto job = [impl]() -> Result<Listing> {
    Listing out;
    auto d = impl->list_disks();
    if (!d) return fail(std::move(d.error()));
    auto s = impl->list_snapshots();
    if (!s) return fail(std::move(s.error()));
    out.disks = std::move(*d);
    out.snapshots = std::move(*s);
    out.torn = impl->torn_snapshots();
    return out;
  };
  auto listing = co_await offload<Result<Listing>>(pool_.get_executor(), std::move(job));
  if (!listing) co_return fail(std::move(listing.error()));
  json::array disk_list, snapshot_list;
  for (const auto& d : listing->disks) {
    json::object o{{"disk_id", d.disk_id},
                   {"size_gib", gib(d.size_bytes)},
                   {"used_bytes", d.used_bytes},
                   {"mounted", d.mounted || !attached_to(d.disk_id).empty()}};
    if (auto user = attached_to(d.disk_id); !user.empty()) o["instance_id"] = user;
    disk_list.push_back(std::move(o));
  }
  for (const auto& s : listing->snapshots) snapshot_list.push_back(snapshot_json(s));
  json::array torn;
  for (const auto& id : listing->torn) torn.emplace_back(id);
  co_return json::object{{"driver", driver.name},
                         {"enforces_size", impl->enforces_size()},
                         {"disks", std::move(disk_list)},
                         {"snapshots", std::move(snapshot_list)},
                         {"torn_snapshots", std::move(torn)}};
}

// ---- instances -------------------------------------------------------------------------------

awaitable<Result<std::vector<Mount>>> DiskRuntime::attach(std::string host, std::string instance_id,
                                                          std::vector<DataDiskAttachment> data_disks) {
  co_return co_await net::co_spawn(
      strand_, attach_on_strand(std::move(host), std::move(instance_id), std::move(data_disks)), use_awaitable);
}

awaitable<Result<std::vector<Mount>>> DiskRuntime::attach_on_strand(std::string host, std::string instance_id,
                                                                    std::vector<DataDiskAttachment> data_disks) {
  if (auto s = disks::check_data_disks(data_disks); !s) co_return fail(std::move(s.error()));
  // Disks this instance had and no longer asks for are let go first.
  std::set<std::string> wanted;
  for (const auto& d : data_disks) wanted.insert(d.disk_id);
  std::vector<std::string> dropped;
  for (const auto& [disk, claim] : claims_) {
    if (claim.instance_id == instance_id && wanted.count(disk) == 0) dropped.push_back(disk);
  }
  for (const auto& disk : dropped) {
    Driver* d = claims_[disk].driver;
    claims_.erase(disk);
    AsyncLock& lock = lock_for("disk:" + disk);
    co_await lock.lock();
    Held held(lock);
    disks::DiskDriver* impl = d->impl.get();
    auto job = [impl, disk]() -> Status { return impl->unmount(disk); };
    if (auto s = co_await offload<Status>(pool_.get_executor(), std::move(job)); !s) {
      spdlog::warn(R"({{"event":"disk_unmount_failed","disk":"{}","error":{}}})", disk, q(s.error().detail));
    }
  }
  if (data_disks.empty()) co_return std::vector<Mount>{};

  auto driver = driver_for(host);
  if (!driver) co_return fail(std::move(driver.error()));
  if (auto s = co_await start_driver(**driver); !s) co_return fail(std::move(s.error()));
  disks::DiskDriver* impl = (*driver)->impl.get();

  std::vector<Mount> mounts;
  std::vector<std::string> newly;  // claimed by this call: let go again if a later disk fails
  Status failed = ok();
  for (std::size_t i = 0; i < data_disks.size() && failed; ++i) {
    const DataDiskAttachment& want = data_disks[i];
    const std::string disk = want.disk_id;
    AsyncLock& lock = lock_for("disk:" + disk);
    co_await lock.lock();
    Held held(lock);
    if (auto user = attached_to(disk); !user.empty() && user != instance_id) {
      failed = fail(ErrorCode::conflict, "data_disks[" + std::to_string(i) + "]: disk " + disk +
                                             " is attached to instance " + user);
      break;
    }
    auto job = [impl, disk]() -> Result<std::string> {
      auto found = impl->inspect(disk);
      if (!found) return fail(std::move(found.error()));
      if (!*found) return fail(ErrorCode::not_found, "no disk " + disk);
      return impl->mount(disk);
    };
    auto path = co_await offload<Result<std::string>>(pool_.get_executor(), std::move(job));
    if (!path) {
      failed = fail(path.error().code, "data_disks[" + std::to_string(i) + "]: " + path.error().detail);
      break;
    }
    fault_point("agent.disk.attach.after_mount");
    if (attached_to(disk).empty()) newly.push_back(disk);
    claims_[disk] = Claim{instance_id, *driver};
    mounts.push_back(Mount{*path, want.mount_path, false});
  }
  if (!failed) {
    for (const auto& disk : newly) {
      claims_.erase(disk);
      AsyncLock& lock = lock_for("disk:" + disk);
      co_await lock.lock();
      Held held(lock);
      auto job = [impl, disk]() -> Status { return impl->unmount(disk); };
      (void)co_await offload<Status>(pool_.get_executor(), std::move(job));
    }
    co_return fail(std::move(failed.error()));
  }
  co_return mounts;
}

awaitable<void> DiskRuntime::detach(std::string instance_id) {
  co_await net::co_spawn(strand_, detach_on_strand(std::move(instance_id)), use_awaitable);
}

awaitable<void> DiskRuntime::detach_on_strand(std::string instance_id) {
  std::vector<std::pair<std::string, Driver*>> mine;
  for (const auto& [disk, claim] : claims_) {
    if (claim.instance_id == instance_id) mine.emplace_back(disk, claim.driver);
  }
  for (const auto& [disk, driver] : mine) {
    claims_.erase(disk);
    AsyncLock& lock = lock_for("disk:" + disk);
    co_await lock.lock();
    Held held(lock);
    fault_point("agent.disk.detach.before_unmount");
    disks::DiskDriver* impl = driver->impl.get();
    const std::string id = disk;
    auto job = [impl, id]() -> Status { return impl->unmount(id); };
    if (auto s = co_await offload<Status>(pool_.get_executor(), std::move(job)); !s) {
      // Left mounted (and unclaimed): the next attach reuses the mount, disk.remove retries.
      spdlog::warn(R"({{"event":"disk_unmount_failed","disk":"{}","instance":"{}","error":{}}})", id, instance_id,
                   q(s.error().detail));
    }
  }
}

awaitable<void> DiskRuntime::claim(std::string host, std::string instance_id,
                                   std::vector<DataDiskAttachment> data_disks) {
  co_await net::co_spawn(strand_, claim_on_strand(std::move(host), std::move(instance_id), std::move(data_disks)),
                         use_awaitable);
}

awaitable<void> DiskRuntime::claim_on_strand(std::string host, std::string instance_id,
                                             std::vector<DataDiskAttachment> data_disks) {
  auto driver = driver_for(host);
  if (!driver) co_return;
  for (const auto& d : data_disks) claims_[d.disk_id] = Claim{instance_id, *driver};
}

awaitable<void> DiskRuntime::adopt(std::map<std::string, RunningInstance> running) {
  co_await net::co_spawn(strand_, adopt_on_strand(std::move(running)), use_awaitable);
}

awaitable<void> DiskRuntime::adopt_on_strand(std::map<std::string, RunningInstance> running) {
  std::map<Driver*, std::set<std::string>> keep;
  for (const auto& [instance_id, r] : running) {
    auto driver = driver_for(r.host);
    if (!driver) continue;
    for (const auto& d : r.data_disks) {
      claims_[d.disk_id] = Claim{instance_id, *driver};
      keep[*driver].insert(d.disk_id);
    }
  }
  for (auto& [name, driver] : drivers_) {
    if (!(co_await start_driver(*driver))) continue;
    disks::DiskDriver* impl = driver->impl.get();
    // Disks claimed since (an attach that ran before this) are kept too.
    std::set<std::string> kept = keep[driver.get()];
    for (const auto& [disk, claim] : claims_) {
      if (claim.driver == driver.get()) kept.insert(disk);
    }
    auto job = [impl, kept]() -> Status { return impl->unmount_all_except(kept); };
    if (auto s = co_await offload<Status>(pool_.get_executor(), std::move(job)); !s) {
      spdlog::warn(R"({{"event":"disk_stale_mounts_left","driver":"{}","error":{}}})", name, q(s.error().detail));
    }
  }
}

}  // namespace gpucloud::agent
