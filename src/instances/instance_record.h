#pragma once
// An instance as the store keeps it, and its API view. States follow the spec:
// creating -> running <-> stopping -> stopped -> starting -> running; any -> releasing ->
// released; error with a reason. Every change of state is a compare-and-set.
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::instances {

struct PortBinding {
  int container_port = 0;
  std::string protocol = "tcp";
  int host_port = 0;
};

struct Instance {
  std::string id, owner, name, state, state_reason, zone;
  std::optional<std::string> host_id, host_name;
  std::optional<std::string> gpu_model;
  int gpu_count = 0;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  bool no_gpu = false;  // running (or to start) at the no-GPU size
  std::int64_t system_disk_gib = 0;
  std::string image_id;
  std::string image_name;  // read only (joined from images)
  std::vector<std::string> ssh_keys;  // key ids
  std::optional<std::string> password_hash;
  std::string billing_mode = "hourly";
  bool auto_renew = true;
  std::int64_t price_per_hour = 0;
  std::optional<std::string> ipv4, host_key, container_id;
  bool cpus_capped = false;
  std::int64_t run_seconds = 0, charged = 0;
  SysTime created_at;
  std::optional<SysTime> started_at, stopped_at, released_at;
  std::vector<PortBinding> ports;
  std::vector<std::string> gpu_uuids;  // of the active reservation
  bool gpus_simulated = false;
};

bool is_transitional(const std::string& state);  // creating, starting, stopping, releasing

Status insert_instance(store::Database& db, const Instance& instance);
Result<std::optional<Instance>> load_instance(store::Database& db, const std::string& id);
// The owner's instance by id or name (not released); another user's is not found.
Result<Instance> find_owned_instance(store::Database& db, const std::string& owner, const std::string& id_or_name);
// Newest first; without a state filter, released ones only when `with_released`.
Result<std::vector<Instance>> list_instances(store::Database& db, const std::optional<std::string>& owner,
                                             const std::optional<std::string>& state, bool with_released = false);
// Every instance that is not released (for reconciliation).
Result<std::vector<Instance>> live_instances(store::Database& db);

// Moves `id` from `from` to `to`; conflict (naming the current state) when it is not in `from`.
Status compare_and_set_state(store::Database& db, const std::string& id, const std::vector<std::string>& from,
                             const std::string& to, const std::string& reason);
Status update_instance_fields(store::Database& db, const Instance& instance);  // everything but id/owner
// Records the event of a state change ("instance.<state>"), in the caller's transaction.
Status record_state_event(store::Database& db, const Instance& instance, SysTime now);
// update_instance_fields, plus the event when the state differs from `previous_state`.
Status update_and_record(store::Database& db, const std::string& previous_state, const Instance& next, SysTime now);

// Host ports: the lowest free ones of the host's range, unique per host in the schema.
Result<std::vector<PortBinding>> allocate_ports(store::Database& db, const std::string& instance_id,
                                                const std::string& host_id, const std::vector<int>& container_ports);
Status free_ports(store::Database& db, const std::string& instance_id);

struct ViewContext {
  std::string public_host;
  std::string currency;
};
boost::json::object instance_json(const Instance& instance, const ViewContext& view, std::int64_t run_seconds_now);

}  // namespace gpucloud::instances
