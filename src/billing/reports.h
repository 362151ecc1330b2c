#pragma once
// What the user and the operator see of billing (api.md "Billing"): usage by resource or by
// day, monthly statements, what bills while idle, the estimate before creating, and the
// operator's revenue by month and kind. Days and months are in `billing_timezone`. Amounts
// are integers in the smallest unit; a usage or statement amount is what was charged.
#include <cstdint>
#include <optional>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "core/timezone.h"
#include "store/database.h"

namespace gpucloud::billing {

// Items {resource, kind, quantity, unit, amount[, day]} from the account's charges in [since, until).
Result<boost::json::array> usage(store::Database& db, const std::string& account_id, SysTime since, SysTime until,
                                 bool by_day, const TimeZone& tz);

// "YYYY-MM" → its first instant and the next month's, in `tz`; invalid_argument otherwise.
Result<std::pair<SysTime, SysTime>> month_bounds(const std::string& month, const TimeZone& tz);
// {month, opening_balance, credits, charges: {kind: amount}, closing_balance, lines: [...]}:
// every entry of the month is a line, so the lines explain every unit charged.
Result<boost::json::object> statement(store::Database& db, const std::string& account_id, const std::string& month,
                                      const TimeZone& tz, const std::string& currency);

// Items {resource, name, kind, since, cost_per_day}: stopped instances' disks, detached data
// disks, snapshots older than `old_snapshot_days`, custom images no live instance uses.
Result<boost::json::array> idle(store::Database& db, const std::string& user_id, SysTime now, int old_snapshot_days = 7);

// What an instance would cost: {per_hour, per_day, per_week, per_month, upfront, storage_per_day, currency}.
struct EstimateRequest {
  std::optional<std::string> gpu_model;
  int gpu_count = 0;
  std::string billing_mode = "hourly";
  std::int64_t system_disk_gib = 30;
  std::int64_t new_data_disk_gib = 0;  // the new data disks' total size
};
Result<boost::json::object> estimate(store::Database& db, const EstimateRequest& request, const std::string& currency);

// The operator's revenue summary for a month: charges by kind, subscriptions, credits, and
// `days`: the same by day (revenue_by_day).
Result<boost::json::object> revenue_summary(store::Database& db, const std::string& month, const TimeZone& tz,
                                            const std::string& currency);

// Every day of [since, until) in `tz` (local midnights; at most 366), oldest first:
// {day: "YYYY-MM-DD", charged (net of refunds; subscriptions included), by_kind: {kind:
// amount}, usage: {meter kind: seconds (compute) or GiB-hours (storage), net of refunds},
// refunds, received (credits), adjustments}. Days without entries are there with zeros, so
// the days' `charged` add up to the period's.
Result<boost::json::array> revenue_by_day(store::Database& db, SysTime since, SysTime until, const TimeZone& tz);

// The user's subscriptions (GET /billing/subscriptions): every instance of theirs with a
// subscription payment, active ones first (soonest to end first), then ended ones (expired
// into pay-as-you-go, or released), last paid first: {instance, name, instance_state,
// gpu_model, gpu_count, term (weekly|monthly), status (active|ended), started_at (the first
// running), expires_at and auto_renew (while active), payments, paid, refunded,
// first_paid_at, last_paid_at}.
Result<boost::json::array> subscriptions(store::Database& db, const std::string& user_id, SysTime now);

}  // namespace gpucloud::billing
