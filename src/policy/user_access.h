#pragma once
// Work that spans resources on an operator's word: disabling a user. The user's tokens stop
// working at once (auth), and their running pay-as-you-go instances stop with
// `state_reason: "user_disabled"`, so nothing keeps charging a user who can no longer stop
// it. Nothing is deleted: disks, images and stopped instances stay as they are, and
// enabling the user again restarts nothing. Paid subscription terms run on (already paid).
#include <string>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::policy {

struct UserAccessChange {
  std::vector<std::string> instances_to_kick;  // stopping now: the engine follows
};

// Sets the user's disabled flag; on disabling, stops their running pay-as-you-go instances.
// Runs in the caller's write transaction.
Result<UserAccessChange> set_user_disabled(store::Database& db, const std::string& user_id, bool disabled, SysTime now);

}  // namespace gpucloud::policy
