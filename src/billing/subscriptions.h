#pragma once
// Subscriptions (spec "Billing"): weekly or monthly, paid up front at creation, running until
// expires_at (a week, or a calendar month in billing_timezone, from the first `running`); the
// GPUs stay reserved while stopped inside the term. Renewal at the price current then is tried
// 24 h before the end (and at the end) when auto_renew is on and the balance covers it;
// otherwise at the end it becomes a stopped pay-as-you-go instance. Terms are counted from
// the anchor (the first running), so a monthly one keeps its day. What was paid comes back
// in full when the instance never ran (a failed create), and pro rata by second for the
// unused part of its terms when it is released early (docs/billing.md). Arrears never touch
// a paid term.
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"
#include "instances/instance_record.h"
#include "store/database.h"

namespace gpucloud::billing {

// The whole price of one term of `mode` ("weekly" | "monthly") at today's prices.
Result<std::int64_t> subscription_price(store::Database& db, const std::optional<std::string>& gpu_model, int gpu_count,
                                        const std::string& mode);
// The end of a term that starts at `start` (the store's meta `billing_timezone` for months).
Result<SysTime> term_end(store::Database& db, SysTime start, const std::string& mode);
// The end of the term after the one ending at `end`: counted from the instance's anchor.
Result<SysTime> next_term_end(store::Database& db, const instances::Instance& instance, SysTime end);
// Gives back what the instance's paid terms have not used at `now` (everything when it never
// ran), less what was refunded before, as one `refund` entry (resource_kind "subscription").
// Returns the amount refunded (0: nothing was owed).
Result<std::int64_t> refund_subscription(store::Database& db, const instances::Instance& instance, SysTime now,
                                         const std::string& why);
// The up-front payment, as a `subscription` ledger entry of the owner's account.
Status pay_subscription(store::Database& db, const instances::Instance& instance, std::int64_t price,
                        const std::string& what, SysTime now);

// When the users' subscriptions next need enforce_subscriptions (renewal tries, expiries).
Result<std::optional<SysTime>> next_subscription_check(store::Database& db, const std::vector<std::string>& users,
                                                       SysTime now);
// The users' live subscriptions with a term (weekly or monthly, expires_at set).
Result<std::vector<instances::Instance>> subscribed_instances(store::Database& db, const std::vector<std::string>& users);
// How long before a term's end its renewal is first tried.
constexpr auto kRenewBefore = std::chrono::hours(24);

}  // namespace gpucloud::billing
