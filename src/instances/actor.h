#pragma once
#include <string>

namespace gpucloud::instances {

// Who acts: a user on their own resources, or the operator (and the platform's timers) on any.
struct Actor {
  std::string user_id;
  bool operator_role = false;
};

}  // namespace gpucloud::instances
