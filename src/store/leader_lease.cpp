#include "store/leader_lease.h"

namespace gpucloud::store {
namespace {

// The database's clock in unix microseconds: replicas compare expiries on one clock.
Result<std::int64_t> database_now(Database& db) {
  const char* sql = db.dialect() == Dialect::postgres
                        ? "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
                        : "SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
  auto row = db.one(sql);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::internal, "store: the database did not say what time it is");
  return (*row)->int64(0);
}

}  // namespace

Result<LeaseClaim> claim_lease(Database& db, const std::string& name, const std::string& holder,
                               std::optional<std::int64_t> held_epoch, bool holds_lock, std::int64_t term_us) {
  auto now = database_now(db);
  if (!now) return fail(now.error());
  auto row = db.one("SELECT holder, epoch, locked, expires_at FROM leader_lease WHERE name = ?", {name});
  if (!row) return fail(row.error());
  const std::int64_t expires = *now + term_us;
  if (*row && held_epoch && (*row)->int64(1) == *held_epoch && (*row)->text(0) == holder) {
    if (auto s = db.run("UPDATE leader_lease SET expires_at = ?, locked = ? WHERE name = ? AND epoch = ?",
                        {expires, holds_lock, name, *held_epoch});
        !s)
      return fail(s.error());
    return LeaseClaim{LeaseClaim::Outcome::leading, *held_epoch, holder};
  }
  if (held_epoch) {
    // Another replica took it (this one was paused or cut off past its term): never take it back here.
    return LeaseClaim{LeaseClaim::Outcome::deposed, *row ? (*row)->int64(1) : 0, *row ? (*row)->text(0) : ""};
  }
  if (*row) {
    const bool expired = (*row)->int64(3) <= *now;
    const bool holder_gone = holds_lock && (*row)->int64(2) != 0;  // its session let the lock go
    if (!expired && !holder_gone) return LeaseClaim{LeaseClaim::Outcome::standby, (*row)->int64(1), (*row)->text(0)};
  }
  const std::int64_t epoch = (*row ? (*row)->int64(1) : 0) + 1;
  if (auto s = db.run("INSERT INTO leader_lease (name, holder, epoch, locked, expires_at) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, "
                      "locked = excluded.locked, expires_at = excluded.expires_at",
                      {name, holder, epoch, holds_lock, expires});
      !s)
    return fail(s.error());
  if (auto s = db.run("INSERT INTO leader_fence (name, epoch) VALUES (?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch",
                      {name, epoch});
      !s)
    return fail(s.error());
  return LeaseClaim{LeaseClaim::Outcome::leading, epoch, holder};
}

Status check_lease_fence(Database& db, const std::string& name, std::int64_t epoch) {
  const char* sql = db.dialect() == Dialect::postgres ? "SELECT epoch FROM leader_fence WHERE name = ? FOR SHARE"
                                                      : "SELECT epoch FROM leader_fence WHERE name = ?";
  auto row = db.one(sql, {name});
  if (!row) return fail(row.error());
  const std::int64_t current = *row ? (*row)->int64(0) : 0;
  if (current != epoch)
    return fail(ErrorCode::conflict, "this replica no longer leads the background work (its lease epoch " +
                                         std::to_string(epoch) + ", now " + std::to_string(current) + ")");
  return ok();
}

}  // namespace gpucloud::store
