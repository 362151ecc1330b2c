#pragma once
// Disk drivers by name, as [[hosts]] disk_driver names them (like Incus'
// lxd/storage/drivers/load.go): "loop-ext4" (the default) and "btrfs".
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/disks/disk_driver.h"

namespace gpucloud::agent::disks {

inline constexpr std::string_view kDefaultDiskDriver = "loop-ext4";

// Every name make_disk_driver knows, the default first.
std::vector<std::string_view> disk_driver_names();
// invalid_argument "disk_driver: unknown ..." for a name not in disk_driver_names().
Result<std::unique_ptr<DiskDriver>> make_disk_driver(std::string_view name, const DiskDriverOptions& options);

}  // namespace gpucloud::agent::disks
