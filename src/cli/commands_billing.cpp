// balance, ledger, usage, statement, idle, alert set|show|clear (/billing/...). Amounts are
// integers in the currency's smallest unit; they are shown with format_money (¥12.34).
#include <algorithm>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/money.h"
#include "cli/output.h"
#include "core/time_format.h"

namespace gpucloud::cli {

namespace json = boost::json;

// A named namespace around the file's helpers: the unity build puts this file in one
// translation unit with other commands_*.cpp, whose anonymous namespaces it would share.
namespace billing_commands {
namespace {

constexpr std::int64_t kMaxPage = 1000;  // the API's largest `limit`

struct BillingArgs {
  std::string since, until, by = "resource", month, below, webhook;
  std::int64_t limit = 100;
};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A money field, or "-" when the answer lacks it.
std::string money_of(const json::value& object, std::string_view key, const std::string& currency) {
  auto v = integer(object, key);
  return v ? format_money(*v, currency) : "-";
}

// A ledger amount with its sign: "+¥12.34", "-¥1.98", "¥0.00".
std::string signed_money(std::int64_t amount, const std::string& currency) {
  return (amount > 0 ? "+" : "") + format_money(amount, currency);
}

std::string signed_money_of(const json::value& object, std::string_view key, const std::string& currency) {
  auto v = integer(object, key);
  return v ? signed_money(*v, currency) : "-";
}

// The alert of GET /billing/account (or of PUT /billing/alert's answer) in words.
std::string alert_text(const json::value& alert, const std::string& currency) {
  return fmt::format("below {}, webhook {}", money_of(alert, "threshold", currency), text(alert, "webhook_url"));
}

}  // namespace
}  // namespace billing_commands

Expected<std::string> parse_billing_time(std::string_view value, std::string_view option) {
  using billing_commands::all_digits;
  auto bad = [&] {
    return usage_error(fmt::format("{} {}: expected an RFC 3339 time (2025-01-02T15:04:05Z) or a date "
                                   "(2025-01-02)",
                                   option, value));
  };
  // YYYY-MM-DD: that day, 00:00 UTC.
  if (value.size() == 10 && value[4] == '-' && value[7] == '-' && all_digits(value.substr(0, 4)) &&
      all_digits(value.substr(5, 2)) && all_digits(value.substr(8, 2))) {
    auto t = parse_rfc3339(std::string(value) + "T00:00:00Z");
    if (!t) return bad();
    return format_rfc3339(*t);
  }
  if (value.size() < 20 || !all_digits(value.substr(0, 4))) return bad();
  auto t = parse_rfc3339(value);
  if (!t) return bad();
  return format_rfc3339(*t);  // in UTC, as the API writes times
}

bool is_statement_month(std::string_view month) {
  using billing_commands::all_digits;
  if (month.size() != 7 || month[4] != '-' || !all_digits(month.substr(0, 4)) || !all_digits(month.substr(5, 2))) {
    return false;
  }
  int m = (month[5] - '0') * 10 + (month[6] - '0');
  return m >= 1 && m <= 12;
}

std::string format_usage_quantity(const json::value& item) {
  const std::string unit = text(item, "unit", "");
  const json::value* q = member(item, "quantity");
  if (q == nullptr) return "-";
  auto whole = integer(item, "quantity");
  if (unit == "second") {
    if (whole) {
      // Hundredths of an hour, rounded half up, in integers.
      std::int64_t seconds = std::max<std::int64_t>(*whole, 0);
      std::int64_t hundredths = seconds / 3600 * 100 + (seconds % 3600 * 100 + 1800) / 3600;
      return fmt::format("{}.{:02} h", hundredths / 100, hundredths % 100);
    }
    if (q->is_double()) return fmt::format("{:.2f} h", q->get_double() / 3600.0);
  } else if (unit == "gib_hour") {
    if (whole) return fmt::format("{} GiB·h", *whole);
    if (q->is_double()) return fmt::format("{:.2f} GiB·h", q->get_double());
  }
  std::string shown = text(item, "quantity");
  return unit.empty() ? shown : shown + " " + unit;
}

std::string render_balance(const json::value& account) {
  using namespace billing_commands;
  const std::string currency = currency_of(account);
  KeyValues kv;
  kv.add("balance", money_of(account, "balance", currency));
  kv.add("state", text(account, "state"));
  const json::value* alert = member(account, "alert");
  kv.add("alert", alert ? alert_text(*alert, currency) : "none");
  if (member(account, "arrears_since")) kv.add("arrears since", text(account, "arrears_since"));
  return kv.render();
}

std::string render_ledger(const json::value& page) {
  using namespace billing_commands;
  const auto& items = items_of(page);
  if (items.empty()) return "No ledger entries.\n";
  const std::string fallback = currency_of(page);
  Table table({"TIME", "KIND", "AMOUNT", "BALANCE AFTER", "RESOURCE", "DESCRIPTION"});
  for (const auto& e : items) {
    const std::string currency = currency_of(e, fallback);
    table.add_row({text(e, "time"), text(e, "kind"), signed_money_of(e, "amount", currency),
                   money_of(e, "balance_after", currency), text(e, "resource"), text(e, "description")});
    // An hourly entry for several resources: each one's share under it.
    if (const auto* lines = member(e, "lines"); lines && lines->is_array())
      for (const auto& l : lines->as_array())
        table.add_row({"", "", signed_money_of(l, "amount", currency), "", text(l, "resource"),
                       "  " + text(l, "resource_kind") + " " + text(l, "quantity")});
  }
  return table.render();
}

std::string render_usage(const json::value& usage, bool by_day) {
  using namespace billing_commands;
  const auto& items = items_of(usage);
  if (items.empty()) return "No usage in this period.\n";
  const std::string currency = currency_of(usage, currency_of(items.front()));
  bool day_column = by_day;
  for (const auto& u : items) day_column = day_column || member(u, "day") != nullptr;
  std::vector<std::string> headers{"RESOURCE", "KIND", "QUANTITY", "AMOUNT"};
  if (day_column) headers.insert(headers.begin(), "DAY");
  Table table(headers);
  std::int64_t total = 0;
  for (const auto& u : items) {
    total += integer(u, "amount").value_or(0);
    std::vector<std::string> row{text(u, "resource"), text(u, "kind"), format_usage_quantity(u),
                                 money_of(u, "amount", currency_of(u, currency))};
    if (day_column) row.insert(row.begin(), text(u, "day"));
    table.add_row(std::move(row));
  }
  return table.render() + fmt::format("Total: {}\n", format_money(total, currency));
}

std::string render_statement(const json::value& statement) {
  using namespace billing_commands;
  const std::string currency = currency_of(statement);
  KeyValues kv;
  kv.add("month", text(statement, "month"));
  kv.add("opening balance", money_of(statement, "opening_balance", currency));
  kv.add("credits", money_of(statement, "credits", currency));
  const json::value* charges = member(statement, "charges");
  if (charges && charges->is_object()) {
    std::int64_t total = 0;
    for (const auto& c : charges->get_object()) total += integer(charges->get_object(), c.key()).value_or(0);
    kv.add("charges", format_money(total, currency));
    for (const auto& c : charges->get_object()) {
      kv.add("  " + std::string(c.key()), money_of(*charges, c.key(), currency));
    }
  } else {
    kv.add("charges", "-");
  }
  kv.add("closing balance", money_of(statement, "closing_balance", currency));
  std::string out = kv.render() + "\n";
  const json::value* lines = member(statement, "lines");
  if (!lines || !lines->is_array() || lines->get_array().empty()) return out + "No entries this month.\n";
  Table table({"TIME", "KIND", "AMOUNT", "RESOURCE", "DESCRIPTION"});
  for (const auto& l : lines->get_array()) {
    table.add_row({text(l, "time"), text(l, "kind"), signed_money_of(l, "amount", currency_of(l, currency)),
                   text(l, "resource"), text(l, "description")});
  }
  return out + table.render();
}

std::string render_idle(const json::value& idle) {
  using namespace billing_commands;
  const auto& items = items_of(idle);
  if (items.empty()) return "Nothing bills you while idle.\n";
  const std::string currency = currency_of(idle, currency_of(items.front()));
  Table table({"RESOURCE", "KIND", "SINCE", "COST PER DAY"});
  std::int64_t total = 0;
  for (const auto& i : items) {
    total += integer(i, "cost_per_day").value_or(0);
    table.add_row({text(i, "resource"), text(i, "kind"), text(i, "since"),
                   money_of(i, "cost_per_day", currency_of(i, currency))});
  }
  return table.render() + fmt::format("Total per day: {}\n", format_money(total, currency));
}

namespace billing_commands {
namespace {

// "?since=...&until=..." (empty when neither), with the times checked and in UTC.
Expected<std::string> period_query(const BillingArgs& a, std::vector<std::string> extra = {}) {
  std::vector<std::string> params;
  std::optional<std::string> since, until;
  if (!a.since.empty()) {
    GC_TRY(t, parse_billing_time(a.since, "--since"));
    since = *t;
    params.push_back("since=" + url_escape(*t));
  }
  if (!a.until.empty()) {
    GC_TRY(t, parse_billing_time(a.until, "--until"));
    until = *t;
    params.push_back("until=" + url_escape(*t));
  }
  if (since && until && *parse_rfc3339(*since) > *parse_rfc3339(*until)) {
    return usage_error(fmt::format("--since {} is after --until {}", a.since, a.until));
  }
  for (auto& p : extra) params.push_back(std::move(p));
  std::string query;
  for (const auto& p : params) query += (query.empty() ? "?" : "&") + p;
  return query;
}

Outcome do_balance(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(account, ctx.check((*api)->get("/billing/account")));
  ctx.print(*account, [&] { ctx.out() << render_balance(*account); });
  return {};
}

// Pages of GET /billing/ledger, newest first, until `limit` entries: each page asks for no
// more than is still wanted, so the last page's next_cursor is where the next entry is.
Outcome do_ledger(Context& ctx, const BillingArgs& a, const std::string& base = "/billing/ledger") {
  if (a.limit < 1) return usage_error(fmt::format("--limit {}: expected a positive number of entries", a.limit));
  GC_TRY(query, period_query(a));
  GC_TRY(api, ctx.api());
  json::array items;
  json::value next = nullptr;
  std::string cursor;
  const std::size_t limit = static_cast<std::size_t>(a.limit);
  while (items.size() < limit) {
    const auto want = std::min<std::size_t>(limit - items.size(), kMaxPage);
    std::string path = base + *query + (query->empty() ? "?" : "&") + fmt::format("limit={}", want);
    if (!cursor.empty()) path += "&cursor=" + url_escape(cursor);
    GC_TRY(page, ctx.check((*api)->get(path)));
    next = nullptr;
    for (const auto& e : items_of(*page)) {
      if (items.size() >= limit) break;
      items.push_back(e);
    }
    if (const auto* c = member(*page, "next_cursor"); c && c->is_string() && !c->get_string().empty()) next = *c;
    if (next.is_null() || std::string(next.get_string()) == cursor) break;
    cursor = std::string(next.get_string());
  }
  json::value ledger = json::object{{"items", std::move(items)}, {"next_cursor", next}};
  ctx.print(ledger, [&] {
    ctx.out() << render_ledger(ledger);
    if (!next.is_null()) {
      ctx.out() << fmt::format("(the newest {} entries; there are more: use --limit or --since)\n", limit);
    }
  });
  return {};
}

Outcome do_usage(Context& ctx, const BillingArgs& a) {
  if (a.by != "day" && a.by != "resource") {
    return usage_error(fmt::format("--by {}: expected day or resource", a.by));
  }
  GC_TRY(query, period_query(a, {"group_by=" + a.by}));
  GC_TRY(api, ctx.api());
  GC_TRY(usage, ctx.check((*api)->get_all("/billing/usage" + *query)));
  ctx.print(*usage, [&] { ctx.out() << render_usage(*usage, a.by == "day"); });
  return {};
}

Outcome do_statement(Context& ctx, const BillingArgs& a) {
  if (!is_statement_month(a.month)) {
    return usage_error(fmt::format("statement {}: expected a month as YYYY-MM, e.g. 2025-01", a.month));
  }
  GC_TRY(api, ctx.api());
  GC_TRY(statement, ctx.check((*api)->get("/billing/statements/" + a.month)));
  ctx.print(*statement, [&] { ctx.out() << render_statement(*statement); });
  return {};
}

Outcome do_idle(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(idle, ctx.check((*api)->get_all("/billing/idle")));
  ctx.print(*idle, [&] { ctx.out() << render_idle(*idle); });
  return {};
}

Outcome do_alert_set(Context& ctx, const BillingArgs& a) {
  auto threshold = parse_money(a.below);
  if (!threshold) return usage_error("--below: " + threshold.error().detail);
  if (*threshold < 0) return usage_error(fmt::format("--below {}: the threshold must not be negative", a.below));
  if (a.webhook.empty()) return usage_error("--webhook: the URL must not be empty");
  GC_TRY(api, ctx.api());
  json::object body{{"threshold", *threshold}, {"webhook_url", a.webhook}};
  GC_TRY(answer, ctx.check((*api)->put("/billing/alert", body)));
  ctx.print(*answer, [&] {
    // The answer is the alert (or the account holding it); what was sent if it is neither.
    const json::value* alert = member(*answer, "alert");
    if (alert == nullptr && member(*answer, "threshold")) alert = &*answer;
    const json::value sent = body;
    ctx.out() << fmt::format("Balance alert set: {}.\n", alert_text(alert ? *alert : sent, currency_of(*answer)));
  });
  return {};
}

Outcome do_alert_show(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(account, ctx.check((*api)->get("/billing/account")));
  const json::value* alert = member(*account, "alert");
  if (ctx.json()) {
    print_json(ctx.out(), alert ? *alert : json::value(nullptr));
    return {};
  }
  if (alert == nullptr) {
    ctx.out() << "No balance alert is set.\n";
  } else {
    ctx.out() << fmt::format("Balance alert: {}.\n", alert_text(*alert, currency_of(*account)));
  }
  return {};
}

Outcome do_alert_clear(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/billing/alert")));
  ctx.print(*answer, [&] { ctx.out() << "Balance alert cleared.\n"; });
  return {};
}

}  // namespace
}  // namespace billing_commands

void add_billing_commands(CLI::App& app, Registry& registry) {
  using namespace billing_commands;
  auto a = std::make_shared<BillingArgs>();
  auto period = [&a](CLI::App& cmd) {
    cmd.add_option("--since", a->since, "from this time (RFC 3339) or date (YYYY-MM-DD, 00:00 UTC)");
    cmd.add_option("--until", a->until, "up to this time (RFC 3339) or date (YYYY-MM-DD, 00:00 UTC)");
  };

  auto* balance = app.add_subcommand("balance", "your balance, its state and the balance alert");
  registry.on(balance, [](Context& ctx) { return do_balance(ctx); });

  auto* ledger = app.add_subcommand("ledger", "every change to your balance, newest first");
  period(*ledger);
  ledger->add_option("--limit", a->limit, "at most this many entries (default 100)");
  registry.on(ledger, [a](Context& ctx) { return do_ledger(ctx, *a); });

  auto* usage = app.add_subcommand("usage", "what you used and what it cost, per resource or per day");
  usage->add_option("--by", a->by, "group by day or resource (default resource)");
  period(*usage);
  registry.on(usage, [a](Context& ctx) { return do_usage(ctx, *a); });

  auto* statement = app.add_subcommand("statement", "a month's statement");
  statement->add_option("MONTH", a->month, "YYYY-MM")->required();
  registry.on(statement, [a](Context& ctx) { return do_statement(ctx, *a); });

  auto* idle = app.add_subcommand("idle", "what bills you while unused (disks, snapshots, images)");
  registry.on(idle, [](Context& ctx) { return do_idle(ctx); });

  auto* alert = app.add_subcommand("alert", "the low-balance alert (a webhook)");
  alert->require_subcommand(1);
  auto* set = alert->add_subcommand("set", "notify a webhook when the balance falls below an amount");
  set->add_option("--below", a->below, "amount in the main unit, e.g. 50 or 12.34")->required();
  set->add_option("--webhook", a->webhook, "URL that receives POST {\"event\": \"balance_low\", ...}")->required();
  registry.on(set, [a](Context& ctx) { return do_alert_set(ctx, *a); });
  auto* show = alert->add_subcommand("show", "the alert, if one is set");
  registry.on(show, [](Context& ctx) { return do_alert_show(ctx); });
  auto* clear = alert->add_subcommand("clear", "remove the alert");
  registry.on(clear, [](Context& ctx) { return do_alert_clear(ctx); });
}

void add_admin_ledger_command(CLI::App& admin, Registry& registry) {
  using namespace billing_commands;
  auto a = std::make_shared<BillingArgs>();
  auto user = std::make_shared<std::string>();
  auto* ledger = admin.add_subcommand("ledger", "a user's ledger, newest first");
  ledger->add_option("USER", *user, "user name or id")->required();
  ledger->add_option("--since", a->since, "from this time (RFC 3339) or date (YYYY-MM-DD, 00:00 UTC)");
  ledger->add_option("--until", a->until, "up to this time (RFC 3339) or date (YYYY-MM-DD, 00:00 UTC)");
  ledger->add_option("--limit", a->limit, "at most this many entries (default 100)");
  registry.on(ledger, [a, user](Context& ctx) { return do_ledger(ctx, *a, "/admin/users" + seg(*user) + "/ledger"); });
}

}  // namespace gpucloud::cli
