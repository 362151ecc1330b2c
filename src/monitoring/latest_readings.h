#pragma once
// The newest sampling round of every host and running instance, kept in memory on the loop:
// what /metrics exposes as gauges, what `gpucloud top` shows as "now", and what idle autostop
// reads to know a reading is fresh. The series themselves live in the store (series.h).
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/agent_protocol.h"
#include "core/time_format.h"

namespace gpucloud::monitoring {

struct LatestInstanceReading {
  std::string instance_id, host_name;
  SysTime at;                                  // platform clock, when the control plane got it
  std::chrono::steady_clock::time_point seen;  // machine clock: how fresh it is
  agent::InstanceSample sample;
};

struct LatestHostReading {
  SysTime at;
  std::chrono::steady_clock::time_point seen;
  std::vector<agent::GpuReading> gpus;
};

class LatestReadings {
 public:
  // A host's round replaces what that host reported before: an instance it no longer
  // reports (stopped, moved) is dropped.
  void record(const agent::SampleReport& report, SysTime at, std::chrono::steady_clock::time_point seen);
  void forget_instance(const std::string& instance_id) { instances_.erase(instance_id); }

  const std::map<std::string, LatestInstanceReading>& instances() const { return instances_; }
  const std::map<std::string, LatestHostReading>& hosts() const { return hosts_; }
  const LatestInstanceReading* instance(const std::string& id) const {
    auto it = instances_.find(id);
    return it == instances_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, LatestInstanceReading> instances_;
  std::map<std::string, LatestHostReading> hosts_;
};

}  // namespace gpucloud::monitoring
