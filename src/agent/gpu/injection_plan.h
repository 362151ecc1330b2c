#pragma once
// How an instance's container gets its GPUs (issue 25). Three modes, chosen per host when the
// agent starts (choose_injection_mode):
//   toolkit  the engine's NVIDIA runtime honours a device request (DeviceRequests) by UUID;
//   builtin  gpucloud itself passes exactly the instance's GPUs' device nodes, the shared
//            control nodes and the driver's user-space files (read-only binds at the paths
//            CUDA images use), so no NVIDIA Container Toolkit is needed;
//   none     no GPU can be given (a GPU instance's create fails with the reason).
//
// Everything here is pure but for reading directories and stat(): the driver tree and the
// /dev root are parameters, so tests use temp dirs (a fake driver tree, mknod'ed nodes).
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gpucloud::gpu {

enum class InjectionMode { none, toolkit, builtin };
std::string_view to_string(InjectionMode mode);
// "auto" is not a mode: the config's "auto" is resolved by choose_injection_mode.
Result<InjectionMode> parse_injection_mode(std::string_view text);

// Where CUDA images look for the driver's libraries and binaries (the toolkit puts them there).
inline constexpr std::string_view kContainerLibDir = "/usr/lib/x86_64-linux-gnu";
inline constexpr std::string_view kContainerBinDir = "/usr/bin";
// NVIDIA_DRIVER_CAPABILITIES for a builtin injection: what the mounted files provide.
inline constexpr std::string_view kDriverCapabilities = "compute,utility";

// A directory pair holding a driver's user-space files, and where it was found.
struct DriverLocation {
  std::string lib_dir;  // holds libnvidia-ml.so.*
  std::string bin_dir;  // holds nvidia-smi (may be empty: then it is reported missing)
  std::string source;   // "nvidia_driver_root", "nvml", "ldconfig", "/usr/local/nvidia"
};

// The candidate locations from a driver root: ROOT/lib64 or ROOT/lib (else ROOT itself) for
// the libraries, ROOT/bin (else ROOT) for the binaries.
DriverLocation location_from_root(const std::string& root, std::string source);
// The directory of libnvidia-ml.so.1 in `ldconfig -p` output (the x86-64 entry); "" if none.
std::string libnvidia_ml_dir_from_ldconfig(std::string_view ldconfig_output);
// The first candidate whose lib_dir holds a libnvidia-ml.so*; not_found naming every place
// looked at when none does.
Result<DriverLocation> pick_driver_location(const std::vector<DriverLocation>& candidates);

// One read-only bind of a driver file: the real file on the host (symlinks resolved) at a
// path in the container (a link name like libcuda.so.1 gets the file itself).
struct DriverMount {
  std::string host_path;
  std::string container_path;
  bool operator==(const DriverMount&) const = default;
};

// The driver's user-space files found at a location.
struct DriverFiles {
  std::string version;  // from libnvidia-ml.so.<ver> (else libcuda.so.<ver>); "" if none
  DriverLocation location;
  std::vector<DriverMount> mounts;    // sorted by container path
  std::vector<std::string> missing;   // required files not found ("libcuda.so", "nvidia-smi")
};
// Reads the location's directories. The libraries of the driver version's set: libcuda,
// libnvidia-ml, libnvidia-ptxjitcompiler, libnvidia-nvvm (required: reported missing when
// absent) and libcudadebugger, libnvidia-gpucomp, libnvidia-allocator, libnvidia-cfg,
// libnvidia-opencl, libnvidia-pkcs11(-openssl3), libnvidia-fatbinaryloader,
// libnvidia-compiler, libnvidia-nvvm (where present). Each is bound as <lib>.so.<ver>, under
// every link name the directory has for it, and under the names CUDA images expect whether
// the directory has them or not (libcuda.so.1, libcuda.so, libnvidia-ml.so.1,
// libnvidia-ptxjitcompiler.so.1). Binaries: nvidia-smi (required), nvidia-debugdump,
// nvidia-cuda-mps-control, nvidia-cuda-mps-server where present. not_found when the
// library directory has no libnvidia-ml at all.
Result<DriverFiles> find_driver_files(const DriverLocation& location);

// One device node for HostConfig.Devices.
struct DeviceNode {
  std::string path_on_host;       // DEV_ROOT/nvidia0
  std::string path_in_container;  // /dev/nvidia0
  unsigned major = 0, minor = 0;  // from stat
  bool operator==(const DeviceNode&) const = default;
};

// What one container gets for its GPUs.
struct InjectionPlan {
  InjectionMode mode = InjectionMode::none;
  std::vector<DeviceNode> devices;   // builtin: the GPUs' nodes, then the control nodes
  std::vector<DriverMount> mounts;   // builtin: the driver's files, read-only
  std::vector<std::string> env;      // builtin: NVIDIA_DRIVER_CAPABILITIES
  bool device_request = false;       // toolkit: DeviceRequests with the UUIDs
  std::vector<std::string> missing;  // what the driver lacks (reported, never guessed)
};

// The plan for GPUs with these minor numbers (/dev/nvidia<minor>). No GPUs: an empty plan
// (no node at all, in every mode). builtin: each GPU's node must be a character device
// (unavailable naming it otherwise); nvidiactl too; nvidia-uvm, nvidia-uvm-tools,
// nvidia-modeset and DEV_ROOT/nvidia-caps/* are added where present. none with GPUs:
// unavailable carrying `none_reason`.
Result<InjectionPlan> plan_injection(InjectionMode mode, const std::vector<int>& minors,
                                     const std::string& dev_root, const DriverFiles* driver,
                                     std::string_view none_reason = "");

// The per-host choice. `requested`: the config's "auto" | "toolkit" | "builtin" | "none".
struct ModeChoice {
  InjectionMode mode = InjectionMode::none;
  std::string reason;
};
ModeChoice choose_injection_mode(std::string_view requested, bool engine_has_nvidia_runtime,
                                 const Result<DriverFiles>& driver, bool gpus_simulated);

}  // namespace gpucloud::gpu
