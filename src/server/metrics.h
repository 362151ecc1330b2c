#pragma once
// Prometheus text exposition of request counts and latency histograms per route. Updated
// only on the event loop, so plain integers suffice.
#include <array>
#include <cstdint>
#include <map>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>

namespace gpucloud::server {

class Metrics {
 public:
  // `route` is the route pattern (or "unmatched"), never the raw path, and a method outside
  // the standard ones counts as "other": a client cannot grow the label sets.
  void record_request(const std::string& method, const std::string& route, int status, double seconds);
  void set_gauge(const std::string& name, const std::string& help, double value) { gauges_[name] = {help, value}; }
  void connection_opened() { ++open_connections_; }
  void connection_closed() { --open_connections_; }
  void connection_refused() { ++refused_connections_; }  // over [server] max_connections
  std::string render() const;

 private:
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.5,    2.5};
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> buckets{};
    std::uint64_t count = 0;
    double sum = 0;
  };
  // Transparent: looked up by views, so a request already counted copies no string. Both
  // sides compare as views (clang 14 cannot compare a tuple of strings with one of views).
  struct ByViews {
    using is_transparent = void;
    template <class... A, class... B>
    bool operator()(const std::tuple<A...>& a, const std::tuple<B...>& b) const {
      return as_views(a) < as_views(b);
    }
    template <class... T>
    static auto as_views(const std::tuple<T...>& t) {
      return std::apply([](const auto&... v) { return std::make_tuple(view(v)...); }, t);
    }
    static std::string_view view(const std::string& s) { return s; }
    static std::string_view view(std::string_view s) { return s; }
    static int view(int i) { return i; }
  };
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t, ByViews> requests_;  // method, route, status
  std::map<std::tuple<std::string, std::string>, Histogram, ByViews> latency_;            // method, route
  struct Gauge {
    std::string help;
    double value = 0;
  };
  std::map<std::string, Gauge> gauges_;
  std::int64_t open_connections_ = 0;
  std::uint64_t refused_connections_ = 0;
};

}  // namespace gpucloud::server
