#pragma once
// The agent protocol: what the control plane and a host agent say to each other. Only
// serialisable value types cross it (each has a JSON form), so the same interface runs
// in-process (all-in-one), behind a loopback JSON transport (tests), or over a wire (cluster).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "core/result.h"

namespace gpucloud::agent {

inline constexpr int kProtocolVersion = 1;

struct GpuInfo {
  int index = 0;
  std::string uuid;
  std::string model;       // as the inventory reports it (NVML name, or the simulated model)
  std::int64_t memory_bytes = 0;
  std::string pci_bus_id;
  std::string health = "ok";
  bool simulated = false;
};

// The filesystem holding the host's disks (DATA_DIR/agent), as the agent measured it: its size
// and real use as df counts them (root-reserved blocks left out), the reserve held back for
// the store and the agent, and the capacity provisioned sizes may reach:
// (size - reserve) x [agent] disk_overcommit.
struct DiskPool {
  std::string path;
  std::int64_t size_bytes = 0, used_bytes = 0, reserve_bytes = 0, capacity_bytes = 0;
};

// One host as its agent sees it: sent at registration and whenever it changes.
struct HostInventory {
  std::string name;
  std::string zone;
  int cpu = 0;                  // cores the platform may hand out
  std::int64_t memory_gib = 0;
  int port_min = 0, port_max = 0;
  std::string engine;           // "unix:///var/run/docker.sock"
  // Where users reach its instances' ports (SSH); "" = the control plane's public_host.
  // Optional in the message ("public_address").
  std::string public_address;
  bool simulated = false;       // its GPUs are declared, not discovered
  std::string inventory_source; // "nvml" | "simulated" | "none"
  std::string inventory_error;  // why NVML found nothing, shown to the operator
  std::vector<GpuInfo> gpus;
  std::optional<DiskPool> disk_pool;  // absent: the agent could not measure it (not checked)
  // How its instances get GPUs (agent/gpu/gpu_injector.h) and whether lxcfs serves their
  // /proc (agent/lxcfs.h), as the agent found them. Optional in the message ("gpu_injection":
  // {mode, reason, driver_version}, "lxcfs": {available, reason}); "" mode: not reported.
  std::string gpu_injection;  // "toolkit" | "builtin" | "none"
  std::string gpu_injection_reason;
  std::string driver_version;
  std::optional<bool> lxcfs_available;
  std::string lxcfs_reason;
  int protocol_version = kProtocolVersion;
};

struct Heartbeat {
  std::string host_name;
  std::uint64_t sequence = 0;
  std::vector<GpuInfo> gpus;  // current health
  std::optional<DiskPool> disk_pool;  // measured at each beat
};

// Monitoring: what the agent's sampler reads every [monitoring] sample_interval.
// One GPU's reading from NVML (never invented: simulated GPUs have none).
struct GpuReading {
  int index = 0;  // NVML index on the host
  std::string uuid;
  int util_percent = 0;  // 0..100, share of the driver's last period a kernel ran
  std::int64_t memory_used_bytes = 0, memory_total_bytes = 0;
  // In an instance's sample: the device memory its own processes hold on this GPU (NVML's
  // compute processes whose cgroup is the instance's container); nullopt where NVML lists no
  // processes (optional in the message, "process_memory_bytes").
  std::optional<std::int64_t> process_memory_bytes;
};

// One running instance, read from its container's cgroup and its GPUs.
struct InstanceSample {
  std::string instance_id;
  // Percent of one core over the last interval (200 = two cores busy), as top and docker stats
  // count it; nullopt on the first reading of a container (a rate needs two).
  std::optional<double> cpu_percent;
  std::optional<std::int64_t> memory_used_bytes;  // the cgroup's use less its inactive page cache
  std::int64_t memory_limit_bytes = 0;            // 0 when unknown
  std::vector<GpuReading> gpus;  // its GPUs (by the UUIDs it holds), in the order it holds them
  // Why `gpus` is empty though the instance holds GPUs: "simulated GPUs report no
  // utilisation", or the NVML error. Empty otherwise.
  std::string gpu_note;
};

// One sampling round of one host.
struct SampleReport {
  std::string host_name;
  std::vector<InstanceSample> instances;  // every running instance the host could read
  std::vector<GpuReading> gpus;           // every real GPU of the host
};

// Something changed on a host behind the control plane's back or ahead of its next look (a
// container started, died or went away): reconcile now. No ids: anything may have changed
// (the agent lost sight of its engine for a while).
struct ChangeReport {
  std::string host_name;
  std::vector<std::string> instance_ids;
};

// A command says the desired state of one thing ("instance X should be running with ...");
// repeating a command id has no further effect (the agent answers the first outcome).
struct Command {
  std::string id;         // unique per command, chosen by the control plane
  std::string host_name;
  std::string kind;       // e.g. "instance.ensure", "instance.remove"
  boost::json::object desired;
};

struct CommandOutcome {
  std::string command_id;
  bool ok = false;
  std::string error_code;   // ErrorCode name when !ok
  std::string error_detail;
  boost::json::object observed;  // what the agent now sees (e.g. container state, host key)
};

boost::json::object to_json(const GpuInfo&);
boost::json::object to_json(const DiskPool&);
Result<DiskPool> disk_pool_from_json(const boost::json::value&);
boost::json::object to_json(const HostInventory&);
boost::json::object to_json(const Heartbeat&);
boost::json::object to_json(const Command&);
boost::json::object to_json(const SampleReport&);
Result<SampleReport> sample_report_from_json(const boost::json::value&);
boost::json::object to_json(const ChangeReport&);
Result<ChangeReport> change_report_from_json(const boost::json::value&);
boost::json::object to_json(const CommandOutcome&);
Result<GpuInfo> gpu_info_from_json(const boost::json::value&);
Result<HostInventory> host_inventory_from_json(const boost::json::value&);
Result<Heartbeat> heartbeat_from_json(const boost::json::value&);
Result<Command> command_from_json(const boost::json::value&);
Result<CommandOutcome> command_outcome_from_json(const boost::json::value&);
// The *_from_json readers never throw: a message that is not an object, lacks a field or has
// one of the wrong type or range is an `internal` error naming the field. parse_message
// turns text into JSON the same way (not JSON: an error, never an exception).
Result<boost::json::value> parse_message(std::string_view text);

// An outcome carrying an error as a value.
CommandOutcome failed_outcome(const std::string& command_id, const Error& error);
Error outcome_error(const CommandOutcome& outcome);

}  // namespace gpucloud::agent
