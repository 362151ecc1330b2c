#include "agent/local_agent.h"

#include <thread>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "agent/gpu/nvml_library.h"
#include "agent/gpu/simulated_inventory.h"

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
}  // namespace

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
    : loop_(loop), heartbeat_interval_(heartbeat_interval), heartbeat_timer_(loop) {
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

LocalAgent::~LocalAgent() { heartbeat_timer_.cancel(); }

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
  co_return out;
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
