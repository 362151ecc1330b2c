#pragma once
// The one path by which an instance's state changes. Handlers (through instances/actions.h),
// converge, reconcile and timers all call transition(); none writes a state change's
// consequences itself. In the caller's transaction it:
//   - compare-and-sets the row on (id, state, generation) as the caller loaded it, so a
//     concurrent writer (another process, a later PostgreSQL store) makes it fail with
//     `conflict` instead of being overwritten; the generation then goes up by one;
//   - closes the run's accounting when a run ends (run_seconds up to `ended_at`, the
//     container's real exit when the agent reported one) and opens it on `running`;
//   - frees the reservation when the instance stops holding one (stopped, error, released;
//     a restart keeps it), and the host ports on release; at release the data disks are
//     detached and kept (or binned, when made with delete_on_release);
//   - records the `instance.<state>` event.
// Billing meters will hang off the same place.
#include <optional>
#include <string>

#include "core/result.h"
#include "core/time_format.h"
#include "instances/instance_record.h"
#include "store/database.h"

namespace gpucloud::instances {

struct Transition {
  InstanceState to;
  std::string reason;                  // state_reason after the change ("" clears it)
  std::optional<SysTime> ended_at;     // when the run really ended, if known (clamped to the run)
};

// `loaded` is the row as read in this transaction; `next` carries any other field changes
// that go with the state change (observed container, host key, size, reservation's host).
// On success `next` holds what was written (state, generation, times).
Status transition(store::Database& db, const Instance& loaded, Instance& next, const Transition& change, SysTime now);

// A new instance enters `creating` (generation 1) with its `instance.created` event.
Status begin_instance(store::Database& db, Instance& instance, SysTime now);

}  // namespace gpucloud::instances
