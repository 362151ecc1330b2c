#include "server/metrics.h"

#include <fmt/format.h>

namespace gpucloud::server {

void Metrics::record_request(const std::string& method, const std::string& route, int status, double seconds) {
  ++requests_[{method, route, status}];
  Histogram& h = latency_[{method, route}];
  for (std::size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++h.buckets[i];
  ++h.count;
  h.sum += seconds;
}

std::string Metrics::render() const {
  std::string out;
  out += "# HELP gpucloud_http_requests_total HTTP requests served, by route and status.\n";
  out += "# TYPE gpucloud_http_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [method, route, status] = key;
    out += fmt::format("gpucloud_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}\n", method, route,
                       status, count);
  }
  out += "# HELP gpucloud_http_request_duration_seconds Time to answer a request, by route.\n";
  out += "# TYPE gpucloud_http_request_duration_seconds histogram\n";
  for (const auto& [key, h] : latency_) {
    const auto& [method, route] = key;
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
      out += fmt::format("gpucloud_http_request_duration_seconds_bucket{{method=\"{}\",route=\"{}\",le=\"{}\"}} {}\n",
                         method, route, kBuckets[i], h.buckets[i]);
    out += fmt::format("gpucloud_http_request_duration_seconds_bucket{{method=\"{}\",route=\"{}\",le=\"+Inf\"}} {}\n",
                       method, route, h.count);
    out += fmt::format("gpucloud_http_request_duration_seconds_sum{{method=\"{}\",route=\"{}\"}} {}\n", method, route,
                       h.sum);
    out += fmt::format("gpucloud_http_request_duration_seconds_count{{method=\"{}\",route=\"{}\"}} {}\n", method,
                       route, h.count);
  }
  out += "# HELP gpucloud_http_open_connections Client connections open now.\n";
  out += "# TYPE gpucloud_http_open_connections gauge\n";
  out += fmt::format("gpucloud_http_open_connections {}\n", open_connections_);
  for (const auto& [name, value] : gauges_) {
    out += fmt::format("# TYPE {} gauge\n{} {}\n", name, name, value);
  }
  return out;
}

}  // namespace gpucloud::server
