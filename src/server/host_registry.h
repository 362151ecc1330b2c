#pragma once
// The control plane's side of the agent interface: records registrations, follows
// heartbeats (monotonic clock) and marks hosts unreachable when they stop.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/host_agent.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "store/store.h"

namespace gpucloud::server {

class HostRegistry {
 public:
  HostRegistry(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store, PlatformClock& clock,
               std::unique_ptr<agent::HostAgent> agent,
               std::chrono::milliseconds unreachable_after = std::chrono::seconds(30),
               std::chrono::milliseconds check_every = std::chrono::seconds(5));
  ~HostRegistry();

  // Registers the agent's hosts (inventory into the store) and starts following heartbeats.
  boost::asio::awaitable<Status> start();
  agent::HostAgent& agent() { return *agent_; }
  // Replicas on PostgreSQL (issue 27): only the leader decides that a host stopped or started
  // answering; a standby writes the heartbeats of the links it holds. `leading` is asked at
  // every check. The leader also reads the heartbeats other replicas wrote.
  void follow_leadership(std::function<bool()> leading) { leading_ = std::move(leading); }
  // This replica's lease holder name: recorded with each remote link it holds
  // (hosts.agent_replica), so other replicas know where that host is served.
  void set_replica(std::string holder) { replica_ = std::move(holder); }
  // This replica just became the leader: every remote host gets the reconnect grace first (its
  // agent may be redialling another replica), as after a restart.
  void begin_leading();

 private:
  void on_heartbeat(agent::Heartbeat beat);
  // A remote agent's hello: recorded like a start's registration (refused for an in-process
  // host's name), then the host is reachable.
  boost::asio::awaitable<Status> register_remote(agent::LateRegistration registration);
  void on_link_change(const std::string& host, bool connected);
  static Status record_registration(store::Database& db, const config::Config& config,
                                    const agent::HostInventory& inventory, const std::string& agent_kind,
                                    const std::string& agent_version, const std::optional<std::string>& address,
                                    SysTime now, const std::optional<std::string>& replica = std::nullopt);
  void schedule_check_soon();
  // Records a beat's GPU health when it differs from the host's last report: GPUs lost or
  // back, with their events (instances' owners, the operator), in one transaction.
  void follow_gpu_health(agent::Heartbeat beat);
  // Records a beat's disk pool (capacity, size, use) and warns at 80 % and 95 % of real use.
  void follow_disk_pool(const agent::Heartbeat& beat);
  void schedule_check();
  boost::asio::awaitable<void> check_liveness();
  // Heartbeats other replicas recorded for remote hosts (their links are held there).
  boost::asio::awaitable<void> merge_stored_heartbeats();
  std::function<bool()> leading_;  // empty: a single control plane, always deciding
  std::optional<std::string> replica_;

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;  // stamps the host.* events
  std::unique_ptr<agent::HostAgent> agent_;
  std::chrono::milliseconds unreachable_after_;
  std::chrono::milliseconds check_every_;  // how often heartbeats are looked at (tests: short)
  std::map<std::string, std::chrono::steady_clock::time_point> last_heartbeat_;
  // The wall time of each host's last heartbeat not yet in the store (GET /admin/hosts'
  // agent.last_heartbeat_at), written by the liveness check: one write per check, not per beat.
  std::map<std::string, SysTime> unwritten_beats_;
  std::map<std::string, bool> reachable_;
  // Per registered host, the GPUs of its last report recorded (registration or beat); shared
  // with the writes in flight.
  using ReportedGpus = std::map<std::string, std::vector<agent::GpuInfo>>;
  std::shared_ptr<ReportedGpus> reported_gpus_ = std::make_shared<ReportedGpus>();
  struct ReportedPool {
    std::optional<std::chrono::steady_clock::time_point> written;
    std::int64_t capacity_bytes = 0;
    int level = 0;
  };
  using ReportedPools = std::map<std::string, ReportedPool>;
  std::shared_ptr<ReportedPools> reported_pools_ = std::make_shared<ReportedPools>();
  boost::asio::steady_timer check_timer_;
  // False once destroyed: a liveness check resuming after a store write looks here first.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace gpucloud::server
