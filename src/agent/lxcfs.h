#pragma once
// lxcfs (Debian's lxcfs 5): a FUSE filesystem whose proc/ and sys/ files show the reading
// process's cgroup limits. Bound over an instance's /proc/meminfo, cpuinfo, stat, uptime,
// diskstats, swaps, loadavg and /sys/devices/system/cpu/online, `free`, `top`, `nproc` and
// `uptime` inside it show its own memory, CPUs and uptime ([agent] lxcfs_dir, started by
// ./dev). A host without it still starts instances; /admin/hosts says why not.
#include <string>
#include <vector>

#include "agent/runtime/runtime_driver.h"

namespace gpucloud::agent {

// The files bound, relative to the lxcfs mount point and to the container's root.
inline constexpr const char* kLxcfsFiles[] = {
    "proc/meminfo", "proc/cpuinfo", "proc/stat",  "proc/uptime",
    "proc/diskstats", "proc/swaps", "proc/loadavg", "sys/devices/system/cpu/online"};

struct LxcfsStatus {
  bool available = false;
  std::string reason;         // why not (or "lxcfs at DIR" when it is)
  std::vector<Mount> mounts;  // read-only binds of the files it serves, when available
};

// Whether `dir` is a mounted lxcfs (a FUSE filesystem holding proc/meminfo), and the mounts
// an instance gets from it. Empty dir: not configured. Blocking (statfs, stat): cheap.
LxcfsStatus probe_lxcfs(const std::string& dir);

}  // namespace gpucloud::agent
