// The cgroup files' formats, from text as the kernel writes it (v1 and v2), and the mapping
// of a /proc/<pid>/cgroup path onto the mount that shows it.
#include "agent/sampling/cgroup_files.h"

#include <gtest/gtest.h>

namespace gpucloud::agent::sampling {
namespace {

TEST(CgroupFiles, CpuStatAndMemoryStatFields) {
  const char* cpu_stat =
      "usage_usec 2512345\nuser_usec 2000000\nsystem_usec 512345\nnr_periods 10\nnr_throttled 2\n"
      "throttled_usec 900\n";
  EXPECT_EQ(stat_field(cpu_stat, "usage_usec"), 2512345);
  EXPECT_EQ(stat_field(cpu_stat, "nr_throttled"), 2);
  EXPECT_EQ(stat_field(cpu_stat, "usage"), std::nullopt);  // a prefix of a key is not the key
  EXPECT_EQ(stat_field(cpu_stat, "wait_usec"), std::nullopt);

  // v1's memory.stat has both the cgroup's own and the hierarchical (total_) counters.
  const char* v1_memory_stat =
      "cache 4096\nrss 8192\ninactive_file 1024\nactive_file 3072\nhierarchical_memory_limit 1073741824\n"
      "total_cache 4096\ntotal_inactive_file 2048\ntotal_active_file 2048";  // no final newline
  EXPECT_EQ(stat_field(v1_memory_stat, "inactive_file"), 1024);
  EXPECT_EQ(stat_field(v1_memory_stat, "total_inactive_file"), 2048);
  EXPECT_EQ(stat_field(v1_memory_stat, "total_active_file"), 2048);
  EXPECT_EQ(stat_field("inactive_file -5\n", "inactive_file"), std::nullopt);
  EXPECT_EQ(stat_field("inactive_file lots\n", "inactive_file"), std::nullopt);
  EXPECT_EQ(stat_field("", "inactive_file"), std::nullopt);
}

TEST(CgroupFiles, SingleValuesAndLimits) {
  EXPECT_EQ(single_integer("123456789012\n"), 123456789012);
  EXPECT_EQ(single_integer("  42 \n"), 42);
  EXPECT_EQ(single_integer(""), std::nullopt);
  EXPECT_EQ(single_integer("12 34\n"), std::nullopt);
  EXPECT_EQ(single_integer("-1\n"), std::nullopt);

  EXPECT_EQ(memory_limit("max\n"), 0);                    // v2: no limit
  EXPECT_EQ(memory_limit("9223372036854771712\n"), 0);    // v1: no limit (LONG_MAX, page-rounded)
  EXPECT_EQ(memory_limit("1073741824\n"), 1073741824);
  EXPECT_EQ(memory_limit("unlimited\n"), std::nullopt);
}

TEST(CgroupFiles, ProcPidCgroupLines) {
  // A v1 host (hybrid: a v2 line with no controllers too).
  const char* v1 =
      "12:memory:/docker/0123abc\n"
      "4:cpu,cpuacct:/docker/0123abc\n"
      "1:name=systemd:/docker/0123abc\n"
      "0::/\n";
  auto lines = parse_proc_cgroup(v1);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].hierarchy, 12);
  EXPECT_EQ(lines[0].controllers, std::vector<std::string>{"memory"});
  EXPECT_EQ(lines[0].path, "/docker/0123abc");
  EXPECT_EQ(lines[1].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(lines[2].controllers, std::vector<std::string>{"name=systemd"});
  EXPECT_EQ(lines[3].hierarchy, 0);
  EXPECT_TRUE(lines[3].controllers.empty());
  EXPECT_EQ(lines[3].path, "/");

  // v2 with the systemd driver; a path may hold ':'.
  lines = parse_proc_cgroup("0::/system.slice/docker-0123abc.scope\n");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].path, "/system.slice/docker-0123abc.scope");
  lines = parse_proc_cgroup("0::/odd:name\ngarbage\n:x:/y\n3:cpu:\n");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].path, "/odd:name");
}

TEST(CgroupFiles, MountinfoCgroupMounts) {
  const char* mountinfo =
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
      "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
      "35 31 0:32 /process_api /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
      "50 22 0:40 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n"
      "not a mountinfo line\n";
  auto mounts = parse_cgroup_mounts(mountinfo);
  ASSERT_EQ(mounts.size(), 6u);
  EXPECT_EQ(mounts[0].version, 1);
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/cpu");
  EXPECT_EQ(mounts[0].controllers, std::vector<std::string>{"cpu"});
  EXPECT_EQ(mounts[1].controllers, std::vector<std::string>{"cpuacct"});
  EXPECT_EQ(mounts[2].root, "/process_api");
  EXPECT_EQ(mounts[3].controllers, (std::vector<std::string>{"xattr", "name=systemd"}));
  EXPECT_EQ(mounts[4].version, 2);
  EXPECT_TRUE(mounts[4].controllers.empty());
  EXPECT_EQ(mounts[5].mount_point, "/mnt/with space");
}

TEST(CgroupFiles, PathsMapOntoTheMountShowingThem) {
  CgroupMount whole{1, "/", "/sys/fs/cgroup/cpuacct", {"cpuacct"}};
  EXPECT_EQ(cgroup_directory(whole, "/docker/abc"), "/sys/fs/cgroup/cpuacct/docker/abc");
  EXPECT_EQ(cgroup_directory(whole, "/"), "/sys/fs/cgroup/cpuacct");
  // Outside this cgroup namespace, or not a path: not reachable.
  EXPECT_EQ(cgroup_directory(whole, "/../../docker/abc"), std::nullopt);
  EXPECT_EQ(cgroup_directory(whole, "/.."), std::nullopt);
  EXPECT_EQ(cgroup_directory(whole, "docker/abc"), std::nullopt);

  // Only a subtree mounted (an agent in a container without its own cgroup namespace).
  CgroupMount subtree{2, "/kubepods/pod1", "/sys/fs/cgroup/", {}};
  EXPECT_EQ(cgroup_directory(subtree, "/kubepods/pod1/docker/abc"), "/sys/fs/cgroup/docker/abc");
  EXPECT_EQ(cgroup_directory(subtree, "/kubepods/pod1"), "/sys/fs/cgroup");
  EXPECT_EQ(cgroup_directory(subtree, "/kubepods/pod10/x"), std::nullopt);
  EXPECT_EQ(cgroup_directory(subtree, "/other"), std::nullopt);
}

}  // namespace
}  // namespace gpucloud::agent::sampling
