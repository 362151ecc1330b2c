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
  // The device node's minor number (/dev/nvidia<minor>): NVML's nvmlDeviceGetMinorNumber;
  // a simulated GPU's index (a fake driver tree's nodes are nvidia0..N-1). -1: unknown.
  int minor = -1;

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

// A compute process on a GPU and the device memory it holds (NVML's
// nvmlDeviceGetComputeRunningProcesses; pid as the host sees it).
struct GpuProcess {
  unsigned pid = 0;
  std::int64_t used_bytes = 0;  // 0 where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
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
  // The compute processes on the device at `index`; unavailable where the source cannot tell.
  virtual Result<std::vector<GpuProcess>> processes(int index) {
    (void)index;
    return fail(ErrorCode::unavailable, "this GPU source lists no processes");
  }
};

}  // namespace gpucloud::gpu
