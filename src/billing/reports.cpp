#include "billing/reports.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "billing/ledger.h"
#include "billing/meters.h"
#include "instances/instance_record.h"
#include "market/prices.h"

namespace gpucloud::billing {
namespace json = boost::json;

namespace {

std::string day_text(const TimeZone::Date& d) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", d.year, d.month, d.day);
  return buf;
}

bool is_storage_kind(std::string_view kind) {
  return kind == "system_disk" || kind == "data_disk" || kind == "snapshot" || kind == "image";
}

// Compute quantities are seconds; storage ones GiB-seconds, shown as GiB-hours.
json::value quantity_json(std::string_view kind, std::int64_t quantity) {
  if (is_storage_kind(kind)) return static_cast<double>(quantity) / 3600.0;
  return quantity;
}

int days_in_month(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Per day, in the smallest unit, of a meter's current rate (floored: an estimate).
std::int64_t per_day(const Meter& m) { return m.rate * 24 * 3600 / m.divisor; }

}  // namespace

Result<json::array> usage(store::Database& db, const std::string& account_id, SysTime since, SysTime until, bool by_day,
                          const TimeZone& tz) {
  auto entries = entries_between(db, account_id, since, until);
  if (!entries) return fail(entries.error());
  // (day, resource, kind) → (quantity, amount); day is "" when grouped by resource.
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::int64_t, std::int64_t>> groups;
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::string>> notes;
  for (const auto& e : *entries) {
    // Charges resource by resource (an hourly entry's lines); a refund on a resource (charged
    // past a run's end) nets against its charges.
    const std::string day = by_day ? day_text(tz.local_date(e.time)) : std::string();
    for (const auto& line : lines_of(e)) {
      auto& g = groups[{day, line.resource, line.resource_kind}];
      g.first += line.quantity;
      g.second += -line.amount;
    }
    // A zero charge on a resource explains time that was not charged (a lost GPU).
    if (e.amount == 0 && e.resource && !e.description.empty())
      notes[{day, *e.resource, e.resource_kind.value_or("")}].push_back(e.description);
  }
  json::array items;
  for (const auto& [key, value] : groups) {
    const auto& [day, resource, kind] = key;
    json::object o{{"resource", resource},
                   {"kind", kind},
                   {"quantity", quantity_json(kind, value.first)},
                   {"unit", is_storage_kind(kind) ? "gib_hour" : "second"},
                   {"amount", value.second}};
    if (by_day) o["day"] = day;
    if (auto n = notes.find(key); n != notes.end()) {
      json::array why;
      for (const auto& text : n->second) why.push_back(json::value(text));
      o["notes"] = std::move(why);
    }
    items.push_back(std::move(o));
  }
  return items;
}

Result<std::pair<SysTime, SysTime>> month_bounds(const std::string& month, const TimeZone& tz) {
  int y = 0, m = 0;
  char tail = 0;
  if (month.size() != 7 || month[4] != '-' || std::sscanf(month.c_str(), "%4d-%2d%c", &y, &m, &tail) != 2 || m < 1 ||
      m > 12 || y < 1970 || y > 9999)
    return fail(ErrorCode::invalid_argument, "month: must be YYYY-MM, like 2026-12");
  const SysTime start = tz.start_of({y, m, 1});
  const SysTime end = tz.start_of({m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1});
  return std::pair{start, end};
}

Result<json::object> statement(store::Database& db, const std::string& account_id, const std::string& month,
                               const TimeZone& tz, const std::string& currency) {
  auto bounds = month_bounds(month, tz);
  if (!bounds) return fail(bounds.error());
  auto opening = balance_before(db, account_id, bounds->first);
  if (!opening) return fail(opening.error());
  auto entries = entries_between(db, account_id, bounds->first, bounds->second);
  if (!entries) return fail(entries.error());
  std::int64_t credits = 0, refunds = 0, closing = *opening;
  std::map<std::string, std::int64_t> charges;
  json::array lines;
  for (const auto& e : *entries) {
    closing = e.balance_after;
    if (e.kind == EntryKind::refund) {
      // A refund reduces the charges it refunds (compute past a run's end, a subscription's
      // unused term): it is not money the user paid in.
      charges[e.resource_kind.value_or("charge")] -= e.amount;
      refunds += e.amount;
    } else if (e.amount > 0) {
      credits += e.amount;
    } else {
      charges[e.kind == EntryKind::charge ? e.resource_kind.value_or("charge") : std::string(to_string(e.kind))] +=
          -e.amount;
    }
    json::object line = entry_json(e);
    line["quantity"] = quantity_json(e.resource_kind.value_or(""), e.quantity);
    if (auto* shares = line.if_contains("lines"))
      for (auto& share : shares->as_array())
        share.as_object()["quantity"] = quantity_json(e.resource_kind.value_or(""), share.as_object()["quantity"].as_int64());
    lines.push_back(std::move(line));
  }
  json::object by_kind;
  std::int64_t total = 0;
  for (const auto& [kind, amount] : charges) {
    by_kind[kind] = amount;
    total += amount;
  }
  return json::object{{"month", month},
                      {"timezone", tz.name()},
                      {"currency", currency},
                      {"opening_balance", *opening},
                      {"credits", credits},
                      {"charges", std::move(by_kind)},
                      {"charges_total", total},
                      {"refunds", refunds},
                      {"closing_balance", closing},
                      {"lines", std::move(lines)}};
}

Result<json::array> idle(store::Database& db, const std::string& user_id, SysTime now, int old_snapshot_days) {
  // Every open storage meter of the user, with what its resource is doing.
  auto rows = db.all(
      "SELECT m.resource, m.kind, m.rate, m.divisor, m.gib, "
      "  i.name, i.state, i.stopped_at, "
      "  d.name, d.state, d.created_at, di.state, di.stopped_at, "
      "  s.name, s.created_at, "
      "  im.name, im.created_at, "
      "  (SELECT COUNT(*) FROM instances u WHERE u.image_id = m.resource AND u.state != 'released') "
      "FROM meters m "
      "LEFT JOIN instances i ON m.kind = 'system_disk' AND i.id = m.resource "
      "LEFT JOIN disks d ON m.kind = 'data_disk' AND d.id = m.resource "
      "LEFT JOIN instances di ON di.id = d.instance_id "
      "LEFT JOIN snapshots s ON m.kind = 'snapshot' AND s.id = m.resource "
      "LEFT JOIN images im ON m.kind = 'image' AND im.id = m.resource "
      "WHERE m.user_id = ? AND m.open_since IS NOT NULL AND m.kind IN ('system_disk', 'data_disk', 'snapshot', 'image') "
      "ORDER BY m.kind, m.resource",
      {user_id});
  if (!rows) return fail(rows.error());
  json::array items;
  auto add = [&](const store::Row& r, const std::string& name, const std::string& why, std::int64_t since_micros) {
    Meter m;
    m.rate = r.int64(2);
    m.divisor = r.int64(3);
    items.push_back(json::object{{"resource", r.text(0)},
                                 {"name", name},
                                 {"kind", r.text(1)},
                                 {"size_gib", r.int64(4)},
                                 {"why", why},
                                 {"since", format_rfc3339(from_unix_micros(since_micros))},
                                 {"cost_per_day", per_day(m)}});
  };
  const auto old_cutoff = to_unix_micros(now - std::chrono::hours(24) * old_snapshot_days);
  for (const auto& r : *rows) {
    const std::string kind = r.text(1);
    if (kind == "system_disk" && (r.text(6) == "stopped" || r.text(6) == "error"))
      add(r, r.text(5), "the instance is " + r.text(6), r.opt_int64(7).value_or(0));
    else if (kind == "data_disk" && r.text(9) == "available")
      add(r, r.text(8), "not attached to an instance", r.opt_int64(10).value_or(0));
    else if (kind == "data_disk" && r.text(9) == "attached" && (r.text(11) == "stopped" || r.text(11) == "error"))
      add(r, r.text(8), "its instance is " + r.text(11), r.opt_int64(12).value_or(0));
    else if (kind == "snapshot" && r.opt_int64(14).value_or(0) < old_cutoff)
      add(r, r.text(13), "older than " + std::to_string(old_snapshot_days) + " days", r.opt_int64(14).value_or(0));
    else if (kind == "image" && r.int64(17) == 0)
      add(r, r.text(15), "no instance uses it", r.opt_int64(16).value_or(0));
  }
  return items;
}

Result<json::object> estimate(store::Database& db, const EstimateRequest& q, const std::string& currency) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  std::int64_t per_hour = prices->no_gpu_per_hour, per_week = 0, per_month = 0;
  if (q.gpu_model && q.gpu_count > 0) {
    auto it = prices->gpus.find(*q.gpu_model);
    if (it == prices->gpus.end()) return fail(ErrorCode::invalid_argument, "gpu_model: no offer for " + *q.gpu_model);
    per_hour = it->second.per_gpu_hour * q.gpu_count;
    per_week = it->second.per_gpu_week * q.gpu_count;
    per_month = it->second.per_gpu_month * q.gpu_count;
  }
  const std::int64_t system_gib = std::max<std::int64_t>(0, q.system_disk_gib - prices->system_disk_free_gib);
  const std::int64_t storage_micros_per_hour =
      system_gib * prices->system_disk_per_gib_hour_micros + q.new_data_disk_gib * prices->data_disk_per_gib_hour_micros;
  std::int64_t upfront = 0;
  if (q.billing_mode == "weekly") upfront = per_week;
  if (q.billing_mode == "monthly") upfront = per_month;
  const bool subscription = q.billing_mode != "hourly";
  return json::object{{"currency", currency},
                      {"billing_mode", q.billing_mode},
                      {"price_per_hour", per_hour},
                      {"per_hour", subscription ? 0 : per_hour},
                      {"per_day", subscription ? 0 : per_hour * 24},
                      {"per_week", subscription ? 0 : per_hour * 24 * 7},
                      {"per_month", subscription ? 0 : per_hour * 24 * 30},
                      {"upfront", upfront},
                      {"subscription", json::object{{"per_week", per_week}, {"per_month", per_month}}},
                      {"storage_per_hour_micros", storage_micros_per_hour},
                      {"storage_per_day", storage_micros_per_hour * 24 / 1000000}};
}

namespace {
// What the users owed the platform at `t`: the sum of the negative balances (arrears) then.
Result<std::int64_t> arrears_at(store::Database& db, SysTime t) {
  auto row = db.one(
      "SELECT COALESCE(SUM(CASE WHEN e.balance_after < 0 THEN -e.balance_after ELSE 0 END), 0) FROM ledger_entries e "
      "WHERE e.seq = (SELECT MAX(l.seq) FROM ledger_entries l WHERE l.account_id = e.account_id AND l.time < ?) ",
      {to_unix_micros(t)});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}
}  // namespace

Result<json::object> revenue_summary(store::Database& db, const std::string& month, const TimeZone& tz,
                                     const std::string& currency) {
  auto bounds = month_bounds(month, tz);
  if (!bounds) return fail(bounds.error());
  auto rows = db.all(
      "SELECT kind, COALESCE(resource_kind, ''), SUM(amount), COUNT(*) FROM ledger_entries WHERE time >= ? AND time < ? "
      "GROUP BY kind, resource_kind ORDER BY kind, resource_kind",
      {to_unix_micros(bounds->first), to_unix_micros(bounds->second)});
  if (!rows) return fail(rows.error());
  // Apart: money received (credits), what was charged (net of refunds, by kind), the
  // operator's adjustments, and what users still owe (arrears). Revenue is what was charged
  // and paid for: charges less the growth of arrears over the month.
  json::object by_kind;
  std::int64_t charged = 0, received = 0, adjustments = 0, refunds = 0;
  auto add_charge = [&](const std::string& key, std::int64_t amount) {
    by_kind[key] = (by_kind.contains(key) ? by_kind[key].as_int64() : 0) + amount;
    charged += amount;
  };
  for (const auto& r : *rows) {
    const std::string kind = r.text(0), resource_kind = r.text(1);
    const std::int64_t sum = r.int64(2);
    if (kind == "charge") add_charge(resource_kind.empty() ? "charge" : resource_kind, -sum);
    else if (kind == "subscription") add_charge("subscription", -sum);
    else if (kind == "refund") {
      add_charge(resource_kind.empty() ? "charge" : resource_kind, -sum);
      refunds += sum;
    } else if (kind == "credit") received += sum;
    else if (kind == "adjustment") adjustments += sum;
  }
  auto arrears_start = arrears_at(db, bounds->first);
  if (!arrears_start) return fail(arrears_start.error());
  auto arrears_end = arrears_at(db, bounds->second);
  if (!arrears_end) return fail(arrears_end.error());
  const std::int64_t unpaid = *arrears_end - *arrears_start;
  auto days = revenue_by_day(db, bounds->first, bounds->second, tz);
  if (!days) return fail(days.error());
  return json::object{{"month", month},
                      {"timezone", tz.name()},
                      {"currency", currency},
                      {"revenue", charged - unpaid},
                      {"charged", charged},
                      {"by_kind", by_kind},
                      {"refunds", refunds},
                      {"received", received},
                      {"credits", received},
                      {"adjustments", adjustments},
                      {"arrears", *arrears_end},
                      {"arrears_change", unpaid},
                      {"days", std::move(*days)}};
}

Result<json::array> revenue_by_day(store::Database& db, SysTime since, SysTime until, const TimeZone& tz) {
  // The local midnights from `since`'s day to `until`: day i is [starts[i], starts[i+1]).
  std::vector<SysTime> starts;
  std::vector<std::string> names;
  for (TimeZone::Date d = tz.local_date(since);;) {
    const SysTime start = tz.start_of(d);
    if (start >= until) break;
    starts.push_back(start);
    names.push_back(day_text(d));
    if (starts.size() > 366) return fail(ErrorCode::invalid_argument, "by day: at most 366 days");
    const int len = days_in_month(d.year, d.month);
    d = d.day < len ? TimeZone::Date{d.year, d.month, d.day + 1}
                    : (d.month == 12 ? TimeZone::Date{d.year + 1, 1, 1} : TimeZone::Date{d.year, d.month + 1, 1});
  }
  struct Day {
    std::int64_t charged = 0, received = 0, refunds = 0, adjustments = 0;
    std::map<std::string, std::int64_t> by_kind, usage;
  };
  std::vector<Day> out(starts.size());
  if (!starts.empty()) {
    // One pass over the period's entries (portable SQL; the day is found here, in `tz`).
    auto s = db.each(
        "SELECT time, kind, COALESCE(resource_kind, ''), amount, quantity FROM ledger_entries WHERE time >= ? AND time < ?",
        {to_unix_micros(starts.front()), to_unix_micros(until)}, [&](const store::RowView& r) {
          const SysTime t = from_unix_micros(r.int64(0));
          auto at = std::upper_bound(starts.begin(), starts.end(), t);
          if (at == starts.begin()) return true;
          Day& day = out[static_cast<std::size_t>(at - starts.begin() - 1)];
          const std::string kind(r.text(1)), resource_kind(r.text(2));
          const std::int64_t amount = r.int64(3), quantity = r.int64(4);
          auto charge = [&](const std::string& key) {
            day.by_kind[key] += -amount;
            day.charged += -amount;
          };
          if (kind == "charge" || kind == "refund") {
            charge(resource_kind.empty() ? "charge" : resource_kind);
            if (kind == "refund") day.refunds += amount;
            // Refunds carry the quantity returned (negative); a subscription's none.
            if (!resource_kind.empty() && resource_kind != "subscription") day.usage[resource_kind] += quantity;
          } else if (kind == "subscription") {
            charge("subscription");
          } else if (kind == "credit") {
            day.received += amount;
          } else if (kind == "adjustment") {
            day.adjustments += amount;
          }
          return true;
        });
    if (!s) return fail(s.error());
  }
  json::array days;
  for (std::size_t i = 0; i < out.size(); ++i) {
    json::object by_kind, usage;
    for (const auto& [k, v] : out[i].by_kind) by_kind[k] = v;
    for (const auto& [k, v] : out[i].usage) usage[k] = quantity_json(k, v);
    days.push_back(json::object{{"day", names[i]},
                                {"charged", out[i].charged},
                                {"by_kind", std::move(by_kind)},
                                {"usage", std::move(usage)},
                                {"refunds", out[i].refunds},
                                {"received", out[i].received},
                                {"adjustments", out[i].adjustments}});
  }
  return days;
}

Result<json::array> subscriptions(store::Database& db, const std::string& user_id, SysTime now) {
  auto account = account_of_user(db, user_id);
  if (!account) return fail(account.error());
  struct Paid {
    std::int64_t paid = 0, refunded = 0, payments = 0;
    std::optional<SysTime> first_paid_at, last_paid_at;
    std::string last_description;
  };
  std::map<std::string, Paid> by_instance;
  // Payments (kind subscription) and their refunds (resource_kind subscription), per instance.
  auto s = db.each(
      "SELECT resource, kind, amount, time, description FROM ledger_entries WHERE account_id = ? AND user_id = ? "
      "AND resource IS NOT NULL "
      "AND (kind = 'subscription' OR (kind = 'refund' AND resource_kind = 'subscription')) ORDER BY seq",
      {account->id, user_id}, [&](const store::RowView& r) {
        Paid& p = by_instance[std::string(r.text(0))];
        const SysTime t = from_unix_micros(r.int64(3));
        if (r.text(1) == "subscription") {
          p.paid += -r.int64(2);
          ++p.payments;
          if (!p.first_paid_at) p.first_paid_at = t;
          p.last_paid_at = t;
          p.last_description = std::string(r.text(4));
        } else {
          p.refunded += r.int64(2);
        }
        return true;
      });
  if (!s) return fail(s.error());
  struct Item {
    instances::Instance instance;
    Paid paid;
    bool active = false;
  };
  std::vector<Item> items;
  for (const auto& [id, paid] : by_instance) {
    auto loaded = instances::load_instance(db, id);
    if (!loaded) return fail(loaded.error());
    if (!*loaded || (*loaded)->owner != user_id) continue;
    const auto& i = **loaded;
    const bool active = i.billing_mode != "hourly" && i.state != instances::InstanceState::released &&
                        i.state != instances::InstanceState::releasing && (!i.expires_at || *i.expires_at > now);
    items.push_back(Item{i, paid, active});
  }
  // Active ones first, the soonest to end first; then ended ones, the last paid first.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.active != b.active) return a.active;
    if (a.active) {
      const auto ea = a.instance.expires_at.value_or(SysTime::max()), eb = b.instance.expires_at.value_or(SysTime::max());
      if (ea != eb) return ea < eb;
    } else if (a.paid.last_paid_at != b.paid.last_paid_at) {
      return a.paid.last_paid_at > b.paid.last_paid_at;
    }
    return a.instance.id < b.instance.id;
  });
  auto time_or_null = [](const std::optional<SysTime>& t) { return t ? json::value(format_rfc3339(*t)) : json::value(nullptr); };
  json::array out;
  for (const auto& it : items) {
    const auto& i = it.instance;
    // The term: the instance's mode while it is a subscription; after it, what the last payment was for.
    std::string term = i.billing_mode;
    if (term == "hourly") term = it.paid.last_description.find("monthly") != std::string::npos ? "monthly" : "weekly";
    out.push_back(json::object{
        {"instance", i.id},
        {"name", i.name},
        {"instance_state", std::string(instances::to_string(i.state))},
        {"gpu_model", i.gpu_model ? json::value(*i.gpu_model) : json::value(nullptr)},
        {"gpu_count", i.gpu_count},
        {"term", term},
        {"status", it.active ? "active" : "ended"},
        {"started_at", time_or_null(i.term_anchor)},
        {"expires_at", it.active ? time_or_null(i.expires_at) : json::value(nullptr)},
        {"auto_renew", it.active && i.auto_renew},
        {"payments", it.paid.payments},
        {"paid", it.paid.paid},
        {"refunded", it.paid.refunded},
        {"first_paid_at", time_or_null(it.paid.first_paid_at)},
        {"last_paid_at", time_or_null(it.paid.last_paid_at)}});
  }
  return out;
}

}  // namespace gpucloud::billing
