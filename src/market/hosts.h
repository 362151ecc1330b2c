#pragma once
// Hosts and their GPUs in the store, as registered by agents. The control plane's record
// of capacity: what the scheduler reads and what reservations change.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "agent/agent_protocol.h"
#include "config/config.h"
#include "core/time_format.h"
#include "market/disk_pool.h"
#include "scheduler/placement.h"
#include "store/database.h"

namespace gpucloud::market {

// The health GET /admin/hosts shows for a GPU the host no longer reports.
inline constexpr const char* kGpuMissing = "missing";

struct GpuRecord {
  int index = 0;  // NVML index where it was last seen; the UUID is what identifies it
  std::string uuid;
  std::string model;          // the offer's model ("RTX 4090"), mapped from what NVML reports
  std::string reported_name;  // as the inventory reported it
  std::int64_t memory_bytes = 0;
  std::string pci_bus_id;
  std::string health;
  bool simulated = false;
  bool present = true;
  std::optional<std::string> reserved_by;  // holder (instance id) of the active reservation
  std::optional<SysTime> lost_at;          // since when it has not been usable (missing or unhealthy)
};

// Who serves a host, as the control plane last saw it (GET /admin/hosts' `agent`); nullopt
// where not known (a host recorded before migration 24 and not registered since).
struct HostAgentInfo {
  std::optional<std::string> kind;     // "in_process" | "remote"
  std::optional<std::string> version;  // the agent's build version
  std::optional<std::string> address;  // a remote agent's peer address; null in-process
  std::optional<SysTime> connected_at;       // since when it is connected (null: disconnected)
  std::optional<SysTime> last_heartbeat_at;  // wall time of the last heartbeat recorded
  std::optional<SysTime> certificate_expires_at;  // its newest unrevoked certificate's not_after
};

// A host's state has two sources kept apart: liveness from heartbeats (the hosts.state
// column: ready | unreachable) and the operator's word (admin_state: active | draining |
// removed). What the API shows as `state` is the stronger: removed > draining > unreachable >
// ready. Only a `ready` host takes new placements and has free GPUs in the market.
inline constexpr const char* kHostActive = "active";
inline constexpr const char* kHostDraining = "draining";
inline constexpr const char* kHostRemoved = "removed";

struct HostRecord {
  std::string id;
  std::string name;
  std::string zone;
  std::string state;     // removed | draining | unreachable | ready (see above)
  std::string liveness = "ready";  // ready | unreachable
  std::string admin_state = kHostActive;  // active | draining | removed
  bool simulated = false;
  std::string inventory_source;
  std::string inventory_error;
  std::string engine;
  int cpu = 0, cpu_used = 0;
  std::int64_t memory_gib = 0, memory_gib_used = 0;
  int port_min = 0, port_max = 0;
  std::optional<SysTime> last_seen;
  std::vector<GpuRecord> gpus;
  // Whether the host's engine enforces system_disk_gib (nullopt: not reported yet), and why not.
  std::optional<bool> system_disk_enforced;
  std::string system_disk_reason;
  DiskPoolState disk_pool;  // the disk pool as last reported and what is provisioned in it
  // As the agent reported at registration ("" / nullopt: not reported).
  std::string gpu_injection, gpu_injection_reason, driver_version;
  std::optional<bool> lxcfs_available;
  std::string lxcfs_reason;
  HostAgentInfo agent;
};

// A GPU that stopped being usable (missing, or reported unhealthy) or became usable again
// (present and "ok"), or that a heartbeat reported for the first time, found while recording
// a host's report. Each loss is found once: the
// GPU's `lost_at` is set by compare-and-set when it is first seen unusable and cleared when
// it is usable again, so repeated reports of the same state find nothing.
struct GpuChange {
  enum class Kind { lost, recovered, added };
  Kind kind = Kind::lost;
  std::string uuid;
  std::string model;
  int index = 0;       // where it was last seen
  std::string health;  // as GET /admin/hosts shows it: "missing", the health error, or "ok"
  std::optional<std::string> holder;  // the holder (instance id) of its active reservation
  std::optional<SysTime> lost_at;     // recovered: since when it had been lost, if known
};

struct HostRegistration {
  HostRecord host;
  std::vector<GpuChange> changes;
  std::optional<DiskPoolCrossing> disk_pool_crossing;  // the report's disk use crossed 80 or 95 %
};

// Records a registration: creates or updates the host and its GPUs, matched by UUID (GPUs
// that vanished stay recorded as not present, health "missing", so reservations on them
// still name the physical GPU; a GPU without a UUID is recorded unhealthy, and so is one
// whose UUID or index the report gives twice). Returns the GPUs lost or recovered by it.
// The host's liveness becomes ready; a drained host stays draining, and a removed one
// (its name joining again) becomes active.
Result<HostRegistration> register_host(store::Database& db, const agent::HostInventory& inventory,
                                       const config::Config& config, SysTime now);
// register_host without the changes (tests, tools).
Result<HostRecord> upsert_host(store::Database& db, const agent::HostInventory& inventory, const config::Config& config,
                               SysTime now);
// Records a heartbeat's GPUs. A beat names the GPUs it could describe: each one known on
// this host takes the beat's health and index (and is present); a healthy UUID no host has is
// added to this one (a card replaced while the daemon runs is placeable without a restart)
// unless a recorded GPU the beat does not name holds its index; a UUID another host has is
// left to that host; a GPU the beat leaves out keeps its record (only a registration, the
// full inventory, makes a GPU missing), and a missing GPU's index (where it was last seen)
// collides with nothing. Returns the GPUs added, lost or recovered; nothing for a host not
// registered.
Result<std::vector<GpuChange>> record_gpu_health(store::Database& db, const std::string& host_name,
                                                 const std::vector<agent::GpuInfo>& gpus, const config::Config& config,
                                                 SysTime now);
Status set_host_state(store::Database& db, const std::string& host_name, const std::string& state,
                      std::optional<SysTime> last_seen);
// Hosts by name; a removed host only when `include_removed`.
Result<std::vector<HostRecord>> list_hosts(store::Database& db, bool include_removed = false);
// A host as GET /admin/hosts shows it: which instance holds or has reserved each GPU.
boost::json::object host_json(const HostRecord& host);
Result<std::optional<HostRecord>> find_host(store::Database& db, const std::string& id_or_name);

// What the scheduler needs: per host, capacity and free GPUs (healthy, present, unreserved).
// `ready` only for a ready, active host; `own_host`: the capacity a start of an instance that
// already lives there sees (not a new placement), so a draining host is ready for it too.
scheduler::HostCapacity to_capacity(const HostRecord& host, bool own_host = false);
Result<std::vector<scheduler::HostCapacity>> load_capacities(store::Database& db);

// (id, name) of every host not marked unreachable and not removed.
Result<std::vector<std::pair<std::string, std::string>>> reachable_hosts(store::Database& db);
Result<std::optional<std::string>> host_id_by_name(store::Database& db, const std::string& name);

}  // namespace gpucloud::market
