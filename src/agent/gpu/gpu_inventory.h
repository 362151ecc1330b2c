#pragma once
// What a host's GPUs are, and how busy: the shape of Nomad's device plugin (fingerprint,
// stats), with one source per kind: NVML on real hosts, the config on simulated ones.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gpucloud::gpu {

struct GpuDevice {
  int index = 0;      // NVML index (for a simulated GPU, its position in the config)
  std::string uuid;   // "GPU-..." from NVML; "GPU-sim-..." for a simulated one
  std::string model;  // the name NVML reports ("NVIDIA GeForce RTX 4090")
  std::int64_t memory_bytes = 0;
  std::string pci_bus_id;     // "00000000:3B:00.0"; empty for a simulated GPU
  std::string health = "ok";  // "ok", or why not ("nvmlDeviceGetUUID: GPU is lost")
  bool simulated = false;

  bool healthy() const { return health == "ok"; }
  bool operator==(const GpuDevice&) const = default;
};

// One reading for one device, for the metrics store and idle autostop.
struct GpuSample {
  int index = 0;
  int gpu_util_percent = 0;     // percent of time a kernel ran over the driver's last period
  int memory_util_percent = 0;  // percent of time device memory was read or written
  std::int64_t memory_used_bytes = 0;
  std::int64_t memory_total_bytes = 0;
};

class GpuInventorySource {
 public:
  virtual ~GpuInventorySource() = default;

  // Every GPU of the host; a device that answers badly is listed with health set to the
  // error, and only a failure to enumerate at all is an error.
  virtual Result<std::vector<GpuDevice>> discover() = 0;
  // Current utilisation and memory use of the device at `index`.
  virtual Result<GpuSample> sample(int index) = 0;
  // "nvml" or "simulated": shown to operators, and decides whether devices are injected.
  virtual std::string_view kind() const = 0;
};

}  // namespace gpucloud::gpu
