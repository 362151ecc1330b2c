#pragma once
// What a user (or a timer: autostop, arrears, scheduled stops) can do to an instance. Each
// action runs inside the caller's write transaction, changes state only through
// transition(), and leaves the engine work to InstanceService::kick(id) after the commit.
// Handlers parse, authorize and answer; the rules live here.
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "disks/disk_actions.h"
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
  std::optional<std::string> security_group;  // id or name; none: the owner's default group
  std::vector<std::string> ssh_keys;  // ids or names
  std::optional<std::string> password_hash;
  std::string billing_mode = "hourly";
  bool auto_renew = true;
  // New disks made with the instance, or available ones attached to it (spec: data_disks).
  std::vector<disks::InstanceDataDisk> data_disks;
  std::vector<std::string> new_disk_ids;  // one per new disk, in order (made by the caller)
  std::optional<std::int64_t> spend_limit;  // compute charges at which it stops
  std::optional<Instance::Autostop> autostop;
  std::optional<SysTime> stop_at;
  std::optional<int> release_after_stopped_days;  // nullopt: the platform's default
};

struct PatchRequest {
  std::optional<std::string> name;
  std::optional<std::vector<PortSpec>> ports;
  std::optional<bool> auto_renew;
  std::optional<std::string> security_group;  // id or name
  std::optional<std::optional<std::int64_t>> spend_limit;  // set, or (inner nullopt) cleared
  // Cost control, each set or (inner nullopt) cleared; a cleared release period is the
  // platform's default again.
  std::optional<std::optional<Instance::Autostop>> autostop;
  std::optional<std::optional<SysTime>> stop_at;
  std::optional<std::optional<int>> release_after_stopped_days;
};

// The actor's instance by id or name; another user's is not_found (the operator sees all).
Result<Instance> find_for(store::Database& db, const Actor& actor, const std::string& id_or_name);

// Quotas, unique name, image, keys, prices, placement, host ports: all or nothing.
Result<Instance> create_instance(store::Database& db, const config::Config& config, const Actor& actor,
                                 const std::string& id, const CreateRequest& request, SysTime now);
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
