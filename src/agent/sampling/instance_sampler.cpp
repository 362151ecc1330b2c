#include "agent/sampling/instance_sampler.h"

#include <algorithm>
#include <unordered_set>

namespace gpucloud::agent::sampling {

namespace {

// A host's GPU readings this round, and why a GPU has none.
struct HostGpuReadings {
  std::unordered_map<std::string, GpuReading> by_uuid;
  std::unordered_map<std::string, std::string> errors;  // uuid -> the NVML error
  std::unordered_set<std::string> simulated;            // uuids of simulated GPUs
  // uuid -> its compute processes, where the source lists them
  std::unordered_map<std::string, std::vector<gpu::GpuProcess>> processes;
};

HostGpuReadings read_host_gpus(const SampledHost& host, std::vector<GpuReading>& into) {
  HostGpuReadings out;
  for (const auto& gpu : host.gpus) {
    if (gpu.simulated || !host.inventory) {
      out.simulated.insert(gpu.uuid);
      continue;
    }
    auto sample = host.inventory->sample(gpu.index);
    if (!sample) {
      out.errors[gpu.uuid] = sample.error().detail;
      continue;
    }
    GpuReading r;
    r.index = gpu.index;
    r.uuid = gpu.uuid;
    r.util_percent = std::clamp(sample->gpu_util_percent, 0, 100);
    r.memory_used_bytes = std::max<std::int64_t>(0, sample->memory_used_bytes);
    r.memory_total_bytes = std::max<std::int64_t>(0, sample->memory_total_bytes);
    if (auto procs = host.inventory->processes(gpu.index)) out.processes[gpu.uuid] = std::move(*procs);
    into.push_back(r);
    out.by_uuid[gpu.uuid] = std::move(r);
  }
  return out;
}

// The instance's GPUs in the order it holds them, or (gpus empty) the note saying why not.
void fill_instance_gpus(const SampleTarget& target, const SampledHost& host, const HostGpuReadings& readings,
                        InstanceSample& sample) {
  if (target.gpu_uuids.empty()) return;
  const bool simulated = target.gpus_simulated ||
                         std::all_of(target.gpu_uuids.begin(), target.gpu_uuids.end(),
                                     [&](const std::string& uuid) { return readings.simulated.count(uuid) > 0; });
  if (simulated) {
    sample.gpu_note = std::string(kSimulatedGpuNote);
    return;
  }
  if (!host.inventory_error.empty()) {
    sample.gpu_note = host.inventory_error;
    return;
  }
  for (const auto& uuid : target.gpu_uuids) {
    if (auto found = readings.by_uuid.find(uuid); found != readings.by_uuid.end()) {
      sample.gpus.push_back(found->second);
      continue;
    }
    auto error = readings.errors.find(uuid);
    sample.gpu_note = error != readings.errors.end() ? error->second : "GPU " + uuid + " is not in this host's inventory";
    sample.gpus.clear();  // all of its GPUs or none: a partial list would read as fewer GPUs
    return;
  }
}

}  // namespace

InstanceSampler::InstanceSampler(CgroupReader reader, Clock clock)
    : reader_(std::move(reader)), clock_(std::move(clock)) {}

std::optional<CgroupUsage> InstanceSampler::read_container(const SampleTarget& target, Seen& seen, bool fresh) {
  const bool resolve_first = fresh || seen.pid != target.pid;
  if (resolve_first) {
    auto paths = reader_.resolve(target.pid);
    if (!paths) return std::nullopt;
    seen = Seen{target.pid, std::move(*paths), 0, {}};
  }
  auto usage = reader_.read(seen.paths);
  if (!usage && !resolve_first) {
    // Its cgroup moved or went away under the same pid: look it up once more.
    auto paths = reader_.resolve(target.pid);
    if (!paths) return std::nullopt;
    seen = Seen{target.pid, std::move(*paths), 0, {}};
    usage = reader_.read(seen.paths);
  }
  if (!usage) return std::nullopt;
  return *usage;
}

SamplingRound InstanceSampler::round(const std::vector<SampledHost>& hosts, const std::vector<SampleTarget>& targets) {
  SamplingRound out;
  std::vector<HostGpuReadings> gpu_readings;
  gpu_readings.reserve(hosts.size());
  for (const auto& host : hosts) {
    SampleReport report;
    report.host_name = host.name;
    gpu_readings.push_back(read_host_gpus(host, report.gpus));
    out.reports.push_back(std::move(report));
  }

  std::unordered_set<std::string> live;
  std::unordered_map<unsigned, CgroupPaths> pid_paths;  // GPU processes' cgroups, this round
  for (const auto& target : targets) {
    std::size_t host = hosts.size();
    for (std::size_t i = 0; i < hosts.size(); ++i)
      if (hosts[i].name == target.host_name) host = i;
    if (host == hosts.size() && hosts.size() == 1) host = 0;
    if (host == hosts.size() || target.container_id.empty()) continue;
    live.insert(target.container_id);

    auto [entry, fresh] = seen_.try_emplace(target.container_id);
    Seen& seen = entry->second;
    auto usage = read_container(target, seen, fresh);
    if (!usage) {
      out.stale.push_back(target.container_id);
      seen_.erase(entry);
      continue;
    }
    const auto now = clock_();
    InstanceSample sample;
    sample.instance_id = target.instance_id;
    // A rate needs a previous counter of this same cgroup; a counter that went backwards is
    // a new cgroup (the container was recreated), whose next reading gives the rate.
    if (seen.at != std::chrono::steady_clock::time_point{} && usage->cpu_usage_ns >= seen.cpu_usage_ns && now > seen.at) {
      const double wall_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - seen.at).count());
      sample.cpu_percent = static_cast<double>(usage->cpu_usage_ns - seen.cpu_usage_ns) / wall_ns * 100.0;
    }
    seen.cpu_usage_ns = usage->cpu_usage_ns;
    seen.at = now;
    sample.memory_used_bytes = usage->memory_used_bytes;
    sample.memory_limit_bytes = usage->memory_limit_bytes > 0 ? usage->memory_limit_bytes : target.memory_limit_bytes;
    fill_instance_gpus(target, hosts[host], gpu_readings[host], sample);
    // The memory its own processes hold on each of its GPUs: NVML's processes whose cgroup is
    // this container's (their pids resolved once per round).
    for (auto& g : sample.gpus) {
      auto procs = gpu_readings[host].processes.find(g.uuid);
      if (procs == gpu_readings[host].processes.end()) continue;
      std::int64_t own = 0;
      for (const auto& p : procs->second) {
        auto [cached, unseen] = pid_paths.try_emplace(p.pid);
        if (unseen) {
          auto paths = reader_.resolve(static_cast<int>(p.pid));
          if (paths) cached->second = std::move(*paths);
        }
        const auto& pp = cached->second;
        if (!pp.cpu_dir.empty() && pp.cpu_dir == seen.paths.cpu_dir && pp.memory_dir == seen.paths.memory_dir)
          own += p.used_bytes;
      }
      g.process_memory_bytes = own;
    }
    out.reports[host].instances.push_back(std::move(sample));
  }
  // Containers no longer running: their counters would only mislead a later rate.
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = live.count(it->first) ? std::next(it) : seen_.erase(it);
  }
  return out;
}

}  // namespace gpucloud::agent::sampling
