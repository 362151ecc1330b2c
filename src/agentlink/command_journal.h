#pragma once
// Commands for remote hosts, durable in the store until their agent reports an outcome: a
// command survives a dropped link and a restart of either side, and is sent again when the
// host's agent reconnects (the agent answers a repeated id with its first outcome, and the
// generation fencing refuses a late one). The body is sealed (libsodium secretbox, key in
// the data directory): commands carry secrets (a Jupyter token, a password hash) that must
// not sit in the store in clear.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_protocol.h"
#include "store/database.h"

namespace gpucloud::agentlink {

// 32 bytes; DATA_DIR/agent-link/journal.key (0600), made when absent. Blocking.
Result<std::string> load_or_create_journal_key(const std::string& path);

// Records the command (a repeat of an id already journaled changes nothing).
Status journal_command(store::Database& db, const std::string& key, const agent::Command& command, std::int64_t now);
// The outcome arrived: the command is done (first outcome wins; later ones change nothing).
// False: no such pending command for this host (a forged or stale outcome).
Result<bool> complete_command(store::Database& db, const std::string& host_name, const agent::CommandOutcome& outcome,
                              std::int64_t now);
// The host's commands without an outcome, oldest first; queries (instance.status and the
// like) only when journaled at or after `queries_since` (a stale question is not asked).
Result<std::vector<agent::Command>> pending_commands(store::Database& db, const std::string& key,
                                                     const std::string& host_name, std::int64_t queries_since = 0);
// Replicas (issue 27): the whole outcome, sealed, kept beside the completed row for the
// replica whose caller waits for it (it may not hold the link), and that replica told.
Status record_command_result(store::Database& db, const std::string& key, const agent::CommandOutcome& outcome);
// The outcome recorded for a command by whichever replica ran it; none while pending.
Result<std::optional<agent::CommandOutcome>> command_result(store::Database& db, const std::string& key,
                                                            const std::string& command_id);
// Done commands older than `before` go; pending ones older than `abandon_before` go too
// (nobody waits for them any more: the control plane sent newer ones since).
Result<std::int64_t> purge_commands(store::Database& db, std::int64_t before, std::int64_t abandon_before);

}  // namespace gpucloud::agentlink
