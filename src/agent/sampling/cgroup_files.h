#pragma once
// The text of the kernel's cgroup files, parsed. Pure (strings in, values out), so each
// format is tested with fixture text; cgroup_reader.h does the reading.
//
//   cgroup v2: cpu.stat ("usage_usec N"), memory.current, memory.stat ("inactive_file N"),
//              memory.max ("max" or N)
//   cgroup v1: cpuacct.usage (ns), memory.usage_in_bytes, memory.stat ("total_inactive_file
//              N"), memory.limit_in_bytes (a huge number when unlimited)
//   /proc/<pid>/cgroup: "ID:CONTROLLERS:PATH" lines (v2's is "0::PATH")
//   /proc/self/mountinfo: where each hierarchy is mounted, and which part of it
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpucloud::agent::sampling {

// The value of `key` in a "key value" per line file (cpu.stat, memory.stat); nullopt when
// the key is absent or its value is not a non-negative integer.
std::optional<std::int64_t> stat_field(std::string_view text, std::string_view key);

// A file holding one non-negative integer (memory.current, cpuacct.usage), surrounding
// whitespace allowed.
std::optional<std::int64_t> single_integer(std::string_view text);

// memory.max or memory.limit_in_bytes: 0 for "no limit" ("max", or v1's page-rounded
// LONG_MAX), nullopt when unreadable.
std::optional<std::int64_t> memory_limit(std::string_view text);

// One line of /proc/<pid>/cgroup.
struct ProcCgroupLine {
  int hierarchy = 0;                     // 0: the v2 unified hierarchy
  std::vector<std::string> controllers;  // v1: "cpu", "cpuacct", "name=systemd"; v2: none
  std::string path;                      // relative to the reader's cgroup namespace root
};
std::vector<ProcCgroupLine> parse_proc_cgroup(std::string_view text);

// One cgroup filesystem mount from /proc/self/mountinfo.
struct CgroupMount {
  int version = 1;                       // 1: "cgroup", 2: "cgroup2"
  std::string root;                      // the hierarchy's path that is mounted here ("/" mostly)
  std::string mount_point;               // "/sys/fs/cgroup/memory" (octal escapes undone)
  std::vector<std::string> controllers;  // v1: from the super options; v2: none listed
};
std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo);

// The directory of cgroup `path` under `mount`, or nullopt when the mount does not show it
// (the cgroup lies outside the mounted root, or outside this namespace: a "/.." path).
std::optional<std::string> cgroup_directory(const CgroupMount& mount, std::string_view path);

}  // namespace gpucloud::agent::sampling
