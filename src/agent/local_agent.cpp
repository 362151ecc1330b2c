#include "agent/local_agent.h"

#include <pthread.h>
#include <unistd.h>

#include <exception>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <spdlog/spdlog.h>

#include "agent/gpu/nvml_library.h"
#include "agent/gpu/simulated_inventory.h"
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
}  // namespace

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
      heartbeat_timer_(loop),
      sample_interval_(std::chrono::duration_cast<std::chrono::milliseconds>(config.monitoring.sample_interval)) {
  for (auto& host : effective_hosts(config)) {
    ServedHost served;
    if (host.uses_nvml()) {
      served.inventory = std::make_unique<gpu::NvmlInventory>();
    } else {
      std::vector<gpu::SimulatedGpuSpec> specs;
      for (const auto& g : host.simulated_gpus) specs.push_back({g.model, g.memory_gib, g.count});
      served.inventory = std::make_unique<gpu::SimulatedInventory>(host.name, std::move(specs));
    }
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
  // A round still reading on the sampling thread uses the hosts' inventories: wait for it.
  sampling_thread_.join();
}

HostInventory LocalAgent::discover(ServedHost& host) {
  HostInventory inv;
  inv.name = host.config.name;
  inv.zone = host.config.zone;
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
  host.last = inv;
  return inv;
}

asio::awaitable<Result<std::vector<HostInventory>>> LocalAgent::register_hosts() {
  std::vector<HostInventory> out;
  for (auto& host : hosts_) out.push_back(discover(host));
  schedule_heartbeat();
  start_sampling();
  co_return out;
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
    if (heartbeat_sink_) {
      for (auto& host : hosts_) heartbeat_sink_(Heartbeat{host.config.name, ++heartbeat_sequence_, host.last.gpus});
    }
    schedule_heartbeat();
  });
}

asio::awaitable<Result<std::unique_ptr<TerminalSession>>> LocalAgent::open_terminal(std::string host_name,
                                                                                   std::string instance_id, int rows,
                                                                                   int cols) {
  if (!terminal_opener_) co_return fail(ErrorCode::unavailable, "this agent has no instance runtime");
  co_return co_await terminal_opener_(std::move(instance_id), rows, cols);
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
