#pragma once
// The instance state machine's engine side. Requests change an instance's recorded state
// (a compare-and-set, committed before anything else happens); converge() then drives the
// host agent until reality matches, and reconcile() repairs whatever a crash, a dying
// container or a restarted engine left behind. Level-triggered: it always acts on what the
// store says now, so running it twice, or after a crash, is safe.
#include <map>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/host_agent.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "instances/instance_record.h"
#include "store/store.h"

namespace gpucloud::instances {

class InstanceService {
 public:
  InstanceService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store,
                  PlatformClock& clock, agent::HostAgent& agent);
  ~InstanceService();

  // Makes the engine match the recorded state of `id`, soon (coalesces repeated kicks).
  void kick(const std::string& id);
  // Re-sends a running instance's desired state (ports changed while it runs).
  void refresh_running(const std::string& id);
  // Compares every live instance with what the agent reports and repairs the difference.
  boost::asio::awaitable<void> reconcile();
  // Reconciles now and then every `period`.
  void start_background(std::chrono::seconds period = std::chrono::seconds(10));

  // Seconds spent running, including the current run.
  std::int64_t run_seconds_now(const Instance& instance) const;
  ViewContext view() const { return ViewContext{config_.public_host, config_.currency}; }

 private:
  boost::asio::awaitable<void> converge(std::string id);
  boost::asio::awaitable<Status> converge_once(const Instance& instance);
  boost::asio::awaitable<Result<agent::CommandOutcome>> send(const std::string& host_name, const std::string& kind,
                                                             boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> ensure(const Instance& instance, const std::string& state);
  void schedule_reconcile();
  // Asks the engine about each public image: its size, or that it is missing.
  boost::asio::awaitable<void> refresh_images();
  boost::asio::awaitable<void> follow_up_images();
  bool images_followup_ = false;
  std::set<std::string> reported_unknown_;  // unknown containers already reported (this run)  // a quicker look is scheduled while a pull runs
  boost::asio::awaitable<void> refresh(std::string id);

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  agent::HostAgent& agent_;
  std::set<std::string> converging_;
  std::set<std::string> dirty_;
  bool reconciling_ = false;
  std::chrono::seconds period_{10};
  boost::asio::steady_timer reconcile_timer_;
};

}  // namespace gpucloud::instances
