#pragma once
// NVML, loaded at run time with dlopen (as Mesos does): no build-time NVIDIA dependency, and a
// host without the driver gets a clean "NVML not available" error, never a crash. Every call's
// failure becomes a Result error carrying NVIDIA's own string ("nvmlDeviceGetUUID: GPU is
// lost").
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu/gpu_inventory.h"
#include "core/result.h"

namespace gpucloud::gpu {

// The few declarations we need from nvml.h, with the ABI of the versioned entry points.
namespace nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t, opaque

inline constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDriverVersionBufferSize = 80;

struct PciInfo {  // nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2/_v3
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};
static_assert(sizeof(PciInfo) == 68, "nvmlPciInfo_t layout");

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

struct ProcessInfo {  // nvmlProcessInfo_t (v2), as _v2 and _v3 of GetComputeRunningProcesses fill it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24, "nvmlProcessInfo_t layout");

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

// The entry points: resolved with dlsym, or given directly by tests.
struct Api {
  Return (*init)() = nullptr;                                             // nvmlInit_v2
  Return (*shutdown)() = nullptr;                                         // nvmlShutdown
  const char* (*error_string)(Return) = nullptr;                          // nvmlErrorString
  Return (*device_get_count)(unsigned int*) = nullptr;                    // nvmlDeviceGetCount_v2
  Return (*device_get_handle_by_index)(unsigned int, Device*) = nullptr;  // ..._v2
  Return (*device_get_pci_info)(Device, PciInfo*) = nullptr;              // _v3, else _v2
  Return (*device_get_name)(Device, char*, unsigned int) = nullptr;
  Return (*device_get_uuid)(Device, char*, unsigned int) = nullptr;
  Return (*device_get_memory_info)(Device, Memory*) = nullptr;
  // Optional: metrics and the probe degrade without them.
  Return (*device_get_utilization_rates)(Device, Utilization*) = nullptr;
  Return (*system_get_driver_version)(char*, unsigned int) = nullptr;
  Return (*device_get_minor_number)(Device, unsigned int*) = nullptr;  // nvmlDeviceGetMinorNumber
  // nvmlDeviceGetComputeRunningProcesses_v3, else _v2 (same struct)
  Return (*device_get_compute_running_processes)(Device, unsigned int*, ProcessInfo*) = nullptr;
};

}  // namespace nvml

class NvmlLibrary {
 public:
  static constexpr const char* kDefaultPath = "libnvidia-ml.so.1";

  // `path` as given to dlopen: a soname searched the usual way, or a file.
  explicit NvmlLibrary(std::string path = kDefaultPath);
  // Tests: these entry points instead of a library; open() only calls init.
  explicit NvmlLibrary(nvml::Api api);
  ~NvmlLibrary();  // nvmlShutdown, then dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // dlopen, resolve every symbol, nvmlInit_v2. unavailable with "NVML not available: ..."
  // when the library, a symbol or the driver is missing. Idempotent; not thread-safe (call it
  // before sharing the object; the queries below may then run on any thread).
  Status open();
  bool is_open() const { return initialized_; }
  const std::string& path() const { return path_; }

  Result<unsigned> device_count() const;
  // Never fails for a bad device once open: its failed queries go into `health`.
  Result<GpuDevice> device(unsigned index) const;
  Result<std::vector<GpuDevice>> devices() const;
  Result<GpuSample> sample(unsigned index) const;
  Result<std::string> driver_version() const;
  // The compute processes on the device and the memory each holds.
  Result<std::vector<GpuProcess>> processes(unsigned index) const;

 private:
  Error call_error(std::string_view call, nvml::Return rc) const;
  Status require_open() const;

  std::string path_;
  void* handle_ = nullptr;  // from dlopen; null for an injected Api
  bool injected_ = false;
  bool initialized_ = false;
  nvml::Api api_;
  const char* pci_call_ = "nvmlDeviceGetPciInfo_v3";  // the version resolved, for messages
};

// The inventory of a real host. Opens NVML on first use, so an agent starts (and says why)
// on a host without the driver.
class NvmlInventory : public GpuInventorySource {
 public:
  explicit NvmlInventory(std::string library_path = NvmlLibrary::kDefaultPath);
  explicit NvmlInventory(std::unique_ptr<NvmlLibrary> library);

  Result<std::vector<GpuDevice>> discover() override;
  Result<GpuSample> sample(int index) override;
  std::string_view kind() const override { return "nvml"; }
  Result<std::vector<GpuProcess>> processes(int index) override;

 private:
  Status ensure_open();

  std::mutex open_mu_;  // guards the lazy open only; NVML queries are thread-safe
  std::unique_ptr<NvmlLibrary> library_;
};

}  // namespace gpucloud::gpu
