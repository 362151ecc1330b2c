#include "agent/disk_pool_probe.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace gpucloud::agent {

std::int64_t disk_pool_reserve(std::int64_t size) {
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  const std::int64_t reserve = std::clamp<std::int64_t>(size / 20, 256 * kMiB, 10 * 1024 * kMiB);
  return std::min(reserve, size / 2);
}

DiskPool disk_pool_from_counts(const std::string& path, std::uint64_t blocks, std::uint64_t free_blocks,
                               std::uint64_t available_blocks, std::uint64_t fragment, double overcommit) {
  DiskPool p;
  p.path = path;
  const auto f = static_cast<std::int64_t>(fragment);
  const std::int64_t used = static_cast<std::int64_t>(blocks >= free_blocks ? blocks - free_blocks : 0) * f;
  // df's size: what is used plus what an unprivileged writer may still take.
  p.size_bytes = used + static_cast<std::int64_t>(available_blocks) * f;
  p.used_bytes = used;
  p.reserve_bytes = disk_pool_reserve(p.size_bytes);
  const double capacity = static_cast<double>(std::max<std::int64_t>(0, p.size_bytes - p.reserve_bytes)) * overcommit;
  p.capacity_bytes = static_cast<std::int64_t>(std::floor(capacity));
  return p;
}

Result<DiskPool> measure_disk_pool(const std::string& path_in, double overcommit) {
  namespace fs = std::filesystem;
  fs::path path = path_in;
  std::error_code ec;
  while (!fs::exists(path, ec) && path.has_parent_path() && path != path.parent_path()) path = path.parent_path();
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0)
    return fail(ErrorCode::internal, "statvfs " + path.string() + ": " + std::strerror(errno));
  return disk_pool_from_counts(path_in, st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize ? st.f_frsize : st.f_bsize,
                               overcommit);
}

}  // namespace gpucloud::agent
