#pragma once
// An instance as the store keeps it (the instance repository), and its API view. States
// change only through instances/transition.h.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "instances/instance_state.h"
#include "security_groups/rules.h"
#include "store/database.h"

namespace gpucloud::market {
struct GpuChange;
}

namespace gpucloud::instances {

// A port the instance serves, as declared (spec "Ports"): tcp or udp.
struct PortSpec {
  int port = 0;
  std::string protocol = "tcp";
  bool operator==(const PortSpec&) const = default;
};

struct PortBinding {
  int container_port = 0;
  std::string protocol = "tcp";
  int host_port = 0;
};

struct Instance {
  std::string id, owner, name;
  InstanceState state = InstanceState::creating;
  std::string state_reason, zone;
  // Goes up with every change the engine must follow (state, name, ports): the compare-and-set
  // key of every write, the fence of the agent's commands, and what a repair checks.
  std::int64_t generation = 0;
  std::optional<std::string> host_id, host_name;
  std::optional<std::string> gpu_model;
  int gpu_count = 0;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  bool no_gpu = false;  // running (or to start) at the no-GPU size
  std::int64_t system_disk_gib = 0;
  std::string image_id;
  std::string image_name;  // read only (joined from images)
  bool jupyter = false;    // read only: its image has Jupyter Notebook (images.jupyter)
  // Read only: its host has stopped answering (heartbeats ceased). The instance keeps its
  // state; nothing is stopped or moved (issue 26).
  bool host_unreachable = false;
  std::string host_public_address;  // read only: its host's public_address ("" = public_host)
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
  // Read only: how each GPU of gpu_uuids (same order) is now, as its host last reported it.
  struct GpuHealth {
    std::string health = "ok";  // "ok", "missing" (the host no longer reports it), or the host's error
    int index = 0;              // where it was last seen on the host
    std::string model;
    std::optional<SysTime> lost_at;  // since when it has not been usable
  };
  std::vector<GpuHealth> gpu_health;
  bool degraded() const {
    return std::any_of(gpu_health.begin(), gpu_health.end(), [](const GpuHealth& g) { return g.health != "ok"; });
  }
  struct AttachedDisk {
    std::string id, mount_path;
  };
  std::vector<AttachedDisk> data_disks;  // read only (the disks attached to it)
  // What the system disk holds (the engine's count of written bytes), as reconcile last saw
  // it; nullopt when unknown. Written only by record_system_disk_use (system_disk.h).
  std::optional<std::int64_t> system_disk_used_bytes;
  // The security group deciding who reaches its ports; its rules are read only (loaded with it).
  std::optional<std::string> security_group_id;
  std::vector<security_groups::Rule> security_rules;
  // Stop once its compute charges reach this (smallest unit); the 80 % event was sent.
  std::optional<std::int64_t> spend_limit;
  bool spend_warned = false;
  // A subscription's paid term (weekly, monthly): from its first `running` to expires_at.
  std::optional<SysTime> expires_at;
  std::optional<SysTime> renewal_tried_for;
  // The first `running` of a subscription: its terms end at anchor + k weeks or months, so a
  // monthly term keeps the anchor's day (31 Jan → 28 Feb → 31 Mar).
  std::optional<SysTime> term_anchor;
  // Cost control (instances/schedules.h). Autostop: stop after idle_minutes with every GPU
  // (no GPU or simulated ones: the CPU) below below_percent.
  struct Autostop {
    int idle_minutes = 0;
    int below_percent = 5;
  };
  std::optional<Autostop> autostop;
  std::optional<SysTime> idle_since;       // every reading below the threshold since then
  std::optional<std::string> busy_reason;  // the latest judgment, as a sentence
  std::optional<SysTime> stop_at;          // a one-off stop
  std::optional<int> release_after_stopped_days;  // nullopt: the platform's default
  int schedule_warned = 0;                 // ScheduleWarning bits
  std::optional<SysTime> schedule_at;      // the earliest deadline; written by write_instance_state
  bool in_paid_term(SysTime now) const { return billing_mode != "hourly" && (!expires_at || *expires_at > now); }
};

// Who may reach one of the instance's ports: the CIDRs its group's rules allow, and only the
// IPv4 ones (the agent publishes ports on IPv4) for the agent's firewall.
std::vector<std::string> port_sources(const Instance& instance, const PortBinding& port);
std::vector<std::string> port_sources_v4(const Instance& instance, const PortBinding& port);

Status insert_instance(store::Database& db, const Instance& instance);
Result<std::optional<Instance>> load_instance(store::Database& db, const std::string& id);
// The owner's instance by id or name (not released); another user's is not found.
Result<Instance> find_owned_instance(store::Database& db, const std::string& owner, const std::string& id_or_name);
// Newest first; without a state filter, released ones only when `with_released`.
Result<std::vector<Instance>> list_instances(store::Database& db, const std::optional<std::string>& owner,
                                             const std::optional<InstanceState>& state, bool with_released = false);
// Every instance that is not released (for reconciliation).
Result<std::vector<Instance>> live_instances(store::Database& db);
// The state of one instance, if it exists (for reservation checks).
Result<std::optional<InstanceState>> instance_state_of(store::Database& db, const std::string& id);

// Writes every mutable field of `next` if the row is still at (`state`, `generation`);
// `conflict` naming the current state otherwise. Only transition() and update_desired() call it.
Status write_instance_state(store::Database& db, const std::string& id, InstanceState state, std::int64_t generation,
                            const Instance& next);
// A change that is not a state change (name, keys, auto-renew, ports already written):
// compare-and-set on the loaded generation, which goes up so converge re-sends the desired state.
Status update_desired(store::Database& db, const Instance& loaded, Instance& next);
// The spend limit's 80 % event was sent (an observation: the generation does not move).
// Autostop's running judgment and the warnings sent, without a generation change (the
// engine follows none of it); schedule_at is planned again. Only while the instance is in
// `state` (conflict otherwise).
Status write_cost_control(store::Database& db, const Instance& i, InstanceState state);
// Instances whose schedule_at is due at `now`, earliest first, at most `limit`; and the
// earliest pending schedule_at.
Result<std::vector<std::string>> instances_due(store::Database& db, SysTime now, int limit);
Result<std::optional<SysTime>> earliest_schedule(store::Database& db);
// The running instances of a host (by its name), and whether each has autostop on.
struct RunningOnHost {
  std::string id;
  bool autostop = false;
};
Result<std::vector<RunningOnHost>> running_on_host(store::Database& db, const std::string& host_name);
Status mark_spend_warned(store::Database& db, const std::string& id);
// Records the event of a state change ("instance.<state>"), in the caller's transaction.
Status record_state_event(store::Database& db, const Instance& instance, SysTime now);
// Records what a host's report found about its GPUs (market::register_host,
// market::record_gpu_health), in the caller's transaction: the operator's `host.gpu_lost` /
// `host.gpu_recovered` / `host.gpu_added` for each GPU, and `instance.gpu_lost` / `instance.gpu_recovered` for
// the owner of the live instance whose reservation holds it. Nothing else changes: the
// instance keeps its state, its reservation and its billing.
Status record_gpu_changes(store::Database& db, const std::string& host_id, const std::string& host_name,
                          const std::vector<market::GpuChange>& changes, SysTime now);

// What counts against a user's quotas: live instances, GPUs held by those that run or will.
struct InstanceUsage {
  std::int64_t instances = 0;
  std::int64_t gpus_held = 0;
};
Result<InstanceUsage> instance_usage(store::Database& db, const std::string& owner, const std::optional<std::string>& except_id);
Result<bool> live_name_taken(store::Database& db, const std::string& owner, const std::string& name);

// Host ports: the lowest free ones of the host's range, unique per host in the schema.
Result<std::vector<PortBinding>> allocate_ports(store::Database& db, const std::string& instance_id,
                                                const std::string& host_id, const std::vector<PortSpec>& ports);
Status free_ports(store::Database& db, const std::string& instance_id);
// Frees one declared port's host port.
Status free_port(store::Database& db, const std::string& instance_id, const PortSpec& port);

struct ViewContext {
  std::string public_host;
  std::string currency;
  int default_release_days = 15;  // [policy] release_stopped_after_days
};
boost::json::object instance_json(const Instance& instance, const ViewContext& view, std::int64_t run_seconds_now);

}  // namespace gpucloud::instances
