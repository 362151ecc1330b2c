#pragma once
// Arrears (spec "Billing"), the planning half: when an account next needs enforcing (its
// projected zero, the warning before it, the graces, spend limits, the alert's crossing on
// the live balance). The enforcement itself, which stops, releases and deletes, is a floor up
// in policy/account_enforcement.h. The rules: a running pay-as-you-go instance stops when its account's
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
#include "billing/ledger.h"
#include "billing/meters.h"
#include "instances/instance_record.h"
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

// What an account's enforcement changed, for the engine to follow (policy/account_enforcement.h
// makes it; BillingService kicks the ids after the commit).
struct ArrearsOutcome {
  std::vector<std::string> instances_to_kick;  // stopped or released: the engine follows
  std::vector<std::string> disks_to_kick;
};

// The pieces of arrears and spend limits that the planning here and the enforcement a floor
// up (policy/account_enforcement.cpp) share.
Result<std::vector<std::string>> users_of_account(store::Database& db, const std::string& account_id);
SysTime release_due(const Account& account, const config::Config& config);  // needs arrears_since
SysTime disks_due(const Account& account, const config::Config& config);
// An instance's compute charges if its meters were settled at `t`.
std::int64_t compute_total_at(const std::vector<Meter>& meters, SysTime t);
// Whether the "runs out" warning already sent still names `zero` (within 5 minutes).
bool stop_warning_current(const Account& account, SysTime zero);
// 80 % of a spend limit, rounded up: when its warning is sent.
std::int64_t spend_warning_level(std::int64_t limit);
struct SpendLimited {
  instances::Instance instance;
  std::vector<Meter> meters;
};
// The users' running instances that have a spend limit, with their meters.
Result<std::vector<SpendLimited>> spend_limited_instances(store::Database& db, const std::vector<std::string>& users);

}  // namespace gpucloud::billing
