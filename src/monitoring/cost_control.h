#pragma once
// The cost-control step due for one instance at the platform time `now` (its schedule_at
// came): a warning event, or the action itself — a stop for `stop_at` (reason "stop_at") or
// idle autostop (reason "autostop"), a release after release_after_stopped_days (reason
// "release_after_stopped"). One step per call, in the caller's write transaction; the
// instance's schedule_at moves on to what is next. Monitoring judges when; the stop and the
// release are the instances' actions, which monitoring does not call itself: they come in
// as `CostControlActions` (policy::cost_control_actions, wired by the server).
#include <functional>
#include <optional>
#include <string>

#include "agent/agent_protocol.h"
#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::monitoring {

struct DueStep {
  bool acted = false;       // something changed (the caller looks again)
  bool engine_follows = false;  // a stop or release: InstanceService::kick after the commit
};

// What a due step does to an instance, in the step's transaction. `reason` is recorded as the
// instance's state_reason.
struct CostControlActions {
  std::function<Status(store::Database&, const std::string& instance_id, SysTime now, const std::string& reason)> stop;
  std::function<Status(store::Database&, const std::string& instance_id, SysTime now, const std::string& reason)>
      release;
};

// `fresh_reading`: the newest reading of the instance when it is recent, else nullopt.
// Autostop stops only when that reading is idle; without one the idle window starts again.
Result<DueStep> run_due_step(store::Database& db, const std::string& instance_id, SysTime now,
                             const std::optional<agent::InstanceSample>& fresh_reading,
                             const CostControlActions& actions);

}  // namespace gpucloud::monitoring
