#pragma once
// Each host's disk pool (issue 23): the filesystem holding its disks, as its agent measured
// it, and what is provisioned in it. Data disks, snapshots and (where the host's engine
// enforces their size) system disks count by their provisioned sizes, not their use (disk
// images are sparse): from the transaction that records one until the one that destroys it.
//
// The accounting is one conditional UPDATE on the host's row per change
// (`provisioned + n <= capacity`), in the transaction that makes the change, so two writers
// (two requests, two processes, a cluster's several control planes) cannot both take the last
// bytes: the second finds the condition false and is refused. Nothing relies on a single
// writer.
#include <cstdint>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "agent/agent_protocol.h"
#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::market {

inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// Takes `bytes` (> 0) of the host's pool for `what` ("disk data-1 (5 GiB)"), or gives them
// back (< 0; never below 0). A take that would pass the capacity is refused with no_capacity
// naming the host, what is free and what is short; a host whose capacity was never reported is
// not checked (counted all the same).
Status take_disk_pool(store::Database& db, const std::string& host_id, std::int64_t bytes, const std::string& what);

struct DiskPoolState {
  std::optional<std::int64_t> capacity_bytes;  // nullopt: not reported yet
  std::int64_t provisioned_bytes = 0;
  std::optional<std::int64_t> size_bytes, used_bytes, reserve_bytes;
  int warned_percent = 0;  // the highest use warning given since use was last below it
};
Result<std::optional<DiskPoolState>> load_disk_pool(store::Database& db, const std::string& host_id);
// {capacity_bytes, provisioned_bytes, free_bytes, size_bytes, used_bytes, reserve_bytes,
// used_percent} for GET /admin/hosts; nulls for what was not reported.
boost::json::object disk_pool_json(const DiskPoolState& pool);

// The real use (percent of the filesystem) at which the operator is warned: 80, then 95.
int disk_pool_level(std::int64_t used_bytes, std::int64_t size_bytes);

// What a report did to the warnings: a level crossed upward (80 or 95) warns once.
struct DiskPoolCrossing {
  int percent = 0;  // the level crossed
  std::int64_t used_bytes = 0, size_bytes = 0;
};
// Records a host's measured pool (capacity, size, use, reserve). Returns the level crossed
// upward since the last warning, if any (compare-and-set on the level, so one crossing warns
// once whoever records it); use that falls below a level re-arms it silently.
Result<std::optional<DiskPoolCrossing>> record_disk_pool(store::Database& db, const std::string& host_id,
                                                         const agent::DiskPool& pool);

}  // namespace gpucloud::market
