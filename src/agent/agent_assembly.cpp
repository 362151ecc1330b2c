#include "agent/agent_assembly.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/gpu/gpu_injector.h"
#include "agent/init_script.h"
#include "agent/runtime/docker_engine_driver.h"
#include "agent/runtime/uplink_mtu.h"

namespace gpucloud::agent {
namespace asio = boost::asio;

namespace {

// The instance runtime on this machine's Docker Engine (all hosts of an all-in-one daemon
// share it). The init script is written out from the binary at every start.
Result<std::unique_ptr<InstanceRuntime>> make_instance_runtime(asio::io_context& io, const config::Config& cfg,
                                                               const std::string& installation_id,
                                                               std::shared_ptr<gpu::GpuInjector> gpu_injector) {
  auto state_dir = std::filesystem::path(cfg.data_dir) / "agent";
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  auto init_path = state_dir / "gpucloud-init.sh";
  {
    auto tmp = init_path.string() + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return fail(ErrorCode::internal, "cannot write " + tmp);
    std::fputs(kInitScript, f);
    std::fclose(f);
    std::filesystem::permissions(tmp, std::filesystem::perms(0755), ec);
    std::filesystem::rename(tmp, init_path, ec);
    if (ec) return fail(ErrorCode::internal, "cannot write " + init_path.string() + ": " + ec.message());
  }
  std::string engine = LocalAgent::effective_hosts(cfg).front().engine;
  DockerEngineDriver::Options options;
  if (engine.rfind("unix://", 0) == 0) options.engine.socket_path = engine.substr(7);
  options.init_path = init_path.string();
  auto driver = std::make_unique<DockerEngineDriver>(io.get_executor(), options);
  InstanceRuntime::Options runtime_options;
  runtime_options.network_holders = cfg.agent.network_holders;
  runtime_options.network_pool_size = cfg.agent.network_pool_size;
  runtime_options.network_mtu = bridge_mtu_for(uplink_mtu());
  runtime_options.gpu_injector = std::move(gpu_injector);
  runtime_options.lxcfs_dir = cfg.agent.lxcfs_dir;
  if (cfg.agent.system_disk_filesystems)
    runtime_options.layer_filesystems = std::make_shared<LayerFilesystems>((state_dir / "system-disks").string());
  return std::make_unique<InstanceRuntime>(io.get_executor(), installation_id, state_dir.string(), std::move(driver),
                                           init_path.string(), "gpucloud-" + installation_id, runtime_options);
}

// Runs `io` until `work` has finished (nothing is served yet), then readies `io` again.
Status run_until_done(asio::io_context& io, asio::awaitable<Status> work, const char* what) {
  std::optional<Status> done;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr e, Status s) {
    done = e ? Status(fail(ErrorCode::internal, std::string(what) + " threw")) : std::move(s);
  });
  while (!done && io.run_one() > 0) {
  }
  io.restart();  // run_one() may have found no more work, which stops the context
  if (!done) return fail(ErrorCode::internal, std::string(what) + " did not finish");
  return *done;
}

void note_disks_unavailable(const Error& error) {
  spdlog::warn(R"({{"event":"disks_unavailable","detail":{}}})",
               boost::json::serialize(boost::json::value(boost::json::string(error.detail))));
}

void note_runtime_unavailable(const Error& error) {
  spdlog::warn(R"({{"event":"runtime_unavailable","detail":{}}})",
               boost::json::serialize(boost::json::value(boost::json::string(error.detail))));
}

}  // namespace

Result<AgentStack> build_agent_stack(asio::io_context& io, const config::Config& config,
                                     const std::string& installation_id, bool start) {
  AgentStack stack;
  stack.agent = std::make_unique<LocalAgent>(io.get_executor(), config);
  // GPU injection ([agent] gpu_injection): the driver's files are looked for once, before
  // serving (ldconfig runs here); the engine's runtimes come with the runtime's start, each
  // host's GPUs with the agent's registration.
  auto gpu_injector = std::make_shared<gpu::GpuInjector>(
      gpu::GpuInjector::Settings{config.agent.gpu_injection, config.agent.nvidia_driver_root, config.agent.dev_root});
  gpu_injector->detect_driver(gpu::nvml_library_dir());
  stack.agent->set_gpu_injector(gpu_injector);
  stack.agent->set_lxcfs_dir(config.agent.lxcfs_dir);
  auto runtime = make_instance_runtime(io, config, installation_id, gpu_injector);
  if (!runtime) return fail(runtime.error());
  stack.runtime = std::move(*runtime);
  stack.runtime->register_handlers(*stack.agent);
  stack.runtime->register_sample_source(*stack.agent);  // the running instances the sampler reads
  // Data disks: each host's disk driver (started before the instance runtime re-attaches, so
  // the mounts of running instances are known when stale ones are cleaned).
  std::vector<DiskRuntime::HostDriver> disk_hosts;
  for (const auto& h : LocalAgent::effective_hosts(config)) disk_hosts.push_back({h.name, h.disk_driver});
  stack.disks = std::make_unique<DiskRuntime>(io.get_executor(), (std::filesystem::path(config.data_dir) / "agent").string(),
                                              std::move(disk_hosts));
  stack.disks->register_handlers(*stack.agent);
  stack.runtime->set_disk_runtime(stack.disks.get());
  InstanceRuntime* runtime_ptr = stack.runtime.get();
  stack.agent->set_terminal_opener([runtime_ptr](std::string instance_id, int rows, int cols) {
    return runtime_ptr->open_terminal(std::move(instance_id), rows, cols);
  });
  stack.agent->set_connection_opener([runtime_ptr](std::string instance_id, int port) {
    return runtime_ptr->open_connection(std::move(instance_id), port);
  });
  if (!start) {
    stack.runtime->hold_start();
    return stack;
  }
  if (auto s = run_until_done(io, stack.disks->start(), "disk runtime start"); !s) note_disks_unavailable(s.error());
  // Re-attach before serving: load the agent's state, ensure the network, re-apply the
  // firewall. Without an engine the agent still serves (instances then fail with a reason).
  if (auto s = run_until_done(io, stack.runtime->start(), "runtime start"); !s) note_runtime_unavailable(s.error());
  return stack;
}

asio::awaitable<void> start_agent_stack(AgentStack* stack) {
  if (auto s = co_await stack->disks->start(); !s) note_disks_unavailable(s.error());
  if (auto s = co_await stack->runtime->start(); !s) note_runtime_unavailable(s.error());
}

void report_runtime_changes(InstanceRuntime& runtime, LocalAgent& agent) {
  LocalAgent* to = &agent;
  runtime.report_changes_to([to](ChangeReport report) { to->report_changes(std::move(report)); });
}

}  // namespace gpucloud::agent
