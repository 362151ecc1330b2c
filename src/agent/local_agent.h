#pragma once
// The in-process agent of all-in-one mode: serves every [[hosts]] entry of the config on
// this machine (each with its own inventory, CPU, memory and port range), keeps its own
// state, and answers commands through the same interface a remote agent would.
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "agent/gpu/gpu_inventory.h"
#include "agent/host_agent.h"
#include "agent/sampling/instance_sampler.h"
#include "agent/sampling/sample_target.h"
#include "config/config.h"

namespace gpucloud::agent {

// Handles one kind of command ("instance.ensure", ...); registered by the runtime layers.
using CommandHandler = std::function<boost::asio::awaitable<Result<CommandOutcome>>(const Command&)>;

class LocalAgent : public HostAgent {
 public:
  LocalAgent(boost::asio::any_io_executor loop, const config::Config& config,
             std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(5));
  ~LocalAgent() override;

  boost::asio::awaitable<Result<std::vector<HostInventory>>> register_hosts() override;
  boost::asio::awaitable<Result<CommandOutcome>> execute(Command command) override;
  void on_heartbeat(std::function<void(Heartbeat)> sink) override { heartbeat_sink_ = std::move(sink); }

  // Sampling: once the control plane set a sink and registered, every [monitoring]
  // sample_interval (steady clock) one round reads every served host's real GPUs (NVML) and
  // each running instance the sample source names (its cgroup's CPU and memory, its GPUs),
  // on a thread of its own; the sink gets one SampleReport per host, on the loop. Rounds
  // never overlap: a slow one delays the next.
  void on_samples(std::function<void(SampleReport)> sink) override { sample_sink_ = std::move(sink); }
  // Where the running instances come from (InstanceRuntime::register_sample_source); none:
  // rounds report the hosts' GPUs only.
  void set_sample_source(sampling::SampleSource source) { sample_source_ = std::move(source); }
  // Tests and benches: another interval than the config's (before register_hosts).
  void set_sample_interval(std::chrono::milliseconds interval) { sample_interval_ = interval; }
  // Tests: read cgroups through this /proc instead (a fake tree; see sampling/cgroup_reader.h).
  void set_sampling_proc_root(std::string proc_root) { sampling_proc_root_ = std::move(proc_root); }

  void add_command_handler(std::string kind, CommandHandler handler) { handlers_[std::move(kind)] = std::move(handler); }

  using TerminalOpener = std::function<boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>>(
      std::string instance_id, int rows, int cols)>;
  void set_terminal_opener(TerminalOpener opener) { terminal_opener_ = std::move(opener); }
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string host_name,
                                                                               std::string instance_id, int rows,
                                                                               int cols) override;

  // The hosts an all-in-one daemon serves: the config's, or one named after this machine.
  static std::vector<config::Host> effective_hosts(const config::Config& config);

 private:
  struct ServedHost {
    config::Host config;
    // Also read by the sampling thread while a round runs (the destructor waits for it).
    std::unique_ptr<gpu::GpuInventorySource> inventory;
    HostInventory last;
  };
  struct Sampling;  // the sampler's state, shared with its rounds in flight
  HostInventory discover(ServedHost& host);
  void schedule_heartbeat();
  void start_sampling();
  static boost::asio::awaitable<void> sample_forever(std::shared_ptr<Sampling> sampling);
  std::vector<sampling::SampledHost> sampled_hosts() const;

  boost::asio::any_io_executor loop_;
  std::vector<ServedHost> hosts_;
  std::function<void(Heartbeat)> heartbeat_sink_;
  std::chrono::milliseconds heartbeat_interval_;
  boost::asio::steady_timer heartbeat_timer_;
  std::uint64_t heartbeat_sequence_ = 0;
  std::map<std::string, CommandHandler> handlers_;
  TerminalOpener terminal_opener_;
  // Outcomes of recent commands, so a repeated command id is answered, not re-run.
  std::unordered_map<std::string, CommandOutcome> outcomes_;
  std::deque<std::string> outcome_order_;

  std::function<void(SampleReport)> sample_sink_;
  sampling::SampleSource sample_source_;
  std::chrono::milliseconds sample_interval_;
  std::string sampling_proc_root_ = "/proc";
  std::shared_ptr<Sampling> sampling_;  // set once sampling started
  // Every blocking read of a round (cgroup files, NVML) runs here, never on the loop.
  boost::asio::thread_pool sampling_thread_{1};
};

}  // namespace gpucloud::agent
