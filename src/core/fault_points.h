#pragma once
// Named crash points for the crash tests: when GPUCLOUD_FAULT_POINT names this point, the
// process writes `fault point NAME: killing with SIGKILL` to stderr and kills itself with
// SIGKILL right here, exactly like `kill -9` at that moment. The line lets a test prove the
// point it armed is the one that fired (a renamed or unreached point would otherwise pass as
// a plain restart). GPUCLOUD_PAUSE_POINT names a point where the process instead stops
// itself (SIGSTOP) the first time, after writing `pause point NAME: stopping with SIGSTOP`: a
// replica paused mid-transaction, for the leader-fencing test.
#include <span>
#include <string_view>

#include "core/result.h"

namespace gpucloud {

// Every name a call site may pass; `fault_point("...")` literals in src/ must be listed here
// (core/fault_points_test.cpp greps the sources for them).
std::span<const std::string_view> known_fault_points();

// Called once at start: an armed name that is not a known point is a configuration error, so
// a crash test with a typo fails at once instead of never firing.
Status check_armed_fault_point();

void fault_point(std::string_view name);

}  // namespace gpucloud
