#include "policy/account_enforcement.h"

#include <algorithm>

#include "billing/arrears.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/subscriptions.h"
#include "core/fault_points.h"
#include "disks/disk_actions.h"
#include "events/events.h"
#include "instances/actions.h"
#include "instances/transition.h"

namespace gpucloud::policy {

namespace {

using std::chrono::hours;
using billing::kRenewBefore;

constexpr auto kDay = hours(24);
constexpr auto kStopWarning = hours(1);  // how long before the projected zero the user is warned

// The platform acts on the owner's behalf (their own resources, their own names).
instances::Actor on_behalf_of(const std::string& user) { return instances::Actor{user, false}; }

Status set_bits(store::Database& db, const billing::Account& a, int bits) {
  return db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned | ? WHERE id = ?", {bits, a.id});
}

Status warn(store::Database& db, const billing::Account& a, const std::string& user, const std::string& step, SysTime at,
            const std::string& message, SysTime now) {
  return events::record(db, now, "billing.arrears_warning", a.id, user, message,
                        {{"step", step}, {"at", format_rfc3339(at)}, {"balance", a.balance}});
}

}  // namespace

Status enforce_subscriptions(store::Database& db, const std::vector<std::string>& users, SysTime now,
                             std::vector<std::string>& kicks) {
  auto subs = billing::subscribed_instances(db, users);
  if (!subs) return fail(subs.error());
  for (const auto& i : *subs) {
    const SysTime end = *i.expires_at;
    if (now < end - kRenewBefore) continue;
    if (i.renewal_tried_for != i.expires_at || now >= end) {
      // A renewal: 24 h before the end, and once more at the end.
      auto price = billing::subscription_price(db, i.gpu_model, i.gpu_count, i.billing_mode);
      if (!price) return fail(price.error());
      auto account = billing::account_of_user(db, i.owner);
      if (!account) return fail(account.error());
      instances::Instance next = i;
      next.renewal_tried_for = i.expires_at;
      const bool renews = i.auto_renew && account->balance >= *price && !account->arrears_since;
      if (renews) {
        if (auto s = billing::pay_subscription(db, i, *price, "renewal of the", now); !s) return s;
        auto new_end = billing::next_term_end(db, i, end);
        if (!new_end) return fail(new_end.error());
        next.expires_at = *new_end;
        if (auto s = instances::update_desired(db, i, next); !s) return s;
        if (auto s = events::record(db, now, "billing.subscription_renewed", i.id, i.owner,
                                    "the " + i.billing_mode + " subscription of " + i.name + " runs on until " +
                                        format_rfc3339(*new_end),
                                    {{"expires_at", format_rfc3339(*new_end)}, {"price", *price}});
            !s)
          return s;
        continue;
      }
      if (now < end) {
        if (auto s = instances::update_desired(db, i, next); !s) return s;
        const std::string why = !i.auto_renew ? "auto_renew is off" : "the balance does not cover " + std::to_string(*price);
        if (auto s = events::record(db, now, "billing.subscription_expiring", i.id, i.owner,
                                    "the subscription of " + i.name + " ends at " + format_rfc3339(end) + " (" + why +
                                        "); it then becomes a stopped pay-as-you-go instance",
                                    {{"expires_at", format_rfc3339(end)}});
            !s)
          return s;
        continue;
      }
    }
    if (now < end) continue;
    // The term ended unrenewed: a stopped pay-as-you-go instance (its GPUs freed).
    instances::Instance next = i;
    next.billing_mode = "hourly";
    next.expires_at.reset();
    next.renewal_tried_for.reset();
    using S = instances::InstanceState;
    Status moved = ok();
    if (i.state == S::running || i.state == S::starting) {
      moved = instances::transition(db, i, next, instances::Transition{S::stopping, "subscription_expired", {}}, now);
      kicks.push_back(i.id);
    } else if (i.state == S::stopped || i.state == S::error) {
      moved = instances::transition(db, i, next, instances::Transition{i.state, "subscription_expired", {}}, now);
    } else {
      moved = instances::update_desired(db, i, next);
    }
    if (!moved) return moved;
    if (auto s = events::record(db, now, "billing.subscription_expired", i.id, i.owner,
                                "the subscription of " + i.name + " ended; it is pay-as-you-go now", {});
        !s)
      return s;
  }
  return ok();
}


Result<billing::ArrearsOutcome> enforce_account(store::Database& db, const config::Config& config,
                                                const std::string& account_id, SysTime now) {
  billing::ArrearsOutcome out;
  if (auto settled = billing::settle_open_meters(db, now, account_id); !settled) return fail(settled.error());
  auto account = billing::load_account(db, account_id);
  if (!account) return fail(account.error());
  const billing::Account& a = *account;
  auto users = billing::users_of_account(db, account_id);
  if (!users) return fail(users.error());
  const std::string first_user = users->empty() ? std::string() : users->front();
  // Subscriptions first: renewals take from the balance before arrears are judged.
  if (auto s = enforce_subscriptions(db, *users, now, out.instances_to_kick); !s) return fail(s.error());

  if (!a.arrears_since || a.balance > 0) {
    // Spend limits: an event at 80 %, a stop at the limit (the stop settles the run exactly).
    auto limited = billing::spend_limited_instances(db, *users);
    if (!limited) return fail(limited.error());
    for (const auto& l : *limited) {
      const std::int64_t total = billing::compute_total_at(l.meters, now), limit = *l.instance.spend_limit;
      if (total >= limit) {
        auto stopped = instances::stop_instance(db, on_behalf_of(l.instance.owner), l.instance.id, now, "spend_limit");
        if (!stopped) return fail(stopped.error());
        if (auto s = events::record(db, now, "instance.spend_limit", l.instance.id, l.instance.owner,
                                    "instance " + l.instance.name + " reached its spend limit and is stopping",
                                    {{"spend_limit", limit}, {"charged", total}});
            !s)
          return fail(s.error());
        out.instances_to_kick.push_back(l.instance.id);
      } else if (total >= billing::spend_warning_level(limit) && !l.instance.spend_warned) {
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
    auto zero = billing::projected_zero(db, account_id, now);
    if (!zero) return fail(zero.error());
    if (*zero && **zero - kStopWarning <= now) {
      if (billing::stop_warning_current(a, **zero)) return out;
      const bool again = (a.arrears_warned & billing::kStopWarned) != 0;
      if (auto s = warn(db, a, first_user, "stop", **zero,
                        std::string(again ? "spending changed: " : "") + "the balance runs out at " +
                            format_rfc3339(**zero) +
                            ": running pay-as-you-go instances will stop then; top up to keep them running",
                        now);
          !s)
        return fail(s.error());
      if (auto s = db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned | ?, stop_warned_zero = ? "
                          "WHERE id = ?",
                          {static_cast<int>(billing::kStopWarned), to_unix_micros(**zero), a.id});
          !s)
        return fail(s.error());
    } else if (a.arrears_warned & billing::kStopWarned) {
      if (auto s = db.run("UPDATE billing_accounts SET arrears_warned = arrears_warned & ?, stop_warned_zero = NULL "
                          "WHERE id = ?",
                          {static_cast<int>(~billing::kStopWarned), a.id});
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
      fault_point("policy.arrears.after_stop");  // the stop written, not committed
      out.instances_to_kick.push_back(i.id);
    }
  }
  const SysTime release_at = billing::release_due(a, config), disks_at = billing::disks_due(a, config);
  int bits = 0;
  if (!(a.arrears_warned & billing::kReleaseWarned) && now >= release_at - kDay) {
    if (auto s = warn(db, a, first_user, "release", release_at,
                      "in arrears since " + format_rfc3339(*a.arrears_since) + ": stopped instances are released at " +
                          format_rfc3339(release_at) + " unless the balance is topped up",
                      now);
        !s)
      return fail(s.error());
    bits |= billing::kReleaseWarned;
  }
  if (!(a.arrears_warned & billing::kReleased) && now >= release_at) {
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
    bits |= billing::kReleased;
  }
  if (!(a.arrears_warned & billing::kDisksWarned) && now >= disks_at - kDay) {
    if (auto s = warn(db, a, first_user, "delete_disks", disks_at,
                      "in arrears since " + format_rfc3339(*a.arrears_since) +
                          ": detached data disks are deleted (into the recycle bin) at " + format_rfc3339(disks_at) +
                          " unless the balance is topped up",
                      now);
        !s)
      return fail(s.error());
    bits |= billing::kDisksWarned;
  }
  if (!(a.arrears_warned & billing::kDisksDeleted) && now >= disks_at) {
    for (const auto& user : *users) {
      auto list = disks::list_disks(db, user, disks::DiskState::available);
      if (!list) return fail(list.error());
      for (const auto& d : *list) {
        auto deleted = disks::delete_disk(db, config, on_behalf_of(user), d.id, now);
        if (!deleted) return fail(deleted.error());
        out.disks_to_kick.push_back(d.id);
      }
    }
    bits |= billing::kDisksDeleted;
  }
  if (bits)
    if (auto s = set_bits(db, a, bits); !s) return fail(s.error());
  return out;
}

}  // namespace gpucloud::policy
