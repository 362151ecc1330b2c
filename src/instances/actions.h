#pragma once
// What a user (or a timer: autostop, arrears, scheduled stops) can do to an instance. Each
// action runs inside the caller's write transaction, changes state only through
// transition(), and leaves the engine work to InstanceService::kick(id) after the commit.
// Handlers parse, authorize and answer; the rules live here. Nothing here calls another
// resource's actions: a create with its security group and data disks, a PATCH that moves
// it to another group, and the platform's stops are the policy floor's (policy/instances.h,
// policy/cost_control.h), which calls these.
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "instances/actor.h"
#include "instances/instance_record.h"
#include "store/database.h"

namespace gpucloud::instances {


struct CreateRequest {
  std::string name, zone, image;
  std::optional<std::string> gpu_model;
  int gpu_count = 0;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  std::int64_t system_disk_gib = 30;
  std::vector<PortSpec> ports{{22, "tcp"}};
  std::string security_group_id;  // resolved by the caller (policy::create_instance)
  std::vector<std::string> ssh_keys;  // ids or names
  std::optional<std::string> password_hash;
  std::string billing_mode = "hourly";
  bool auto_renew = true;
  std::optional<std::int64_t> spend_limit;  // compute charges at which it stops
  std::optional<Instance::Autostop> autostop;
  std::optional<SysTime> stop_at;
  std::optional<int> release_after_stopped_days;  // nullopt: the platform's default
};

struct PatchRequest {
  std::optional<std::string> name;
  std::optional<std::vector<PortSpec>> ports;
  std::optional<bool> auto_renew;
  std::optional<std::string> security_group_id;  // a group the caller resolved (policy::patch_instance)
  std::optional<std::optional<std::int64_t>> spend_limit;  // set, or (inner nullopt) cleared
  // Cost control, each set or (inner nullopt) cleared; a cleared release period is the
  // platform's default again.
  std::optional<std::optional<Instance::Autostop>> autostop;
  std::optional<std::optional<SysTime>> stop_at;
  std::optional<std::optional<int>> release_after_stopped_days;
};

// The actor's instance by id or name; another user's is not_found (the operator sees all).
Result<Instance> find_for(store::Database& db, const Actor& actor, const std::string& id_or_name);

// A create in two steps, so the floor above (policy::create_instance) can fit the instance's
// security group and data disks in between, all in one transaction:
// check_create: quotas, unique name, image, keys, price, affordability; the instance as it
// would be recorded (`upfront`: a subscription's payment). Nothing is written.
struct NewInstance {
  Instance instance;
  std::int64_t upfront = 0;
};
Result<NewInstance> check_create(store::Database& db, const config::Config& config, const Actor& actor,
                                 const std::string& id, const CreateRequest& request, SysTime now);
// record_create: placement (on `host` when given: the host of its existing data disks, a
// refusal said so), the `creating` row, the subscription's payment, host ports.
Result<Instance> record_create(store::Database& db, NewInstance made, const CreateRequest& request,
                               const std::optional<std::string>& host, SysTime now);
// `reason` is recorded as the state_reason ("arrears", "autostop", "spend_limit"; "" for a user's stop).
Result<Instance> stop_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now,
                               const std::string& reason = "");
Result<Instance> restart_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now);
Result<Instance> start_instance(store::Database& db, const config::Config& config, const Actor& actor,
                                const std::string& id_or_name, bool no_gpu, SysTime now);
// `reason`: "" for a user's release; "release_after_stopped", "arrears" for the platform's.
Result<Instance> release_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now,
                                  const std::string& reason = "");
// Everything is checked before anything changes. The answer says whether the engine must follow.
struct PatchOutcome {
  Instance instance;
  bool engine_follows = false;
};
Result<PatchOutcome> patch_instance(store::Database& db, const Actor& actor, const std::string& id_or_name,
                                    const PatchRequest& request, SysTime now);

}  // namespace gpucloud::instances
