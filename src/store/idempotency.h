#pragma once
// The Idempotency-Key mechanism of api.md, as one piece every POST can use: a key is scoped
// to (user, method, path), kept 24 h, and its answer is written in the SAME transaction as
// the request's effect, so a repeat either replays the answer or finds no effect at all.
#include <optional>
#include <string>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::store {

struct IdempotencyScope {
  std::string user_id;
  std::string method;
  std::string path;
  std::string key;
  std::string body_hash;  // SHA-256 of the request body
};

struct StoredAnswer {
  int status = 0;
  std::string body;
};

enum class ClaimOutcome {
  proceed,             // first use: do the work, then complete()
  replay,              // same key, same body, done: answer is the stored one
  conflict_other_body, // same key, another body
  conflict_in_flight,  // same key, first request still running
};

struct Claim {
  ClaimOutcome outcome;
  std::optional<StoredAnswer> answer;
};

inline constexpr std::chrono::hours kIdempotencyRetention{24};

// Looks the key up. On `proceed` with mark_in_flight, records the key as in flight (for
// work that spans several transactions); otherwise nothing is written until complete().
// `now` is the machine's wall clock, not the platform clock (retention is not billing time).
Result<Claim> claim_idempotency_key(Database& db, const IdempotencyScope& scope, SysTime now, bool mark_in_flight);
// Stores the answer; call in the transaction that made the effect.
Status complete_idempotency_key(Database& db, const IdempotencyScope& scope, const StoredAnswer& answer, SysTime now);
// Forgets an in-flight key whose work failed, so the client may retry it.
Status abandon_idempotency_key(Database& db, const IdempotencyScope& scope);
Status purge_idempotency_keys(Database& db, SysTime now);

// Valid keys: 1-255 printable ASCII characters.
bool is_valid_idempotency_key(const std::string& key);

}  // namespace gpucloud::store
