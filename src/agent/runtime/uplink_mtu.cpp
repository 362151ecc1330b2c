#include "agent/runtime/uplink_mtu.h"

#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpucloud::agent {

namespace {

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::optional<long> number(std::string_view text, int base) {
  long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<int> uplink_mtu_from(std::string_view text,
                                   const std::function<std::optional<int>(const std::string& iface)>& mtu_of) {
  std::optional<std::string> best;
  long best_metric = LONG_MAX;
  bool header = true;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (header) {  // "Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT"
      header = false;
      continue;
    }
    const auto f = fields(line);
    if (f.size() < 8) continue;
    const auto destination = number(f[1], 16), metric = number(f[6], 10), mask = number(f[7], 16);
    if (!destination || !metric || !mask || *destination != 0 || *mask != 0) continue;
    if (*metric < best_metric) {
      best_metric = *metric;
      best = std::string(f[0]);
    }
  }
  if (!best) return std::nullopt;
  return mtu_of(*best);
}

std::optional<int> uplink_mtu() {
  auto route = read_file("/proc/net/route");
  if (!route) return std::nullopt;
  return uplink_mtu_from(*route, [](const std::string& iface) -> std::optional<int> {
    if (iface.find('/') != std::string::npos) return std::nullopt;
    auto text = read_file("/sys/class/net/" + iface + "/mtu");
    if (!text) return std::nullopt;
    while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
    auto v = number(*text, 10);
    if (!v) return std::nullopt;
    return static_cast<int>(*v);
  });
}

int bridge_mtu_for(std::optional<int> uplink) {
  if (!uplink || *uplink < 576 || *uplink >= 1500) return 0;
  return *uplink;
}

}  // namespace gpucloud::agent
