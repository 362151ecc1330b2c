#pragma once
// The operator's word on a host (issue 26): drain (no new placements; what runs there
// stays), undrain, and remove (only when nothing lives there). Kept in the hosts table's
// `admin_state`, apart from liveness (`state`: ready | unreachable from heartbeats), so a
// restart's registrations and heartbeats never undo it. Each change records its operator
// event (`host.drained`, `host.undrained`, `host.removed`) in the caller's transaction.
#include <string>

#include "core/time_format.h"
#include "market/hosts.h"
#include "store/database.h"

namespace gpucloud::market {

struct HostAdminChange {
  HostRecord host;       // as it is after the call
  bool changed = false;  // false: it was already so (no event)
};

// Drain: not_found for no such host (a removed one included), conflict never. Undrain:
// likewise. Both repeatable.
Result<HostAdminChange> drain_host(store::Database& db, const std::string& id_or_name, SysTime now);
Result<HostAdminChange> undrain_host(store::Database& db, const std::string& id_or_name, SysTime now);

// What still lives on a host, which a remove refuses over.
struct HostResidents {
  std::vector<std::string> instances;     // not released
  std::vector<std::string> data_disks;    // not destroyed (the recycle bin's count: restorable)
  std::vector<std::string> snapshots;     // not destroyed
  std::vector<std::string> images;        // custom images whose engine copy is there, not purged
  std::vector<std::string> reservations;  // active: their holders
  bool empty() const {
    return instances.empty() && data_disks.empty() && snapshots.empty() && images.empty() && reservations.empty();
  }
};
Result<HostResidents> host_residents(store::Database& db, const std::string& host_id);

// Remove: conflict naming what lives there (with counts as problem members `instances`,
// `data_disks`, `snapshots`, `images`, `reservations`) when anything does; else the host is
// `removed`: not listed by default, never placed on, its free GPUs not offered. A later
// registration of its name makes it active again. Removing a removed host changes nothing.
Result<HostAdminChange> remove_host(store::Database& db, const std::string& id_or_name, SysTime now);

}  // namespace gpucloud::market
