#include "billing/arrears.h"

#include <algorithm>
#include <cmath>

#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/subscriptions.h"
#include "disks/disk_actions.h"
#include "events/events.h"
#include "instances/actions.h"

namespace gpucloud::billing {

namespace {

using std::chrono::hours;

constexpr auto kDay = hours(24);
constexpr auto kStopWarning = hours(1);  // how long before the projected zero the user is warned

// The platform acts on the owner's behalf (their own resources, their own names).
instances::Actor on_behalf_of(const std::string& user) { return instances::Actor{user, false}; }

Result<std::vector<std::string>> users_of(store::Database& db, const std::string& account_id) {
  auto rows = db.all("SELECT id FROM users WHERE billing_account = ? ORDER BY id", {account_id});
  if (!rows) return fail(rows.error());
  std::vector<std::string> out;
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

SysTime release_due(const Account& a, const config::Config& c) {
  return *a.arrears_since + kDay * c.policy.arrears_release_instances_after_days;
}
SysTime disks_due(const Account& a, const config::Config& c) {
  return *a.arrears_since + kDay * c.policy.arrears_delete_disks_after_days;
}

Status set_bits(store::Database& db, const Account& a, int bits) {
  return db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned | ? WHERE id = ?", {bits, a.id});
}

Status warn(store::Database& db, const Account& a, const std::string& user, const std::string& step, SysTime at,
            const std::string& message, SysTime now) {
  return events::record(db, now, "billing.arrears_warning", a.id, user, message,
                        {{"step", step}, {"at", format_rfc3339(at)}, {"balance", a.balance}});
}

// An instance's compute charges if its meters were settled at `t`.
std::int64_t compute_total_at(const std::vector<Meter>& meters, SysTime t) {
  std::int64_t total = 0;
  for (const auto& m : meters)
    if (is_compute(m.kind)) total += std::max(m.charged, accrued_at(m, t) / m.divisor);
  return total;
}

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

// A "runs out" warning names a moment; once spending moves the projection by this much, the
// warning is stale and the user is told the new one.
constexpr auto kStaleWarning = std::chrono::minutes(5);
bool stop_warning_current(const Account& a, SysTime zero) {
  if (!(a.arrears_warned & kStopWarned) || !a.stop_warned_zero) return false;
  const auto moved = zero > *a.stop_warned_zero ? zero - *a.stop_warned_zero : *a.stop_warned_zero - zero;
  return moved < kStaleWarning;
}

std::int64_t warning_level(std::int64_t limit) { return (limit * 8 + 9) / 10; }  // 80 %, rounded up

struct Limited {
  instances::Instance instance;
  std::vector<Meter> meters;
};
// The account's running instances that have a spend limit, with their meters.
Result<std::vector<Limited>> limited_instances(store::Database& db, const std::vector<std::string>& users) {
  std::vector<Limited> out;
  for (const auto& user : users) {
    auto running = instances::list_instances(db, user, instances::InstanceState::running);
    if (!running) return fail(running.error());
    for (auto& i : *running) {
      if (!i.spend_limit) continue;
      auto meters = meters_of_resource(db, i.id);
      if (!meters) return fail(meters.error());
      out.push_back(Limited{std::move(i), std::move(*meters)});
    }
  }
  return out;
}

}  // namespace

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
  auto users = users_of(db, account_id);
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
  auto limited = limited_instances(db, *users);
  if (!limited) return fail(limited.error());
  for (const auto& l : *limited) {
    if (!l.instance.spend_warned)
      if (auto t = reaches(l.meters, warning_level(*l.instance.spend_limit), now)) consider(*t);
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

Result<ArrearsOutcome> enforce_arrears(store::Database& db, const config::Config& config, const std::string& account_id,
                                       SysTime now) {
  ArrearsOutcome out;
  if (auto settled = settle_open_meters(db, now, account_id); !settled) return fail(settled.error());
  auto account = load_account(db, account_id);
  if (!account) return fail(account.error());
  const Account& a = *account;
  auto users = users_of(db, account_id);
  if (!users) return fail(users.error());
  const std::string first_user = users->empty() ? std::string() : users->front();
  // Subscriptions first: renewals take from the balance before arrears are judged.
  if (auto s = enforce_subscriptions(db, *users, now, out.instances_to_kick); !s) return fail(s.error());

  if (!a.arrears_since || a.balance > 0) {
    // Spend limits: an event at 80 %, a stop at the limit (the stop settles the run exactly).
    auto limited = limited_instances(db, *users);
    if (!limited) return fail(limited.error());
    for (const auto& l : *limited) {
      const std::int64_t total = compute_total_at(l.meters, now), limit = *l.instance.spend_limit;
      if (total >= limit) {
        auto stopped = instances::stop_instance(db, on_behalf_of(l.instance.owner), l.instance.id, now, "spend_limit");
        if (!stopped) return fail(stopped.error());
        if (auto s = events::record(db, now, "instance.spend_limit", l.instance.id, l.instance.owner,
                                    "instance " + l.instance.name + " reached its spend limit and is stopping",
                                    {{"spend_limit", limit}, {"charged", total}});
            !s)
          return fail(s.error());
        out.instances_to_kick.push_back(l.instance.id);
      } else if (total >= warning_level(limit) && !l.instance.spend_warned) {
        if (auto s = instances::mark_spend_warned(db, l.instance.id); !s) return fail(s.error());
        if (auto s = events::record(db, now, "instance.spend_limit_warning", l.instance.id, l.instance.owner,
                                    "instance " + l.instance.name + " has used 80 % of its spend limit",
                                    {{"spend_limit", limit}, {"charged", total}});
            !s)
          return fail(s.error());
      }
    }
    // The warning before the projected zero; warned again when spending moves that moment,
    // and afresh once the projection leaves the warning's hour (spending fell).
    auto zero = projected_zero(db, account_id, now);
    if (!zero) return fail(zero.error());
    if (*zero && **zero - kStopWarning <= now) {
      if (stop_warning_current(a, **zero)) return out;
      const bool again = (a.arrears_warned & kStopWarned) != 0;
      if (auto s = warn(db, a, first_user, "stop", **zero,
                        std::string(again ? "spending changed: " : "") + "the balance runs out at " +
                            format_rfc3339(**zero) +
                            ": running pay-as-you-go instances will stop then; top up to keep them running",
                        now);
          !s)
        return fail(s.error());
      if (auto s = db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned | ?, stop_warned_zero = ? "
                          "WHERE id = ?",
                          {static_cast<int>(kStopWarned), to_unix_micros(**zero), a.id});
          !s)
        return fail(s.error());
    } else if (a.arrears_warned & kStopWarned) {
      if (auto s = db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned & ?, stop_warned_zero = NULL "
                          "WHERE id = ?",
                          {static_cast<int>(~kStopWarned), a.id});
          !s)
        return fail(s.error());
    }
    return out;
  }

  // In arrears: running pay-as-you-go instances stop (a subscription's paid term runs on).
  for (const auto& user : *users) {
    auto running = instances::list_instances(db, user, instances::InstanceState::running);
    if (!running) return fail(running.error());
    for (const auto& i : *running) {
      if (i.billing_mode != "hourly") continue;
      auto stopped = instances::stop_instance(db, on_behalf_of(user), i.id, now, "arrears");
      if (!stopped) return fail(stopped.error());
      out.instances_to_kick.push_back(i.id);
    }
  }
  const SysTime release_at = release_due(a, config), disks_at = disks_due(a, config);
  int bits = 0;
  if (!(a.arrears_warned & kReleaseWarned) && now >= release_at - kDay) {
    if (auto s = warn(db, a, first_user, "release", release_at,
                      "in arrears since " + format_rfc3339(*a.arrears_since) + ": stopped instances are released at " +
                          format_rfc3339(release_at) + " unless the balance is topped up",
                      now);
        !s)
      return fail(s.error());
    bits |= kReleaseWarned;
  }
  if (!(a.arrears_warned & kReleased) && now >= release_at) {
    for (const auto& user : *users)
      // `stopping`: the stop at zero may still be under way in the engine.
      for (auto state : {instances::InstanceState::stopped, instances::InstanceState::error,
                         instances::InstanceState::stopping}) {
        auto list = instances::list_instances(db, user, state);
        if (!list) return fail(list.error());
        for (const auto& i : *list) {
          if (i.billing_mode != "hourly") continue;  // a subscription in its paid term is never touched
          auto released = instances::release_instance(db, on_behalf_of(user), i.id, now);
          if (!released) return fail(released.error());
          out.instances_to_kick.push_back(i.id);
        }
      }
    bits |= kReleased;
  }
  if (!(a.arrears_warned & kDisksWarned) && now >= disks_at - kDay) {
    if (auto s = warn(db, a, first_user, "delete_disks", disks_at,
                      "in arrears since " + format_rfc3339(*a.arrears_since) +
                          ": detached data disks are deleted (into the recycle bin) at " + format_rfc3339(disks_at) +
                          " unless the balance is topped up",
                      now);
        !s)
      return fail(s.error());
    bits |= kDisksWarned;
  }
  if (!(a.arrears_warned & kDisksDeleted) && now >= disks_at) {
    for (const auto& user : *users) {
      auto list = disks::list_disks(db, user, disks::DiskState::available);
      if (!list) return fail(list.error());
      for (const auto& d : *list) {
        auto deleted = disks::delete_disk(db, config, on_behalf_of(user), d.id, now);
        if (!deleted) return fail(deleted.error());
        out.disks_to_kick.push_back(d.id);
      }
    }
    bits |= kDisksDeleted;
  }
  if (bits)
    if (auto s = set_bits(db, a, bits); !s) return fail(s.error());
  return out;
}

}  // namespace gpucloud::billing
