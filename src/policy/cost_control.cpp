#include "policy/cost_control.h"

#include "instances/actions.h"

namespace gpucloud::policy {

monitoring::CostControlActions cost_control_actions() {
  static const instances::Actor platform{"", true};
  monitoring::CostControlActions out;
  out.stop = [](store::Database& db, const std::string& id, SysTime now, const std::string& reason) -> Status {
    auto stopped = instances::stop_instance(db, platform, id, now, reason);
    if (!stopped) return fail(stopped.error());
    return ok();
  };
  out.release = [](store::Database& db, const std::string& id, SysTime now, const std::string& reason) -> Status {
    auto released = instances::release_instance(db, platform, id, now, reason);
    if (!released) return fail(released.error());
    return ok();
  };
  return out;
}

}  // namespace gpucloud::policy
