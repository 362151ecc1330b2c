#include "agent/local_agent.h"

#include "agent/disk_pool_probe.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <spdlog/spdlog.h>

#include "agent/gpu/nvml_library.h"
#include "agent/gpu/simulated_inventory.h"
#include "agent/lxcfs.h"
#include "core/offload.h"

namespace gpucloud::agent {
namespace asio = boost::asio;

namespace {
constexpr std::size_t kRememberedOutcomes = 4096;

std::string machine_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "node-1";
  std::string name;
  for (char c : std::string(buf)) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? static_cast<char>(std::tolower(c)) : '-';
  return name;
}

std::int64_t machine_memory_gib() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 1;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(pages) * page / (1LL << 30));
}

GpuInfo to_info(const gpu::GpuDevice& d) {
  return GpuInfo{d.index, d.uuid, d.model, d.memory_bytes, d.pci_bus_id, d.health, d.simulated};
}

std::string quoted_for_log(const std::string& text) { return boost::json::serialize(boost::json::string(text)); }

// nvmlErrorString(NVML_ERROR_GPU_IS_LOST), inside every error a call on a fallen GPU gives.
constexpr std::string_view kGpuLostError = "GPU is lost";
// The health the control plane shows for a GPU its host no longer reports (market::kGpuMissing).
constexpr const char* kMissingHealth = "missing";

bool same_gpus(const std::vector<GpuInfo>& a, const std::vector<GpuInfo>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const GpuInfo& x, const GpuInfo& y) {
    return x.index == y.index && x.uuid == y.uuid && x.health == y.health && x.model == y.model &&
           x.memory_bytes == y.memory_bytes && x.pci_bus_id == y.pci_bus_id && x.simulated == y.simulated;
  });
}

// A host's GPUs after a rediscovery, as a heartbeat must say them: a heartbeat only updates
// the health of UUIDs the host registered, so each GPU of `last` stays in the list. One that
// NVML still counts but cannot name (a GPU fallen off the bus answers "GPU is lost" from its
// UUID on) keeps its identity at its index, with NVML's error as health; one not counted
// any more is "missing". A new UUID is listed too (the registry records it at the host's
// next registration).
std::vector<GpuInfo> merge_discovery(const std::vector<GpuInfo>& last, const std::vector<gpu::GpuDevice>& found) {
  std::set<std::string> found_uuids;
  for (const auto& d : found)
    if (!d.uuid.empty()) found_uuids.insert(d.uuid);
  std::vector<const GpuInfo*> unfound;  // GPUs of `last` not found by UUID
  for (const auto& g : last)
    if (!g.uuid.empty() && !found_uuids.count(g.uuid)) unfound.push_back(&g);

  std::vector<GpuInfo> out;
  for (const auto& d : found) {
    GpuInfo info = to_info(d);
    if (info.uuid.empty()) {
      auto known = std::find_if(unfound.begin(), unfound.end(),
                                [&](const GpuInfo* g) { return g && g->index == d.index; });
      if (known != unfound.end()) {
        info = **known;
        info.health = d.healthy() ? "no UUID reported" : d.health;
        *known = nullptr;
      }
    }
    out.push_back(std::move(info));
  }
  // Two GPUs at one index make the registry mark both unhealthy: a missing GPU whose index
  // another now has is listed past the others (a heartbeat never moves a recorded index).
  std::set<int> taken;
  for (const auto& g : out) taken.insert(g.index);
  for (const GpuInfo* g : unfound) {
    if (!g) continue;
    GpuInfo info = *g;
    info.health = kMissingHealth;
    if (taken.count(info.index)) info.index = *taken.rbegin() + 1;
    taken.insert(info.index);
    out.push_back(std::move(info));
  }
  return out;
}

std::string gpus_for_log(const std::vector<GpuInfo>& gpus) {
  boost::json::array out;
  for (const auto& g : gpus) out.push_back(boost::json::object{{"index", g.index}, {"uuid", g.uuid}, {"health", g.health}});
  return boost::json::serialize(out);
}
}  // namespace

// The host's source as the agent uses it: notes each index whose sample found the GPU lost
// (on the sampling thread), for the loop to read after the round.
class LocalAgent::WatchedInventory final : public gpu::GpuInventorySource {
 public:
  explicit WatchedInventory(std::unique_ptr<gpu::GpuInventorySource> source) : source_(std::move(source)) {}
  Result<std::vector<gpu::GpuDevice>> discover() override { return source_->discover(); }
  Result<gpu::GpuSample> sample(int index) override {
    auto sample = source_->sample(index);
    if (!sample && sample.error().detail.find(kGpuLostError) != std::string::npos) {
      std::lock_guard lock(mu_);
      lost_.insert(index);
    }
    return sample;
  }
  std::string_view kind() const override { return source_->kind(); }
  Result<std::vector<gpu::GpuProcess>> processes(int index) override { return source_->processes(index); }
  std::set<int> take_lost() {
    std::lock_guard lock(mu_);
    return std::exchange(lost_, {});
  }

 private:
  std::unique_ptr<gpu::GpuInventorySource> source_;
  std::mutex mu_;
  std::set<int> lost_;
};

struct LocalAgent::Watch {
  explicit Watch(asio::any_io_executor loop) : timer(loop) {}
  bool stopped = false;         // set by the agent's destructor
  LocalAgent* agent = nullptr;  // valid while !stopped
  asio::steady_timer timer;
  std::chrono::milliseconds interval{};
  bool woken = false;  // a sample found a listed GPU lost: rediscover without waiting
};

struct LocalAgent::Sampling {
  explicit Sampling(asio::any_io_executor loop) : timer(loop) {}
  // Set by the agent's destructor: a round in flight then ends without touching the agent.
  bool stopped = false;
  LocalAgent* agent = nullptr;  // valid while !stopped
  asio::steady_timer timer;
  std::chrono::milliseconds interval{};
  // Touched only by the round running on the sampling thread.
  std::shared_ptr<sampling::InstanceSampler> sampler;
  std::vector<std::string> stale;  // from the last round, for the source
  std::string last_source_error;   // logged once per distinct error
};

std::vector<config::Host> LocalAgent::effective_hosts(const config::Config& config) {
  if (!config.hosts.empty()) return config.hosts;
  config::Host host;
  host.name = machine_name();
  host.zone = config.zones.empty() ? "zone-a" : config.zones.front().name;
  host.cpu = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  host.memory_gib = machine_memory_gib();
  return {host};
}

LocalAgent::LocalAgent(asio::any_io_executor loop, const config::Config& config,
                       std::chrono::milliseconds heartbeat_interval)
    : loop_(loop),
      heartbeat_interval_(heartbeat_interval),
      disk_pool_path_(config.data_dir + "/agent"),
      disk_overcommit_(config.agent.disk_overcommit),
      heartbeat_timer_(loop),
      sample_interval_(std::chrono::duration_cast<std::chrono::milliseconds>(config.monitoring.sample_interval)),
      inventory_interval_(heartbeat_interval) {
  for (auto& host : effective_hosts(config)) {
    ServedHost served;
    std::unique_ptr<gpu::GpuInventorySource> source;
    if (host.uses_nvml()) {
      source = std::make_unique<gpu::NvmlInventory>();
    } else {
      std::vector<gpu::SimulatedGpuSpec> specs;
      for (const auto& g : host.simulated_gpus) specs.push_back({g.model, g.memory_gib, g.count});
      source = std::make_unique<gpu::SimulatedInventory>(host.name, std::move(specs));
    }
    served.inventory = std::make_unique<WatchedInventory>(std::move(source));
    served.config = std::move(host);
    hosts_.push_back(std::move(served));
  }
}

LocalAgent::~LocalAgent() {
  heartbeat_timer_.cancel();
  if (sampling_) {
    sampling_->stopped = true;
    sampling_->timer.cancel();
  }
  if (watch_) {
    watch_->stopped = true;
    watch_->timer.cancel();
  }
  // A round or a rediscovery still reading on the sampling thread uses the hosts' inventories: wait for it.
  sampling_thread_.join();
}

HostInventory LocalAgent::discover(ServedHost& host) {
  HostInventory inv;
  inv.name = host.config.name;
  inv.zone = host.config.zone;
  inv.public_address = host.config.public_address;
  inv.cpu = host.config.cpu;
  inv.memory_gib = host.config.memory_gib;
  inv.port_min = host.config.port_min;
  inv.port_max = host.config.port_max;
  inv.engine = host.config.engine;
  inv.simulated = !host.config.uses_nvml();
  inv.inventory_source = std::string(host.inventory->kind());
  auto devices = host.inventory->discover();
  if (!devices) {
    // No driver is a normal state of a CPU-only machine: the host serves no-GPU instances.
    inv.inventory_error = devices.error().detail;
    inv.inventory_source = "none";
    spdlog::info(R"({{"event":"gpu_inventory","host":"{}","gpus":0,"note":"{}"}})", inv.name, devices.error().detail);
  } else {
    for (const auto& d : *devices) inv.gpus.push_back(to_info(d));
  }
  if (gpu_injector_) {
    gpu_injector_->set_host(inv.name, inv.simulated, devices ? *devices : std::vector<gpu::GpuDevice>{});
    if (auto mode = gpu_injector_->host_mode(inv.name)) {
      inv.gpu_injection = std::string(gpu::to_string(mode->mode));
      inv.gpu_injection_reason = mode->reason;
      inv.driver_version = mode->driver_version;
      spdlog::info(R"({{"event":"gpu_injection","host":"{}","mode":"{}","reason":{}}})", inv.name, inv.gpu_injection,
                   quoted_for_log(mode->reason));
    }
  }
  {
    auto lxcfs = probe_lxcfs(lxcfs_dir_);
    inv.lxcfs_available = lxcfs.available;
    inv.lxcfs_reason = lxcfs.reason;
  }
  inv.disk_pool = measure_pool();
  host.last = inv;
  return inv;
}

std::optional<DiskPool> LocalAgent::measure_pool() const {
  auto pool = measure_disk_pool(disk_pool_path_, disk_overcommit_);
  if (!pool) {
    spdlog::warn(R"({{"event":"disk_pool_unmeasured","error":{}}})", quoted_for_log(pool.error().detail));
    return std::nullopt;
  }
  return *pool;
}

asio::awaitable<Result<std::vector<HostInventory>>> LocalAgent::register_hosts() {
  std::vector<HostInventory> out;
  for (auto& host : hosts_) out.push_back(discover(host));
  schedule_heartbeat();
  start_sampling();
  start_watching();
  co_return out;
}

bool LocalAgent::set_inventory_source(const std::string& host_name, std::unique_ptr<gpu::GpuInventorySource> source) {
  for (auto& host : hosts_) {
    if (host.config.name != host_name) continue;
    host.inventory = std::make_unique<WatchedInventory>(std::move(source));
    return true;
  }
  return false;
}

// Simulated inventories never change; a host registered without GPUs (no driver, a CPU-only
// machine) has none a heartbeat could speak of (a beat never adds one): neither is watched.
bool LocalAgent::watched(const ServedHost& host) { return host.inventory->kind() != "simulated" && !host.last.gpus.empty(); }

void LocalAgent::start_watching() {
  if (watch_ || std::none_of(hosts_.begin(), hosts_.end(), watched)) return;
  watch_ = std::make_shared<Watch>(loop_);
  watch_->agent = this;
  watch_->interval = std::max(inventory_interval_, std::chrono::milliseconds(10));
  asio::co_spawn(loop_, watch_forever(watch_), asio::detached);
}

asio::awaitable<void> LocalAgent::watch_forever(std::shared_ptr<Watch> w) {
  using Found = std::vector<Result<std::vector<gpu::GpuDevice>>>;
  for (;;) {
    if (!w->woken) {
      w->timer.expires_after(w->interval);
      boost::system::error_code ec;
      co_await w->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (w->stopped) co_return;
    w->woken = false;
    try {
      std::vector<std::size_t> which;
      std::vector<gpu::GpuInventorySource*> sources;
      for (std::size_t i = 0; i < w->agent->hosts_.size(); ++i) {
        if (!watched(w->agent->hosts_[i])) continue;
        which.push_back(i);
        sources.push_back(w->agent->hosts_[i].inventory.get());
      }
      // On the sampling thread: NVML calls may block, and never overlap a sampling round.
      auto job = [sources]() -> Found {
        Found out;
        for (auto* source : sources) {
          try {
            out.push_back(source->discover());
          } catch (const std::exception& e) {
            out.push_back(fail(ErrorCode::internal, std::string("GPU discovery threw: ") + e.what()));
          }
        }
        return out;
      };
      auto found = co_await offload<Found>(w->agent->sampling_thread_.get_executor(), std::move(job));
      if (w->stopped) co_return;
      for (std::size_t k = 0; k < which.size(); ++k) w->agent->apply_discovery(w->agent->hosts_[which[k]], std::move(found[k]));
    } catch (const std::exception& e) {
      spdlog::error(R"({{"event":"gpu_rediscovery_failed","error":{}}})", quoted_for_log(e.what()));
    }
  }
}

void LocalAgent::apply_discovery(ServedHost& host, Result<std::vector<gpu::GpuDevice>> found) {
  std::vector<GpuInfo> gpus;
  if (!found) {
    // One failed enumeration says nothing about any GPU (the list stays); a driver that keeps
    // failing makes them unusable, so they are then reported with its error.
    ++host.discovery_failures;
    if (found.error().detail != host.last_discovery_error) {
      host.last_discovery_error = found.error().detail;
      spdlog::warn(R"({{"event":"gpu_rediscovery_failed","host":"{}","error":{}}})", host.config.name,
                   quoted_for_log(host.last_discovery_error));
    }
    if (host.discovery_failures < kDiscoveryFailuresBeforeUnhealthy) return;
    gpus = host.last.gpus;
    for (auto& g : gpus)
      if (g.health != kMissingHealth) g.health = found.error().detail;
  } else {
    if (host.discovery_failures > 0)
      spdlog::info(R"({{"event":"gpu_rediscovery_works_again","host":"{}"}})", host.config.name);
    host.discovery_failures = 0;
    host.last_discovery_error.clear();
    gpus = merge_discovery(host.last.gpus, *found);
    // Minor numbers follow the devices (a replaced card may have another node).
    if (gpu_injector_) gpu_injector_->set_host(host.config.name, !host.config.uses_nvml(), *found);
  }
  if (same_gpus(gpus, host.last.gpus)) return;
  spdlog::warn(R"({{"event":"gpu_inventory_changed","host":"{}","was":{},"now":{}}})", host.config.name,
               gpus_for_log(host.last.gpus), gpus_for_log(gpus));
  host.last.gpus = std::move(gpus);
  send_heartbeat(host);
}

void LocalAgent::note_lost_samples() {
  bool wake = false;
  for (auto& host : hosts_) {
    for (int index : host.inventory->take_lost()) {
      // Already listed unhealthy: its samples keep failing, and that is no news.
      wake = wake || std::any_of(host.last.gpus.begin(), host.last.gpus.end(),
                                 [&](const GpuInfo& g) { return g.index == index && g.health == "ok"; });
    }
  }
  if (wake && watch_) {
    watch_->woken = true;
    watch_->timer.cancel();
  }
}

void LocalAgent::start_sampling() {
  if (sampling_ || !sample_sink_) return;
  sampling_ = std::make_shared<Sampling>(loop_);
  sampling_->agent = this;
  sampling_->interval = std::max(sample_interval_, std::chrono::milliseconds(10));
  sampling_->sampler = std::make_shared<sampling::InstanceSampler>(sampling::CgroupReader(sampling_proc_root_));
  asio::co_spawn(loop_, sample_forever(sampling_), asio::detached);
}

std::vector<sampling::SampledHost> LocalAgent::sampled_hosts() const {
  std::vector<sampling::SampledHost> out;
  for (const auto& host : hosts_) {
    out.push_back({host.config.name, host.inventory.get(), host.last.gpus, host.last.inventory_error});
  }
  return out;
}

asio::awaitable<void> LocalAgent::sample_forever(std::shared_ptr<Sampling> s) {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now() + s->interval;
  for (;;) {
    s->timer.expires_at(next);
    boost::system::error_code ec;
    co_await s->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (s->stopped) co_return;
    try {
      std::vector<sampling::SampleTarget> targets;
      if (s->agent->sample_source_) {
        auto source = s->agent->sample_source_;  // the agent may go while it runs
        std::vector<std::string> stale = std::move(s->stale);
        s->stale.clear();
        auto asking = source(std::move(stale));
        auto listed = co_await std::move(asking);
        if (s->stopped) co_return;
        if (listed) {
          targets = std::move(*listed);
          s->last_source_error.clear();
        } else if (listed.error().detail != s->last_source_error) {
          s->last_source_error = listed.error().detail;
          spdlog::warn(R"({{"event":"sample_source_failed","error":{}}})", quoted_for_log(s->last_source_error));
        }
      }
      auto round_job = [sampler = s->sampler, hosts = s->agent->sampled_hosts(),
                        targets = std::move(targets)]() -> sampling::SamplingRound {
        // Named, so `top -H` and the sampling bench can tell it apart.
        thread_local bool named = (pthread_setname_np(pthread_self(), "gpucloud-sample"), true);
        (void)named;
        try {
          return sampler->round(hosts, targets);
        } catch (const std::exception& e) {
          spdlog::error(R"({{"event":"sample_round_failed","error":{}}})", quoted_for_log(e.what()));
          return {};
        }
      };
      auto round = co_await offload<sampling::SamplingRound>(s->agent->sampling_thread_.get_executor(),
                                                             std::move(round_job));
      if (s->stopped) co_return;
      s->stale = std::move(round.stale);
      s->agent->note_lost_samples();
      for (auto& report : round.reports) {
        if (s->stopped || !s->agent->sample_sink_) break;
        s->agent->sample_sink_(std::move(report));
      }
    } catch (const std::exception& e) {
      spdlog::error(R"({{"event":"sample_round_failed","error":{}}})", quoted_for_log(e.what()));
    }
    if (s->stopped) co_return;
    // Steady spacing; a round that overran its interval is followed one interval after it
    // ended, so rounds never pile up.
    next += s->interval;
    if (const auto now = Clock::now(); next <= now) next = now + s->interval;
  }
}

void LocalAgent::schedule_heartbeat() {
  heartbeat_timer_.expires_after(heartbeat_interval_);
  heartbeat_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (const auto& host : hosts_) send_heartbeat(host);
    schedule_heartbeat();
  });
}

void LocalAgent::send_heartbeat(const ServedHost& host) {
  if (heartbeat_sink_) heartbeat_sink_(Heartbeat{host.config.name, ++heartbeat_sequence_, host.last.gpus, measure_pool()});
}

asio::awaitable<Result<std::unique_ptr<TerminalSession>>> LocalAgent::open_terminal(std::string host_name,
                                                                                   std::string instance_id, int rows,
                                                                                   int cols) {
  if (!terminal_opener_) co_return fail(ErrorCode::unavailable, "this agent has no instance runtime");
  co_return co_await terminal_opener_(std::move(instance_id), rows, cols);
}

asio::awaitable<Result<std::unique_ptr<TerminalSession>>> LocalAgent::open_connection(std::string host_name,
                                                                                     std::string instance_id, int port) {
  (void)host_name;
  if (!connection_opener_) co_return fail(ErrorCode::unavailable, "this agent has no instance runtime");
  co_return co_await connection_opener_(std::move(instance_id), port);
}

asio::awaitable<Result<CommandOutcome>> LocalAgent::execute(Command command) {
  if (auto it = outcomes_.find(command.id); it != outcomes_.end()) co_return it->second;
  auto handler = handlers_.find(command.kind);
  CommandOutcome outcome;
  if (handler == handlers_.end()) {
    outcome = failed_outcome(command.id, Error{ErrorCode::invalid_argument, "unknown command " + command.kind, {}, 0});
  } else {
    auto result = co_await handler->second(command);
    outcome = result ? std::move(*result) : failed_outcome(command.id, result.error());
  }
  outcome.command_id = command.id;
  // Only what was done is remembered: a command that failed (the engine away, say) runs
  // again when the control plane retries it under the same id.
  if (!outcome.ok) co_return outcome;
  outcomes_[command.id] = outcome;
  outcome_order_.push_back(command.id);
  if (outcome_order_.size() > kRememberedOutcomes) {
    outcomes_.erase(outcome_order_.front());
    outcome_order_.pop_front();
  }
  co_return outcome;
}

}  // namespace gpucloud::agent
