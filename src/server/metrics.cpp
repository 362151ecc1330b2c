#include "server/metrics.h"

#include <fmt/format.h>

namespace gpucloud::server {

namespace {
// The methods of RFC 9110 (and PATCH); any other token a client sends is one label.
std::string_view method_label(std::string_view method) {
  static constexpr std::string_view kKnown[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"};
  for (std::string_view known : kKnown)
    if (method == known) return known;
  return "other";
}
}  // namespace

void Metrics::record_request(const std::string& raw_method, const std::string& route, int status, double seconds) {
  std::string_view method = method_label(raw_method);
  std::string_view route_view = route;
  auto count = requests_.find(std::make_tuple(method, route_view, status));
  if (count == requests_.end())
    count = requests_.emplace(std::make_tuple(std::string(method), route, status), 0).first;
  ++count->second;
  auto series = latency_.find(std::make_tuple(method, route_view));
  if (series == latency_.end()) series = latency_.emplace(std::make_tuple(std::string(method), route), Histogram{}).first;
  Histogram& h = series->second;
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
  out += "# HELP gpucloud_http_refused_connections_total Connections closed at once because max_connections were open.\n";
  out += "# TYPE gpucloud_http_refused_connections_total counter\n";
  out += fmt::format("gpucloud_http_refused_connections_total {}\n", refused_connections_);
  for (const auto& [name, gauge] : gauges_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, gauge.help, name, name, gauge.value);
  }
  return out;
}

}  // namespace gpucloud::server
