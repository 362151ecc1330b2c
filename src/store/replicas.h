#pragma once
// Where each gpucloudd replica on a shared store answers (issue 27), and which one serves a
// host: the leader serves the in-process hosts, the replica holding a remote host's agent link
// serves that host. A replica that does not serve a host hands its web terminals to the one
// that does (server/replica_terminal.h).
#include <optional>
#include <string>

#include "core/time_format.h"
#include "core/result.h"
#include "store/database.h"

namespace gpucloud::store {

struct ReplicaAddress {
  std::string holder;   // the replica's lease holder name (HOSTNAME/PID/random)
  std::string api_url;  // http://HOST:PORT where its API answers
};

// This replica's row: written at its start (a restart under the same holder replaces it).
Status record_replica(Database& db, const std::string& holder, const std::string& api_url, SysTime now);

// The replica serving `host_name` now: for an in-process host the background lease's holder,
// for a remote host the replica its connected agent's link is on. nullopt when none is known
// (no leader yet, the agent not connected, a replica that never recorded itself).
Result<std::optional<ReplicaAddress>> replica_serving_host(Database& db, const std::string& host_name);

}  // namespace gpucloud::store
