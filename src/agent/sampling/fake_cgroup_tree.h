#pragma once
// Tests only: a fake /proc and cgroup mounts in a temporary directory, so the cgroup reader
// and the sampler run against files the test writes (v1 or v2 layout, like the kernel's).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace gpucloud::agent::sampling::testing {

class FakeCgroupTree {
 public:
  // `version` 1: cpuacct and memory hierarchies (plus an empty v2 mount, as hybrid hosts
  // have); 2: one unified hierarchy.
  explicit FakeCgroupTree(int version) : version_(version) {
    std::random_device rd;
    root_ = std::filesystem::temp_directory_path() /
            ("gpucloud-fake-cgroup-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(root_ / "proc" / "self");
    std::string mountinfo;
    if (version == 1) {
      mountinfo += "33 31 0:30 / " + (root_ / "cgroup" / "cpu,cpuacct").string() +
                   " rw,relatime - cgroup cgroup rw,cpu,cpuacct\n";
      mountinfo += "35 31 0:32 / " + (root_ / "cgroup" / "memory").string() + " rw,relatime - cgroup cgroup rw,memory\n";
      mountinfo += "41 31 0:38 / " + (root_ / "cgroup" / "unified").string() + " rw,relatime - cgroup2 cgroup2 rw\n";
    } else {
      mountinfo += "30 23 0:26 / " + (root_ / "cgroup").string() + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    }
    write("proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + mountinfo);
  }
  ~FakeCgroupTree() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  FakeCgroupTree(const FakeCgroupTree&) = delete;
  FakeCgroupTree& operator=(const FakeCgroupTree&) = delete;

  std::string proc_root() const { return (root_ / "proc").string(); }

  // Process `pid` lives in cgroup `path` ("/docker/<id>"), with the given counters.
  void add_process(int pid, const std::string& path) {
    if (version_ == 1) {
      write("proc/" + std::to_string(pid) + "/cgroup",
            "12:memory:" + path + "\n4:cpu,cpuacct:" + path + "\n1:name=systemd:" + path + "\n0::/\n");
    } else {
      write("proc/" + std::to_string(pid) + "/cgroup", "0::" + path + "\n");
    }
  }
  void set_cpu_ns(const std::string& path, std::int64_t ns) {
    if (version_ == 1) {
      write("cgroup/cpu,cpuacct" + path + "/cpuacct.usage", std::to_string(ns) + "\n");
    } else {
      write("cgroup" + path + "/cpu.stat", "usage_usec " + std::to_string(ns / 1000) +
                                              "\nuser_usec 1\nsystem_usec 2\nnr_periods 0\n");
    }
  }
  void set_memory(const std::string& path, std::int64_t usage, std::int64_t inactive_file, const std::string& limit) {
    if (version_ == 1) {
      const std::string dir = "cgroup/memory" + path;
      write(dir + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
      write(dir + "/memory.stat", "cache 100\nrss 200\ninactive_file 7\ntotal_cache 100\ntotal_inactive_file " +
                                      std::to_string(inactive_file) + "\ntotal_active_file 3\n");
      write(dir + "/memory.limit_in_bytes", limit + "\n");
    } else {
      const std::string dir = "cgroup" + path;
      write(dir + "/memory.current", std::to_string(usage) + "\n");
      write(dir + "/memory.stat", "anon 200\nfile 100\nactive_file 3\ninactive_file " + std::to_string(inactive_file) +
                                      "\nslab 9\n");
      write(dir + "/memory.max", limit + "\n");
    }
  }
  // The cgroup's directories go (the container stopped).
  void remove_cgroup(const std::string& path) {
    std::error_code ignored;
    if (version_ == 1) {
      std::filesystem::remove_all(root_ / ("cgroup/cpu,cpuacct" + path), ignored);
      std::filesystem::remove_all(root_ / ("cgroup/memory" + path), ignored);
    } else {
      std::filesystem::remove_all(root_ / ("cgroup" + path), ignored);
    }
  }

 private:
  void write(const std::string& relative, const std::string& content) {
    const auto path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::trunc) << content;
  }

  int version_;
  std::filesystem::path root_;
};

}  // namespace gpucloud::agent::sampling::testing
