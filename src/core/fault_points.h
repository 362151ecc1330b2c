#pragma once
// Named crash points for the crash tests: when GPUCLOUD_FAULT_POINT names this point, the
// process kills itself with SIGKILL right here, exactly like `kill -9` at that moment.
#include <string_view>

namespace gpucloud {

void fault_point(std::string_view name);

}  // namespace gpucloud
