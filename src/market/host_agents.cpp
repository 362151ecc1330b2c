#include "market/host_agents.h"

namespace gpucloud::market {

Status record_agent_connected(store::Database& db, const std::string& host_name, const std::string& kind,
                              const std::string& version, const std::optional<std::string>& address, SysTime now,
                              const std::optional<std::string>& replica) {
  if (kind != kAgentInProcess && kind != kAgentRemote)
    return fail(ErrorCode::invalid_argument, "agent kind: in_process or remote, not " + kind);
  const auto at = to_unix_micros(now);
  if (auto s = db.run("UPDATE hosts SET agent_kind = ?, agent_version = ?, agent_address = ?, connected_at = ?, "
                      "last_heartbeat_at = ?, agent_replica = ? WHERE name = ?",
                      {kind, version, address, at, at, replica, host_name});
      !s)
    return s;
  if (db.changes() != 1) return fail(ErrorCode::not_found, "no host " + host_name);
  return ok();
}

Status record_agent_disconnected(store::Database& db, const std::string& host_name, SysTime now,
                                 const std::optional<std::string>& replica) {
  (void)now;  // the last heartbeat says since when it is silent
  if (auto s = replica ? db.run("UPDATE hosts SET connected_at = NULL WHERE name = ? AND "
                                "(agent_replica IS NULL OR agent_replica = ?)",
                                {host_name, *replica})
                       : db.run("UPDATE hosts SET connected_at = NULL WHERE name = ?", {host_name});
      !s)
    return s;
  if (db.changes() != 1) {
    auto known = db.one("SELECT 1 FROM hosts WHERE name = ?", {host_name});
    if (!known) return fail(known.error());
    if (!*known) return fail(ErrorCode::not_found, "no host " + host_name);
  }
  return ok();
}

Status record_heartbeats(store::Database& db, const std::vector<std::pair<std::string, SysTime>>& beats) {
  for (const auto& [name, at] : beats)
    if (auto s = db.run("UPDATE hosts SET last_heartbeat_at = ? WHERE name = ? AND "
                        "(last_heartbeat_at IS NULL OR last_heartbeat_at < ?)",
                        {to_unix_micros(at), name, to_unix_micros(at)});
        !s)
      return s;
  return ok();
}

}  // namespace gpucloud::market
