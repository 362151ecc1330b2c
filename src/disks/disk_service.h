#pragma once
// The disks' engine side: makes each disk and snapshot on its host agent what the store
// says (creating → made, a grow not applied yet → grown, deleting → destroyed), keeps
// used_bytes current from the agents' reports, and runs the recycle bin's clock (a warning
// event a day before, then destruction when `[policy] recycle_days` have passed). Like
// InstanceService it is level-triggered: every step acts on what the store says now, so a
// crash at any point is repaired by the next pass. Reconciliation never destroys a disk the
// store does not say to destroy.
//
// Agent commands (see agent/disk_runtime.h): disk.ensure {disk_id, size_gib, from_snapshot?,
// generation}, disk.remove {disk_id}, disk.snapshot {disk_id, snapshot_id}, snapshot.remove
// {snapshot_id}, disk.status {}. Command ids are stable per (disk, generation, step).
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "agent/host_agent.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "disks/disk_record.h"
#include "store/store.h"

namespace gpucloud::disks {

class DiskService {
 public:
  DiskService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store, PlatformClock& clock,
              agent::HostAgent& agent);
  ~DiskService();

  // Makes the agent follow the disk's (snapshot's) recorded state, soon; coalesced.
  void kick_disk(const std::string& id);
  void kick_snapshot(const std::string& id);
  // Something may have entered or left the recycle bin (a delete, restore, or an instance's
  // release): the bin's timer is set again. Awaited before the answer, so a test clock
  // advanced right after it sees the new deadline.
  boost::asio::awaitable<void> rearm_recycle_bin();
  // The instance's disks that are still being made (or grown) are made now; an error names
  // the disk that failed. Called before the instance's container starts.
  boost::asio::awaitable<Status> prepare_instance(std::string instance_id);
  // One pass: kicks pending work, refreshes used_bytes, sets the bin's timer. Never throws.
  boost::asio::awaitable<void> reconcile();
  void start_background(std::chrono::seconds period = std::chrono::seconds(5));
  void stop_background();
  // A standby replica (issue 27): the recycle bin's timer is the leader's, whose reconcile
  // sets it within a period; until start_background() this one sets none.
  void defer_background() { background_ = false; }
  bool busy() const { return !disk_queue_.empty() || !snapshot_queue_.empty() || reconciling_; }

 private:
  boost::asio::awaitable<void> converge_disk(std::string id);
  boost::asio::awaitable<void> converge_snapshot(std::string id);
  // One step; whether another is needed.
  boost::asio::awaitable<Result<bool>> disk_step(const std::string& id);
  boost::asio::awaitable<Result<bool>> snapshot_step(const std::string& id);
  boost::asio::awaitable<Result<agent::CommandOutcome>> send(std::string host, std::string kind, boost::json::object desired,
                                                             std::string command_id);
  boost::asio::awaitable<void> reconcile_pass();
  boost::asio::awaitable<void> refresh_usage();
  void schedule_reconcile();
  // The recycle bin: warnings and purges due now, then the timer for the next one.
  boost::asio::awaitable<Status> retention_due();
  boost::asio::awaitable<void> schedule_retention();
  boost::asio::awaitable<void> retention_timer_fired();

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  agent::HostAgent& agent_;
  std::set<std::string> disk_queue_, disk_dirty_, snapshot_queue_, snapshot_dirty_;
  bool reconciling_ = false;
  bool stopped_ = false;
  bool background_ = true;
  std::chrono::seconds period_{5};
  boost::asio::steady_timer reconcile_timer_;
  std::optional<PlatformClock::TimerId> retention_timer_;
  std::optional<SysTime> retention_at_;
};

}  // namespace gpucloud::disks
