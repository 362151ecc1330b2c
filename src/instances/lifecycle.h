#pragma once
// The instance state machine's engine side. Requests change an instance's recorded state
// (a compare-and-set, committed before anything else happens); converge() then drives the
// host agent until reality matches, and reconcile() repairs whatever a crash, a dying
// container or a restarted engine left behind. Level-triggered: it always acts on what the
// store says now, so running it twice, or after a crash, is safe.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/host_agent.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "instances/instance_record.h"
#include "store/store.h"

namespace gpucloud::disks {
class DiskService;
}

namespace gpucloud::instances {

class InstanceService {
 public:
  InstanceService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store,
                  PlatformClock& clock, agent::HostAgent& agent);
  ~InstanceService();
  // The disks' service: an instance's new data disks are made before its container starts,
  // and a release hands its disks back. Without one (tests), disks are only passed through.
  void use_disks(disks::DiskService& service) { disks_ = &service; }

  // Makes the engine match the recorded state of `id`, soon (coalesces repeated kicks).
  // Everything that talks to the agent about one instance (converge, refresh, reconcile's
  // repairs) runs in that instance's one queue, one step at a time, in order.
  void kick(const std::string& id);
  // Re-sends the instance's desired state in its current state (ports or name changed).
  void refresh(const std::string& id);
  // Compares every live instance with what the agent reports and repairs the difference.
  // Never throws; always schedules the next pass.
  boost::asio::awaitable<void> reconcile();
  // Reconciles now and then every `period`.
  void start_background(std::chrono::seconds period = std::chrono::seconds(10));
  // A host reported containers that started, died or went away (HostAgent::on_changes): the
  // next pass runs within kNudgeDelay instead of at its period, but never sooner than
  // kNudgeSpacing after the last pass ended (a burst of events costs one pass, not one each).
  // A change reported during a pass gets one more pass after it.
  static constexpr std::chrono::milliseconds kNudgeDelay{100};
  static constexpr std::chrono::milliseconds kNudgeSpacing{500};
  void nudge(const std::vector<std::string>& instance_ids);
  // Stops scheduling passes (shutdown).
  void stop_background();

  // Seconds spent running, including the current run.
  std::int64_t run_seconds_now(const Instance& instance) const;
  ViewContext view() const {
    return ViewContext{config_.public_host, config_.currency, config_.policy.release_stopped_after_days};
  }
  // The token of the instance's Jupyter: HMAC(DATA_DIR/jupyter.key, id), so nothing is
  // stored; the agent writes it into the instance's config directory, the proxy adds it.
  std::string jupyter_token(const std::string& instance_id) const;
  // True while no step is queued or running for `id` (tests).
  bool idle(const std::string& id) const { return !converging_.contains(id); }
  // True while any engine work is under way (shutdown waits for it).
  bool busy() const { return !converging_.empty() || reconciling_ || !stopping_unknown_.empty(); }

  // What the agent reported about one instance's container.
  struct ContainerReport {
    bool exists = false, running = false;
    std::string reason;
    std::optional<SysTime> finished_at;  // on the platform clock
  };

 private:
  struct Observation {  // reconcile's report, applied in the queue if the generation still matches
    std::int64_t generation = 0;
    ContainerReport report;
  };
  boost::asio::awaitable<void> converge(std::string id);
  // One step; returns whether another is needed now.
  boost::asio::awaitable<Result<bool>> step(const std::string& id);
  boost::asio::awaitable<Result<bool>> converge_once(const Instance& instance);
  boost::asio::awaitable<Status> apply_observation(const Instance& instance, const Observation& seen);
  boost::asio::awaitable<Status> resend_desired(const Instance& instance);
  boost::asio::awaitable<Result<agent::CommandOutcome>> send(const std::string& host_name, const std::string& kind,
                                                             boost::json::object desired, std::string command_id = "");
  boost::asio::awaitable<Result<boost::json::object>> ensure(const Instance& instance, InstanceState desired);
  boost::asio::awaitable<void> reconcile_pass();
  // instance.status's system disk part: what the host enforces, what each instance uses.
  boost::asio::awaitable<Status> record_system_disk(std::string host, boost::json::object observed);
  void schedule_reconcile();
  void arm_reconcile(std::chrono::steady_clock::time_point at);
  // Asks the engine about each public image: its size, or that it is missing.
  boost::asio::awaitable<void> refresh_images();
  boost::asio::awaitable<void> follow_up_images();
  bool images_followup_ = false;  // a quicker look is scheduled while a pull runs
  std::set<std::string> reported_unknown_;  // unknown containers already reported (this run)
  std::set<std::string> stopping_unknown_;  // unknown containers being stopped and reported now
  // Stops one unknown container (when running) and reports it once; beside the pass.
  boost::asio::awaitable<void> handle_unknown_container(std::string host, std::string container, bool running);

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  agent::HostAgent& agent_;
  disks::DiskService* disks_ = nullptr;
  std::string jupyter_key_;
  std::set<std::string> converging_;
  std::set<std::string> dirty_;
  std::set<std::string> refresh_wanted_;
  std::map<std::string, Observation> observations_;
  bool reconciling_ = false;
  bool pass_again_ = false;  // a change was reported during the pass
  std::chrono::steady_clock::time_point last_pass_end_{};
  bool stopped_ = false;
  std::chrono::seconds period_{10};
  boost::asio::steady_timer reconcile_timer_;
};

}  // namespace gpucloud::instances
