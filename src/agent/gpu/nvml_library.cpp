#include "agent/gpu/nvml_library.h"

#include <dlfcn.h>

#include <cstring>
#include <utility>

namespace gpucloud::gpu {

namespace {

Error unavailable(std::string detail) {
  return Error{ErrorCode::unavailable, "NVML not available: " + std::move(detail), {}, 0};
}

// A fixed-size C string buffer from NVML, which may lack its terminator on a bad driver.
std::string from_buffer(const char* buf, std::size_t size) {
  return std::string(buf, strnlen(buf, size));
}

template <class Fn>
bool resolve(void* handle, const char* name, Fn& out) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) return false;
  // POSIX guarantees a data pointer from dlsym converts to a function pointer.
  out = reinterpret_cast<Fn>(sym);
  return true;
}

}  // namespace

NvmlLibrary::NvmlLibrary(std::string path) : path_(std::move(path)) {}

NvmlLibrary::NvmlLibrary(nvml::Api api) : path_("(injected)"), injected_(true), api_(api) {}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_ && api_.shutdown != nullptr) api_.shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

Status NvmlLibrary::open() {
  if (initialized_) return ok();
  if (!injected_) {
    if (handle_ == nullptr) {
      dlerror();  // clear a stale message
      handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_ == nullptr) {
        const char* why = dlerror();
        return fail(unavailable(why != nullptr ? why : path_ + ": cannot be loaded"));
      }
    }
    nvml::Api api;
    const char* missing = nullptr;
    auto need = [&](const char* name, auto& fn) {
      if (missing == nullptr && !resolve(handle_, name, fn)) missing = name;
    };
    need("nvmlInit_v2", api.init);
    need("nvmlShutdown", api.shutdown);
    need("nvmlErrorString", api.error_string);
    need("nvmlDeviceGetCount_v2", api.device_get_count);
    need("nvmlDeviceGetHandleByIndex_v2", api.device_get_handle_by_index);
    // _v3 fills busId the current way; drivers before it only have _v2 (same struct).
    if (!resolve(handle_, "nvmlDeviceGetPciInfo_v3", api.device_get_pci_info)) {
      pci_call_ = "nvmlDeviceGetPciInfo_v2";
      need(pci_call_, api.device_get_pci_info);
    }
    need("nvmlDeviceGetName", api.device_get_name);
    need("nvmlDeviceGetUUID", api.device_get_uuid);
    need("nvmlDeviceGetMemoryInfo", api.device_get_memory_info);
    resolve(handle_, "nvmlDeviceGetUtilizationRates", api.device_get_utilization_rates);
    resolve(handle_, "nvmlSystemGetDriverVersion", api.system_get_driver_version);
    resolve(handle_, "nvmlDeviceGetMinorNumber", api.device_get_minor_number);
    if (!resolve(handle_, "nvmlDeviceGetComputeRunningProcesses_v3", api.device_get_compute_running_processes))
      resolve(handle_, "nvmlDeviceGetComputeRunningProcesses_v2", api.device_get_compute_running_processes);
    if (missing != nullptr) {
      // Not NVML (or a stub too old to use): let go of it so a later try starts clean.
      dlclose(handle_);
      handle_ = nullptr;
      return fail(unavailable("symbol not found in " + path_ + ": " + missing));
    }
    api_ = api;
  }
  if (api_.init == nullptr) return fail(unavailable("no nvmlInit_v2"));
  if (nvml::Return rc = api_.init(); rc != nvml::kSuccess) {
    return fail(unavailable(call_error("nvmlInit_v2", rc).detail));
  }
  initialized_ = true;
  return ok();
}

Error NvmlLibrary::call_error(std::string_view call, nvml::Return rc) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(rc) : nullptr;
  std::string why = text != nullptr ? text : "NVML error " + std::to_string(rc);
  return Error{ErrorCode::unavailable, std::string(call) + ": " + why, {}, 0};
}

Status NvmlLibrary::require_open() const {
  if (!initialized_) return fail(unavailable(path_ + " is not open"));
  return ok();
}

Result<unsigned> NvmlLibrary::device_count() const {
  if (auto s = require_open(); !s) return fail(s.error());
  unsigned count = 0;
  if (auto rc = api_.device_get_count(&count); rc != nvml::kSuccess) {
    return fail(call_error("nvmlDeviceGetCount_v2", rc));
  }
  return count;
}

Result<GpuDevice> NvmlLibrary::device(unsigned index) const {
  if (auto s = require_open(); !s) return fail(s.error());
  GpuDevice d;
  d.index = static_cast<int>(index);
  d.simulated = false;
  // The first failed query is the device's health; the others still fill what they can.
  auto note = [&](std::string_view call, nvml::Return rc) {
    if (rc == nvml::kSuccess) return true;
    if (d.healthy()) d.health = call_error(call, rc).detail;
    return false;
  };

  nvml::Device dev = nullptr;
  if (!note("nvmlDeviceGetHandleByIndex_v2", api_.device_get_handle_by_index(index, &dev))) {
    return d;
  }
  char uuid[nvml::kUuidBufferSize] = {};
  if (note("nvmlDeviceGetUUID", api_.device_get_uuid(dev, uuid, sizeof uuid))) {
    d.uuid = from_buffer(uuid, sizeof uuid);
  }
  char name[nvml::kNameBufferSize] = {};
  if (note("nvmlDeviceGetName", api_.device_get_name(dev, name, sizeof name))) {
    d.model = from_buffer(name, sizeof name);
  }
  nvml::Memory mem{};
  if (note("nvmlDeviceGetMemoryInfo", api_.device_get_memory_info(dev, &mem))) {
    d.memory_bytes = static_cast<std::int64_t>(mem.total);
  }
  nvml::PciInfo pci{};
  if (note(pci_call_, api_.device_get_pci_info(dev, &pci))) {
    d.pci_bus_id = from_buffer(pci.bus_id, sizeof pci.bus_id);
    if (d.pci_bus_id.empty())
      d.pci_bus_id = from_buffer(pci.bus_id_legacy, sizeof pci.bus_id_legacy);
  }
  // The node's minor number (/dev/nvidia<minor>), for built-in injection; not a health matter.
  if (api_.device_get_minor_number != nullptr) {
    unsigned minor = 0;
    if (api_.device_get_minor_number(dev, &minor) == nvml::kSuccess) d.minor = static_cast<int>(minor);
  }
  return d;
}

Result<std::vector<GpuDevice>> NvmlLibrary::devices() const {
  auto count = device_count();
  if (!count) return fail(count.error());
  std::vector<GpuDevice> out;
  out.reserve(*count);
  for (unsigned i = 0; i < *count; ++i) {
    auto d = device(i);
    if (!d) return fail(d.error());
    out.push_back(std::move(*d));
  }
  return out;
}

Result<GpuSample> NvmlLibrary::sample(unsigned index) const {
  if (auto s = require_open(); !s) return fail(s.error());
  nvml::Device dev = nullptr;
  if (auto rc = api_.device_get_handle_by_index(index, &dev); rc != nvml::kSuccess) {
    return fail(call_error("nvmlDeviceGetHandleByIndex_v2", rc));
  }
  GpuSample out;
  out.index = static_cast<int>(index);
  if (api_.device_get_utilization_rates == nullptr) {
    return fail(Error{
        ErrorCode::unavailable, "nvmlDeviceGetUtilizationRates: not provided by " + path_, {}, 0});
  }
  nvml::Utilization util{};
  if (auto rc = api_.device_get_utilization_rates(dev, &util); rc != nvml::kSuccess) {
    return fail(call_error("nvmlDeviceGetUtilizationRates", rc));
  }
  nvml::Memory mem{};
  if (auto rc = api_.device_get_memory_info(dev, &mem); rc != nvml::kSuccess) {
    return fail(call_error("nvmlDeviceGetMemoryInfo", rc));
  }
  out.gpu_util_percent = static_cast<int>(util.gpu);
  out.memory_util_percent = static_cast<int>(util.memory);
  out.memory_used_bytes = static_cast<std::int64_t>(mem.used);
  out.memory_total_bytes = static_cast<std::int64_t>(mem.total);
  return out;
}

Result<std::vector<GpuProcess>> NvmlLibrary::processes(unsigned index) const {
  if (auto s = require_open(); !s) return fail(s.error());
  if (api_.device_get_compute_running_processes == nullptr) {
    return fail(Error{ErrorCode::unavailable, "nvmlDeviceGetComputeRunningProcesses: not provided by " + path_, {}, 0});
  }
  nvml::Device dev = nullptr;
  if (auto rc = api_.device_get_handle_by_index(index, &dev); rc != nvml::kSuccess) {
    return fail(call_error("nvmlDeviceGetHandleByIndex_v2", rc));
  }
  // Asked with room for what it said plus a margin: processes may start between two calls.
  std::vector<nvml::ProcessInfo> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(infos.size());
    auto rc = api_.device_get_compute_running_processes(dev, &count, infos.data());
    if (rc == nvml::kErrorInsufficientSize) {
      infos.resize(static_cast<std::size_t>(count) + 16);
      continue;
    }
    if (rc != nvml::kSuccess) return fail(call_error("nvmlDeviceGetComputeRunningProcesses", rc));
    std::vector<GpuProcess> out;
    for (unsigned i = 0; i < count && i < infos.size(); ++i) {
      const auto used = infos[i].used_gpu_memory;
      out.push_back({infos[i].pid, used == nvml::kValueNotAvailable ? 0 : static_cast<std::int64_t>(used)});
    }
    return out;
  }
  return fail(Error{ErrorCode::unavailable, "nvmlDeviceGetComputeRunningProcesses: the list kept growing", {}, 0});
}

Result<std::string> NvmlLibrary::driver_version() const {
  if (auto s = require_open(); !s) return fail(s.error());
  if (api_.system_get_driver_version == nullptr) {
    return fail(Error{
        ErrorCode::unavailable, "nvmlSystemGetDriverVersion: not provided by " + path_, {}, 0});
  }
  char buf[nvml::kDriverVersionBufferSize] = {};
  if (auto rc = api_.system_get_driver_version(buf, sizeof buf); rc != nvml::kSuccess) {
    return fail(call_error("nvmlSystemGetDriverVersion", rc));
  }
  return from_buffer(buf, sizeof buf);
}

NvmlInventory::NvmlInventory(std::string library_path)
    : library_(std::make_unique<NvmlLibrary>(std::move(library_path))) {}

NvmlInventory::NvmlInventory(std::unique_ptr<NvmlLibrary> library) : library_(std::move(library)) {}

Status NvmlInventory::ensure_open() {
  std::lock_guard lock(open_mu_);
  return library_->open();
}

Result<std::vector<GpuDevice>> NvmlInventory::discover() {
  if (auto s = ensure_open(); !s) return fail(s.error());
  return library_->devices();
}

Result<GpuSample> NvmlInventory::sample(int index) {
  if (index < 0) return fail(ErrorCode::invalid_argument, "GPU index must not be negative");
  if (auto s = ensure_open(); !s) return fail(s.error());
  return library_->sample(static_cast<unsigned>(index));
}

Result<std::vector<GpuProcess>> NvmlInventory::processes(int index) {
  if (index < 0) return fail(ErrorCode::invalid_argument, "GPU index must not be negative");
  if (auto s = ensure_open(); !s) return fail(s.error());
  return library_->processes(static_cast<unsigned>(index));
}

}  // namespace gpucloud::gpu
