#pragma once
// The platform's gauges for Prometheus (/metrics): instances by state, hosts by state, GPUs
// by host, model and state, billing totals (from the store, one read transaction), and the
// newest sampling round of each host and running instance (from LatestReadings, in memory).
//
// Names and labels follow Prometheus' conventions (base units: bytes, seconds, ratios
// 0..1; `_total` only on counters). Label sets are bounded by what the platform holds:
// instances carry `instance_id` (never `instance`, which Prometheus gives the scrape
// target) and the owner's `user`; a simulated GPU says so in `simulated="true"`.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/result.h"
#include "monitoring/latest_readings.h"
#include "store/database.h"

namespace gpucloud::monitoring {

struct GpuCount {
  std::string host, model;
  bool simulated = false;
  std::string state;  // free, used, missing (not reported by its host), unhealthy
  std::int64_t count = 0;
};

struct InstanceLabels {
  std::string name, user;
};

struct GpuLabels {
  std::string model;
  bool simulated = false;
};

struct PlatformTotals {
  std::map<std::string, std::int64_t> instances_by_state;  // every state, zero included
  std::map<std::string, std::int64_t> hosts_by_state;      // ready, unreachable, draining
  std::vector<GpuCount> gpus;
  std::int64_t billing_accounts = 0, billing_accounts_in_arrears = 0;
  std::int64_t billing_balance_sum = 0;                    // smallest currency unit
  std::map<std::string, std::int64_t> billing_charged_by_kind;  // meter kind → charged so far
  std::map<std::string, InstanceLabels> instances;  // live instances (not released), by id
  std::map<std::string, GpuLabels> gpus_by_uuid;
  // Per host, its disk pool (market/disk_pool.h): what = capacity | provisioned | size | used
  // | reserve, in bytes; only what the host reported (provisioned always).
  struct DiskPoolValue {
    std::string host, what;
    std::int64_t bytes = 0;
  };
  std::vector<DiskPoolValue> disk_pools;
};

// One read transaction's worth; `db` is a reader.
Result<PlatformTotals> read_platform_totals(store::Database& db);

// Prometheus text (HELP and TYPE for every family), to append to the HTTP metrics.
// `currency` names the unit of the billing gauges in their HELP.
// `tenants`: also the per-instance series (labelled by instance, name and user), for an
// operator or the configured scrape token only; without it, the platform's totals.
std::string render_platform_metrics(const PlatformTotals& totals, const LatestReadings& latest,
                                    std::chrono::steady_clock::time_point now, const std::string& currency,
                                    bool tenants = true);

// A label value as the exposition format wants it (backslash, quote and newline escaped).
std::string escape_label_value(std::string_view value);

}  // namespace gpucloud::monitoring
