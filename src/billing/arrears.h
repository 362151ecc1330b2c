#pragma once
// Arrears (spec "Billing"): a running pay-as-you-go instance stops when its account's
// balance reaches zero — at the projected moment, not at the next hourly settlement; after
// `[policy] arrears_release_instances_after_days` in arrears the stopped instances are
// released, after `arrears_delete_disks_after_days` the detached data disks go to the
// recycle bin; each step has a warning event first. A paid subscription term is never
// touched, nothing of an account with a positive balance is ever deleted, and a top-up lifts
// the restrictions without restarting anything.
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::billing {

// When the account's balance, less what its open meters accrue from `now`, reaches zero;
// nullopt when no compute meter is open (storage alone is settled hourly and stops nothing).
Result<std::optional<SysTime>> projected_zero(store::Database& db, const std::string& account_id, SysTime now);
// When the balance net of what its open meters accrue reaches `level` or below (the same
// projection; nullopt when no compute meter is open).
Result<std::optional<SysTime>> projected_at_or_below(store::Database& db, const std::string& account_id,
                                                     std::int64_t level, SysTime now);

// The warnings and steps of arrears, as bits of billing_accounts.arrears_warned.
enum ArrearsStep : int {
  kStopWarned = 1,
  kReleaseWarned = 2,
  kReleased = 4,
  kDisksWarned = 8,
  kDisksDeleted = 16,
};

// When the account next needs enforce_arrears (read only): a warning or step coming due,
// now when something is overdue, nullopt when nothing is pending.
Result<std::optional<SysTime>> next_arrears_check(store::Database& db, const config::Config& config,
                                                  const std::string& account_id, SysTime now);

struct ArrearsOutcome {
  std::vector<std::string> instances_to_kick;  // stopped or released: the engine follows
  std::vector<std::string> disks_to_kick;
};

// Everything due for the account at `now`: settles its open meters; stops its running
// pay-as-you-go instances when the balance is at or below zero; warns and releases or bins
// after the graces. Runs in the caller's write transaction.
Result<ArrearsOutcome> enforce_arrears(store::Database& db, const config::Config& config, const std::string& account_id,
                                       SysTime now);

}  // namespace gpucloud::billing
