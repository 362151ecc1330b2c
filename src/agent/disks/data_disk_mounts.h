#pragma once
// Where an instance's data disks appear inside its container: instance.ensure's
// "data_disks": [{"disk_id", "mount_path"}]. The control plane validates mount paths; the
// agent checks them again, since a bind mount over /etc or /proc of a container is a way out
// of it. Pure.
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gpucloud::agent::disks {

struct DataDiskAttachment {
  std::string disk_id;
  std::string mount_path;  // absolute, normalised, inside the container
  bool operator==(const DataDiskAttachment&) const = default;
};

// invalid_argument (detail without the field name) unless `path` is absolute and normal
// (no "..", ".", "//" or trailing '/'), at most 1024 bytes of printable characters without
// ':' or ',', not "/", "/root" or "/var", and not at or under /bin /boot /dev /etc /lib*
// /proc /run /sbin /sys /usr /var/run or /.gpucloud.
Status check_mount_path(std::string_view path);

// The whole list: each disk id valid (is_valid_disk_id), each path checked, no disk or path
// twice, no path inside another. Errors name the entry: "data_disks[1].mount_path: ...".
Status check_data_disks(const std::vector<DataDiskAttachment>& disks);

}  // namespace gpucloud::agent::disks
