#include "store/replicas.h"

#include "store/leader_lease.h"

namespace gpucloud::store {

Status record_replica(Database& db, const std::string& holder, const std::string& api_url, SysTime now) {
  return db.run("INSERT INTO replicas (holder, api_url, seen_at) VALUES (?, ?, ?) "
                "ON CONFLICT (holder) DO UPDATE SET api_url = excluded.api_url, seen_at = excluded.seen_at",
                {holder, api_url, to_unix_micros(now)});
}

Result<std::optional<ReplicaAddress>> replica_serving_host(Database& db, const std::string& host_name) {
  auto row = db.one("SELECT r.holder, r.api_url FROM hosts h JOIN replicas r ON r.holder = CASE "
                    "WHEN h.agent_kind = 'in_process' THEN (SELECT holder FROM leader_lease WHERE name = ?) "
                    "WHEN h.connected_at IS NOT NULL THEN h.agent_replica END "
                    "WHERE h.name = ?",
                    {std::string(kBackgroundLease), host_name});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<ReplicaAddress>{};
  return std::optional<ReplicaAddress>{ReplicaAddress{(*row)->text(0), (*row)->text(1)}};
}

}  // namespace gpucloud::store
