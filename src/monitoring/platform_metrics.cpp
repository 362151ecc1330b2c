#include "monitoring/platform_metrics.h"

#include <fmt/format.h>

#include "instances/instance_state.h"

namespace gpucloud::monitoring {

namespace {

constexpr instances::InstanceState kAllStates[] = {
    instances::InstanceState::creating, instances::InstanceState::running,   instances::InstanceState::stopping,
    instances::InstanceState::stopped,  instances::InstanceState::starting,  instances::InstanceState::releasing,
    instances::InstanceState::released, instances::InstanceState::error};
constexpr std::string_view kHostStates[] = {"ready", "unreachable", "draining", "removed"};
constexpr std::string_view kMeterKinds[] = {"compute", "compute_no_gpu", "system_disk", "data_disk", "snapshot", "image"};

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // `labels`: already formatted `a="x",b="y"` (empty for none).
  void sample(const std::string& labels, double value) {
    if (labels.empty()) out_ += fmt::format("{} {}\n", name_, value);
    else out_ += fmt::format("{}{{{}}} {}\n", name_, labels, value);
  }

 private:
  std::string& out_;
  std::string_view name_;
};

std::string label(std::string_view key, std::string_view value) {
  return fmt::format("{}=\"{}\"", key, escape_label_value(value));
}

std::string labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  std::string out;
  for (const auto& [k, v] : pairs) {
    if (!out.empty()) out += ',';
    out += label(k, v);
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Result<PlatformTotals> read_platform_totals(store::Database& db) {
  PlatformTotals t;
  for (auto s : kAllStates) t.instances_by_state[std::string(instances::to_string(s))] = 0;
  for (auto s : kHostStates) t.hosts_by_state[std::string(s)] = 0;
  for (auto k : kMeterKinds) t.billing_charged_by_kind[std::string(k)] = 0;

  auto states = db.all("SELECT state, COUNT(*) FROM instances GROUP BY state");
  if (!states) return fail(states.error());
  for (const auto& r : *states) t.instances_by_state[r.text(0)] = r.int64(1);

  // The state GET /admin/hosts shows: the operator's drain or removal over liveness.
  auto hosts = db.all(
      "SELECT CASE WHEN admin_state IN ('draining', 'removed') THEN admin_state ELSE state END AS shown, COUNT(*) "
      "FROM hosts GROUP BY shown");
  if (!hosts) return fail(hosts.error());
  for (const auto& r : *hosts) t.hosts_by_state[r.text(0)] = r.int64(1);

  // A GPU its host no longer reports is `missing` even while an instance still holds it: the
  // operator needs to see it before anything else.
  auto gpus = db.all(
      "SELECT h.name, g.model, g.simulated, "
      "  CASE WHEN g.present = 0 THEN 'missing' WHEN g.health <> 'ok' THEN 'unhealthy' "
      "       WHEN r.gpu_uuid IS NOT NULL THEN 'used' ELSE 'free' END AS gpu_state, "
      "  COUNT(*) "
      "FROM gpus g JOIN hosts h ON h.id = g.host_id "
      "LEFT JOIN gpu_reservations r ON r.gpu_uuid = g.uuid AND r.active = 1 "
      "GROUP BY h.name, g.model, g.simulated, gpu_state ORDER BY h.name, g.model, gpu_state");
  if (!gpus) return fail(gpus.error());
  for (const auto& r : *gpus) t.gpus.push_back({r.text(0), r.text(1), r.int64(2) != 0, r.text(3), r.int64(4)});

  auto gpu_labels = db.all("SELECT uuid, model, simulated FROM gpus");
  if (!gpu_labels) return fail(gpu_labels.error());
  for (const auto& r : *gpu_labels) t.gpus_by_uuid[r.text(0)] = {r.text(1), r.int64(2) != 0};

  auto accounts = db.one(
      "SELECT COUNT(*), COALESCE(SUM(CASE WHEN arrears_since IS NOT NULL THEN 1 ELSE 0 END), 0), "
      "  COALESCE(SUM(balance), 0) FROM billing_accounts");
  if (!accounts) return fail(accounts.error());
  if (*accounts) {
    t.billing_accounts = (*accounts)->int64(0);
    t.billing_accounts_in_arrears = (*accounts)->int64(1);
    t.billing_balance_sum = (*accounts)->int64(2);
  }
  auto charged = db.all("SELECT kind, COALESCE(SUM(charged), 0) FROM meters GROUP BY kind");
  if (!charged) return fail(charged.error());
  for (const auto& r : *charged) t.billing_charged_by_kind[r.text(0)] = r.int64(1);

  auto pools = db.all(
      "SELECT name, disk_pool_capacity_bytes, disk_pool_provisioned_bytes, disk_pool_size_bytes, disk_pool_used_bytes, "
      "disk_pool_reserve_bytes FROM hosts ORDER BY name");
  if (!pools) return fail(pools.error());
  for (const auto& r : *pools) {
    constexpr std::string_view kWhat[] = {"capacity", "provisioned", "size", "used", "reserve"};
    for (int k = 0; k < 5; ++k)
      if (auto v = r.opt_int64(k + 1)) t.disk_pools.push_back({r.text(0), std::string(kWhat[k]), *v});
  }

  auto live = db.all(
      "SELECT i.id, i.name, u.username FROM instances i JOIN users u ON u.id = i.owner WHERE i.state = 'running'");
  if (!live) return fail(live.error());
  for (const auto& r : *live) t.instances[r.text(0)] = {r.text(1), r.text(2)};
  return t;
}

std::string render_platform_metrics(const PlatformTotals& t, const LatestReadings& latest,
                                    std::chrono::steady_clock::time_point now, const std::string& currency,
                                    bool tenants) {
  std::string out;
  {
    Family f(out, "gpucloud_instances", "gauge", "Instances by state (released ones included).");
    for (const auto& [state, n] : t.instances_by_state) f.sample(label("state", state), static_cast<double>(n));
  }
  {
    Family f(out, "gpucloud_hosts", "gauge", "Hosts by state.");
    for (const auto& [state, n] : t.hosts_by_state) f.sample(label("state", state), static_cast<double>(n));
  }
  {
    Family f(out, "gpucloud_host_disk_pool_bytes", "gauge",
             "Each host's disk pool: capacity (what provisioned sizes may reach), provisioned (data disks, snapshots, "
             "enforced system disks), and the filesystem's size, real use and reserve.");
    for (const auto& p : t.disk_pools)
      f.sample(labels({{"host", p.host}, {"what", p.what}}), static_cast<double>(p.bytes));
  }
  {
    Family f(out, "gpucloud_gpus", "gauge",
             "GPUs by host, model and state (free, used, missing, unhealthy); simulated=\"true\" for a simulated "
             "inventory.");
    for (const auto& g : t.gpus)
      f.sample(labels({{"host", g.host}, {"model", g.model}, {"simulated", g.simulated ? "true" : "false"},
                       {"state", g.state}}),
               static_cast<double>(g.count));
  }
  {
    Family f(out, "gpucloud_billing_accounts", "gauge", "Billing accounts, and how many are in arrears.");
    f.sample(label("state", "in_arrears"), static_cast<double>(t.billing_accounts_in_arrears));
    f.sample(label("state", "ok"), static_cast<double>(t.billing_accounts - t.billing_accounts_in_arrears));
  }
  {
    Family f(out, "gpucloud_billing_accounts_balance", "gauge",
             fmt::format("Sum of every account's balance, in the smallest unit of {}.", currency));
    f.sample("", static_cast<double>(t.billing_balance_sum));
  }
  {
    Family f(out, "gpucloud_billing_charged_total", "counter",
             fmt::format("Charged by settlements so far, by meter kind, in the smallest unit of {}.", currency));
    for (const auto& [kind, n] : t.billing_charged_by_kind) f.sample(label("kind", kind), static_cast<double>(n));
  }

  // The newest sampling round. Only instances the store says are running: a reading can
  // outlive its instance's stop by one round.
  auto seconds_since = [&](std::chrono::steady_clock::time_point seen) {
    return std::chrono::duration<double>(now - seen).count();
  };
  {
    Family f(out, "gpucloud_host_sample_age_seconds", "gauge", "Seconds since the host's last sampling round arrived.");
    for (const auto& [host, reading] : latest.hosts()) f.sample(label("host", host), seconds_since(reading.seen));
  }
  auto gpu_labels = [&](const std::string& host, const agent::GpuReading& g) {
    auto known = t.gpus_by_uuid.find(g.uuid);
    std::string model = known == t.gpus_by_uuid.end() ? "" : known->second.model;
    return labels({{"host", host}, {"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"model", model}});
  };
  {
    Family f(out, "gpucloud_host_gpu_utilization_ratio", "gauge",
             "Share of the driver's last period a kernel ran on the GPU (NVML), 0 to 1. Simulated GPUs have none.");
    for (const auto& [host, reading] : latest.hosts())
      for (const auto& g : reading.gpus) f.sample(gpu_labels(host, g), g.util_percent / 100.0);
  }
  {
    Family f(out, "gpucloud_host_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML).");
    for (const auto& [host, reading] : latest.hosts())
      for (const auto& g : reading.gpus) f.sample(gpu_labels(host, g), static_cast<double>(g.memory_used_bytes));
  }
  {
    Family f(out, "gpucloud_host_gpu_memory_total_bytes", "gauge", "GPU memory in all (NVML).");
    for (const auto& [host, reading] : latest.hosts())
      for (const auto& g : reading.gpus) f.sample(gpu_labels(host, g), static_cast<double>(g.memory_total_bytes));
  }

  // Per-instance series name a tenant's instance and its user: not for anonymous scrapes.
  if (!tenants) return out;
  struct Shown {
    const LatestInstanceReading* reading;
    std::string labels;
  };
  std::vector<Shown> shown;
  for (const auto& [id, reading] : latest.instances()) {
    auto live = t.instances.find(id);
    if (live == t.instances.end()) continue;
    shown.push_back({&reading, labels({{"instance_id", id}, {"name", live->second.name}, {"user", live->second.user},
                                       {"host", reading.host_name}})});
  }
  {
    Family f(out, "gpucloud_instance_cpu_usage_ratio", "gauge",
             "CPU the instance used over the last sampling interval, in cores (1 = one core busy).");
    for (const auto& s : shown)
      if (s.reading->sample.cpu_percent) f.sample(s.labels, *s.reading->sample.cpu_percent / 100.0);
  }
  {
    Family f(out, "gpucloud_instance_memory_used_bytes", "gauge",
             "Memory the instance's cgroup uses, less its inactive page cache.");
    for (const auto& s : shown)
      if (s.reading->sample.memory_used_bytes)
        f.sample(s.labels, static_cast<double>(*s.reading->sample.memory_used_bytes));
  }
  {
    Family f(out, "gpucloud_instance_memory_limit_bytes", "gauge", "The instance's memory limit.");
    for (const auto& s : shown)
      if (s.reading->sample.memory_limit_bytes > 0)
        f.sample(s.labels, static_cast<double>(s.reading->sample.memory_limit_bytes));
  }
  auto instance_gpu_labels = [](const Shown& s, const agent::GpuReading& g, std::size_t position) {
    return s.labels + "," + labels({{"gpu", std::to_string(position)}, {"uuid", g.uuid}});
  };
  {
    Family f(out, "gpucloud_instance_gpu_utilization_ratio", "gauge",
             "Utilisation of each GPU the instance holds (gpu = its position in the instance), 0 to 1.");
    for (const auto& s : shown)
      for (std::size_t i = 0; i < s.reading->sample.gpus.size(); ++i)
        f.sample(instance_gpu_labels(s, s.reading->sample.gpus[i], i), s.reading->sample.gpus[i].util_percent / 100.0);
  }
  {
    Family f(out, "gpucloud_instance_gpu_memory_used_bytes", "gauge", "Memory in use on each GPU the instance holds.");
    for (const auto& s : shown)
      for (std::size_t i = 0; i < s.reading->sample.gpus.size(); ++i)
        f.sample(instance_gpu_labels(s, s.reading->sample.gpus[i], i),
                 static_cast<double>(s.reading->sample.gpus[i].memory_used_bytes));
  }
  {
    Family f(out, "gpucloud_instance_gpu_process_memory_bytes", "gauge",
             "GPU memory the instance's own processes hold on each GPU it holds (NVML's compute processes in its cgroup).");
    for (const auto& s : shown)
      for (std::size_t i = 0; i < s.reading->sample.gpus.size(); ++i)
        if (s.reading->sample.gpus[i].process_memory_bytes)
          f.sample(instance_gpu_labels(s, s.reading->sample.gpus[i], i),
                   static_cast<double>(*s.reading->sample.gpus[i].process_memory_bytes));
  }
  return out;
}

}  // namespace gpucloud::monitoring
