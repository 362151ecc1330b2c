#include "monitoring/metrics_view.h"

#include <cmath>
#include <optional>
#include <string>

#include <boost/json.hpp>

namespace gpucloud::monitoring {
namespace json = boost::json;

namespace {

SysTime whole_seconds(SysTime t) { return std::chrono::floor<std::chrono::seconds>(t); }

// [[RFC 3339 time of the step's start, value], ...]; memory in whole bytes, percentages to
// two decimals.
json::array metric_points(const std::vector<Point>& points, bool whole) {
  json::array out;
  out.reserve(points.size());
  for (const auto& p : points) {
    json::value v = whole ? json::value(static_cast<std::int64_t>(std::llround(p.value)))
                          : json::value(std::round(p.value * 100) / 100);
    out.push_back(json::array{json::value(format_rfc3339(SysTime(std::chrono::seconds(p.t)))), v});
  }
  return out;
}

}  // namespace

json::object instance_metrics_json(const instances::Instance& instance, const std::vector<QueriedSeries>& series,
                                   const LatestInstanceReading* latest, const MetricsWindow& window) {
  std::optional<std::string> gpu_absent;
  if (instance.gpu_count == 0 || instance.no_gpu) gpu_absent = "the instance runs without GPUs";
  else if (instance.gpus_simulated) gpu_absent = "simulated GPUs report no utilisation";
  else if (latest && latest->sample.gpus.empty() && !latest->sample.gpu_note.empty()) gpu_absent = latest->sample.gpu_note;

  json::array gpus;
  if (!instance.no_gpu)
    for (std::size_t n = 0; n < instance.gpu_uuids.size(); ++n) {
      json::value total = nullptr;
      if (latest && n < latest->sample.gpus.size()) total = latest->sample.gpus[n].memory_total_bytes;
      gpus.push_back(json::object{{"gpu", static_cast<std::int64_t>(n)},
                                  {"uuid", instance.gpu_uuids[n]},
                                  {"model", instance.gpu_model ? json::value(*instance.gpu_model) : json::value(nullptr)},
                                  {"simulated", instance.gpus_simulated},
                                  {"memory_total_bytes", total}});
    }

  json::array out;
  for (const auto& s : series) {
    if (s.gpu == kInstanceRow) {
      out.push_back(json::object{{"name", "cpu_percent"}, {"points", metric_points(s.util, false)}});
      out.push_back(json::object{{"name", "memory_used_bytes"}, {"points", metric_points(s.memory, true)}});
    } else {
      out.push_back(json::object{{"name", "gpu_util_percent"}, {"gpu", s.gpu}, {"points", metric_points(s.util, false)}});
      out.push_back(json::object{{"name", "gpu_memory_used_bytes"}, {"gpu", s.gpu}, {"points", metric_points(s.memory, true)}});
    }
  }

  json::value latest_json = nullptr;
  if (latest) {
    json::array lg;
    for (std::size_t n = 0; n < latest->sample.gpus.size(); ++n) {
      const auto& g = latest->sample.gpus[n];
      lg.push_back(json::object{{"gpu", static_cast<std::int64_t>(n)},
                                {"util_percent", g.util_percent},
                                {"memory_used_bytes", g.memory_used_bytes},
                                {"memory_total_bytes", g.memory_total_bytes},
                                {"process_memory_bytes", g.process_memory_bytes ? json::value(*g.process_memory_bytes)
                                                                                : json::value(nullptr)}});
    }
    const auto& smp = latest->sample;
    latest_json = json::object{
        {"at", format_rfc3339(whole_seconds(latest->at))},
        {"cpu_percent", smp.cpu_percent ? json::value(std::round(*smp.cpu_percent * 100) / 100) : json::value(nullptr)},
        {"memory_used_bytes", smp.memory_used_bytes ? json::value(*smp.memory_used_bytes) : json::value(nullptr)},
        {"gpus", std::move(lg)}};
  }

  return json::object{{"instance", instance.id},
                      {"since", format_rfc3339(whole_seconds(window.since))},
                      {"until", format_rfc3339(whole_seconds(window.until))},
                      {"step", window.step},
                      {"resolution", window.raw ? "raw" : "1m"},
                      {"cpu", instance.cpu},
                      {"memory_limit_bytes", instance.memory_gib * 1024 * 1024 * 1024},
                      {"gpus", std::move(gpus)},
                      {"gpu_metrics", json::object{{"available", !gpu_absent.has_value()},
                                                   {"reason", gpu_absent ? json::value(*gpu_absent) : json::value(nullptr)}}},
                      {"series", std::move(out)},
                      {"latest", std::move(latest_json)}};
}

}  // namespace gpucloud::monitoring
