#include "agent/sampling/cgroup_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpucloud::agent::sampling {

namespace {

// A small kernel file, whole (cgroup files and /proc files are read in one go; their size
// on disk says nothing). nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path, std::string* error = nullptr) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (error) *error = path + ": " + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (1u << 20)) break;  // mountinfo of a busy host is tens of KiB, never this
  }
  ::close(fd);
  return out;
}

bool has_controller(const std::vector<std::string>& controllers, const std::string& name) {
  return std::find(controllers.begin(), controllers.end(), name) != controllers.end();
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// The directory of the pid's cgroup in the v1 hierarchy carrying `controller`, if mounted.
std::optional<std::string> v1_directory(const std::vector<CgroupMount>& mounts, const std::vector<ProcCgroupLine>& lines,
                                        const std::string& controller) {
  for (const auto& line : lines) {
    if (line.hierarchy == 0 || !has_controller(line.controllers, controller)) continue;
    for (const auto& mount : mounts) {
      if (mount.version != 1 || !has_controller(mount.controllers, controller)) continue;
      if (auto dir = cgroup_directory(mount, line.path)) return dir;
    }
  }
  return std::nullopt;
}

}  // namespace

CgroupReader::CgroupReader(std::string proc_root) : proc_root_(std::move(proc_root)) {}

Status CgroupReader::load_mounts() {
  std::string error;
  auto text = read_small_file(proc_root_ + "/self/mountinfo", &error);
  if (!text) return fail(ErrorCode::unavailable, "cgroup mounts: " + error);
  mounts_ = parse_cgroup_mounts(*text);
  mounts_loaded_ = true;
  return ok();
}

Result<CgroupPaths> CgroupReader::resolve_with(const std::vector<ProcCgroupLine>& lines) const {
  // v1 (or a hybrid host): cpuacct and memory each in their own hierarchy.
  if (auto cpu = v1_directory(mounts_, lines, "cpuacct")) {
    if (!file_exists(*cpu + "/cpuacct.usage")) return fail(ErrorCode::not_found, "no cpuacct.usage in " + *cpu);
    CgroupPaths paths;
    paths.version = 1;
    paths.cpu_dir = std::move(*cpu);
    paths.memory_dir = v1_directory(mounts_, lines, "memory").value_or("");
    return paths;
  }
  for (const auto& line : lines) {
    if (line.hierarchy != 0 || !line.controllers.empty()) continue;
    for (const auto& mount : mounts_) {
      if (mount.version != 2) continue;
      auto dir = cgroup_directory(mount, line.path);
      if (!dir) continue;
      if (!file_exists(*dir + "/cpu.stat")) return fail(ErrorCode::not_found, "no cpu.stat in " + *dir);
      CgroupPaths paths;
      paths.version = 2;
      paths.cpu_dir = *dir;
      paths.memory_dir = *dir;
      return paths;
    }
  }
  return fail(ErrorCode::not_found, "its cgroup is under no cgroup mount of this agent");
}

Result<CgroupPaths> CgroupReader::resolve(int pid) {
  if (pid <= 0) return fail(ErrorCode::invalid_argument, "no init pid");
  const std::string path = proc_root_ + "/" + std::to_string(pid) + "/cgroup";
  std::string error;
  auto text = read_small_file(path, &error);
  if (!text) return fail(ErrorCode::not_found, "cgroup of pid " + std::to_string(pid) + ": " + error);
  const auto lines = parse_proc_cgroup(*text);
  if (!mounts_loaded_) {
    if (auto s = load_mounts(); !s) return fail(std::move(s.error()));
  }
  auto paths = resolve_with(lines);
  if (paths) return paths;
  // Mounts change rarely (a controller mounted after the agent started): look once more.
  if (auto s = load_mounts(); !s) return fail(std::move(s.error()));
  paths = resolve_with(lines);
  if (!paths) return fail(paths.error().code, "cgroup of pid " + std::to_string(pid) + ": " + paths.error().detail);
  return paths;
}

Result<CgroupUsage> CgroupReader::read(const CgroupPaths& paths) const {
  CgroupUsage usage;
  std::string error;
  const bool v1 = paths.version == 1;
  auto cpu_text = read_small_file(paths.cpu_dir + (v1 ? "/cpuacct.usage" : "/cpu.stat"), &error);
  if (!cpu_text) return fail(ErrorCode::not_found, error);
  auto cpu = v1 ? single_integer(*cpu_text) : stat_field(*cpu_text, "usage_usec");
  if (!cpu) return fail(ErrorCode::internal, paths.cpu_dir + ": unreadable CPU usage");
  usage.cpu_usage_ns = v1 ? *cpu : *cpu * 1000;

  // Memory is optional: a v2 cgroup without the memory controller has no memory files.
  if (paths.memory_dir.empty()) return usage;
  auto current = read_small_file(paths.memory_dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
  auto used = current ? single_integer(*current) : std::nullopt;
  if (used) {
    // Page cache the kernel can drop is not use (as docker stats and the kubelet count it).
    auto stat = read_small_file(paths.memory_dir + "/memory.stat");
    auto inactive = stat ? stat_field(*stat, v1 ? "total_inactive_file" : "inactive_file") : std::nullopt;
    usage.memory_used_bytes = std::max<std::int64_t>(0, *used - inactive.value_or(0));
  }
  auto limit = read_small_file(paths.memory_dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"));
  if (limit) usage.memory_limit_bytes = memory_limit(*limit).value_or(0);
  return usage;
}

}  // namespace gpucloud::agent::sampling
