#pragma once
// Cost control's deadlines for one instance (spec, "Cost control"): idle autostop (a warning
// idle_minutes / 6 before, at least a minute, then the stop), a one-off `stop_at`, and the
// release of an instance stopped for release_after_stopped_days (warnings 3 days and 1 day
// before). Pure: the instance row keeps the settings and which warnings went out, and
// `next_deadline` gives the earliest moment any of them is due, which write_instance_state
// stores as schedule_at for the monitoring service's one timer (monitoring/schedule_runner.h).
#include <optional>

#include "core/time_format.h"

namespace gpucloud::instances {

struct Instance;

// Instance::schedule_warned bits.
enum ScheduleWarning : int {
  kAutostopWarned = 1,
  kReleaseWarned3d = 2,
  kReleaseWarned1d = 4,
};

struct AutostopDeadlines {
  SysTime warn_at, stop_at;
};
// While the instance is idle (idle_since set) with autostop on.
std::optional<AutostopDeadlines> autostop_deadlines(const Instance& i);

// When a stopped instance is released: release_after_stopped_days (or the platform's
// default) after it stopped, counted from the end of a paid subscription term if later.
std::optional<SysTime> release_at(const Instance& i, int default_release_days);

// The earliest pending deadline of the instance (a warning not yet sent, a stop, a release),
// nullopt when none.
std::optional<SysTime> next_deadline(const Instance& i, int default_release_days);

// The platform default, kept in meta by gpucloudd at start (config [policy]
// release_stopped_after_days) so every writer of an instance row plans with the same value.
inline constexpr const char* kReleaseDaysMetaKey = "policy.release_stopped_after_days";

}  // namespace gpucloud::instances
