#pragma once
// Single-use join tokens for remote agents (issue 26). An operator makes one for a host name
// (POST /admin/hosts/join-token); the agent presents it once, on its first contact, to get
// its certificate signed. The token carries the fingerprint of the agents' CA, so the agent
// pins the control plane before it sends anything.
//
// Token text: "gcjoin1.<CA fingerprint, 64 hex>.<id, 16 hex>.<secret, 43 chars base64url of
// 32 random bytes>". Only the id and a SHA-256 of the secret are stored, never the token;
// no refusal's detail contains the secret. Repository functions on store::Database (portable
// SQL); times in the arguments are unix seconds, stored as microseconds like every table.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::pki {

inline constexpr std::string_view kJoinTokenPrefix = "gcjoin1";

struct JoinToken {
  std::string token;  // the whole text: shown once, to the operator who asked
  std::string host_name;
  std::int64_t expires_at = 0;  // unix seconds
  std::string ca_fingerprint;
};

// A new token admitting `host_name` until now + ttl. invalid_argument for a host name that
// is not one (config::is_valid_host_name), a fingerprint that is not 64 lowercase hex, or a
// ttl outside 1 s - 7 days.
Result<JoinToken> create_join_token(store::Database& db, const std::string& host_name, const std::string& ca_fingerprint,
                                    std::chrono::seconds ttl, const std::string& created_by_user_id, std::int64_t now);

struct ParsedJoinToken {
  std::string ca_fingerprint, id, secret;
};
// The token's shape only (the agent's side, before it dials): invalid_argument when it is
// not a gcjoin1 token. The detail never repeats the text.
Result<ParsedJoinToken> parse_join_token(std::string_view token);

// Redeems a token once: its id exists, its secret matches (hashes compared in constant time),
// it is not used and not expired; then it is marked used by a conditional UPDATE ... WHERE
// used_at IS NULL, so of two replicas racing exactly one wins. Returns the host name it
// admits. Every refusal is ErrorCode::unauthorized with a detail saying which: "join token:
// malformed", "join token: unknown", "join token: forged", "join token: used",
// "join token: expired".
Result<std::string> redeem_join_token(store::Database& db, std::string_view token, std::int64_t now);

// redeem_join_token's last step: marks token `id` used when it is still unused and unexpired
// at now (UPDATE ... WHERE used_at IS NULL AND expires_at > now); false when it was not.
Result<bool> claim_join_token(store::Database& db, const std::string& id, std::int64_t now);

}  // namespace gpucloud::pki
