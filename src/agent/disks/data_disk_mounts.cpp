#include "agent/disks/data_disk_mounts.h"

#include <set>

#include "agent/disks/disk_driver.h"

namespace gpucloud::agent::disks {

namespace {


bool at_or_under(std::string_view path, std::string_view dir) {
  return path == dir || (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

constexpr std::string_view kReservedTrees[] = {"/bin", "/boot", "/dev",  "/etc",  "/lib",  "/lib32",   "/lib64",
                                               "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr", "/var/run",
                                               "/.gpucloud"};
constexpr std::string_view kReservedExact[] = {"/", "/root", "/var"};

}  // namespace

Status check_mount_path(std::string_view path) {
  if (path.empty() || path.front() != '/') return invalid("must be an absolute path");
  if (path.size() > 1024) return invalid("is longer than 1024 bytes");
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == ':' || c == ',') return invalid("holds a control character, ':' or ','");
  }
  for (auto exact : kReservedExact) {
    if (path == exact) return invalid("'" + std::string(path) + "' is reserved");
  }
  if (path.back() == '/') return invalid("must not end with '/'");
  // Each component: not empty ("//"), not "." or "..".
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return invalid("must be a normal path (no '//', '.' or '..')");
    start = end + 1;
  }
  for (auto tree : kReservedTrees) {
    if (at_or_under(path, tree)) return invalid("'" + std::string(path) + "' is under " + std::string(tree) + ", which is reserved");
  }
  return ok();
}

Status check_data_disks(const std::vector<DataDiskAttachment>& disks) {
  std::set<std::string> ids;
  for (std::size_t i = 0; i < disks.size(); ++i) {
    const std::string at = "data_disks[" + std::to_string(i) + "]";
    const auto& d = disks[i];
    if (!is_valid_disk_id(d.disk_id)) return invalid(at + ".disk_id: '" + d.disk_id + "' is not a disk id");
    if (!ids.insert(d.disk_id).second) return invalid(at + ".disk_id: " + d.disk_id + " is attached twice");
    if (auto s = check_mount_path(d.mount_path); !s) return invalid(at + ".mount_path: " + s.error().detail);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& other = disks[j].mount_path;
      if (at_or_under(d.mount_path, other) || at_or_under(other, d.mount_path)) {
        return invalid(at + ".mount_path: " + d.mount_path + " overlaps data_disks[" + std::to_string(j) +
                       "].mount_path " + other);
      }
    }
  }
  return ok();
}

}  // namespace gpucloud::agent::disks
