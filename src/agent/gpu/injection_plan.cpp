#include "agent/gpu/injection_plan.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

namespace gpucloud::gpu {

namespace {

namespace fs = std::filesystem;

struct DriverLibrary {
  std::string_view stem;  // "libcuda"
  bool required;
  // Names a CUDA image expects beside <stem>.so.<ver>, bound even where the driver's
  // directory has no such link.
  std::vector<std::string_view> expected_links;
};

// The driver version's compute and utility libraries (what the toolkit mounts for
// NVIDIA_DRIVER_CAPABILITIES=compute,utility), current and older names.
const std::vector<DriverLibrary>& driver_libraries() {
  static const std::vector<DriverLibrary> libs{
      {"libcuda", true, {"libcuda.so.1", "libcuda.so"}},
      {"libnvidia-ml", true, {"libnvidia-ml.so.1"}},
      {"libnvidia-ptxjitcompiler", true, {"libnvidia-ptxjitcompiler.so.1"}},
      {"libnvidia-nvvm", true, {}},
      {"libcudadebugger", false, {}},
      {"libnvidia-gpucomp", false, {}},
      {"libnvidia-allocator", false, {}},
      {"libnvidia-cfg", false, {}},
      {"libnvidia-opencl", false, {}},
      {"libnvidia-pkcs11", false, {}},
      {"libnvidia-pkcs11-openssl3", false, {}},
      {"libnvidia-fatbinaryloader", false, {}},
      {"libnvidia-compiler", false, {}},
  };
  return libs;
}

constexpr std::string_view kRequiredBinary = "nvidia-smi";
constexpr std::string_view kOptionalBinaries[] = {"nvidia-debugdump", "nvidia-cuda-mps-control",
                                                   "nvidia-cuda-mps-server"};

// Names in `dir` (files and links), sorted; empty when it cannot be read.
std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The real file behind `path` (links followed), or "" when it is not a regular file.
std::string real_file(const fs::path& path) {
  std::error_code ec;
  auto real = fs::canonical(path, ec);
  if (ec || !fs::is_regular_file(real, ec)) return {};
  return real.string();
}

// "580.159.04" from "libnvidia-ml.so.580.159.04"; "" for "libnvidia-ml.so.1" (a soname, not
// a version) or another name.
std::string version_suffix(std::string_view name, std::string_view stem) {
  std::string prefix = std::string(stem) + ".so.";
  if (!name.starts_with(prefix)) return {};
  std::string_view rest = name.substr(prefix.size());
  if (rest.find('.') == std::string_view::npos) return {};
  if (!std::all_of(rest.begin(), rest.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) return {};
  return std::string(rest);
}

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

Error precondition(std::string detail) { return Error{ErrorCode::unavailable, std::move(detail), {}, 0}; }

// A character device's numbers; an error naming it otherwise.
Result<DeviceNode> char_device(const std::string& host, std::string container) {
  struct stat st {};
  if (::stat(host.c_str(), &st) != 0) return fail(precondition("device node " + host + " does not exist"));
  if (!S_ISCHR(st.st_mode)) return fail(precondition(host + " is not a character device"));
  return DeviceNode{host, std::move(container), ::major(st.st_rdev), ::minor(st.st_rdev)};
}

}  // namespace

std::string_view to_string(InjectionMode mode) {
  switch (mode) {
    case InjectionMode::toolkit: return "toolkit";
    case InjectionMode::builtin: return "builtin";
    case InjectionMode::none: break;
  }
  return "none";
}

Result<InjectionMode> parse_injection_mode(std::string_view text) {
  if (text == "toolkit") return InjectionMode::toolkit;
  if (text == "builtin") return InjectionMode::builtin;
  if (text == "none") return InjectionMode::none;
  return fail(ErrorCode::invalid_argument, "GPU injection mode '" + std::string(text) + "' is not toolkit, builtin or none");
}

DriverLocation location_from_root(const std::string& root, std::string source) {
  DriverLocation loc;
  loc.source = std::move(source);
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  if (is_dir(r + "/lib64")) loc.lib_dir = r + "/lib64";
  else if (is_dir(r + "/lib")) loc.lib_dir = r + "/lib";
  else loc.lib_dir = r;
  loc.bin_dir = is_dir(r + "/bin") ? r + "/bin" : r;
  return loc;
}

std::string libnvidia_ml_dir_from_ldconfig(std::string_view out) {
  std::string fallback;
  std::size_t pos = 0;
  while (pos < out.size()) {
    std::size_t nl = out.find('\n', pos);
    std::string_view line = out.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? out.size() : nl + 1;
    std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    line.remove_prefix(first);
    if (!line.starts_with("libnvidia-ml.so.1 ")) continue;
    std::size_t arrow = line.find("=> ");
    if (arrow == std::string_view::npos) continue;
    std::string path(line.substr(arrow + 3));
    while (!path.empty() && (path.back() == ' ' || path.back() == '\r')) path.pop_back();
    std::size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) continue;
    std::string dir = path.substr(0, slash);
    if (line.find("x86-64") != std::string_view::npos) return dir;
    if (fallback.empty()) fallback = dir;
  }
  return fallback;
}

Result<DriverLocation> pick_driver_location(const std::vector<DriverLocation>& candidates) {
  std::string looked;
  for (const auto& c : candidates) {
    if (c.lib_dir.empty()) continue;
    for (const auto& name : dir_names(c.lib_dir)) {
      if (name.starts_with("libnvidia-ml.so")) return c;
    }
    looked += (looked.empty() ? "" : ", ") + c.lib_dir + " (" + c.source + ")";
  }
  return fail(ErrorCode::not_found,
              "no NVIDIA driver found (no libnvidia-ml.so in " + (looked.empty() ? std::string("any place") : looked) + ")");
}

Result<DriverFiles> find_driver_files(const DriverLocation& location) {
  DriverFiles out;
  out.location = location;
  const auto names = dir_names(location.lib_dir);
  for (const auto& name : names) {
    if (auto v = version_suffix(name, "libnvidia-ml"); !v.empty()) { out.version = v; break; }
  }
  if (out.version.empty()) {
    for (const auto& name : names) {
      if (auto v = version_suffix(name, "libcuda"); !v.empty()) { out.version = v; break; }
    }
  }
  const bool has_nvml = std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("libnvidia-ml.so"); });
  if (!has_nvml) return fail(ErrorCode::not_found, "no libnvidia-ml.so in " + location.lib_dir);

  std::set<std::string> targets;
  auto add = [&](const std::string& host, std::string_view container_name, std::string_view dir) {
    std::string target = std::string(dir) + "/" + std::string(container_name);
    if (targets.insert(target).second) out.mounts.push_back({host, std::move(target)});
  };
  const fs::path lib_dir(location.lib_dir);
  for (const auto& lib : driver_libraries()) {
    // The real file: <stem>.so.<ver>, else whatever <stem>.so.1 (or .so) leads to.
    std::string real;
    std::string versioned = out.version.empty() ? std::string() : std::string(lib.stem) + ".so." + out.version;
    if (!versioned.empty()) real = real_file(lib_dir / versioned);
    for (const char* fallback : {".so.1", ".so"}) {
      if (!real.empty()) break;
      real = real_file(lib_dir / (std::string(lib.stem) + fallback));
    }
    if (real.empty()) {
      if (lib.required) out.missing.push_back(std::string(lib.stem) + ".so" + (out.version.empty() ? "" : "." + out.version));
      continue;
    }
    if (!versioned.empty()) add(real, versioned, kContainerLibDir);
    // Every name in the directory for this library that leads to the same file.
    const std::string so = std::string(lib.stem) + ".so";
    for (const auto& name : names) {
      if (name != so && !name.starts_with(so + ".")) continue;
      if (real_file(lib_dir / name) == real) add(real, name, kContainerLibDir);
    }
    for (auto link : lib.expected_links) add(real, link, kContainerLibDir);
  }
  if (location.bin_dir.empty()) {
    out.missing.emplace_back(kRequiredBinary);
  } else {
    const fs::path bin_dir(location.bin_dir);
    if (auto smi = real_file(bin_dir / std::string(kRequiredBinary)); !smi.empty()) add(smi, kRequiredBinary, kContainerBinDir);
    else out.missing.emplace_back(kRequiredBinary);
    for (auto name : kOptionalBinaries) {
      if (auto f = real_file(bin_dir / std::string(name)); !f.empty()) add(f, name, kContainerBinDir);
    }
  }
  std::sort(out.mounts.begin(), out.mounts.end(),
            [](const DriverMount& a, const DriverMount& b) { return a.container_path < b.container_path; });
  return out;
}

Result<InjectionPlan> plan_injection(InjectionMode mode, const std::vector<int>& minors, const std::string& dev_root,
                                     const DriverFiles* driver, std::string_view none_reason) {
  InjectionPlan plan;
  plan.mode = mode;
  if (minors.empty()) return plan;  // a no-GPU container: nothing NVIDIA at all
  switch (mode) {
    case InjectionMode::none:
      return fail(precondition("GPU injection is none" +
                               (none_reason.empty() ? std::string() : ": " + std::string(none_reason))));
    case InjectionMode::toolkit:
      plan.device_request = true;
      return plan;
    case InjectionMode::builtin:
      break;
  }
  if (driver == nullptr) return fail(precondition("builtin GPU injection without a driver"));
  std::string root = dev_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::set<int> seen;
  for (int minor : minors) {
    if (minor < 0) return fail(precondition("GPU minor number " + std::to_string(minor) + " is not valid"));
    if (!seen.insert(minor).second) continue;
    const std::string name = "nvidia" + std::to_string(minor);
    auto node = char_device(root + "/" + name, "/dev/" + name);
    if (!node) return fail(node.error());
    plan.devices.push_back(std::move(*node));
  }
  auto ctl = char_device(root + "/nvidiactl", "/dev/nvidiactl");
  if (!ctl) return fail(ctl.error());
  plan.devices.push_back(std::move(*ctl));
  for (const char* name : {"nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
    if (auto node = char_device(root + "/" + name, std::string("/dev/") + name)) plan.devices.push_back(std::move(*node));
  }
  for (const auto& name : dir_names(root + "/nvidia-caps")) {
    if (auto node = char_device(root + "/nvidia-caps/" + name, "/dev/nvidia-caps/" + name))
      plan.devices.push_back(std::move(*node));
  }
  plan.mounts = driver->mounts;
  plan.missing = driver->missing;
  plan.env.push_back("NVIDIA_DRIVER_CAPABILITIES=" + std::string(kDriverCapabilities));
  return plan;
}

ModeChoice choose_injection_mode(std::string_view requested, bool engine_has_nvidia_runtime,
                                 const Result<DriverFiles>& driver, bool gpus_simulated) {
  auto driver_text = [&]() {
    std::string t = "driver " + (driver->version.empty() ? std::string("(version unknown)") : driver->version) +
                    " in " + driver->location.lib_dir + " (" + driver->location.source + ")";
    if (!driver->missing.empty()) {
      t += "; missing:";
      for (const auto& m : driver->missing) t += " " + m;
    }
    return t;
  };
  if (requested == "none") return {InjectionMode::none, "configured: gpu_injection = \"none\""};
  if (requested == "toolkit") {
    return {InjectionMode::toolkit, engine_has_nvidia_runtime
                                        ? "configured; the engine has the nvidia runtime"
                                        : "configured, but the engine has no nvidia runtime: GPU creates will fail"};
  }
  if (requested == "builtin") {
    if (driver) return {InjectionMode::builtin, "configured; " + driver_text()};
    return {InjectionMode::none, "configured builtin, but " + driver.error().detail};
  }
  // auto
  if (engine_has_nvidia_runtime && !gpus_simulated) return {InjectionMode::toolkit, "the engine has the nvidia runtime"};
  if (driver) {
    return {InjectionMode::builtin,
            std::string(gpus_simulated ? "simulated GPUs with " : "the engine has no nvidia runtime; ") + driver_text()};
  }
  if (gpus_simulated) return {InjectionMode::none, "simulated GPUs and no NVIDIA driver found"};
  return {InjectionMode::none, "the engine has no nvidia runtime and " + driver.error().detail};
}

}  // namespace gpucloud::gpu
