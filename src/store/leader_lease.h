#pragma once
// The lease that makes one replica the leader of background work (issue 27). A row per lease
// name: holder, epoch, expiry on the database's own clock (replicas' clocks may disagree), and
// whether the holder also holds the lease's session advisory lock. A replica takes the lease
// when it has expired, or at once when the holder held the advisory lock and this replica now
// holds it (the holder's session is gone: a killed process). Every change of hands raises the
// epoch, in the lease row and in the fence row that the leader's commits check.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::store {

inline constexpr const char* kBackgroundLease = "background";
// pg_advisory_lock's key for the background lease (the migrations' lock is 7262737401).
inline constexpr std::int64_t kBackgroundLeaseLockKey = 7262737402;

struct LeaseClaim {
  enum class Outcome { leading, standby, deposed };
  Outcome outcome = Outcome::standby;
  std::int64_t epoch = 0;  // leading: this replica's epoch; otherwise the current one (0: none)
  std::string holder;      // who leads now
};

// A leader's renewal: one statement, so it holds no row lock across round trips (a leader
// paused between two statements of a transaction would hold up the replica taking over).
// Deposed when `epoch` is no longer the lease's. `holds_lock`: this replica holds the advisory
// lock now. `term_us`: how long the lease lasts from now.
Result<LeaseClaim> renew_lease(Database& db, const std::string& name, const std::string& holder, std::int64_t epoch,
                               bool holds_lock, std::int64_t term_us);
// A standby's claim, in the caller's transaction: takes the lease when it may be taken, else
// says who holds it.
Result<LeaseClaim> take_lease(Database& db, const std::string& name, const std::string& holder, bool holds_lock,
                              std::int64_t term_us);
// renew_lease with `held_epoch`, take_lease without.
Result<LeaseClaim> claim_lease(Database& db, const std::string& name, const std::string& holder,
                               std::optional<std::int64_t> held_epoch, bool holds_lock, std::int64_t term_us);

// Inside a leader's write transaction, just before its commit: refuses it unless `epoch` is
// still the lease's (ErrorCode::conflict). On PostgreSQL the row is read FOR SHARE: a change of
// hands committed after this transaction began fails it as a serialization failure (it is run
// again, and then refused), and one in progress waits for it.
Status check_lease_fence(Database& db, const std::string& name, std::int64_t epoch);
// The same check as one PostgreSQL statement (gpucloud_lease_fence, migration 31), for the
// script that commits a leader's transaction (Store::CommitFence): it fails with SQLSTATE
// kLeaseFenceRefused, which the store answers as ErrorCode::conflict with its message.
std::string lease_fence_sql(const std::string& name, std::int64_t epoch);
inline constexpr std::string_view kLeaseFenceRefused = "GCF01";
// Whether a failed write was refused by the fence (either form's message).
inline bool is_lease_fence_refusal(const Error& e) {
  return e.code == ErrorCode::conflict && e.detail.starts_with("this replica no longer leads the background work");
}

}  // namespace gpucloud::store
