#pragma once
// Monitoring's side of the control plane, on the event loop: takes each host's sampling
// round from the agent (HostAgent::on_samples) into the store (monitoring/ingest.h) and
// the newest readings (latest_readings.h), and runs cost control's one timer: at the
// earliest instance schedule_at (instances/schedules.h), every due step
// (monitoring/cost_control.h) runs, then the timer waits for the next. A commit that
// writes an earlier deadline (Store::on_schedule_commit) moves the timer at once. All of it
// runs on the platform clock, so --test-clock drives it; freshness of readings uses the
// machine's clock.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "agent/agent_protocol.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "monitoring/cost_control.h"
#include "monitoring/ingest.h"
#include "monitoring/latest_readings.h"
#include "store/store.h"

namespace gpucloud::monitoring {

class MonitoringService {
 public:
  struct Hooks {
    std::function<void(const std::string&)> kick_instance;  // the engine follows a stop or release
    // The stop and the release of a due step, in its transaction (policy::cost_control_actions,
    // wired by the server: monitoring calls no instance action itself).
    CostControlActions act;
  };
  MonitoringService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store,
                    PlatformClock& clock, Hooks hooks);
  ~MonitoringService();

  // Arms the schedule timer at the earliest deadline in the store.
  boost::asio::awaitable<void> start();
  void stop();
  // A standby replica (issue 27): commits' hooks plan nothing here until start() (the
  // leader's background work) runs.
  void defer_background() { background_ = false; }
  // A host's sampling round (loop). Rounds arriving while one is written wait, newest per host.
  void ingest(agent::SampleReport report);
  // From the store's writer thread: a deadline at `at` was written.
  void schedule_noted(SysTime at);
  // Arms the timer at the store's earliest cost-control deadline (start, and a leader that
  // may have missed other replicas' notes).
  boost::asio::awaitable<void> arm_earliest();

  const LatestReadings& latest() const { return latest_; }
  // The newest reading of an instance if it is fresh (within three sampling intervals).
  std::optional<agent::InstanceSample> fresh_reading(const std::string& instance_id) const;
  // Rounds written since start (tests wait on it).
  std::uint64_t rounds_written() const { return rounds_written_; }

 private:
  boost::asio::awaitable<void> write_pending();
  void arm(SysTime at);
  boost::asio::awaitable<void> run_due();

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  Hooks hooks_;
  Retention retention_;
  LatestReadings latest_;
  std::map<std::string, agent::SampleReport> pending_;  // host → newest unwritten round
  bool writing_ = false;
  std::uint64_t rounds_written_ = 0;
  std::optional<std::pair<PlatformClock::TimerId, SysTime>> timer_;
  bool running_due_ = false, rerun_due_ = false;
  bool stopped_ = false;
  bool background_ = true;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace gpucloud::monitoring
