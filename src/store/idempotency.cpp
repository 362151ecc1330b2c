#include "store/idempotency.h"

namespace gpucloud::store {

bool is_valid_idempotency_key(const std::string& key) {
  if (key.empty() || key.size() > 255) return false;
  for (char c : key)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

Result<Claim> claim_idempotency_key(Database& db, const IdempotencyScope& scope, SysTime now, bool mark_in_flight) {
  // Expired keys go now, whoever used them: their answers are kept no longer than retention
  // (an index range scan on created_at, empty almost always).
  if (auto s = purge_idempotency_keys(db, now); !s) return fail(s.error());
  auto cutoff = to_unix_micros(now - kIdempotencyRetention);
  auto row = db.one("SELECT body_hash, state, status, response, created_at FROM idempotency_keys "
                    "WHERE user_id = ? AND method = ? AND path = ? AND key = ?",
                    {scope.user_id, scope.method, scope.path, scope.key});
  if (!row) return fail(row.error());
  if (*row && (*row)->int64(4) < cutoff) {  // expired: as if never used
    if (auto s = db.run("DELETE FROM idempotency_keys WHERE user_id = ? AND method = ? AND path = ? AND key = ?",
                        {scope.user_id, scope.method, scope.path, scope.key});
        !s)
      return fail(s.error());
    row->reset();
  }
  if (*row) {
    const Row& r = **row;
    if (r.text(0) != scope.body_hash) return Claim{ClaimOutcome::conflict_other_body, std::nullopt};
    if (r.text(1) == "in_flight") return Claim{ClaimOutcome::conflict_in_flight, std::nullopt};
    return Claim{ClaimOutcome::replay, StoredAnswer{static_cast<int>(r.int64(2)), r.text(3)}};
  }
  if (mark_in_flight) {
    if (auto s = db.run("INSERT INTO idempotency_keys (user_id, method, path, key, body_hash, state, created_at) "
                        "VALUES (?, ?, ?, ?, ?, 'in_flight', ?)",
                        {scope.user_id, scope.method, scope.path, scope.key, scope.body_hash, to_unix_micros(now)});
        !s)
      return fail(s.error());
  }
  return Claim{ClaimOutcome::proceed, std::nullopt};
}

Status complete_idempotency_key(Database& db, const IdempotencyScope& scope, const StoredAnswer& answer, SysTime now) {
  return db.run("INSERT INTO idempotency_keys (user_id, method, path, key, body_hash, state, status, response, "
                "created_at) VALUES (?, ?, ?, ?, ?, 'done', ?, ?, ?) "
                "ON CONFLICT (user_id, method, path, key) DO UPDATE SET state = 'done', status = excluded.status, "
                "response = excluded.response",
                {scope.user_id, scope.method, scope.path, scope.key, scope.body_hash, answer.status, answer.body,
                 to_unix_micros(now)});
}

Status abandon_idempotency_key(Database& db, const IdempotencyScope& scope) {
  return db.run("DELETE FROM idempotency_keys WHERE user_id = ? AND method = ? AND path = ? AND key = ? "
                "AND state = 'in_flight'",
                {scope.user_id, scope.method, scope.path, scope.key});
}

Status purge_idempotency_keys(Database& db, SysTime now) {
  return db.run("DELETE FROM idempotency_keys WHERE created_at < ?", {to_unix_micros(now - kIdempotencyRetention)});
}

}  // namespace gpucloud::store
