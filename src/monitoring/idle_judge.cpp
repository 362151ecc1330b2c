#include "monitoring/idle_judge.h"

#include <fmt/format.h>

namespace gpucloud::monitoring {

IdleBasis idle_basis(const instances::Instance& i) {
  const bool real_gpus = i.gpu_count > 0 && !i.no_gpu && !i.gpus_simulated;
  return real_gpus ? IdleBasis::gpu : IdleBasis::cpu;
}

std::optional<IdleJudgment> judge_idle(const instances::Instance& i, const agent::InstanceSample& sample, SysTime at) {
  if (!i.autostop) return std::nullopt;
  const int below = i.autostop->below_percent;
  const std::string when = format_rfc3339(std::chrono::floor<std::chrono::seconds>(at));
  if (idle_basis(i) == IdleBasis::gpu) {
    if (sample.gpus.empty())
      return IdleJudgment{false, fmt::format("no GPU reading at {} ({}): not counted idle", when,
                                             sample.gpu_note.empty() ? "the agent reported none" : sample.gpu_note)};
    std::string levels;
    for (std::size_t n = 0; n < sample.gpus.size(); ++n) {
      const auto& g = sample.gpus[n];
      if (g.util_percent >= below)
        return IdleJudgment{false, fmt::format("GPU {} at {} % (threshold {} %) at {}", n, g.util_percent, below, when)};
      levels += fmt::format("{}GPU {} at {} %", n == 0 ? "" : ", ", n, g.util_percent);
    }
    return IdleJudgment{true, fmt::format("every GPU below {} % at {} ({})", below, when, levels)};
  }
  if (!sample.cpu_percent) return std::nullopt;
  const double cpu = *sample.cpu_percent;
  if (cpu >= below)
    return IdleJudgment{false, fmt::format("CPU at {:.1f} % of a core (threshold {} %) at {}", cpu, below, when)};
  return IdleJudgment{true, fmt::format("CPU at {:.1f} % of a core, below {} %, at {}", cpu, below, when)};
}

}  // namespace gpucloud::monitoring
