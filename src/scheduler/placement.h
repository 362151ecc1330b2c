#pragma once
// Placement: which host and which GPUs an instance gets. A pure library, no I/O.
//
// Shape follows Nomad's feasibility stack and the Kubernetes framework's Status: cheap filters
// first (zone, ready, model present, free GPUs on one host, CPU, memory), then ranking, and a
// request that does not fit is a normal outcome (Unschedulable, with named reasons and a
// message a user can act on), kept apart from an internal error (a bad request: Result error).
//
// Not thread-safe: the caller serialises decisions (one lock around place + commit).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/result.h"

namespace gpucloud::scheduler {

struct GpuSlot {
  int index = 0;  // NVML index on the host
  std::string uuid;
  std::string model;  // market model name ("RTX 4090"), not the raw NVML name
  bool free = true;
};

struct HostCapacity {
  std::string id;
  std::string name;
  std::string zone;
  bool ready = true;
  int cpu_total = 0;
  int cpu_used = 0;
  std::int64_t memory_gib_total = 0;
  std::int64_t memory_gib_used = 0;
  std::vector<GpuSlot> gpus;

  int cpu_free() const { return cpu_total - cpu_used; }
  std::int64_t memory_gib_free() const { return memory_gib_total - memory_gib_used; }
  int free_gpus(std::string_view model) const;
  int free_gpus_any() const;
  bool has_model(std::string_view model) const;
};

struct PlacementRequest {
  std::string zone;       // empty: any zone
  std::string gpu_model;  // empty exactly when gpu_count == 0
  int gpu_count = 0;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  // GPUs to take first when free on the chosen host (a start: the instance's previous
  // GPUs, so its container need not be rebuilt). A preference only: it never changes which
  // host is chosen or whether the request fits.
  std::vector<std::string> preferred_gpu_uuids;
};

// A decision, and also the reservation to commit and later release.
struct Placement {
  std::string host_id;
  std::vector<int> gpu_indices;  // ascending
  int cpu = 0;
  std::int64_t memory_gib = 0;

  bool operator==(const Placement&) const = default;
};

// Filters in the order they run; a host is counted under the first one it fails.
enum class Reason {
  zone_mismatch,
  host_not_ready,
  model_absent,
  not_enough_gpus,
  not_enough_cpu,
  not_enough_memory,
};
inline constexpr int kReasonCount = 6;
std::string_view to_string(Reason reason);

struct ReasonCount {
  Reason reason = Reason::zone_mismatch;
  int hosts = 0;

  bool operator==(const ReasonCount&) const = default;
};

struct Unschedulable {
  std::vector<ReasonCount> reasons;  // non-zero counts only, in filter order
  // The filter that stopped the hosts that got furthest: what the user must change.
  Reason limiting = Reason::zone_mismatch;
  // e.g. "no host in zone-a has 4 free RTX 4090; most free on one host: 3 (node-2)"
  std::string message;
  // Of the limiting resource (GPUs, CPU cores or GiB) on the host that came closest, among
  // the hosts that passed every earlier filter; 0 and "" for zone/ready/model.
  std::int64_t most_free_on_one_host = 0;
  std::string best_host_name;

  int hosts_rejected(Reason reason) const;
  // The no_capacity problem: detail = message, plus gpus_free / cpu_free / memory_gib_free.
  Error to_error() const;

  bool operator==(const Unschedulable&) const = default;
};

using PlacementResult = std::variant<Placement, Unschedulable>;

enum class Strategy {
  // Fewest free GPUs of the model left on the host after placement (whole hosts stay free
  // for 8-GPU requests), then lower CPU use, then host id.
  best_fit,
  // The first feasible host in list (insertion) order: the baseline for the benchmark.
  first_fit,
};

// Request errors (negative counts, model without GPUs...) are invalid_argument.
Status validate(const PlacementRequest& request);

// Linear over `hosts`: fine for the server's sizes; ClusterIndex below for 10,000 hosts.
// A no-GPU request (gpu_count 0) needs only CPU and memory; best fit then prefers hosts with
// the fewest free GPUs of any model, so it does not take CPU that free GPUs need.
Result<PlacementResult> place(const std::vector<HostCapacity>& hosts,
                              const PlacementRequest& request,
                              Strategy strategy = Strategy::best_fit);

// Market "gpus_free" for one host: min(free GPUs of model, free CPU / cpu_per_gpu,
// free memory / mem_per_gpu). A per-GPU amount <= 0 does not limit; a host not ready has 0.
std::int64_t free_gpus_for_offer(const HostCapacity& host, const std::string& model,
                                 int cpu_per_gpu, std::int64_t mem_per_gpu);

// Marks the placement's GPUs used and adds its CPU and memory; conflict (and no change) when
// a GPU is missing or already used or the CPU/memory is not free.
Status reserve(HostCapacity& host, const Placement& placement);
// The inverse; conflict (and no change) when a GPU is not in use or more is returned than
// is used (a double release).
Status release(HostCapacity& host, std::span<const int> gpu_indices, int cpu,
               std::int64_t memory_gib);

// Hosts bucketed by (zone, GPU model, free GPUs of that model), each bucket ordered by
// (cpu_used, id): a best-fit decision walks the buckets upward from the requested count and
// stops at the first feasible host, instead of scanning every host. Same answers as place()
// over hosts() (tested on random traces), including Unschedulable's counts and message.
class ClusterIndex {
 public:
  ClusterIndex();
  ~ClusterIndex();
  ClusterIndex(ClusterIndex&&) noexcept;
  ClusterIndex& operator=(ClusterIndex&&) noexcept;
  ClusterIndex(const ClusterIndex&) = delete;
  ClusterIndex& operator=(const ClusterIndex&) = delete;

  // invalid_argument for an empty or duplicate id, used > total, duplicate GPU index.
  Status add_host(HostCapacity host);
  // Replaces a host's whole record (e.g. after the agent re-reported it); not_found if absent.
  Status update_host(HostCapacity host);
  Status remove_host(std::string_view host_id);
  Status set_ready(std::string_view host_id, bool ready);

  Result<PlacementResult> place(const PlacementRequest& request,
                                Strategy strategy = Strategy::best_fit) const;
  // not_found for an unknown host, conflict if the host is not ready or short (it changed).
  Status commit(const Placement& placement);
  Status release(std::string_view host_id, std::span<const int> gpu_indices, int cpu,
                 std::int64_t memory_gib);
  Status release(const Placement& placement);

  const HostCapacity* find(std::string_view host_id) const;
  std::vector<HostCapacity> hosts() const;  // in insertion order
  std::size_t size() const;
  // Free GPUs of `model` on ready hosts in `zone` (empty: all zones).
  std::int64_t free_gpus(std::string_view zone, std::string_view model) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpucloud::scheduler
