#pragma once
// One sampling round, blocking: every real GPU of each host from its inventory (NVML), then
// each running instance's cgroup and GPUs. Keeps what a rate needs (the previous CPU counter
// per container) and each container's resolved cgroup. Runs on the agent's sampling thread
// only (not thread-safe); LocalAgent drives it.
#include <chrono>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/agent_protocol.h"
#include "agent/gpu/gpu_inventory.h"
#include "agent/sampling/cgroup_reader.h"
#include "agent/sampling/sample_target.h"

namespace gpucloud::agent::sampling {

inline constexpr std::string_view kSimulatedGpuNote = "simulated GPUs report no utilisation";

// One served host as the round sees it: its inventory as last discovered.
struct SampledHost {
  std::string name;
  gpu::GpuInventorySource* inventory = nullptr;  // outlives the round
  std::vector<GpuInfo> gpus;                     // as discovered (simulated ones are not read)
  std::string inventory_error;                   // why discovery found no GPUs ("" when it did)
};

struct SamplingRound {
  std::vector<SampleReport> reports;  // one per host, in the order given
  std::vector<std::string> stale;     // containers whose cgroup could not be read
};

class InstanceSampler {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `clock`: when each cgroup was read (tests give their own).
  explicit InstanceSampler(CgroupReader reader = CgroupReader(), Clock clock = std::chrono::steady_clock::now);

  // A target whose host is not among `hosts` is reported under the only host when there is
  // one (an instance spec without a host name), else left out.
  SamplingRound round(const std::vector<SampledHost>& hosts, const std::vector<SampleTarget>& targets);

 private:
  struct Seen {
    int pid = 0;
    CgroupPaths paths;
    std::int64_t cpu_usage_ns = 0;
    std::chrono::steady_clock::time_point at;
  };
  // The cgroup's counters, resolving (again) when needed; nullopt when unreadable.
  std::optional<CgroupUsage> read_container(const SampleTarget& target, Seen& seen, bool fresh);

  CgroupReader reader_;
  Clock clock_;
  std::unordered_map<std::string, Seen> seen_;  // by container id
};

}  // namespace gpucloud::agent::sampling
