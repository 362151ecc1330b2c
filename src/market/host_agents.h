#pragma once
// Who serves each host, as GET /admin/hosts shows it (`agent`): kind (in_process | remote),
// version, a remote agent's address, since when it is connected, and its last heartbeat.
// The certificate's expiry is read from host_certificates (market::list_hosts).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::market {

inline constexpr const char* kAgentInProcess = "in_process";
inline constexpr const char* kAgentRemote = "remote";

// An agent connected for the host (after its registration): kind, version, address (nullopt
// in-process), connected since `now`, which also counts as its last heartbeat.
// invalid_argument for another kind; not_found when no host has that name. `replica`: the
// replica holding a remote agent's link when several share the store (store/replicas.h).
Status record_agent_connected(store::Database& db, const std::string& host_name, const std::string& kind,
                              const std::string& version, const std::optional<std::string>& address, SysTime now,
                              const std::optional<std::string>& replica = std::nullopt);
// Its agent went away: no longer connected (kind, version and address stay as last seen).
// With `replica`, only when that replica held the link (the agent may have dialled another
// replica meanwhile). not_found when no host has that name.
Status record_agent_disconnected(store::Database& db, const std::string& host_name, SysTime now,
                                 const std::optional<std::string>& replica = std::nullopt);
// The last heartbeat of each named host (wall time); a name no host has is skipped, and an
// older time never replaces a newer one.
Status record_heartbeats(store::Database& db, const std::vector<std::pair<std::string, SysTime>>& beats);

}  // namespace gpucloud::market
