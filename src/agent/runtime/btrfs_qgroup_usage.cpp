#include "agent/runtime/btrfs_qgroup_usage.h"

#include <charconv>
#include <sstream>

#include "agent/disks/disk_tools.h"

namespace gpucloud::agent {

std::optional<std::int64_t> parse_qgroup_exclusive(std::string_view output) {
  std::istringstream lines{std::string(output)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string id, referenced, exclusive;
    if (!(fields >> id >> referenced >> exclusive) || !id.starts_with("0/")) continue;
    std::int64_t bytes = 0;
    const auto [end, ec] = std::from_chars(exclusive.data(), exclusive.data() + exclusive.size(), bytes);
    if (ec != std::errc() || end != exclusive.data() + exclusive.size() || bytes < 0) continue;
    return bytes;
  }
  return std::nullopt;
}

Result<std::int64_t> btrfs_subvolume_usage(const std::string& path) {
  if (path.empty() || path.front() != '/') return fail(ErrorCode::invalid_argument, "not an absolute path: " + path);
  auto out = disks::run_tool({"btrfs", "qgroup", "show", "--raw", "-f", path}, "btrfs-progs",
                             std::chrono::seconds(10));
  if (!out) return fail(std::move(out.error()));
  auto bytes = parse_qgroup_exclusive(*out);
  if (!bytes) return fail(ErrorCode::unavailable, "no quota group for " + path + " (quotas off?)");
  return *bytes;
}

}  // namespace gpucloud::agent
