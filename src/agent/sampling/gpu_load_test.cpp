// The sampler on a real GPU (named NVIDIA_GPU_: skipped where NVML is missing, run on the GPU
// machine by scripts/device/gpu-checks.sh). It loads the GPU itself through the CUDA driver
// API, loaded with dlopen like NVML (no CUDA toolkit needed to build): a PTX kernel that
// spins on the clock for a few seconds, JIT-compiled by the driver, plus 1 GiB of device
// memory; meanwhile the sampler's rounds must see the utilisation and the memory, on the
// host and on an instance that holds that GPU.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "agent/gpu/nvml_library.h"
#include "agent/sampling/instance_sampler.h"

namespace gpucloud::agent::sampling {
namespace {

// The few CUDA driver entry points the load needs (cuda.h's ABI).
using CuResult = int;
using CuDevice = int;
using CuContext = struct CuCtxSt*;
using CuModule = struct CuModSt*;
using CuFunction = struct CuFuncSt*;
using CuDevicePtr = unsigned long long;

// Spins until `cycles` of the SM clock have passed; one block keeps the GPU "busy" for NVML,
// which counts the time any kernel runs.
constexpr const char* kSpinPtx = R"(
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
  .reg .pred p;
  .reg .u64 start, now, spent, limit;
  ld.param.u64 limit, [cycles];
  mov.u64 start, %clock64;
LOOP:
  mov.u64 now, %clock64;
  sub.u64 spent, now, start;
  setp.lt.u64 p, spent, limit;
  @p bra LOOP;
  ret;
}
)";

class CudaDriver {
 public:
  CudaDriver() : lib_(::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (!lib_) return;
    ok_ = sym(init_, "cuInit") && sym(device_get_count_, "cuDeviceGetCount") && sym(device_get_, "cuDeviceGet") &&
          sym(device_get_pci_bus_id_, "cuDeviceGetPCIBusId") && sym(ctx_create_, "cuCtxCreate_v2") &&
          sym(ctx_destroy_, "cuCtxDestroy_v2") && sym(ctx_synchronize_, "cuCtxSynchronize") &&
          sym(module_load_data_, "cuModuleLoadData") && sym(module_get_function_, "cuModuleGetFunction") &&
          sym(launch_kernel_, "cuLaunchKernel") && sym(mem_alloc_, "cuMemAlloc_v2") &&
          sym(mem_free_, "cuMemFree_v2") && sym(memset_, "cuMemsetD8_v2");
  }
  ~CudaDriver() {
    if (ctx_) ctx_destroy_(ctx_);
    if (lib_) ::dlclose(lib_);
  }
  bool loaded() const { return ok_; }

  // A context on the CUDA device at `pci_bus_id` (NVML's form, "00000000:3B:00.0").
  std::string open(const std::string& pci_bus_id) {
    if (CuResult rc = init_(0); rc != 0) return "cuInit: " + std::to_string(rc);
    int count = 0;
    device_get_count_(&count);
    for (int i = 0; i < count; ++i) {
      CuDevice d = 0;
      char bus[64] = {};
      if (device_get_(&d, i) != 0 || device_get_pci_bus_id_(bus, sizeof bus, d) != 0) continue;
      if (!same_bus(bus, pci_bus_id)) continue;
      if (CuResult rc = ctx_create_(&ctx_, 0, d); rc != 0) return "cuCtxCreate: " + std::to_string(rc);
      return "";
    }
    return "no CUDA device at " + pci_bus_id;
  }
  // Takes `bytes` of device memory (written, so it is really backed) and starts the kernel.
  std::string load(std::uint64_t bytes, std::uint64_t cycles) {
    if (CuResult rc = mem_alloc_(&memory_, bytes); rc != 0) return "cuMemAlloc: " + std::to_string(rc);
    if (CuResult rc = memset_(memory_, 1, bytes); rc != 0) return "cuMemsetD8: " + std::to_string(rc);
    CuModule module = nullptr;
    if (CuResult rc = module_load_data_(&module, kSpinPtx); rc != 0) return "cuModuleLoadData: " + std::to_string(rc);
    CuFunction spin = nullptr;
    if (CuResult rc = module_get_function_(&spin, module, "spin"); rc != 0) return "cuModuleGetFunction: " + std::to_string(rc);
    void* params[] = {&cycles};
    if (CuResult rc = launch_kernel_(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr); rc != 0)
      return "cuLaunchKernel: " + std::to_string(rc);
    return "";
  }
  void finish() {
    ctx_synchronize_();
    if (memory_) mem_free_(memory_);
    memory_ = 0;
  }

 private:
  template <class F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib_, name));
    return f != nullptr;
  }
  // CUDA says "0000:3B:00.0", NVML "00000000:3B:00.0": compare bus:device.function.
  static bool same_bus(std::string a, std::string b) {
    auto tail = [](std::string s) {
      std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
      return s.size() > 7 ? s.substr(s.size() - 7) : s;
    };
    return tail(std::move(a)) == tail(std::move(b));
  }

  void* lib_ = nullptr;
  bool ok_ = false;
  CuContext ctx_ = nullptr;
  CuDevicePtr memory_ = 0;
  CuResult (*init_)(unsigned) = nullptr;
  CuResult (*device_get_count_)(int*) = nullptr;
  CuResult (*device_get_)(CuDevice*, int) = nullptr;
  CuResult (*device_get_pci_bus_id_)(char*, int, CuDevice) = nullptr;
  CuResult (*ctx_create_)(CuContext*, unsigned, CuDevice) = nullptr;
  CuResult (*ctx_destroy_)(CuContext) = nullptr;
  CuResult (*ctx_synchronize_)() = nullptr;
  CuResult (*module_load_data_)(CuModule*, const void*) = nullptr;
  CuResult (*module_get_function_)(CuFunction*, CuModule, const char*) = nullptr;
  CuResult (*launch_kernel_)(CuFunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**) = nullptr;
  CuResult (*mem_alloc_)(CuDevicePtr*, std::size_t) = nullptr;
  CuResult (*mem_free_)(CuDevicePtr) = nullptr;
  CuResult (*memset_)(CuDevicePtr, unsigned char, std::size_t) = nullptr;
};

TEST(GpuSamplingTest, NVIDIA_GPU_TheSamplerSeesALoadedGpusUtilisationAndMemory) {
  gpu::NvmlInventory inventory;
  auto devices = inventory.discover();
  if (!devices || devices->empty())
    GTEST_SKIP() << "no NVIDIA GPU: " << (devices ? "NVML found no device" : devices.error().detail);
  const gpu::GpuDevice& device = devices->front();
  CudaDriver cuda;
  ASSERT_TRUE(cuda.loaded()) << "NVML is here but libcuda.so.1 (the driver's CUDA library) is not";
  ASSERT_EQ(cuda.open(device.pci_bus_id), "");

  SampledHost host{"gpu-host", &inventory, {}, ""};
  host.gpus.push_back({device.index, device.uuid, device.model, device.memory_bytes, device.pci_bus_id, "ok", false});
  // An "instance" holding that GPU: this test process stands in for its container's init.
  SampleTarget target{"i-gpu", "gpu-host", "container", static_cast<int>(::getpid()), {device.uuid}, false, 0};
  InstanceSampler sampler;

  auto before = sampler.round({host}, {target});
  ASSERT_EQ(before.reports.size(), 1u);
  ASSERT_EQ(before.reports[0].gpus.size(), 1u);
  const std::int64_t memory_before = before.reports[0].gpus[0].memory_used_bytes;

  constexpr std::uint64_t kGiB = 1ULL << 30;
  ASSERT_EQ(cuda.load(kGiB, 12'000'000'000ULL), "");  // about 6 s at 2 GHz
  int host_util = 0, instance_util = 0;
  std::int64_t host_memory = 0, instance_memory = 0;
  std::string note;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // NVML's own period, not a wait for a condition
    auto round = sampler.round({host}, {target});
    for (const auto& g : round.reports[0].gpus) {
      host_util = std::max(host_util, g.util_percent);
      host_memory = std::max(host_memory, g.memory_used_bytes);
    }
    for (const auto& s : round.reports[0].instances) {
      note = s.gpu_note;
      for (const auto& g : s.gpus) {
        instance_util = std::max(instance_util, g.util_percent);
        instance_memory = std::max(instance_memory, g.memory_used_bytes);
      }
    }
  }
  cuda.finish();
  std::cout << "NVIDIA_GPU sampler: " << device.model << " " << device.uuid << ": host util max " << host_util
            << " %, instance util max " << instance_util << " %, memory used " << memory_before << " -> "
            << host_memory << " bytes (+" << (host_memory - memory_before) / (1 << 20) << " MiB)\n";
  EXPECT_GE(host_util, 50) << "a kernel ran the whole time";
  EXPECT_GE(instance_util, 50) << "the instance holding the GPU sees it too; note: " << note;
  EXPECT_GE(host_memory - memory_before, static_cast<std::int64_t>(kGiB * 9 / 10));
  EXPECT_EQ(instance_memory, host_memory);
}

}  // namespace
}  // namespace gpucloud::agent::sampling
