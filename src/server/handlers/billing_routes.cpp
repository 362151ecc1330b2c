// Billing (api.md "Billing"): the caller's account, ledger, usage, statements, what bills
// while idle, the balance alert; the operator's credit and revenue summary. The estimate is
// in instance_routes.cpp (it takes the body of POST /instances).
#include "api/json_input.h"
#include "auth/accounts.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/reports.h"
#include "billing/webhook_sender.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// `since`/`until`: an RFC 3339 time, or a date YYYY-MM-DD (that day's start in billing_timezone).
Result<std::optional<SysTime>> parse_time_param(const std::map<std::string, std::string>& params, const std::string& name,
                                                const TimeZone& tz) {
  auto it = params.find(name);
  if (it == params.end() || it->second.empty()) return std::optional<SysTime>{};
  if (auto t = parse_rfc3339(it->second)) return std::optional<SysTime>{*t};
  int y = 0, m = 0, d = 0;
  char tail = 0;
  if (it->second.size() == 10 && std::sscanf(it->second.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 && m >= 1 &&
      m <= 12 && d >= 1 && d <= 31)
    return std::optional<SysTime>{tz.start_of({y, m, d})};
  return fail(ErrorCode::invalid_argument, name + ": must be an RFC 3339 time or a date YYYY-MM-DD");
}

Result<TimeZone> billing_zone(const App& app) { return TimeZone::load(app.config().billing_timezone); }

asio::awaitable<Result<Response>> get_account(RequestContext& ctx) {
  auto read = [user = ctx.caller().user.id, currency = ctx.app.config().currency,
               now = ctx.app.clock().now()](store::Database& db) -> Result<json::object> {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    auto pending = billing::unsettled_of_account(db, account->id, now);
    if (!pending) return fail(pending.error());
    return billing::account_json(*account, currency, *pending);
  };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

asio::awaitable<Result<Response>> ledger_of(RequestContext& ctx, std::string user);
asio::awaitable<Result<Response>> get_ledger(RequestContext& ctx) { co_return co_await ledger_of(ctx, ctx.caller().user.id); }

// GET /admin/users/{id}/ledger: a user's ledger as they see it (id or name).
asio::awaitable<Result<Response>> get_user_ledger(RequestContext& ctx) {
  auto find = [id = ctx.param("id")](store::Database& db) -> Result<std::string> {
    auto user = auth::find_user(db, id);
    if (!user) return fail(user.error());
    if (!*user) return fail(ErrorCode::not_found, "no user " + id);
    return (*user)->id;
  };
  auto user = co_await ctx.app.store().read(std::move(find));
  if (!user) co_return tl::unexpected(user.error());
  co_return co_await ledger_of(ctx, *user);
}

asio::awaitable<Result<Response>> ledger_of(RequestContext& ctx, std::string user_id) {
  auto tz = billing_zone(ctx.app);
  if (!tz) co_return tl::unexpected(tz.error());
  const auto params = ctx.request.query();
  auto since = parse_time_param(params, "since", *tz);
  if (!since) co_return tl::unexpected(since.error());
  auto until = parse_time_param(params, "until", *tz);
  if (!until) co_return tl::unexpected(until.error());
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  billing::LedgerQuery q;
  q.since = *since;
  q.until = *until;
  q.limit = page->limit + 1;  // one more says whether there is a next page
  if (page->after) q.before_seq = page->after->first;  // the cursor carries the last seq seen
  auto read = [user = user_id, q](store::Database& db) -> Result<std::vector<billing::Entry>> {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    return billing::list_entries(db, account->id, q);
  };
  auto entries = co_await ctx.app.store().read(std::move(read));
  if (!entries) co_return tl::unexpected(entries.error());
  json::array items;
  const bool more = entries->size() > page->limit;
  if (more) entries->resize(page->limit);
  for (const auto& e : *entries) items.push_back(billing::entry_json(e));
  json::object doc{{"items", std::move(items)}, {"next_cursor", nullptr}};
  if (more) doc["next_cursor"] = encode_cursor(entries->back().seq, entries->back().id);
  co_return json_response(200, doc);
}

asio::awaitable<Result<Response>> get_usage(RequestContext& ctx) {
  auto tz = billing_zone(ctx.app);
  if (!tz) co_return tl::unexpected(tz.error());
  const auto params = ctx.request.query();
  auto since = parse_time_param(params, "since", *tz);
  if (!since) co_return tl::unexpected(since.error());
  auto until = parse_time_param(params, "until", *tz);
  if (!until) co_return tl::unexpected(until.error());
  std::string group_by = params.count("group_by") ? params.at("group_by") : "resource";
  if (group_by != "resource" && group_by != "day")
    co_return fail(ErrorCode::invalid_argument, "group_by: must be resource or day");
  const SysTime from = since->value_or(SysTime{}), to = until->value_or(ctx.app.clock().now() + std::chrono::hours(1));
  auto read = [user = ctx.caller().user.id, from, to, by_day = group_by == "day", zone = *tz](store::Database& db)
      -> Result<json::array> {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    return billing::usage(db, account->id, from, to, by_day, zone);
  };
  auto items = co_await ctx.app.store().read(std::move(read));
  if (!items) co_return tl::unexpected(items.error());
  co_return json_response(200, json::object{{"items", std::move(*items)}, {"next_cursor", nullptr},
                                            {"currency", ctx.app.config().currency}});
}

asio::awaitable<Result<Response>> get_statement(RequestContext& ctx) {
  auto tz = billing_zone(ctx.app);
  if (!tz) co_return tl::unexpected(tz.error());
  auto read = [user = ctx.caller().user.id, month = ctx.param("month"), zone = *tz,
               currency = ctx.app.config().currency](store::Database& db) -> Result<json::object> {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    return billing::statement(db, account->id, month, zone, currency);
  };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

asio::awaitable<Result<Response>> get_idle(RequestContext& ctx) {
  auto read = [user = ctx.caller().user.id, now = ctx.app.clock().now()](store::Database& db) {
    return billing::idle(db, user, now);
  };
  auto items = co_await ctx.app.store().read(std::move(read));
  if (!items) co_return tl::unexpected(items.error());
  std::int64_t total = 0;
  for (const auto& i : *items) total += i.as_object().at("cost_per_day").as_int64();
  co_return json_response(200, json::object{{"items", std::move(*items)}, {"next_cursor", nullptr},
                                            {"cost_per_day", total}, {"currency", ctx.app.config().currency}});
}

asio::awaitable<Result<Response>> list_subscriptions(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto read = [user = ctx.caller().user.id, now = ctx.app.clock().now()](store::Database& db) {
    return billing::subscriptions(db, user, now);
  };
  auto items = co_await ctx.app.store().read(std::move(read));
  if (!items) co_return tl::unexpected(items.error());
  auto doc = page_in_order(*items, *page);
  doc["currency"] = ctx.app.config().currency;
  co_return json_response(200, std::move(doc));
}

asio::awaitable<Result<Response>> put_alert(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"threshold", "webhook_url"}, ""); !s) co_return tl::unexpected(s.error());
  auto threshold = api::optional_int(*body, "threshold");
  if (!threshold) co_return tl::unexpected(threshold.error());
  if (!*threshold) co_return fail(ErrorCode::invalid_argument, "threshold: is required (an amount in the smallest unit)");
  if (**threshold < 0) co_return fail(ErrorCode::invalid_argument, "threshold: must not be negative");
  auto url = api::optional_string(*body, "webhook_url");
  if (!url) co_return tl::unexpected(url.error());
  if (*url && !(*url)->empty()) {
    auto parsed = billing::parse_webhook_url(**url, ctx.app.config().alerts.allow_private_webhook_targets);
    if (!parsed) co_return tl::unexpected(parsed.error());
  }
  auto write = [user = ctx.caller().user.id, t = **threshold, u = *url, currency = ctx.app.config().currency,
                now = ctx.app.clock().now()](store::Database& db) -> Result<json::object> {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    std::optional<std::string> hook;
    if (u && !u->empty()) hook = *u;
    auto pending = billing::unsettled_of_account(db, account->id, now);
    if (!pending) return fail(pending.error());
    if (auto s = billing::set_alert(db, account->id, t, hook, *pending, user, now); !s) return fail(s.error());
    auto updated = billing::load_account(db, account->id);
    if (!updated) return fail(updated.error());
    return billing::account_json(*updated, currency, *pending);
  };
  auto doc = co_await ctx.app.store().write(std::move(write));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

asio::awaitable<Result<Response>> delete_alert(RequestContext& ctx) {
  auto write = [user = ctx.caller().user.id, now = ctx.app.clock().now()](store::Database& db) -> Status {
    auto account = billing::account_of_user(db, user);
    if (!account) return fail(account.error());
    return billing::set_alert(db, account->id, std::nullopt, std::nullopt, 0, user, now);
  };
  if (auto s = co_await ctx.app.store().write(std::move(write)); !s) co_return tl::unexpected(s.error());
  co_return empty_response(204);
}

// POST /admin/users/{id}/credit {amount, note}: a credit (or, negative, an adjustment) as one
// ledger entry; honours Idempotency-Key, so a retried top-up is applied once.
asio::awaitable<Result<Response>> credit_user(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"amount", "note"}, ""); !s) co_return tl::unexpected(s.error());
  auto amount = api::optional_int(*body, "amount");
  if (!amount) co_return tl::unexpected(amount.error());
  if (!*amount) co_return fail(ErrorCode::invalid_argument, "amount: is required (an integer in the smallest unit)");
  if (**amount == 0) co_return fail(ErrorCode::invalid_argument, "amount: must not be zero");
  if (**amount > 1'000'000'000'000 || **amount < -1'000'000'000'000)
    co_return fail(ErrorCode::invalid_argument, "amount: out of range");
  auto note = api::optional_string(*body, "note");
  if (!note) co_return tl::unexpected(note.error());
  if (*note && (*note)->size() > 500) co_return fail(ErrorCode::invalid_argument, "note: at most 500 characters");
  // The key's scope is the user, however the path names them (name or id): resolved first.
  auto resolve = [id = ctx.param("id")](store::Database& db) -> Result<std::string> {
    auto user = auth::find_user(db, id);
    if (!user) return fail(user.error());
    if (!*user) return fail(ErrorCode::not_found, "no user " + id);
    return (*user)->id;
  };
  auto resolved = co_await ctx.app.store().read(std::move(resolve));
  if (!resolved) co_return tl::unexpected(resolved.error());
  ctx.idempotency_resource = "/api/v1/admin/users/" + *resolved + "/credit";
  auto effect = [id = *resolved, a = **amount, n = note->value_or(""), now = ctx.app.clock().now(),
                 by = ctx.caller().user.username](store::Database& db) -> Result<Response> {
    auto user = auth::find_user(db, id);
    if (!user) return fail(user.error());
    if (!*user) return fail(ErrorCode::not_found, "no user " + id);
    auto account = billing::account_of_user(db, (*user)->id);
    if (!account) return fail(account.error());
    billing::NewEntry entry;
    entry.kind = a > 0 ? billing::EntryKind::credit : billing::EntryKind::adjustment;
    entry.amount = a;
    entry.user_id = (*user)->id;
    entry.description = (n.empty() ? std::string(a > 0 ? "credit" : "adjustment") : n) + " (by " + by + ")";
    auto posted = billing::post_entry(db, account->id, entry, now);
    if (!posted) return fail(posted.error());
    json::object o = billing::entry_json(*posted);
    o["user"] = (*user)->id;
    return json_response(201, o);
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect));
}

asio::awaitable<Result<Response>> revenue(RequestContext& ctx) {
  auto tz = billing_zone(ctx.app);
  if (!tz) co_return tl::unexpected(tz.error());
  const auto params = ctx.request.query();
  std::string month;
  if (auto it = params.find("month"); it != params.end() && !it->second.empty()) {
    month = it->second;
  } else {
    auto d = tz->local_date(ctx.app.clock().now());
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04d-%02d", d.year, d.month);
    month = buf;
  }
  auto read = [month, zone = *tz, currency = ctx.app.config().currency](store::Database& db) {
    return billing::revenue_summary(db, month, zone, currency);
  };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

}  // namespace

void register_billing_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/billing/account", Access::user, "billing", "Balance, state and the balance alert", get_account);
  r.add("GET", "/api/v1/billing/ledger", Access::user, "billing", "Ledger entries, newest first (?since=&until=)",
        get_ledger);
  r.add("GET", "/api/v1/billing/usage", Access::user, "billing", "Usage by resource or day (?since=&until=&group_by=)",
        get_usage);
  r.add("GET", "/api/v1/billing/statements/{month}", Access::user, "billing", "A monthly statement (YYYY-MM)",
        get_statement);
  r.add("GET", "/api/v1/billing/idle", Access::user, "billing", "What bills while unused, with its cost per day", get_idle);
  r.add("GET", "/api/v1/billing/subscriptions", Access::user, "billing",
        "The user's weekly and monthly subscriptions: term, expiry, auto-renew, what was paid", list_subscriptions);
  r.add("PUT", "/api/v1/billing/alert", Access::user, "billing", "Set the balance alert", put_alert);
  r.add("DELETE", "/api/v1/billing/alert", Access::user, "billing", "Remove the balance alert", delete_alert);
  r.add("POST", "/api/v1/admin/users/{id}/credit", Access::admin, "admin", "Credit (or debit) a user's balance",
        credit_user);
  r.add("GET", "/api/v1/admin/users/{id}/ledger", Access::admin, "admin", "A user's ledger entries, newest first",
        get_user_ledger);
  r.add("GET", "/api/v1/admin/billing/summary", Access::admin, "admin", "Revenue by kind and by day for a month (?month=YYYY-MM)",
        revenue);
}

}  // namespace gpucloud::server
