// Prints every GPU NVML reports, and one utilisation/memory sample of each: a quick check of
// the NVML loader on a GPU machine. Not built by CMake; scripts/device/nvml-discovery.sh
// compiles and runs it.
//
//   nvml_probe [path-to-libnvidia-ml]     exit 0: read, 1: NVML not available, 2: a device is
//                                         unhealthy or a sample failed
#include <cstdio>
#include <string>

#include "agent/gpu/nvml_library.h"

int main(int argc, char** argv) {
  using gpucloud::gpu::NvmlLibrary;
  NvmlLibrary nvml(argc > 1 ? argv[1] : NvmlLibrary::kDefaultPath);
  if (auto s = nvml.open(); !s) {
    std::fprintf(stderr, "%s\n", s.error().detail.c_str());
    return 1;
  }
  if (auto v = nvml.driver_version()) {
    std::printf("driver %s\n", v->c_str());
  } else {
    std::printf("driver version unknown: %s\n", v.error().detail.c_str());
  }
  auto devices = nvml.devices();
  if (!devices) {
    std::fprintf(stderr, "%s\n", devices.error().detail.c_str());
    return 1;
  }
  std::printf("%zu GPU(s)\n", devices->size());
  int rc = 0;
  for (const auto& d : *devices) {
    std::printf("gpu %d: %s | %s | %.1f GiB | pci %s | health %s\n", d.index, d.model.c_str(),
                d.uuid.c_str(), static_cast<double>(d.memory_bytes) / (1024.0 * 1024 * 1024),
                d.pci_bus_id.c_str(), d.health.c_str());
    if (!d.healthy()) rc = 2;
    auto s = nvml.sample(static_cast<unsigned>(d.index));
    if (s) {
      std::printf("  util gpu %d%% mem %d%% | memory used %.2f of %.2f GiB\n", s->gpu_util_percent,
                  s->memory_util_percent,
                  static_cast<double>(s->memory_used_bytes) / (1024.0 * 1024 * 1024),
                  static_cast<double>(s->memory_total_bytes) / (1024.0 * 1024 * 1024));
    } else {
      std::printf("  sample failed: %s\n", s.error().detail.c_str());
      rc = 2;
    }
  }
  return rc;
}
