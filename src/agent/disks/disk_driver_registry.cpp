#include "agent/disks/disk_driver_registry.h"

#include <functional>
#include <utility>

#include "agent/disks/btrfs_driver.h"
#include "agent/disks/loop_ext4_driver.h"

namespace gpucloud::agent::disks {

namespace {

using Constructor = std::function<std::unique_ptr<DiskDriver>(const DiskDriverOptions&)>;

const std::vector<std::pair<std::string_view, Constructor>>& drivers() {
  static const std::vector<std::pair<std::string_view, Constructor>> table{
      {"loop-ext4", [](const DiskDriverOptions& o) { return std::make_unique<LoopExt4Driver>(o); }},
      {"btrfs", [](const DiskDriverOptions& o) { return std::make_unique<BtrfsDriver>(o); }},
  };
  return table;
}

}  // namespace

std::vector<std::string_view> disk_driver_names() {
  std::vector<std::string_view> out;
  for (const auto& [name, make] : drivers()) out.push_back(name);
  return out;
}

Result<std::unique_ptr<DiskDriver>> make_disk_driver(std::string_view name, const DiskDriverOptions& options) {
  for (const auto& [known, make] : drivers()) {
    if (known == name) return make(options);
  }
  std::string names;
  for (auto n : disk_driver_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  return fail(ErrorCode::invalid_argument, "disk_driver: unknown driver \"" + std::string(name) + "\" (known: " + names + ")");
}

}  // namespace gpucloud::agent::disks
