#pragma once
// A container's CPU and memory use, read from its cgroup: the files the kernel keeps for it,
// no engine call. Both layouts are read: cgroup v2 (one unified directory) and v1 (one
// hierarchy per controller, cpuacct and memory used here). Blocking (file reads): run it
// off the event loop.
//
// A container is found by its init's pid: /proc/<pid>/cgroup names its cgroup in each
// hierarchy, relative to this process's cgroup namespace, and /proc/self/mountinfo says
// where (and which part of) each hierarchy is mounted here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/sampling/cgroup_files.h"
#include "core/result.h"

namespace gpucloud::agent::sampling {

// Where one container's counters are.
struct CgroupPaths {
  int version = 2;
  std::string cpu_dir;     // v2: the cgroup's directory; v1: its cpuacct directory
  std::string memory_dir;  // v2: the same; v1: its memory directory ("" when not mounted)
};

struct CgroupUsage {
  std::int64_t cpu_usage_ns = 0;                  // CPU time used since the cgroup was made
  std::optional<std::int64_t> memory_used_bytes;  // use less inactive page cache; nullopt: no memory controller
  std::int64_t memory_limit_bytes = 0;            // 0: no limit (or unknown)
};

class CgroupReader {
 public:
  // `proc_root`: where /proc is ("/proc"; tests point it at a fake tree, whose
  // self/mountinfo then names fake mount points).
  explicit CgroupReader(std::string proc_root = "/proc");

  // The cgroup of process `pid`: v1 where cpuacct is mounted as a v1 hierarchy (a hybrid
  // host's v2 mount then holds no controllers), else v2. Re-reads the mount table when the
  // pid's cgroup is not under any mount known so far.
  Result<CgroupPaths> resolve(int pid);

  // The counters now. An error when the CPU counter cannot be read (the container is gone,
  // or its cgroup moved): resolve again.
  Result<CgroupUsage> read(const CgroupPaths& paths) const;

 private:
  Status load_mounts();
  Result<CgroupPaths> resolve_with(const std::vector<ProcCgroupLine>& lines) const;

  std::string proc_root_;
  std::vector<CgroupMount> mounts_;
  bool mounts_loaded_ = false;
};

}  // namespace gpucloud::agent::sampling
