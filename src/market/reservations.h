#pragma once
// Reserving GPUs, CPU and memory for a holder (an instance): decided by the scheduler and
// recorded in the SAME transaction, so two racing requests can never both get a GPU.
#include <optional>
#include <string>
#include <vector>

#include "core/time_format.h"
#include "scheduler/placement.h"
#include "store/database.h"

namespace gpucloud::market {

struct Reservation {
  std::string id;
  std::string holder;
  std::string host_id;
  std::string host_name;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  std::string gpu_model;
  std::vector<int> gpu_indices;         // where the GPUs were last seen (NVML index)
  std::vector<std::string> gpu_uuids;   // what the reservation holds: the physical GPUs
};

// Places `request` (on `only_host` when set: a restart on the same host) and records the
// reservation. The GPUs of the holder's previous reservation are preferred when free (unless
// the request names its own preference). Unschedulable comes back as a no_capacity error
// naming what is short, and which of the holder's previous GPUs are missing or unhealthy.
Result<Reservation> reserve(store::Database& db, const std::string& holder, const scheduler::PlacementRequest& request,
                            const std::optional<std::string>& only_host, SysTime now);
// Frees the holder's active reservation, if any. Returns whether one was freed.
Result<bool> release_reservation(store::Database& db, const std::string& holder, SysTime now);
Result<std::optional<Reservation>> active_reservation(store::Database& db, const std::string& holder);
// Every holder with an active reservation (for reconciliation).
Result<std::vector<std::string>> reservation_holders(store::Database& db);

}  // namespace gpucloud::market
