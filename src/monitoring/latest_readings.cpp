#include "monitoring/latest_readings.h"

namespace gpucloud::monitoring {

void LatestReadings::record(const agent::SampleReport& report, SysTime at, std::chrono::steady_clock::time_point seen) {
  for (auto it = instances_.begin(); it != instances_.end();) {
    if (it->second.host_name == report.host_name) it = instances_.erase(it);
    else ++it;
  }
  for (const auto& s : report.instances) instances_[s.instance_id] = {s.instance_id, report.host_name, at, seen, s};
  hosts_[report.host_name] = {at, seen, report.gpus};
}

}  // namespace gpucloud::monitoring
