#pragma once
// What the sampler needs to know of each running instance, and where it learns it: the
// instance runtime (InstanceRuntime::sample_targets) answers once per round.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "core/result.h"

namespace gpucloud::agent::sampling {

struct SampleTarget {
  std::string instance_id;
  std::string host_name;
  std::string container_id;
  int pid = 0;  // the container's init, as the engine reported it
  std::vector<std::string> gpu_uuids;  // the GPUs it holds, in its desired spec's order
  bool gpus_simulated = false;
  std::int64_t memory_limit_bytes = 0;  // from its desired spec; the cgroup's own limit wins
};

// One round's running instances. `stale`: containers whose cgroup could not be read last
// round with the pid given then (restarted, or gone): the source asks the engine again.
using SampleSource =
    std::function<boost::asio::awaitable<Result<std::vector<SampleTarget>>>(std::vector<std::string> stale)>;

}  // namespace gpucloud::agent::sampling
