#include "store/leader_lease.h"

namespace gpucloud::store {
namespace {

// The database's clock in unix microseconds, as SQL: replicas compare expiries on one clock.
const char* database_now_sql(const Database& db) {
  return db.dialect() == Dialect::postgres ? "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
                                           : "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
}

Result<std::int64_t> database_now(Database& db) {
  auto row = db.one(std::string("SELECT ") + database_now_sql(db));
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::internal, "store: the database did not say what time it is");
  return (*row)->int64(0);
}

}  // namespace

Result<LeaseClaim> renew_lease(Database& db, const std::string& name, const std::string& holder, std::int64_t epoch,
                               bool holds_lock, std::int64_t term_us) {
  if (auto s = db.run(std::string("UPDATE leader_lease SET expires_at = ") + database_now_sql(db) +
                          " + ?, locked = ? WHERE name = ? AND holder = ? AND epoch = ?",
                      {term_us, holds_lock, name, holder, epoch});
      !s)
    return fail(s.error());
  if (db.changes() == 1) return LeaseClaim{LeaseClaim::Outcome::leading, epoch, holder};
  // Another replica took it (this one was paused or cut off past its term): never taken back here.
  auto row = db.one("SELECT holder, epoch FROM leader_lease WHERE name = ?", {name});
  if (!row) return fail(row.error());
  return LeaseClaim{LeaseClaim::Outcome::deposed, *row ? (*row)->int64(1) : 0, *row ? (*row)->text(0) : ""};
}

Result<LeaseClaim> take_lease(Database& db, const std::string& name, const std::string& holder, bool holds_lock,
                              std::int64_t term_us) {
  auto now = database_now(db);
  if (!now) return fail(now.error());
  auto row = db.one("SELECT holder, epoch, locked, expires_at FROM leader_lease WHERE name = ?", {name});
  if (!row) return fail(row.error());
  if (*row) {
    const bool expired = (*row)->int64(3) <= *now;
    const bool holder_gone = holds_lock && (*row)->int64(2) != 0;  // its session let the lock go
    if (!expired && !holder_gone) return LeaseClaim{LeaseClaim::Outcome::standby, (*row)->int64(1), (*row)->text(0)};
  }
  const std::int64_t epoch = (*row ? (*row)->int64(1) : 0) + 1;
  if (auto s = db.run("INSERT INTO leader_lease (name, holder, epoch, locked, expires_at) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, "
                      "locked = excluded.locked, expires_at = excluded.expires_at",
                      {name, holder, epoch, holds_lock, *now + term_us});
      !s)
    return fail(s.error());
  if (auto s = db.run("INSERT INTO leader_fence (name, epoch) VALUES (?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch",
                      {name, epoch});
      !s)
    return fail(s.error());
  return LeaseClaim{LeaseClaim::Outcome::leading, epoch, holder};
}

Result<LeaseClaim> claim_lease(Database& db, const std::string& name, const std::string& holder,
                               std::optional<std::int64_t> held_epoch, bool holds_lock, std::int64_t term_us) {
  if (held_epoch) return renew_lease(db, name, holder, *held_epoch, holds_lock, term_us);
  return take_lease(db, name, holder, holds_lock, term_us);
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

std::string lease_fence_sql(const std::string& name, std::int64_t epoch) {
  // Lease names are the program's own constants (kBackgroundLease): no quote to escape.
  return "SELECT gpucloud_lease_fence('" + name + "', " + std::to_string(epoch) + ")";
}

}  // namespace gpucloud::store
