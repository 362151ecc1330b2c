#include "billing/arrears.h"

#include <algorithm>
#include <cmath>

#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/subscriptions.h"
#include "events/events.h"
#include "instances/instance_record.h"

namespace gpucloud::billing {

namespace {

using std::chrono::hours;

constexpr auto kDay = hours(24);
constexpr auto kStopWarning = hours(1);  // how long before the projected zero the user is warned

// When the instance's compute charges reach `target`, from its open compute meter.
std::optional<SysTime> reaches(const std::vector<Meter>& meters, std::int64_t target, SysTime now) {
  if (compute_total_at(meters, now) >= target) return now;
  for (const auto& m : meters) {
    if (!is_compute(m.kind) || !m.open_since || m.rate <= 0) continue;
    std::int64_t others = 0;
    for (const auto& o : meters)
      if (is_compute(o.kind) && o.id != m.id) others += std::max(o.charged, accrued_at(o, now) / o.divisor);
    const std::int64_t needed = (target - others) * m.divisor - m.accrued;  // accrual still to come
    const std::int64_t secs = (needed + m.rate - 1) / m.rate;
    return *m.open_since + std::chrono::seconds(std::max<std::int64_t>(0, secs));
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> users_of_account(store::Database& db, const std::string& account_id) {
  auto rows = db.all("SELECT id FROM users WHERE billing_account = ? ORDER BY id", {account_id});
  if (!rows) return fail(rows.error());
  std::vector<std::string> out;
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

SysTime release_due(const Account& a, const config::Config& c) {
  return *a.arrears_since + std::chrono::hours(24) * c.policy.arrears_release_instances_after_days;
}
SysTime disks_due(const Account& a, const config::Config& c) {
  return *a.arrears_since + std::chrono::hours(24) * c.policy.arrears_delete_disks_after_days;
}

std::int64_t compute_total_at(const std::vector<Meter>& meters, SysTime t) {
  std::int64_t total = 0;
  for (const auto& m : meters)
    if (is_compute(m.kind)) total += std::max(m.charged, accrued_at(m, t) / m.divisor);
  return total;
}

bool stop_warning_current(const Account& a, SysTime zero) {
  constexpr auto kStaleWarning = std::chrono::minutes(5);
  if (!(a.arrears_warned & kStopWarned) || !a.stop_warned_zero) return false;
  const auto moved = zero > *a.stop_warned_zero ? zero - *a.stop_warned_zero : *a.stop_warned_zero - zero;
  return moved < kStaleWarning;
}

std::int64_t spend_warning_level(std::int64_t limit) { return (limit * 8 + 9) / 10; }  // 80 %, rounded up

Result<std::vector<SpendLimited>> spend_limited_instances(store::Database& db, const std::vector<std::string>& users) {
  std::vector<SpendLimited> out;
  for (const auto& user : users) {
    auto running = instances::list_instances(db, user, instances::InstanceState::running);
    if (!running) return fail(running.error());
    for (auto& i : *running) {
      if (!i.spend_limit) continue;
      auto meters = meters_of_resource(db, i.id);
      if (!meters) return fail(meters.error());
      out.push_back(SpendLimited{std::move(i), std::move(*meters)});
    }
  }
  return out;
}

Result<std::optional<SysTime>> projected_at_or_below(store::Database& db, const std::string& account_id,
                                                     std::int64_t level, SysTime now) {
  auto account = load_account(db, account_id);
  if (!account) return fail(account.error());
  auto open = open_meters_of_account(db, account_id);
  if (!open) return fail(open.error());
  if (std::none_of(open->begin(), open->end(), [](const Meter& m) { return is_compute(m.kind); }))
    return std::optional<SysTime>{};
  std::int64_t pending = 0;
  double per_second = 0;  // a time estimate only; money stays integer
  for (const auto& m : *open) {
    pending += due_at(m, now);
    per_second += static_cast<double>(m.rate) / static_cast<double>(m.divisor);
  }
  const std::int64_t remaining = account->balance - pending - level;
  if (remaining <= 0) return std::optional<SysTime>{now};
  if (per_second <= 0) return std::optional<SysTime>{};
  const double seconds = std::min(std::ceil(static_cast<double>(remaining) / per_second), 3.0e8);  // ≤ ~10 years
  return std::optional<SysTime>{now + std::chrono::seconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(seconds)))};
}

Result<std::optional<SysTime>> projected_zero(store::Database& db, const std::string& account_id, SysTime now) {
  return projected_at_or_below(db, account_id, 0, now);
}

Result<std::optional<SysTime>> next_arrears_check(store::Database& db, const config::Config& config,
                                                  const std::string& account_id, SysTime now) {
  auto account = load_account(db, account_id);
  if (!account) return fail(account.error());
  const Account& a = *account;
  std::optional<SysTime> next;
  auto consider = [&](SysTime t) { next = next ? std::min(*next, t) : t; };
  auto users = users_of_account(db, account_id);
  if (!users) return fail(users.error());
  auto subs = next_subscription_check(db, *users, now);
  if (!subs) return fail(subs.error());
  if (*subs) consider(**subs);
  if (a.arrears_since) {
    if (a.balance <= 0) {
      // Running pay-as-you-go instances stop now; then the graces' warnings and steps.
      auto open = open_meters_of_account(db, account_id);
      if (!open) return fail(open.error());
      if (std::any_of(open->begin(), open->end(), [](const Meter& m) { return is_compute(m.kind); })) consider(now);
      if (!(a.arrears_warned & kReleaseWarned)) consider(release_due(a, config) - kDay);
      if (!(a.arrears_warned & kReleased)) consider(release_due(a, config));
      if (!(a.arrears_warned & kDisksWarned)) consider(disks_due(a, config) - kDay);
      if (!(a.arrears_warned & kDisksDeleted)) consider(disks_due(a, config));
    }
    return next ? std::optional<SysTime>{std::max(*next, now)} : next;
  }
  // Spend limits: the 80 % event and the stop, each at the second the charges reach it.
  auto limited = spend_limited_instances(db, *users);
  if (!limited) return fail(limited.error());
  for (const auto& l : *limited) {
    if (!l.instance.spend_warned)
      if (auto t = reaches(l.meters, spend_warning_level(*l.instance.spend_limit), now)) consider(*t);
    if (auto t = reaches(l.meters, *l.instance.spend_limit, now)) consider(*t);
  }
  auto zero = projected_zero(db, account_id, now);
  if (!zero) return fail(zero.error());
  if (*zero) {
    // The warning an hour before (again when spending moved the moment), then the zero itself.
    if (**zero - kStopWarning > now) consider(**zero - kStopWarning);
    else consider(stop_warning_current(a, **zero) ? **zero : now);
  }
  // The balance alert crosses on the live balance (net of what has accrued): the account is
  // settled at that second, and the crossing notifies as any balance change does.
  if (a.alert_threshold && a.alert_armed) {
    auto below = projected_at_or_below(db, account_id, *a.alert_threshold - 1, now);
    if (!below) return fail(below.error());
    if (*below) consider(**below);
  }
  return next ? std::optional<SysTime>{std::max(*next, now)} : next;
}

}  // namespace gpucloud::billing
