#include "policy/user_access.h"

#include "auth/accounts.h"
#include "events/events.h"
#include "instances/actions.h"

namespace gpucloud::policy {

Result<UserAccessChange> set_user_disabled(store::Database& db, const std::string& user_id, bool disabled, SysTime now) {
  UserAccessChange out;
  if (auto s = auth::set_user_disabled(db, user_id, disabled); !s) return fail(s.error());
  if (!disabled) return out;
  auto running = instances::list_instances(db, user_id, instances::InstanceState::running);
  if (!running) return fail(running.error());
  int stopped = 0;
  for (const auto& i : *running) {
    if (i.billing_mode != "hourly") continue;  // a paid term is the user's already
    // The platform acts for the operator here; the instance stays the user's.
    auto moved = instances::stop_instance(db, instances::Actor{user_id, false}, i.id, now, "user_disabled");
    if (!moved) return fail(moved.error());
    out.instances_to_kick.push_back(i.id);
    ++stopped;
  }
  if (stopped > 0)
    if (auto s = events::record(db, now, "user.disabled", user_id, user_id,
                                "the account was disabled: " + std::to_string(stopped) +
                                    " running pay-as-you-go instance(s) stop; nothing is deleted",
                                {{"instances_stopped", stopped}});
        !s)
      return fail(s.error());
  return out;
}

}  // namespace gpucloud::policy
