#pragma once
// Work on an instance that spans resources, on a user's word: a create that also takes a
// security group and makes or attaches data disks, and a PATCH that moves the instance to
// another security group. Each runs in the caller's write transaction, all or nothing, and
// calls the resources' own actions (instances/actions.h, disks/disk_actions.h,
// security_groups/security_group_actions.h); none of those calls another's. Handlers parse,
// authorize and answer, and call these.
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "disks/disk_actions.h"
#include "instances/actions.h"
#include "store/database.h"

namespace gpucloud::policy {

// POST /instances: the instance's own fields, and what it takes from other resources.
struct CreateInstanceRequest : instances::CreateRequest {
  std::optional<std::string> security_group;  // id or name; none: the owner's default group
  // New disks made with the instance, or available ones attached to it (spec: data_disks).
  std::vector<disks::InstanceDataDisk> data_disks;
  std::vector<std::string> new_disk_ids;  // one per new disk, in order (made by the caller)
};

// The instance's checks, its security group (marked in use), its data disks' checks (existing
// ones pin it to their host), placement and the `creating` row, then its disks made or
// attached on the host it got. The answer is the instance as recorded, its disks with it.
Result<instances::Instance> create_instance(store::Database& db, const config::Config& config,
                                            const instances::Actor& actor, const std::string& id,
                                            const CreateInstanceRequest& request, SysTime now);

// PATCH /instances/{id}: a `security_group` named is resolved for the instance's owner (the
// owner's own groups only) and marked in use; the rest is instances::patch_instance.
struct PatchInstanceRequest : instances::PatchRequest {
  std::optional<std::string> security_group;  // id or name
};
Result<instances::PatchOutcome> patch_instance(store::Database& db, const instances::Actor& actor,
                                               const std::string& id_or_name, const PatchInstanceRequest& request,
                                               SysTime now);

}  // namespace gpucloud::policy
