#pragma once
// Cost control's stops and releases (monitoring/cost_control.h judges when: stop_at, idle
// autostop, release after N days stopped) are the instances' own actions, taken by the
// platform. MonitoringService reaches them through its `act` hook, which the server wires to
// these, so monitoring calls no instance action itself.
#include "monitoring/cost_control.h"

namespace gpucloud::policy {

// stop: instances::stop_instance; release: instances::release_instance; both as the
// platform (any user's instance), with the reason as the instance's state_reason.
monitoring::CostControlActions cost_control_actions();

}  // namespace gpucloud::policy
