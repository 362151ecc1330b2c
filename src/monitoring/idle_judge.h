#pragma once
// Idle autostop's rule for one reading (spec, "Cost control"): an instance with real GPUs is
// idle when every GPU it holds is below the threshold; a no-GPU instance, or one on
// simulated GPUs (which report nothing), when its CPU is. A GPU instance without GPU
// readings (NVML failed) is never counted idle. The judgment carries the sentence the
// instance shows, so a user sees which GPU or the CPU decided it, and when.
#include <optional>
#include <string>

#include "agent/agent_protocol.h"
#include "core/time_format.h"
#include "instances/instance_record.h"

namespace gpucloud::monitoring {

enum class IdleBasis { gpu, cpu };
IdleBasis idle_basis(const instances::Instance& i);

struct IdleJudgment {
  bool idle = false;
  std::string reason;  // "GPU 1 at 87 % (threshold 5 %) at 2026-12-02T10:00:05Z"
};

// nullopt when the reading cannot decide (a CPU rate needs two readings).
std::optional<IdleJudgment> judge_idle(const instances::Instance& i, const agent::InstanceSample& sample, SysTime at);

}  // namespace gpucloud::monitoring
