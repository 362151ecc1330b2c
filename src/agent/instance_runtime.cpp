#include "agent/instance_runtime.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disk_runtime.h"
#include "agent/host_key.h"
#include "agent/image_saver.h"
#include "agent/local_agent.h"
#include "agent/log_text.h"
#include "core/child_process.h"
#include "core/fault_points.h"
#include "core/offload.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using net::awaitable;
using net::use_awaitable;
using namespace boost::asio::experimental::awaitable_operators;

// ---- an awaitable mutex for coroutines on one strand ---------------------------------------

class InstanceRuntime::AsyncLock {
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

struct InstanceRuntime::Instance {
  std::optional<InstanceRecord> record;  // nullopt: no record (the slot exists for its lock)
  AsyncLock lock;
};

namespace {

constexpr int kSubnetAttempts = 64;
constexpr int kHostKeyLogTail = 400;
constexpr std::chrono::minutes kPullTimeout{30};
constexpr std::chrono::minutes kPullRetry{10};  // after a failed pull

// Releases an AsyncLock-like object when the scope ends (co_return included).
template <class Lock>
class Unlocker {
 public:
  explicit Unlocker(Lock& lock) : lock_(&lock) {}
  ~Unlocker() { lock_->unlock(); }
  Unlocker(const Unlocker&) = delete;
  Unlocker& operator=(const Unlocker&) = delete;

 private:
  Lock* lock_;
};

// Incus's revert helper (shared/revert/revert.go) for coroutines: each step that changed
// something registers how to undo it; a failure undoes them newest first, success forgets
// them. Undo steps never fail (they log what they could not undo).
class Revert {
 public:
  using Step = std::function<awaitable<void>()>;
  void add(Step step) { steps_.push_back(std::move(step)); }
  void add_sync(std::function<void()> step) {
    steps_.push_back([step = std::move(step)]() { return run_now(step); });
  }
  awaitable<void> undo() {
    while (!steps_.empty()) {
      Step step = std::move(steps_.back());
      steps_.pop_back();
      co_await step();
    }
  }
  void success() { steps_.clear(); }

 private:
  static awaitable<void> run_now(std::function<void()> step) {
    step();
    co_return;
  }
  std::vector<Step> steps_;
};

bool valid_installation_id(std::string_view id) {
  return id.size() <= 40 && is_valid_instance_id(id);
}

// ---- IPv4 arithmetic ---------------------------------------------------------------------

std::optional<std::uint32_t> parse_ipv4(std::string_view text) {
  if (!firewall::is_ipv4_address(text)) return std::nullopt;
  std::uint32_t value = 0;
  int octet = 0;
  for (char c : text) {
    if (c == '.') {
      value = (value << 8) | static_cast<std::uint32_t>(octet);
      octet = 0;
    } else {
      octet = octet * 10 + (c - '0');
    }
  }
  return (value << 8) | static_cast<std::uint32_t>(octet);
}

std::string format_ipv4(std::uint32_t v) {
  return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 255) + "." +
         std::to_string((v >> 8) & 255) + "." + std::to_string(v & 255);
}

struct Subnet {
  std::uint32_t base = 0;
  int prefix = 0;
  std::uint32_t size() const { return prefix == 0 ? 0 : (std::uint32_t{1} << (32 - prefix)); }
  bool contains(std::uint32_t ip) const { return ip - base < size(); }
};

std::optional<Subnet> parse_subnet(std::string_view cidr) {
  auto canonical = firewall::canonical_cidr(cidr);
  if (!canonical || cidr.find('/') == std::string_view::npos) return std::nullopt;
  const auto slash = canonical->find('/');
  auto base = parse_ipv4(std::string_view(*canonical).substr(0, slash));
  const int prefix = std::atoi(canonical->c_str() + slash + 1);
  if (!base || prefix < 8 || prefix > 29) return std::nullopt;  // room for gateway + hosts
  return Subnet{*base, prefix};
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The i-th subnet to try for an installation: 10.<200..254>.<0..255>.0/24, starting at a
// point derived from the installation id (so two installations on one host rarely meet) and
// stepping by a prime co-prime with the candidate count (every candidate once).
std::string subnet_candidate(std::string_view installation_id, int i) {
  constexpr std::uint64_t kCount = 55 * 256;
  const std::uint64_t index = (fnv1a(installation_id) + static_cast<std::uint64_t>(i) * 7919) % kCount;
  return "10." + std::to_string(200 + index / 256) + "." + std::to_string(index % 256) + ".0/24";
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::string error_text(const Error& e) { return q(std::string(to_string(e.code)) + ": " + e.detail); }

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

json::value nullable(const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); }

// Data disks in a canonical order: the same set in another order is no change.
std::vector<disks::DataDiskAttachment> sorted_disks(std::vector<disks::DataDiskAttachment> d) {
  std::sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.disk_id < b.disk_id; });
  return d;
}

std::vector<std::string> effective_gpus(const InstanceSpec& spec) {
  return spec.gpus_simulated ? std::vector<std::string>{} : spec.gpu_uuids;
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
      start_lock_(std::make_unique<AsyncLock>()),
      network_lock_(std::make_unique<AsyncLock>()),
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

void InstanceRuntime::report_changes_to(std::function<void(ChangeReport)> sink) {
  if (!driver_->reports_events() || watching_) return;
  change_sink_ = std::move(sink);
  watching_ = true;
  net::co_spawn(strand_, watch_engine_events(), net::detached);
}

void InstanceRuntime::on_engine_event(const EngineEvent& event) {
  if (!watching_) return;
  for (auto& [host, ids] : instances_of(event)) change_sink_(ChangeReport{host, std::move(ids)});
  if ((event.action == "die" || event.action == "destroy") &&
      event.attributes.contains(std::string(kNetworkHolderLabel))) {
    auto pooled = std::find_if(pool_.begin(), pool_.end(), [&](const PoolHolder& h) { return h.id == event.id; });
    if (pooled == pool_.end()) return;
    spdlog::warn(R"({{"event":"network_holder_dropped","holder":"{}","why":"it {} in the pool"}})", pooled->name,
                 event.action == "die" ? "died" : "was removed");
    pool_.erase(pooled);
    net::co_spawn(strand_, replace_pooled_holder(event.action == "die" ? event.id : std::string()), net::detached);
  }
}

awaitable<void> InstanceRuntime::replace_pooled_holder(std::string container_id) {
  if (!container_id.empty()) co_await remove_container_quietly(std::move(container_id));
  schedule_refill();
}

std::map<std::string, std::vector<std::string>> InstanceRuntime::instances_of(const EngineEvent& event) const {
  std::map<std::string, std::vector<std::string>> out;
  const auto own = event.attributes.find(std::string(kInstanceLabel));
  const bool holder = event.attributes.contains(std::string(kNetworkHolderLabel));
  for (const auto& [id, slot] : instances_) {
    if (!slot->record) continue;
    const auto& record = *slot->record;
    const bool concerned = (own != event.attributes.end() && own->second == id) ||
                           (holder && !record.holder.id.empty() && record.holder.id == event.id);
    if (concerned) out[record.desired.host].push_back(id);
  }
  return out;
}

awaitable<void> InstanceRuntime::watch_engine_events() {
  constexpr auto kFirstPause = std::chrono::seconds(1), kLongestPause = std::chrono::seconds(30);
  auto pause = std::chrono::seconds(kFirstPause);
  bool ever_connected = false;
  std::string last_error;
  net::steady_timer timer(strand_);
  while (watching_) {
    bool connected = false;
    auto on_connected = [&] {
      connected = true;
      // Reconnected: what happened meanwhile was not seen, so everything may have changed.
      if (ever_connected && watching_) change_sink_(ChangeReport{});
      ever_connected = true;
      if (!last_error.empty()) spdlog::info("{}", R"({"event":"engine_events_following"})");
      last_error.clear();
    };
    // instances_ and the pool are touched on the strand, where they are written.
    auto on_event = [this](EngineEvent event) {
      net::post(strand_, [this, event = std::move(event)] { on_engine_event(event); });
    };
    std::map<std::string, std::string> labels{{std::string(kInstallationLabel), installation_id_}};
    auto s = co_await driver_->watch_events(std::move(labels), on_event, on_connected);
    if (!watching_) break;
    std::string error = s ? std::string("the engine ended the event stream") : s.error().detail;
    // The first retry after losing a stream comes at once-ish; failed retries back off.
    pause = connected || last_error.empty() ? std::chrono::seconds(kFirstPause)
                                            : std::min(pause * 2, std::chrono::seconds(kLongestPause));
    if (error != last_error)
      spdlog::warn(R"({{"event":"engine_events_lost","error":{},"retry_in_s":{}}})", q(error), pause.count());
    last_error = error;
    timer.expires_after(pause);
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

void InstanceRuntime::register_sample_source(LocalAgent& agent) {
  agent.set_sample_source([this](std::vector<std::string> stale) { return sample_targets(std::move(stale)); });
}

awaitable<Result<std::vector<sampling::SampleTarget>>> InstanceRuntime::sample_targets(std::vector<std::string> stale) {
  co_return co_await net::co_spawn(strand_, sample_targets_on_strand(std::move(stale)), use_awaitable);
}

awaitable<Result<std::vector<sampling::SampleTarget>>> InstanceRuntime::sample_targets_on_strand(
    std::vector<std::string> stale) {
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  for (const auto& id : stale) sample_pids_.erase(id);
  // Copied first: commands for these instances may run while the engine is asked below.
  std::vector<sampling::SampleTarget> candidates;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record || slot->record->desired.state != "running" || slot->record->container_id.empty()) continue;
    const InstanceRecord& r = *slot->record;
    sampling::SampleTarget t;
    t.instance_id = id;
    t.host_name = r.desired.host;
    t.container_id = r.container_id;
    t.gpu_uuids = r.desired.gpu_uuids;
    t.gpus_simulated = r.desired.gpus_simulated;
    t.memory_limit_bytes = r.desired.memory_gib * kGiB;
    candidates.push_back(std::move(t));
  }
  std::map<std::string, int> known;
  std::vector<sampling::SampleTarget> out;
  bool engine_away = false;
  for (auto& t : candidates) {
    auto cached = sample_pids_.find(t.container_id);
    if (cached != sample_pids_.end()) {
      t.pid = cached->second;
    } else {
      if (engine_away) continue;
      auto c = co_await driver_->inspect(t.container_id);
      // The engine away: the instances whose pid is known are still sampled (cgroups need
      // no engine); the others wait for the next round.
      if (!c) {
        engine_away = true;
        continue;
      }
      if (!c->exists || !c->running || c->pid <= 0) continue;  // asked again next round
      t.pid = c->pid;
    }
    known[t.container_id] = t.pid;
    out.push_back(std::move(t));
  }
  sample_pids_ = std::move(known);  // containers gone or stopped are forgotten
  co_return out;
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
                 q(command.kind), q(command.id), error_text(observed.error()));
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
  co_await start_lock_->lock();
  Unlocker guard(*start_lock_);
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
    co_await slot->lock.lock();
    Unlocker guard(slot->lock);
    if (!slot->record) continue;
    auto found = co_await driver_->recover(driver_state_for(*slot->record));
    if (!found || (found->exists && found->running)) {
      // Unseen counts as running: its disks must not be taken for stale mounts.
      const auto& disks = slot->record->created_with.data_disks;
      if (!disks.empty()) with_disks[id] = DiskRuntime::RunningInstance{slot->record->desired.host, disks};
    }
    if (!found) {
      spdlog::warn(R"({{"event":"instance_reattach_failed","instance":"{}","error":{}}})", id,
                   error_text(found.error()));
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
  // Disks of running instances stay mounted; every other mount of ours goes.
  if (disks_) co_await disks_->adopt(std::move(with_disks));
  // Network holders: the records' stay theirs, other running ones fill the pool, the rest go.
  if (auto s = co_await adopt_holders(); !s) {
    spdlog::warn(R"({{"event":"network_holders_not_adopted","error":{}}})", error_text(s.error()));
  }
  schedule_refill();
  // What saves of an earlier run left (one killed at any step): raw copies hold secrets.
  if (saves_in_flight_ == 0) {
    if (auto s = co_await images_->sweep(); !s)
      spdlog::warn(R"({{"event":"image_save_leftovers","error":{}}})", error_text(s.error()));
  }
  co_return co_await apply_firewall();
}

// ---- the network -------------------------------------------------------------------------

// A network made before the MTU was set (or by another version) keeps its MTU: changing it
// means removing it with every instance detached, so the operator is told instead.
void InstanceRuntime::warn_if_mtu_differs(const NetworkInfo& info) const {
  const int have = info.mtu > 0 ? info.mtu : 1500, want = options_.network_mtu > 0 ? options_.network_mtu : 1500;
  if (have > want)
    spdlog::warn(R"({{"event":"instance_network_mtu","network":"{}","mtu":{},"uplink_mtu":{},)"
                 R"("detail":"instances' full-size packets exceed the uplink; recreate the network with no instance on it"}})",
                 network_name_, have, want);
}

awaitable<Status> InstanceRuntime::ensure_network() {
  if (network_checked_) co_return ok();
  co_await network_lock_->lock();
  Unlocker guard(*network_lock_);
  if (network_checked_) co_return ok();
  NetworkSpec spec;
  spec.name = network_name_;
  spec.labels = {{std::string(kInstallationLabel), installation_id_}};
  spec.icc = false;
  spec.mtu = options_.network_mtu;
  if (network_) {
    spec.subnet = network_->subnet;
    auto info = co_await driver_->ensure_network(spec);
    if (!info) co_return fail(std::move(info.error()));
    warn_if_mtu_differs(*info);
    if ((info->gateway != network_->gateway && !info->gateway.empty()) ||
        (info->bridge_name != network_->bridge && !info->bridge_name.empty())) {
      NetworkRecord updated = *network_;
      if (!info->gateway.empty()) updated.gateway = info->gateway;
      if (!info->bridge_name.empty()) updated.bridge = info->bridge_name;
      if (auto s = co_await save_network_record(updated); !s) co_return s;
      network_ = std::move(updated);
    }
    network_checked_ = true;
    co_return ok();
  }
  // First start: pick a subnet nobody on this host uses, and keep it.
  std::string last_error;
  for (int i = 0; i < kSubnetAttempts; ++i) {
    spec.subnet = subnet_candidate(installation_id_, i);
    auto info = co_await driver_->ensure_network(spec);
    if (!info && contains(info.error().detail, "exists with subnet")) {
      // Our network exists already (its record was lost): adopt its subnet.
      spec.subnet.clear();
      info = co_await driver_->ensure_network(spec);
      if (info && !parse_subnet(info->subnet)) {
        co_return fail(ErrorCode::conflict, "network " + network_name_ + " has subnet '" + info->subnet +
                                                "', not an IPv4 subnet with room for instances");
      }
    }
    if (info) {
      warn_if_mtu_differs(*info);
      NetworkRecord record{network_name_, info->subnet, info->gateway, info->bridge_name};
      if (auto s = co_await save_network_record(record); !s) co_return s;
      network_ = std::move(record);
      network_checked_ = true;
      spdlog::info(R"({{"event":"instance_network_ready","network":"{}","subnet":"{}","created":{}}})",
                   network_name_, network_->subnet, info->created);
      co_return ok();
    }
    const Error& e = info.error();
    last_error = e.detail;
    // The engine refuses a subnet overlapping one of its other networks (403 "Pool overlaps").
    const bool taken = e.code == ErrorCode::conflict || contains(e.detail, "overlap");
    if (!taken || contains(e.detail, "exists with")) co_return fail(e);
  }
  co_return fail(ErrorCode::unavailable, "no free subnet for network " + network_name_ + " after " +
                                             std::to_string(kSubnetAttempts) + " tries: " + last_error);
}

awaitable<Result<std::string>> InstanceRuntime::allocate_ip(std::string instance_id,
                                                            std::string preferred) {
  if (!network_) co_return fail(ErrorCode::internal, "no network yet");
  auto subnet = parse_subnet(network_->subnet);
  if (!subnet) co_return fail(ErrorCode::internal, "network subnet '" + network_->subnet + "' is unusable");
  // Addresses held by any container of this installation (unknown ones included: a stopped
  // container's fixed address is claimed again when it starts).
  std::set<std::uint32_t> used;
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_}};
  auto containers = co_await driver_->list(std::move(filter));
  if (!containers) co_return fail(std::move(containers.error()));
  // From here to the end nothing suspends: the choice and its reservation are atomic.
  std::set<std::uint32_t> recorded;
  for (const auto& [id, slot] : instances_) {
    if (slot->record && id != instance_id) {
      if (auto ip = parse_ipv4(slot->record->ipv4)) recorded.insert(*ip);
    }
  }
  for (const auto& ip : reserved_ips_) {
    if (auto v = parse_ipv4(ip)) recorded.insert(*v);
  }
  for (const auto& h : pool_) {
    if (auto v = parse_ipv4(h.ipv4)) recorded.insert(*v);
  }
  used = recorded;
  for (const auto& c : *containers) {
    if (auto it = c.labels.find(std::string(kInstanceLabel)); it != c.labels.end() && it->second == instance_id) {
      continue;
    }
    if (auto ip = parse_ipv4(c.ipv4)) used.insert(*ip);
  }
  const std::uint32_t first = subnet->base + 2, last = subnet->base + subnet->size() - 2;
  std::optional<std::uint32_t> gateway;
  if (auto g = parse_ipv4(network_->gateway)) gateway = *g;
  std::optional<std::uint32_t> chosen;
  if (auto p = parse_ipv4(preferred); p && *p >= first && *p <= last && !recorded.count(*p) && gateway != *p) {
    chosen = *p;
  }
  for (std::uint32_t ip = first; !chosen && ip <= last; ++ip) {
    if (!used.count(ip) && gateway != ip) chosen = ip;
  }
  if (!chosen) {
    co_return fail(ErrorCode::no_capacity, "no free address left in " + network_->subnet);
  }
  const std::string text = format_ipv4(*chosen);
  reserved_ips_.insert(text);
  co_return text;
}

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
  co_await slot.lock.lock();
  Unlocker guard(slot.lock);
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
    if (auto s = co_await driver_->remove(record.container_id); !s) co_return s;
    auto made = co_await driver_->create(instance_container_spec(record, record.desired, std::move(mounts)));
    if (!made) co_return fail(std::move(made.error()));
    record.container_id = made->id;
    record.driver_state = encode_driver_state(driver_state_for(record));
    if (auto s = co_await save_record(record); !s) co_return s;
    slot.record = record;
  }
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

// ---- helpers -----------------------------------------------------------------------------

ContainerSpec InstanceRuntime::instance_container_spec(const InstanceRecord& record, const InstanceSpec& spec,
                                                       std::vector<Mount> mounts) const {
  const std::string& id = spec.instance_id;
  ContainerSpec cs;
  cs.name = container_name(id);
  cs.image = record.system_images.empty() ? spec.image : record.system_images.back();
  cs.hostname = spec.name;
  cs.labels = {{std::string(kInstallationLabel), installation_id_}, {std::string(kInstanceLabel), id}};
  cs.cpus = spec.cpu;
  cs.memory_bytes = spec.memory_gib * kGiB;
  if (record.holder.id.empty()) {
    cs.network = network_name_;
    cs.ipv4 = record.ipv4;
  } else {
    cs.join_network_of = record.holder.id;  // the engine sends no Hostname in this mode
  }
  cs.init_config_dir = store_.config_dir(id);
  cs.gpu_uuids = effective_gpus(spec);
  if (system_disk_ && system_disk_->enforced) cs.system_disk_gib = spec.system_disk_gib;
  cs.mounts = std::move(mounts);
  return cs;
}

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

InstanceRuntime::Instance& InstanceRuntime::instance_slot(const std::string& instance_id) {
  auto& slot = instances_[instance_id];
  if (!slot) slot = std::make_unique<Instance>();
  return *slot;
}

std::vector<firewall::PublishedPort> InstanceRuntime::published_ports() const {
  std::vector<firewall::PublishedPort> out;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record || slot->record->desired.state != "running") continue;
    for (const auto& p : slot->record->desired.ports) {
      firewall::PublishedPort port;
      port.instance_id = id;
      port.host_port = p.host_port;
      port.container_ip = slot->record->ipv4;
      port.container_port = p.container_port;
      port.protocol = p.protocol;
      for (const auto& cidr : p.allowed) port.allowed.push_back(firewall::SourceRule{cidr});
      out.push_back(std::move(port));
    }
  }
  return out;
}

Status InstanceRuntime::check_ports_free(const InstanceSpec& spec) const {
  for (const auto& [id, slot] : instances_) {
    // Only running instances publish ports (published_ports): a stopped record's ports may
    // already belong to another instance in the store, which is what decides.
    if (!slot->record || id == spec.instance_id || slot->record->desired.state != "running") continue;
    for (const auto& theirs : slot->record->desired.ports) {
      for (const auto& ours : spec.ports) {
        if (ours.host_port == theirs.host_port && ours.protocol == theirs.protocol) {
          return fail(ErrorCode::conflict, "host port " + ours.protocol + "/" +
                                               std::to_string(ours.host_port) +
                                               " is already published for instance " + id);
        }
      }
    }
  }
  return ok();
}

awaitable<Status> InstanceRuntime::apply_firewall() {
  // The snapshot is taken now, on the strand; the single firewall thread applies snapshots
  // in the order they were taken, so the last one applied is the newest.
  auto ports = published_ports();
  // The bridge as the network record has it (persisted, so the guard stays in the table
  // also when a ports-only change is applied while the engine is away).
  firewall::HostGuard guard;
  if (network_ && !network_->bridge.empty()) guard.interfaces.push_back(network_->bridge);
  auto job = [this, ports = std::move(ports), guard = std::move(guard)]() -> Status {
    return options_.apply_ports ? options_.apply_ports(ports) : firewall_.apply(ports, guard);
  };
  co_return co_await offload<Status>(firewall_thread_.get_executor(), std::move(job));
}

bool InstanceRuntime::only_ports_differ(const InstanceSpec& recorded, const InstanceSpec& desired) {
  // Published only while running; a stopped instance's ports are in no table.
  if (recorded.state != "running" || desired.state != "running") return false;
  json::object a = to_json(recorded), b = to_json(desired);
  if (a == b) return false;  // nothing changed: the full ensure (it repairs what drifted)
  a.erase("ports");
  b.erase("ports");
  return a == b;
}

awaitable<Status> InstanceRuntime::apply_ports_change(Instance& slot, InstanceSpec spec, std::int64_t generation) {
  if (auto s = check_ports_free(spec); !s) co_return s;
  const InstanceRecord old = *slot.record;
  InstanceRecord updated = old;
  updated.desired = std::move(spec);
  updated.generation = std::max(updated.generation, generation);
  // Taken in memory at once (no suspension since the check), so no other instance's ensure
  // can claim these host ports meanwhile; the file follows.
  slot.record = updated;
  if (auto s = co_await save_record(updated); !s) {
    slot.record = old;
    co_return s;
  }
  if (auto s = co_await apply_firewall(); !s) {
    // nft applies a whole file or nothing: the table still holds the old record's rules.
    co_await restore_record(slot, old);
    co_return s;
  }
  spdlog::info(R"({{"event":"instance_ports_applied","instance":"{}","generation":{}}})", old.desired.instance_id,
               updated.generation);
  co_return ok();
}

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

awaitable<bool> InstanceRuntime::wait_for_listener(std::string ip, int port, std::chrono::milliseconds limit) {
  boost::system::error_code ec;
  const auto address = net::ip::make_address_v4(ip, ec);
  if (ec) co_return false;
  const net::ip::tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  auto executor = co_await net::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    // A closed port answers at once (RST); a network not up yet would not answer at all,
    // hence the short timeout on each try.
    net::ip::tcp::socket socket(executor);
    net::steady_timer give_up(executor, std::chrono::milliseconds(200));
    boost::system::error_code connected, timed;
    auto which = co_await (socket.async_connect(endpoint, net::redirect_error(use_awaitable, connected)) ||
                           give_up.async_wait(net::redirect_error(use_awaitable, timed)));
    if (which.index() == 0 && !connected) co_return true;
    net::steady_timer pause(executor, std::chrono::milliseconds(20));
    co_await pause.async_wait(net::redirect_error(use_awaitable, timed));
  }
  co_return false;
}

awaitable<void> InstanceRuntime::remove_container_quietly(std::string container_id) {
  auto removed = co_await driver_->remove(container_id);
  if (!removed) {
    spdlog::warn(R"({{"event":"instance_revert_failed","container":"{}","error":{}}})", container_id,
                 error_text(removed.error()));
  }
}

awaitable<void> InstanceRuntime::stop_container_quietly(std::string container_id) {
  auto stopped = co_await driver_->stop(container_id, options_.stop_grace);
  if (!stopped) {
    spdlog::warn(R"({{"event":"instance_revert_failed","container":"{}","error":{}}})", container_id,
                 error_text(stopped.error()));
  }
}

// ---- instance.ensure ---------------------------------------------------------------------

namespace {

struct Secrets {
  std::string authorized_keys;
  std::optional<std::string> password_hash;
  // For an image with Jupyter: its token and base URL, written to config/jupyter_token and
  // config/jupyter_base_url for the init (absent: both files removed).
  std::optional<std::pair<std::string, std::string>> jupyter;
};

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

std::vector<std::string> InstanceRuntime::drift_of(const CreatedWith& cw, const InstanceSpec& spec) const {
  std::vector<std::string> drift;
  if (!cw.image.empty() && cw.image != spec.image) drift.emplace_back("image");
  if (!cw.hostname.empty() && cw.hostname != spec.name) drift.emplace_back("name");
  if (cw.cpu > 0 && std::fabs(cw.cpu - spec.cpu) > 1e-9) drift.emplace_back("cpu");
  if (cw.memory_gib > 0 && cw.memory_gib != spec.memory_gib) drift.emplace_back("memory_gib");
  if (cw.gpu_uuids != effective_gpus(spec)) drift.emplace_back("gpu_uuids");
  if (sorted_disks(cw.data_disks) != sorted_disks(spec.data_disks)) drift.emplace_back("data_disks");
  return drift;
}

int InstanceRuntime::default_max_system_image_layers() {
  if (const char* v = std::getenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != nullptr && *end == '\0' && n > 0 && n < 1000) return static_cast<int>(n);
  }
  return 100;
}

InstanceRuntime::Rebuild InstanceRuntime::rebuild_for(const std::vector<std::string>& drift, int image_layers,
                                                      int max_layers) {
  // The image is what the engine resolved at create; a newer tag never forces a rebuild.
  auto has = [&](std::string_view d) { return std::find(drift.begin(), drift.end(), d) != drift.end(); };
  if (has("name") || has("gpu_uuids") || has("data_disks")) {
    // A commit adds one layer on top of the image the container came from.
    return image_layers + 1 > max_layers ? Rebuild::flatten : Rebuild::commit;
  }
  if (has("cpu") || has("memory_gib")) return Rebuild::update;
  return Rebuild::none;
}

awaitable<int> InstanceRuntime::system_image_layers(const InstanceRecord& record, const InstanceSpec& spec) {
  const std::string image = !record.system_images.empty()      ? record.system_images.back()
                            : !record.created_with.image.empty() ? record.created_with.image
                                                                  : spec.image;
  auto info = co_await driver_->image_inspect(image);
  if (!info || !*info) co_return 0;  // unknown: a commit, as before; the next rebuild sees it
  co_return (*info)->layers;
}

awaitable<Result<std::string>> InstanceRuntime::commit_system_disk(const InstanceRecord& record, bool flatten) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string repo = "gpucloud-system/" + lower(installation_id_) + "-" + lower(record.desired.instance_id);
  const std::string tag = "r" + std::to_string(record.system_images.size() + 1);
  std::map<std::string, std::string> labels{{std::string(kInstallationLabel), installation_id_},
                                            {std::string(kInstanceLabel), record.desired.instance_id}};
  Result<std::string> made;
  if (flatten) {
    made = co_await driver_->flatten(record.container_id, repo, tag, std::move(labels));
  } else {
    made = co_await driver_->commit(record.container_id, repo, tag, std::move(labels));
  }
  if (!made) co_return fail(std::move(made.error()));
  co_return repo + ":" + tag;
}

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
  co_await slot.lock.lock();
  Unlocker guard(slot.lock);
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

  const bool had_record = slot.record.has_value();
  std::optional<InstanceRecord> old_record = slot.record;
  InstanceRecord record;
  if (had_record) {
    record = *slot.record;
  } else {
    record.desired.instance_id = id;
  }
  Revert revert;

  // The steps; each registers its undo in `revert`, run below if a later step fails.
  auto run = [&]() -> awaitable<Result<json::object>> {
    // 1. The container, if it exists: by recorded id, else by name, else by labels.
    auto found = co_await driver_->recover(driver_state_for(record));
    if (!found) co_return fail(std::move(found.error()));
    ContainerStatus container = std::move(*found);

    // 2. The address: kept for the instance's life; a container found without a record
    //    keeps the address it has when that is free.
    //    A new instance on network holders takes one (its address is the holder's); when
    //    none can be had it goes on the bridge itself, as without holders.
    if (!had_record && options_.network_holders && !container.exists) {
      auto holder = co_await take_holder(spec.image);
      if (holder) {
        record.ipv4 = holder->ipv4;
        record.holder = InstanceRecord::Holder{holder->id, holder->name, 0, ""};
        revert.add_sync([this, ip = holder->ipv4] { reserved_ips_.erase(ip); });
        revert.add([this, hid = holder->id]() { return remove_container_quietly(hid); });
      } else {
        spdlog::warn(R"({{"event":"network_holder_unavailable","instance":"{}","error":{},"action":"on the bridge"}})",
                     id, error_text(holder.error()));
      }
    }
    if (!had_record && record.ipv4.empty()) {
      std::string preferred = container.exists ? container.ipv4 : std::string();
      auto ip = co_await allocate_ip(id, std::move(preferred));
      if (!ip) co_return fail(std::move(ip.error()));
      record.ipv4 = *ip;
      revert.add_sync([this, ip = *ip] { reserved_ips_.erase(ip); });
    }

    // 3. The record, before the engine is asked for anything new (a crash after this finds
    //    the container again by name and labels). Host ports are checked here, with no
    //    suspension between the check and the record taking them.
    if (auto s = check_ports_free(spec); !s) co_return fail(std::move(s.error()));
    record.desired = spec;
    record.generation = std::max(record.generation, *generation);
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
    if (!had_record) {
      revert.add([this, &slot, id]() { return forget_record(slot, id); });
    } else {
      // By reference: a rebuild below updates the system images the old record must keep.
      revert.add([this, &slot, &old_record]() { return restore_record(slot, *old_record); });
    }
    if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
    slot.record = record;
    reserved_ips_.erase(record.ipv4);
    fault_point("agent.ensure.after_record_saved");
    const bool on_holder = !record.holder.id.empty();
    if (on_holder && !had_record) fault_point("agent.ensure.after_holder_recorded");

    // 4. The init's inputs (read at every boot; the directory must exist before the engine
    //    is asked to bind-mount it), and the SSH host key in the config directory: made
    //    before a new filesystem first boots, so it is known without reading the container's
    //    log and sshd starts at once. An instance whose key lives on its system disk (made by
    //    an older init, or adopted) keeps that one; so does any instance on a host without
    //    ssh-keygen. A container still to be made gets its key while the engine creates it
    //    (only the start needs it).
    auto config_changed = co_await write_init_config(id, secrets->authorized_keys, secrets->password_hash);
    if (!config_changed) co_return fail(std::move(config_changed.error()));
    // On a holder the engine names the instance after the holder: the init writes this name
    // into /etc/hostname and /etc/hosts (the holder's files, which the instance shares) and
    // the agent sets it in the instance's UTS namespace once it runs (below).
    if (on_holder) {
      if (auto s = co_await write_hostname_file(id, spec.name); !s) co_return fail(std::move(s.error()));
    }
    {
      auto jupyter_job = [dir = store_.config_dir(id), jupyter = secrets->jupyter]() { return write_jupyter_files(dir, jupyter); };
      if (auto s = co_await offload<Status>(state_thread_.get_executor(), std::move(jupyter_job)); !s)
        co_return fail(std::move(s.error()));
    }
    const bool new_filesystem = !container.exists && record.system_images.empty();
    std::string config_host_key;
    auto host_key_step = [&]() -> awaitable<Status> {
      const std::string key_comment = "root@" + spec.name;  // (a named local: g++ 12, see architecture.md)
      if (auto key = co_await instance_host_key(id, key_comment, new_filesystem)) {
        config_host_key = *key;
      } else {
        spdlog::warn(R"({{"event":"instance_host_key_not_made","instance":"{}","error":{}}})", id,
                     error_text(key.error()));
      }
      co_return ok();
    };
    const bool key_with_create = !container.exists;
    if (!key_with_create) {
      (void)co_await host_key_step();
      if (!config_host_key.empty()) record.host_key = config_host_key;
    }

    // 5. The container: create when missing, then start or stop as desired. A stopped
    //    container that cannot take the new hostname, GPUs or size is rebuilt first: its
    //    filesystem (the system disk) becomes an image and a new container is made from it.
    bool created = false, booted = false, rebuilt = false;
    bool cpus_capped = false;
    bool resave = false;
    // A new name on a holder is set in the running container at once (the container is still
    // rebuilt at its next start, as any renamed one: created_with keeps the old name).
    const bool renamed = on_holder && !record.created_with.hostname.empty() && record.created_with.hostname != spec.name;
    // The holder runs before its instance's container is made or started; one that died or
    // restarted under a running container took that container's network with it (restarted
    // below), and one made again (the old one was gone) needs the container made again.
    std::optional<ContainerStatus> holder_now;
    bool holder_moved = false;
    if (on_holder && (spec.state == "running" || !container.exists)) {
      const std::string holder_before = record.holder.id;
      auto h = co_await ensure_holder(record, spec.image);
      if (!h) co_return fail(std::move(h.error()));
      holder_now = std::move(*h);
      if (record.holder.id != holder_before) {
        if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
        slot.record = record;
      }
      holder_moved = container.exists && container.network_mode != "container:" + record.holder.id;
      if (container.exists && container.running && (holder_moved || holder_now->pid != record.holder.pid)) {
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
      if (holder_moved) drift_now.emplace_back("gpu_uuids");  // made again, like a GPU change
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
      if (old_record) old_record->created_with = record.created_with;  // the container has them even if a later step fails
      if (auto s = store_.save_instance(record); !s) co_return fail(std::move(s.error()));
      slot.record = record;
      spdlog::info(R"({{"event":"instance_resized","instance":"{}","cpus":{},"memory_gib":{}}})", id, *applied,
                   spec.memory_gib);
    }
    if (rebuild == Rebuild::commit || rebuild == Rebuild::flatten) {
      auto image = co_await commit_system_disk(record, rebuild == Rebuild::flatten);
      if (!image) co_return fail(std::move(image.error()));
      record.system_images.push_back(*image);
      if (old_record) old_record->system_images = record.system_images;  // kept even if a later step fails
      if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
      slot.record = record;
      fault_point("rebuild.after_commit");
      if (auto s = co_await driver_->remove(record.container_id); !s) co_return fail(std::move(s.error()));
      spdlog::info(R"({{"event":"instance_rebuilding","instance":"{}","system_image":{},"because":{},"flattened":{}}})",
                   id, q(*image), q(fmt::format("{}", fmt::join(drift_before, ","))), rebuild == Rebuild::flatten);
      container.exists = false;
      rebuilt = true;
    }
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
        revert.add([this, id]() { return disks_->detach(id); });
      } else if (container.running) {
        // Running already (an agent restart that could not see it): the disks stay its own.
        co_await disks_->claim(spec.host, id, record.created_with.data_disks);
      }
    }
    if (!container.exists) {
      co_await detect_system_disk_limit();
      ContainerSpec cs = instance_container_spec(record, spec, disk_mounts);
      ContainerSpec retry_spec = cs;
      Result<CreatedContainer> made = fail(ErrorCode::internal, "not created");
      if (key_with_create) {
        auto [keyed, created_now] = co_await (host_key_step() && driver_->create(std::move(cs)));
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
      created = true;
      cpus_capped = made->cpus_capped;
      revert.add([this, cid = made->id]() { return remove_container_quietly(cid); });
      record.container_id = made->id;
      record.driver_state = encode_driver_state(driver_state_for(record));
      if (!rebuilt) record.host_key = config_host_key;  // a new filesystem: "" = the init makes one
      record.created_with =
          CreatedWith{spec.image, spec.name, spec.cpu, spec.memory_gib, effective_gpus(spec), spec.data_disks};
      if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
      slot.record = record;
      container.exists = true;
      container.id = made->id;
      container.running = false;
      container.state = "created";
    }
    bool published = firewall_first;  // step 0 applied this record's table already
    if (spec.state == "running" && !container.running) {
      // 7 (early). The table is applied while the engine starts the container: its rules name
      // the instance's fixed address, so publishing a moment before sshd listens only means
      // an early connection is refused, and the two slowest steps overlap.
      fault_point("agent.ensure.before_firewall_apply");
      auto [started, table] = co_await (driver_->start(record.container_id) && apply_firewall());
      if (!started) co_return fail(std::move(started.error()));
      booted = true;
      if (!created) {
        // A later failure must not leave running what the caller will believe is stopped.
        revert.add([this, cid = record.container_id]() { return stop_container_quietly(cid); });
      }
      if (!table) co_return fail(std::move(table.error()));
      fault_point("agent.ensure.after_firewall_apply");
      published = true;
    } else if (spec.state == "stopped" && container.running) {
      if (auto s = co_await driver_->stop(record.container_id, options_.stop_grace); !s) {
        co_return fail(std::move(s.error()));
      }
    }
    // Stopped: its loop disks are unmounted (kept; a disk.remove or another instance may follow).
    if (spec.state == "stopped" && disks_) co_await disks_->detach(id);

    // 6. What the engine now says, and the host key the init printed at boot.
    auto now = co_await driver_->inspect(record.container_id);
    if (!now) co_return fail(std::move(now.error()));
    if (!now->exists) co_return fail(ErrorCode::conflict, "container " + record.container_id + " vanished");
    if (on_holder && now->running && (booted || renamed)) {
      if (auto s = co_await set_instance_hostname(now->pid, spec.name); !s)
        spdlog::warn(R"({{"event":"instance_hostname_not_set","instance":"{}","error":{}}})", id, error_text(s.error()));
    }
    if (on_holder && booted && holder_now) {
      // What the container joined: another pid later means the holder restarted under it.
      record.holder.pid = holder_now->pid;
      record.holder.started_at = holder_now->started_at;
      resave = true;
    }
    if (now->running) {
      const std::chrono::milliseconds wait = booted ? options_.host_key_wait : std::chrono::milliseconds(0);
      if (config_host_key.empty() && (booted || record.host_key.empty())) {
        std::string key = co_await read_host_key(record.container_id, wait);
        if (!key.empty()) record.host_key = key;
      }
    }
    // A running instance whose keys changed (the control plane sends the key set again when
    // a key is deleted) gets them now, by the init's own installer, not at its next boot.
    if (now->running && !booted && *config_changed) {
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
    if (booted && now->running && publishes_ssh && options_.ssh_listen_wait.count() > 0) {
      if (!co_await wait_for_listener(record.ipv4, 22, options_.ssh_listen_wait))
        spdlog::info(R"({{"event":"instance_ssh_not_listening","instance":"{}","waited_ms":{}}})", id,
                     options_.ssh_listen_wait.count());
    }

    // Saved again only when the log gave a host key: everything else was saved above.
    if (!slot.record || slot.record->host_key != record.host_key || resave) {
      if (auto s = co_await save_record(record); !s) co_return fail(std::move(s.error()));
      slot.record = record;
    }

    // 7. Publish: the whole table, from every running instance of this installation (done
    //    above, during the start, when this call booted the container).
    if (!published) {
      fault_point("agent.ensure.before_firewall_apply");
      if (auto s = co_await apply_firewall(); !s) co_return fail(std::move(s.error()));
      fault_point("agent.ensure.after_firewall_apply");
    }

    const double applied = static_cast<double>(now->nano_cpus) / 1e9;
    if (!created) cpus_capped = now->nano_cpus > 0 && applied + 1e-6 < record.created_with.cpu;
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
        {"created", created},
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
        {"cpus_capped", cpus_capped},
        {"memory_bytes", now->memory_bytes},
        {"config_changed", *config_changed},
        {"ports", std::move(ports)},
        // Desired fields the existing container cannot take (it needs recreating).
        {"drift", std::move(drift)},
        {"rebuilt", rebuilt},
    };
    co_return observed;
  };

  // (A named lambda, not one written inside the co_await: g++ 12 can destroy such a
  // temporary twice. `run` and what it refers to outlive the coroutine it returns.)
  auto result = co_await run();
  // A holder taken is replaced once this command is done, so the refill's engine work never
  // competes with the create it served.
  schedule_refill();
  if (!result) {
    co_await revert.undo();
    // The table may have been applied with this call's record: bring it back in line.
    auto reapplied = co_await apply_firewall();
    if (!reapplied) {
      spdlog::warn(R"({{"event":"instance_firewall_reapply_failed","error":{}}})",
                   error_text(reapplied.error()));
    }
    co_return fail(std::move(result.error()));
  }
  revert.success();
  spdlog::info(R"({{"event":"instance_ensured","instance":"{}","state":"{}","container":"{}"}})", id,
               spec.state, record.container_id);
  co_return result;
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
    spdlog::warn(R"({{"event":"instance_revert_failed","instance":"{}","error":{}}})", id, error_text(s.error()));
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
  co_await slot.lock.lock();
  Unlocker guard(slot.lock);
  if (auto s = co_await check_fence(slot, id, *generation); !s) co_return fail(std::move(s.error()));
  const std::int64_t removed_at = std::max(*generation, slot.record ? slot.record->generation : 0);

  json::array removed;
  if (slot.record && !slot.record->container_id.empty()) {
    if (auto s = co_await driver_->remove(slot.record->container_id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(slot.record->container_id);
  }
  // Any other container of this instance (a crash between create and record, a copy made by
  // hand with our labels).
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_},
                                            {std::string(kInstanceLabel), id}};
  auto others = co_await driver_->list(std::move(filter));
  if (!others) co_return fail(std::move(others.error()));
  for (const auto& c : *others) {
    if (auto s = co_await driver_->remove(c.id); !s) co_return fail(std::move(s.error()));
    removed.emplace_back(c.id);
  }
  auto by_name = co_await driver_->inspect(container_name(id));
  if (by_name && by_name->exists && by_name->name == container_name(id)) {
    if (auto s = co_await driver_->remove(by_name->id); !s) co_return fail(std::move(s.error()));
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

// ---- image.save --------------------------------------------------------------------------

awaitable<void> InstanceRuntime::detect_system_disk_limit() {
  if (system_disk_) co_return;
  auto info = co_await driver_->fingerprint();
  if (!info) co_return;  // asked again next time
  storage_driver_ = info->storage_driver;
  system_disk_ = system_disk_limit_for(info->storage_driver);
  spdlog::info(R"({{"event":"system_disk_limit","storage_driver":{},"enforced":{}}})", q(storage_driver_),
               system_disk_->enforced);
}

awaitable<Result<json::object>> InstanceRuntime::save_image(json::object desired) {
  auto request = save_request_from_json(desired, installation_id_);
  if (!request) co_return fail(std::move(request.error()));
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  const std::string id = request->instance_id;
  Instance& slot = instance_slot(id);
  // Under the instance's lock: no stop, start or rebuild moves the container meanwhile.
  co_await slot.lock.lock();
  Unlocker guard(slot.lock);
  if (!slot.record || slot.record->container_id.empty())
    co_return fail(ErrorCode::not_found, "instance " + id + " has no container on this host");
  if (request->base.empty()) request->base = slot.record->desired.image;
  std::string container = slot.record->container_id;
  ++saves_in_flight_;
  auto saved = co_await images_->save(std::move(container), std::move(*request));
  --saves_in_flight_;
  co_return saved;
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

}  // namespace gpucloud::agent
