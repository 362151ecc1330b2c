#include "agent/gpu/gpu_injector.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <utility>

namespace gpucloud::gpu {

namespace {

// `ldconfig -p`'s output ("" when it cannot run).
std::string ldconfig_cache() {
  std::string out;
  for (const char* cmd : {"/sbin/ldconfig -p 2>/dev/null", "ldconfig -p 2>/dev/null"}) {
    std::FILE* p = ::popen(cmd, "r");
    if (p == nullptr) continue;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int rc = ::pclose(p);
    if (rc == 0 && !out.empty()) break;
    out.clear();
  }
  return out;
}

}  // namespace

GpuInjector::GpuInjector(Settings settings)
    : settings_(std::move(settings)), driver_(fail(ErrorCode::not_found, "no NVIDIA driver looked for yet")) {}

void GpuInjector::detect_driver(const std::string& nvml_dir) {
  std::vector<DriverLocation> candidates;
  Result<DriverFiles> found = fail(ErrorCode::not_found, "");
  if (!settings_.driver_root.empty()) {
    // The operator's word: only there.
    auto loc = location_from_root(settings_.driver_root, "nvidia_driver_root");
    found = find_driver_files(loc);
    if (!found)
      found = fail(ErrorCode::not_found, "no NVIDIA driver in nvidia_driver_root " + settings_.driver_root + ": " +
                                             found.error().detail);
  } else {
    if (!nvml_dir.empty()) {
      DriverLocation loc{nvml_dir, "", "nvml"};
      for (const char* bin : {"/usr/bin", "/usr/local/nvidia/bin"}) {
        std::string b = bin;
        if (std::FILE* f = std::fopen((b + "/nvidia-smi").c_str(), "r")) {
          std::fclose(f);
          loc.bin_dir = b;
          break;
        }
      }
      // A driver directory with bin/ beside it (/usr/local/nvidia/lib64 → bin).
      if (auto slash = nvml_dir.rfind('/'); slash != std::string::npos && slash > 0) {
        auto sibling = location_from_root(nvml_dir.substr(0, slash), "nvml");
        if (sibling.lib_dir == nvml_dir && sibling.bin_dir != nvml_dir.substr(0, slash)) loc.bin_dir = sibling.bin_dir;
      }
      candidates.push_back(loc);
    }
    if (auto dir = libnvidia_ml_dir_from_ldconfig(ldconfig_cache()); !dir.empty()) {
      DriverLocation loc{dir, "/usr/bin", "ldconfig"};
      if (auto slash = dir.rfind('/'); slash != std::string::npos && slash > 0) {
        auto sibling = location_from_root(dir.substr(0, slash), "ldconfig");
        if (sibling.lib_dir == dir && sibling.bin_dir != dir.substr(0, slash)) loc.bin_dir = sibling.bin_dir;
      }
      candidates.push_back(loc);
    }
    candidates.push_back(location_from_root("/usr/local/nvidia", "/usr/local/nvidia"));
    auto picked = pick_driver_location(candidates);
    found = picked ? find_driver_files(*picked) : Result<DriverFiles>(fail(picked.error()));
  }
  set_driver(std::move(found));
}

void GpuInjector::set_driver(Result<DriverFiles> driver) {
  std::lock_guard lock(mu_);
  driver_ = std::move(driver);
  for (auto& [name, h] : hosts_) choose(h);
}

void GpuInjector::set_engine_nvidia_runtime(bool has) {
  std::lock_guard lock(mu_);
  engine_nvidia_runtime_ = has;
  for (auto& [name, h] : hosts_) choose(h);
}

void GpuInjector::choose(Host& h) const {
  h.choice = choose_injection_mode(settings_.requested, engine_nvidia_runtime_, driver_, h.simulated);
}

void GpuInjector::set_host(const std::string& host, bool simulated, const std::vector<GpuDevice>& devices) {
  std::lock_guard lock(mu_);
  Host& h = hosts_[host];
  h.simulated = simulated;
  h.minors.clear();
  for (const auto& d : devices)
    if (!d.uuid.empty()) h.minors[d.uuid] = d.minor;
  choose(h);
}

std::optional<GpuInjector::HostMode> GpuInjector::host_mode(const std::string& host) const {
  std::lock_guard lock(mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return std::nullopt;
  return HostMode{it->second.choice.mode, it->second.choice.reason, driver_ ? driver_->version : std::string()};
}

Result<InjectionPlan> GpuInjector::plan(const std::string& host, const std::vector<std::string>& uuids) const {
  std::lock_guard lock(mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) {
    if (uuids.empty()) return InjectionPlan{};
    return fail(ErrorCode::unavailable, "host " + host + " has no GPU injection set up");
  }
  const Host& h = it->second;
  std::vector<int> minors;
  for (const auto& uuid : uuids) {
    auto m = h.minors.find(uuid);
    if (h.choice.mode == InjectionMode::builtin && (m == h.minors.end() || m->second < 0))
      return fail(ErrorCode::unavailable, "GPU " + uuid + " on host " + host + " has no known device node");
    minors.push_back(m == h.minors.end() ? 0 : m->second);
  }
  auto plan = plan_injection(h.choice.mode, minors, settings_.dev_root, driver_ ? &*driver_ : nullptr,
                             "host " + host + ": " + h.choice.reason);
  if (!plan) return fail(plan.error());
  return plan;
}

std::string nvml_library_dir() {
  void* handle = ::dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return {};
  std::string dir;
  if (void* sym = ::dlsym(handle, "nvmlInit_v2")) {
    Dl_info info{};
    if (::dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
      std::string path = info.dli_fname;
      if (auto slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash);
    }
  }
  ::dlclose(handle);
  return dir;
}

}  // namespace gpucloud::gpu
