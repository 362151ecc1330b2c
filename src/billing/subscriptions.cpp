#include "billing/subscriptions.h"

#include "billing/affordability.h"
#include "billing/ledger.h"
#include "core/timezone.h"
#include "events/events.h"
#include "market/prices.h"
#include "store/meta.h"

namespace gpucloud::billing {

Result<std::vector<instances::Instance>> subscribed_instances(store::Database& db, const std::vector<std::string>& users) {
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

namespace {
constexpr auto kWeek = std::chrono::hours(24 * 7);

Result<TimeZone> billing_zone(store::Database& db) {
  auto zone = store::get_meta(db, "billing_timezone");
  if (!zone) return fail(zone.error());
  return TimeZone::load(zone->value_or("UTC"));
}

// The k-th term boundary from the anchor: anchor + k weeks, or k calendar months in
// billing_timezone, each counted from the anchor (so the anchor's day is kept).
SysTime boundary(const TimeZone& tz, SysTime anchor, std::int64_t k, const std::string& mode) {
  if (mode == "weekly") return anchor + kWeek * k;
  return tz.add_months(anchor, static_cast<int>(k));
}
}  // namespace

Result<SysTime> term_end(store::Database& db, SysTime start, const std::string& mode) {
  if (mode == "weekly") return start + kWeek;
  auto tz = billing_zone(db);
  if (!tz) return fail(tz.error());
  return tz->add_months(start, 1);
}

Result<SysTime> next_term_end(store::Database& db, const instances::Instance& i, SysTime end) {
  if (!i.term_anchor || *i.term_anchor >= end) return term_end(db, end, i.billing_mode);
  auto tz = billing_zone(db);
  if (!tz) return fail(tz.error());
  // Terms are contiguous from the anchor: the first boundary after `end`.
  const auto elapsed = std::chrono::duration_cast<std::chrono::hours>(end - *i.term_anchor).count();
  std::int64_t k = i.billing_mode == "weekly" ? elapsed / (24 * 7) : elapsed / (24 * 31);
  while (boundary(*tz, *i.term_anchor, k, i.billing_mode) <= end) ++k;
  return boundary(*tz, *i.term_anchor, k, i.billing_mode);
}

Result<std::int64_t> refund_subscription(store::Database& db, const instances::Instance& i, SysTime now,
                                         const std::string& why) {
  if (i.billing_mode == "hourly") return std::int64_t{0};
  auto account = account_of_user(db, i.owner);
  if (!account) return fail(account.error());
  auto paid = db.all("SELECT -amount FROM ledger_entries WHERE account_id = ? AND resource = ? AND kind = 'subscription' "
                     "ORDER BY seq",
                     {account->id, i.id});
  if (!paid) return fail(paid.error());
  auto refunded = db.one("SELECT COALESCE(SUM(amount), 0) FROM ledger_entries WHERE account_id = ? AND resource = ? "
                         "AND kind = 'refund' AND resource_kind = 'subscription'",
                         {account->id, i.id});
  if (!refunded) return fail(refunded.error());
  std::int64_t owed = 0;
  const std::int64_t terms = static_cast<std::int64_t>(paid->size());
  if (!i.expires_at || !i.term_anchor) {
    // It never reached `running`: no term began, everything paid goes back.
    for (const auto& p : *paid) owed += p.int64(0);
  } else {
    auto tz = billing_zone(db);
    if (!tz) return fail(tz.error());
    // Payment j paid for the j-th term [B(j-1), B(j)] from the anchor; the last ends at
    // expires_at. Each term's unused part goes back pro rata by second; the used part is
    // charged floored, so rounding never favours the platform.
    for (std::int64_t j = 0; j < terms; ++j) {
      const std::int64_t price = (*paid)[static_cast<std::size_t>(j)].int64(0);
      const SysTime start = boundary(*tz, *i.term_anchor, j, i.billing_mode);
      const SysTime end = boundary(*tz, *i.term_anchor, j + 1, i.billing_mode);
      if (now >= end) continue;
      const auto length = std::chrono::duration_cast<std::chrono::seconds>(end - start).count();
      const auto used = now <= start ? 0 : std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      if (length <= 0) continue;
      const __int128 charged = static_cast<__int128>(price) * used / length;
      owed += price - static_cast<std::int64_t>(charged);
    }
  }
  owed -= (*refunded)->int64(0);
  if (owed <= 0) return std::int64_t{0};
  NewEntry entry{EntryKind::refund, owed, i.owner, i.id, std::string("subscription"), 0,
                 "refund of the " + i.billing_mode + " subscription of " + i.name + ": " + why};
  if (auto e = post_entry(db, account->id, entry, now); !e) return fail(e.error());
  return owed;
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
  auto subs = subscribed_instances(db, users);
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

}  // namespace gpucloud::billing
