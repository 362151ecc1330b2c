#pragma once
// System disk sizes as the engine sees them: whether a host's engine enforces
// system_disk_gib (btrfs does; overlay2 here cannot), and, from each reconcile's
// instance.status, how much each instance's system disk holds. Use that passes the size
// records one `instance.system_disk_overrun` event (again only after it went back under).
#include <cstdint>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::instances {

inline constexpr std::int64_t kGiBBytes = std::int64_t{1} << 30;

// True when `used` bytes pass a system disk of `gib` GiB. Pure.
bool system_disk_overrun(std::optional<std::int64_t> used, std::int64_t gib);

// Writes instance.status's "system_disk" (to the host's row) and each instance's
// "system_disk_used_bytes", with an overrun event on the crossing.
Status record_system_disk_report(store::Database& db, const std::string& host_name, const boost::json::object& observed,
                                 SysTime now);

// The host's disk pool (market/disk_pool.h) and system disks: where the host's engine
// enforces system_disk_gib, an instance's system disk takes its size from the pool from its
// create (refused with no_capacity when the pool lacks it) until its release; where the engine
// cannot enforce it (overlay2), its writes are not provisioned anywhere and the pool's real
// use is what is watched. What was taken is kept on the instance (disk_pool_bytes), so a
// release gives back exactly that whatever the host reports meanwhile.
Status take_system_disk(store::Database& db, const std::string& instance_id, const std::string& instance_name,
                        const std::string& host_id, std::int64_t gib);
Status free_system_disk(store::Database& db, const std::string& instance_id);

}  // namespace gpucloud::instances
