#include "core/fault_points.h"

#include <csignal>
#include <cstdlib>
#include <unistd.h>

namespace gpucloud {

void fault_point(std::string_view name) {
  static const char* armed = std::getenv("GPUCLOUD_FAULT_POINT");
  if (armed && name == armed) ::kill(::getpid(), SIGKILL);
}

}  // namespace gpucloud
