#include "billing/subscriptions.h"

#include "billing/affordability.h"
#include "billing/ledger.h"
#include "core/timezone.h"
#include "events/events.h"
#include "instances/transition.h"
#include "market/prices.h"
#include "store/meta.h"

namespace gpucloud::billing {

namespace {

constexpr auto kRenewBefore = std::chrono::hours(24);

Result<std::vector<instances::Instance>> subscribed(store::Database& db, const std::vector<std::string>& users) {
  std::vector<instances::Instance> out;
  for (const auto& u : users) {
    auto list = instances::list_instances(db, u, std::nullopt);
    if (!list) return fail(list.error());
    for (auto& i : *list)
      if (i.billing_mode != "hourly" && i.expires_at && i.state != instances::InstanceState::releasing)
        out.push_back(std::move(i));
  }
  return out;
}

}  // namespace

Result<std::int64_t> subscription_price(store::Database& db, const std::optional<std::string>& model, int gpus,
                                        const std::string& mode) {
  if (!model || gpus <= 0)
    return fail(ErrorCode::invalid_argument, "billing.mode: subscriptions are for GPU instances; a no-GPU one is hourly");
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  auto it = prices->gpus.find(*model);
  if (it == prices->gpus.end()) return fail(ErrorCode::invalid_argument, "gpu_model: no price for " + *model);
  return (mode == "weekly" ? it->second.per_gpu_week : it->second.per_gpu_month) * gpus;
}

Result<SysTime> term_end(store::Database& db, SysTime start, const std::string& mode) {
  if (mode == "weekly") return start + std::chrono::hours(24 * 7);
  auto zone = store::get_meta(db, "billing_timezone");
  if (!zone) return fail(zone.error());
  auto tz = TimeZone::load(zone->value_or("UTC"));
  if (!tz) return fail(tz.error());
  return tz->add_months(start, 1);
}

Status pay_subscription(store::Database& db, const instances::Instance& i, std::int64_t price, const std::string& what,
                        SysTime now) {
  auto account = account_of_user(db, i.owner);
  if (!account) return fail(account.error());
  NewEntry entry{EntryKind::subscription, -price, i.owner, i.id, std::string("subscription"), 0,
                 what + " " + i.billing_mode + " subscription of " + i.name};
  if (auto e = post_entry(db, account->id, entry, now); !e) return fail(e.error());
  return ok();
}

Result<std::optional<SysTime>> next_subscription_check(store::Database& db, const std::vector<std::string>& users,
                                                       SysTime now) {
  auto subs = subscribed(db, users);
  if (!subs) return fail(subs.error());
  std::optional<SysTime> next;
  auto consider = [&](SysTime t) { next = next ? std::min(*next, t) : t; };
  for (const auto& i : *subs) {
    if (i.renewal_tried_for != i.expires_at) consider(*i.expires_at - kRenewBefore);
    consider(*i.expires_at);
  }
  if (next && *next < now) next = now;
  return next;
}

Status enforce_subscriptions(store::Database& db, const std::vector<std::string>& users, SysTime now,
                             std::vector<std::string>& kicks) {
  auto subs = subscribed(db, users);
  if (!subs) return fail(subs.error());
  for (const auto& i : *subs) {
    const SysTime end = *i.expires_at;
    if (now < end - kRenewBefore) continue;
    if (i.renewal_tried_for != i.expires_at || now >= end) {
      // A renewal: 24 h before the end, and once more at the end.
      auto price = subscription_price(db, i.gpu_model, i.gpu_count, i.billing_mode);
      if (!price) return fail(price.error());
      auto account = account_of_user(db, i.owner);
      if (!account) return fail(account.error());
      instances::Instance next = i;
      next.renewal_tried_for = i.expires_at;
      const bool renews = i.auto_renew && account->balance >= *price && !account->arrears_since;
      if (renews) {
        if (auto s = pay_subscription(db, i, *price, "renewal of the", now); !s) return s;
        auto new_end = term_end(db, end, i.billing_mode);
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

}  // namespace gpucloud::billing
