#pragma once
// GPUs declared in the config (`simulated_gpus = [{model, memory_gib, count}]`) so the market,
// scheduler and billing run on CPU-only machines. Marked simulated everywhere; nothing is
// injected into containers for them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu/gpu_inventory.h"

namespace gpucloud::gpu {

struct SimulatedGpuSpec {
  std::string model;  // the market's model name, e.g. "RTX 4090"
  std::int64_t memory_gib = 0;
  int count = 0;
};

// A config mistake (count = 8000) should fail loudly rather than flood the market.
inline constexpr int kMaxSimulatedGpusPerHost = 64;

// "GPU-sim-" then an 8-4-4-4-12 hex body: the first three groups from the host name (the same
// for all its GPUs), the rest from name and index, the last four digits the index. Stable
// across runs and machines, so instances keep their GPUs' UUIDs after a restart.
std::string simulated_gpu_uuid(std::string_view host_name, int index);

class SimulatedInventory : public GpuInventorySource {
 public:
  SimulatedInventory(std::string host_name, std::vector<SimulatedGpuSpec> specs);

  // Devices in config order, indices 0..n-1; invalid_argument for a bad spec.
  Result<std::vector<GpuDevice>> discover() override;
  // Always idle: a simulated GPU runs nothing.
  Result<GpuSample> sample(int index) override;
  std::string_view kind() const override { return "simulated"; }

 private:
  Status validate() const;

  std::string host_name_;
  std::vector<SimulatedGpuSpec> specs_;
};

}  // namespace gpucloud::gpu
