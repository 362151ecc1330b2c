#pragma once
// The agent's GPU injection, per host (injection_plan.h does the planning): which mode each
// host has and why, the driver's files found once at start, and each GPU's minor number from
// the host's inventory. Shared by the local agent (which reports the mode in the host's
// registration) and the instance runtime (which asks for a container's plan at each create).
// Thread-safe.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu/gpu_inventory.h"
#include "agent/gpu/injection_plan.h"
#include "core/result.h"

namespace gpucloud::gpu {

class GpuInjector {
 public:
  struct Settings {
    std::string requested = "auto";  // [agent] gpu_injection
    std::string driver_root;         // [agent] nvidia_driver_root
    std::string dev_root = "/dev";   // [agent] dev_root
  };
  explicit GpuInjector(Settings settings);

  // Finds the driver's files: the configured root, else NVML's own directory (`nvml_dir`,
  // where the loaded libnvidia-ml is; "" when not loaded), else the linker cache (runs
  // `ldconfig -p`: blocking, call it off the event loop), else /usr/local/nvidia.
  void detect_driver(const std::string& nvml_dir);
  // For tests: this result instead of looking.
  void set_driver(Result<DriverFiles> driver);
  // What the engine said: it has the nvidia runtime (GET /info Runtimes). Hosts set before
  // are chosen again.
  void set_engine_nvidia_runtime(bool has);
  // A host and its GPUs (their minor numbers); chooses its mode.
  void set_host(const std::string& host, bool simulated, const std::vector<GpuDevice>& devices);

  struct HostMode {
    InjectionMode mode = InjectionMode::none;
    std::string reason;
    std::string driver_version;  // "" when no driver was found
  };
  std::optional<HostMode> host_mode(const std::string& host) const;

  // The plan for a container on `host` with these GPUs. A UUID the host's inventory does not
  // have (or has without a minor number) is unavailable under builtin. A host never set:
  // unavailable.
  Result<InjectionPlan> plan(const std::string& host, const std::vector<std::string>& uuids) const;

  const Settings& settings() const { return settings_; }

 private:
  struct Host {
    bool simulated = false;
    std::map<std::string, int> minors;  // uuid -> minor
    ModeChoice choice;
  };
  void choose(Host& h) const;

  Settings settings_;
  mutable std::mutex mu_;
  Result<DriverFiles> driver_;
  bool engine_nvidia_runtime_ = false;
  std::map<std::string, Host> hosts_;
};

// The directory libnvidia-ml.so.1 loads from here (dlopen, then dladdr on one of its
// symbols: NVML's own path, which the linker's search may find outside the cache); "" when it
// cannot be loaded. Initialises nothing.
std::string nvml_library_dir();

}  // namespace gpucloud::gpu
