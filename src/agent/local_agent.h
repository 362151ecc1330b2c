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

#include "agent/gpu/gpu_injector.h"
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
  void set_heartbeat_interval(std::chrono::milliseconds interval) override { heartbeat_interval_ = interval; }

  // Sampling: once the control plane set a sink and registered, every [monitoring]
  // sample_interval (steady clock) one round reads every served host's real GPUs (NVML) and
  // each running instance the sample source names (its cgroup's CPU and memory, its GPUs),
  // on a thread of its own; the sink gets one SampleReport per host, on the loop. Rounds
  // never overlap: a slow one delays the next.
  void on_samples(std::function<void(SampleReport)> sink) override { sample_sink_ = std::move(sink); }
  void on_changes(std::function<void(ChangeReport)> sink) override { change_sink_ = std::move(sink); }
  // The runtime layers report changes here (on the loop); dropped until a sink is set.
  void report_changes(ChangeReport report) {
    if (change_sink_) change_sink_(std::move(report));
  }
  // Where the running instances come from (InstanceRuntime::register_sample_source); none:
  // rounds report the hosts' GPUs only.
  void set_sample_source(sampling::SampleSource source) { sample_source_ = std::move(source); }
  // Tests and benches: another interval than the config's (before register_hosts).
  void set_sample_interval(std::chrono::milliseconds interval) { sample_interval_ = interval; }
  // Tests: read cgroups through this /proc instead (a fake tree; see sampling/cgroup_reader.h).
  void set_sampling_proc_root(std::string proc_root) { sampling_proc_root_ = std::move(proc_root); }

  // GPU health while running: every `inventory_interval` (default: the heartbeat interval)
  // each host registered with GPUs not simulated is discovered again on the sampling thread,
  // and at once when a sampling round finds a GPU the last discovery called healthy lost. A
  // list that differs from the last (a GPU gone, its health, a new UUID, a moved index)
  // replaces it and goes out in a heartbeat for that host right away; an unchanged one
  // sends nothing extra. The registry takes a beat's health and indexes and adds a UUID no
  // host has (a replaced card), but a GPU a beat leaves out keeps its record, so a GPU no
  // longer enumerated is kept in the list as "missing" rather than left out. A
  // failed discovery keeps the last list; kDiscoveryFailuresBeforeUnhealthy in a row mark
  // every GPU of the host with the error, until one succeeds.
  static constexpr int kDiscoveryFailuresBeforeUnhealthy = 3;
  // Tests: another interval (before register_hosts).
  void set_inventory_interval(std::chrono::milliseconds interval) { inventory_interval_ = interval; }
  // Tests: this host's GPUs come from `source` (before register_hosts); false: no such host.
  bool set_inventory_source(const std::string& host_name, std::unique_ptr<gpu::GpuInventorySource> source);

  // GPU injection per host (agent/gpu/gpu_injector.h): each discovery tells it the host's GPUs
  // (their minor numbers), and the registration reports the host's mode. lxcfs_dir: probed
  // at registration (agent/lxcfs.h). Before register_hosts.
  void set_gpu_injector(std::shared_ptr<gpu::GpuInjector> injector) { gpu_injector_ = std::move(injector); }
  void set_lxcfs_dir(std::string dir) { lxcfs_dir_ = std::move(dir); }

  void add_command_handler(std::string kind, CommandHandler handler) { handlers_[std::move(kind)] = std::move(handler); }

  using TerminalOpener = std::function<boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>>(
      std::string instance_id, int rows, int cols)>;
  void set_terminal_opener(TerminalOpener opener) { terminal_opener_ = std::move(opener); }
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string host_name,
                                                                               std::string instance_id, int rows,
                                                                               int cols) override;

  using ConnectionOpener = std::function<boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>>(
      std::string instance_id, int port)>;
  void set_connection_opener(ConnectionOpener opener) { connection_opener_ = std::move(opener); }
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_connection(std::string host_name,
                                                                                 std::string instance_id,
                                                                                 int port) override;

  // The hosts an all-in-one daemon serves: the config's, or one named after this machine.
  static std::vector<config::Host> effective_hosts(const config::Config& config);

 private:
  class WatchedInventory;  // the host's source, noting samples that find a GPU lost
  struct ServedHost {
    config::Host config;
    // Also used by the sampling thread while a round or a rediscovery runs (the destructor
    // waits for it).
    std::unique_ptr<WatchedInventory> inventory;
    HostInventory last;
    int discovery_failures = 0;       // in a row, since the last discovery that worked
    std::string last_discovery_error;  // logged once per distinct error
  };
  struct Sampling;  // the sampler's state, shared with its rounds in flight
  struct Watch;     // the rediscovery loop's state, shared with its discoveries in flight
  HostInventory discover(ServedHost& host);
  static bool watched(const ServedHost& host);
  void start_watching();
  static boost::asio::awaitable<void> watch_forever(std::shared_ptr<Watch> watch);
  // A rediscovery's answer for `host`: replaces its GPUs and sends a heartbeat when they changed.
  void apply_discovery(ServedHost& host, Result<std::vector<gpu::GpuDevice>> found);
  // After a sampling round: a GPU listed healthy that a sample found lost wakes the watch.
  void note_lost_samples();
  void send_heartbeat(const ServedHost& host);
  void schedule_heartbeat();
  void start_sampling();
  static boost::asio::awaitable<void> sample_forever(std::shared_ptr<Sampling> sampling);
  std::vector<sampling::SampledHost> sampled_hosts() const;

  boost::asio::any_io_executor loop_;
  std::vector<ServedHost> hosts_;
  std::function<void(Heartbeat)> heartbeat_sink_;
  std::chrono::milliseconds heartbeat_interval_;
  // The disk pool measured at registration and each beat (agent/disk_pool_probe.h).
  std::string disk_pool_path_;
  double disk_overcommit_ = 1.0;
  std::optional<DiskPool> measure_pool() const;
  boost::asio::steady_timer heartbeat_timer_;
  std::uint64_t heartbeat_sequence_ = 0;
  std::map<std::string, CommandHandler> handlers_;
  TerminalOpener terminal_opener_;
  ConnectionOpener connection_opener_;
  // Outcomes of recent commands, so a repeated command id is answered, not re-run.
  std::unordered_map<std::string, CommandOutcome> outcomes_;
  std::deque<std::string> outcome_order_;

  std::function<void(SampleReport)> sample_sink_;
  std::function<void(ChangeReport)> change_sink_;
  sampling::SampleSource sample_source_;
  std::chrono::milliseconds sample_interval_;
  std::string sampling_proc_root_ = "/proc";
  std::shared_ptr<Sampling> sampling_;  // set once sampling started
  std::chrono::milliseconds inventory_interval_;
  std::shared_ptr<gpu::GpuInjector> gpu_injector_;
  std::string lxcfs_dir_;
  std::shared_ptr<Watch> watch_;  // set once rediscovery started (only with a real inventory)
  // Every blocking read of a round (cgroup files, NVML) runs here, never on the loop.
  boost::asio::thread_pool sampling_thread_{1};
};

}  // namespace gpucloud::agent
