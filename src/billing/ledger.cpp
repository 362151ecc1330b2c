#include "billing/ledger.h"

#include <algorithm>
#include <charconv>

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include "core/ids.h"
#include "events/events.h"

namespace gpucloud::billing {
namespace json = boost::json;

namespace {

constexpr const char* kAccountColumns =
    "SELECT id, kind, name, balance, entries, arrears_since, arrears_warned, alert_threshold, alert_webhook_url, "
    "alert_armed, created_at, stop_warned_zero FROM billing_accounts ";
constexpr const char* kEntryColumns =
    "SELECT id, account_id, seq, user_id, time, amount, balance_after, kind, resource, resource_kind, quantity, "
    "description, lines FROM ledger_entries ";

Account account_from(const store::Row& r) {
  Account a;
  a.id = r.text(0);
  a.kind = r.text(1);
  a.name = r.text(2);
  a.balance = r.int64(3);
  a.entries = r.int64(4);
  if (auto t = r.opt_int64(5)) a.arrears_since = from_unix_micros(*t);
  a.arrears_warned = static_cast<int>(r.int64(6));
  a.alert_threshold = r.opt_int64(7);
  a.alert_webhook_url = r.opt_text(8);
  a.alert_armed = r.int64(9) != 0;
  a.created_at = from_unix_micros(r.int64(10));
  if (auto t = r.opt_int64(11)) a.stop_warned_zero = from_unix_micros(*t);
  return a;
}

EntryKind entry_kind_from(std::string_view s) {
  if (s == "credit") return EntryKind::credit;
  if (s == "subscription") return EntryKind::subscription;
  if (s == "refund") return EntryKind::refund;
  if (s == "adjustment") return EntryKind::adjustment;
  return EntryKind::charge;
}

Result<Entry> entry_from(const store::Row& r) {
  Entry e;
  e.id = r.text(0);
  e.account_id = r.text(1);
  e.seq = r.int64(2);
  e.user_id = r.opt_text(3);
  e.time = from_unix_micros(r.int64(4));
  e.amount = r.int64(5);
  e.balance_after = r.int64(6);
  e.kind = entry_kind_from(r.text(7));
  e.resource = r.opt_text(8);
  e.resource_kind = r.opt_text(9);
  e.quantity = r.int64(10);
  e.description = r.text(11);
  auto lines = decode_lines(r.text(12));
  if (!lines) return fail(lines.error());
  e.lines = std::move(*lines);
  return e;
}

Result<std::vector<Entry>> entries(store::Database& db, const std::string& sql, std::initializer_list<store::Arg> args) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<Entry> out;
  out.reserve(rows->size());
  for (const auto& r : *rows) {
    auto e = entry_from(r);
    if (!e) return fail(e.error());
    out.push_back(std::move(*e));
  }
  return out;
}

// One notification of a balance below the alert's threshold: disarmed until the balance is
// back at or above it; the webhook is queued in the outbox and the event recorded.
Status notify_low_balance(store::Database& db, const Account& account, std::int64_t balance, std::int64_t threshold,
                          const std::optional<std::string>& owner, SysTime now) {
  if (auto s = db.run("UPDATE billing_accounts SET alert_armed = 0 WHERE id = ?", {account.id}); !s) return s;
  json::object body{{"event", "balance_low"},
                    {"user", owner ? json::value(*owner) : json::value(nullptr)},
                    {"account", account.id},
                    {"balance", balance},
                    {"threshold", threshold},
                    {"time", format_rfc3339(now)}};
  if (account.alert_webhook_url && !account.alert_webhook_url->empty())
    if (auto s = db.run("INSERT INTO webhook_outbox (id, account_id, url, body, created_at) VALUES (?, ?, ?, ?, ?)",
                        {new_id("wh"), account.id, *account.alert_webhook_url, json::serialize(body), to_unix_micros(now)});
        !s)
      return s;
  return events::record(db, now, "billing.low_balance", account.id, owner, "the balance fell below the alert threshold",
                        {{"balance", balance}, {"threshold", threshold}});
}

// The arrears mark and the balance alert follow every balance change, in its transaction.
Status follow_balance(store::Database& db, const Account& before, std::int64_t balance, std::int64_t change,
                      const std::optional<std::string>& owner, SysTime now) {
  if (balance <= 0 && change < 0 && !before.arrears_since) {
    if (auto s = db.run("UPDATE billing_accounts SET arrears_since = ?, arrears_warned = 0 WHERE id = ? AND "
                        "arrears_since IS NULL",
                        {to_unix_micros(now), before.id});
        !s)
      return s;
    if (auto s = events::record(db, now, "billing.arrears", before.id, owner,
                                "the balance reached zero: pay-as-you-go instances stop, creates and starts are refused",
                                {{"balance", balance}});
        !s)
      return s;
  } else if (balance > 0 && before.arrears_since) {
    if (auto s = db.run("UPDATE billing_accounts SET arrears_since = NULL, arrears_warned = 0 WHERE id = ?", {before.id}); !s)
      return s;
    if (auto s = events::record(db, now, "billing.arrears_lifted", before.id, owner,
                                "the balance is positive again: creates and starts are allowed", {{"balance", balance}});
        !s)
      return s;
  }
  if (change > 0 && !before.arrears_since && before.arrears_warned != 0)
    // A top-up before the balance ran out: the next projected zero is warned about again.
    if (auto s = db.run("UPDATE billing_accounts SET arrears_warned = 0 WHERE id = ?", {before.id}); !s) return s;
  if (!before.alert_threshold) return ok();
  const std::int64_t threshold = *before.alert_threshold;
  if (before.alert_armed && balance < threshold) return notify_low_balance(db, before, balance, threshold, owner, now);
  if (!before.alert_armed && balance >= threshold)
    return db.run("UPDATE billing_accounts SET alert_armed = 1 WHERE id = ?", {before.id});
  return ok();
}

}  // namespace

std::string_view to_string(EntryKind kind) {
  switch (kind) {
    case EntryKind::charge: return "charge";
    case EntryKind::credit: return "credit";
    case EntryKind::subscription: return "subscription";
    case EntryKind::refund: return "refund";
    case EntryKind::adjustment: return "adjustment";
  }
  return "charge";
}

std::string encode_lines(const std::vector<EntryLine>& lines) {
  std::string out;
  for (const auto& l : lines) {
    if (!out.empty()) out += '\n';
    out += l.resource;
    out += ' ';
    out += l.resource_kind;
    out += ' ';
    out += std::to_string(l.quantity);
    out += ' ';
    out += std::to_string(l.amount);
  }
  return out;
}

Result<std::vector<EntryLine>> decode_lines(std::string_view text) {
  std::vector<EntryLine> out;
  auto number = [](std::string_view t, std::int64_t& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && p == t.data() + t.size() && !t.empty();
  };
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    std::string_view fields[4];
    for (auto& f : fields) {
      const auto space = line.find(' ');
      f = line.substr(0, space);
      line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    }
    EntryLine l{std::string(fields[0]), std::string(fields[1])};
    if (l.resource.empty() || l.resource_kind.empty() || !line.empty() || !number(fields[2], l.quantity) ||
        !number(fields[3], l.amount))
      return fail(ErrorCode::internal, "a ledger entry's lines are malformed");
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<EntryLine> lines_of(const Entry& e) {
  if (!e.lines.empty()) return e.lines;
  if ((e.kind != EntryKind::charge && e.kind != EntryKind::refund) || !e.resource) return {};
  return {EntryLine{*e.resource, e.resource_kind.value_or(""), e.quantity, e.amount}};
}

std::string account_id_for_user(const std::string& user_id) {
  return "ba-" + (user_id.size() > 2 ? user_id.substr(2) : user_id);
}

Status open_account(store::Database& db, const std::string& user_id, const std::string& username,
                    std::int64_t signup_credit, SysTime now) {
  const std::string id = account_id_for_user(user_id);
  if (auto s = db.run("INSERT INTO billing_accounts (id, kind, name, created_at) VALUES (?, 'user', ?, ?) "
                      "ON CONFLICT (id) DO NOTHING",
                      {id, username, to_unix_micros(now)});
      !s)
    return s;
  const bool made = db.changes() > 0;
  if (auto s = db.run("UPDATE users SET billing_account = ? WHERE id = ? AND billing_account IS NULL", {id, user_id}); !s)
    return s;
  if (made && signup_credit > 0) {
    NewEntry credit{EntryKind::credit, signup_credit, user_id, std::nullopt, std::nullopt, 0, "sign-up credit"};
    if (auto e = post_entry(db, id, credit, now); !e) return fail(e.error());
  }
  return ok();
}

Result<Account> load_account(store::Database& db, const std::string& account_id) {
  auto row = db.one(std::string(kAccountColumns) + "WHERE id = ?", {account_id});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "billing account " + account_id + " not found");
  return account_from(**row);
}

Result<Account> account_of_user(store::Database& db, const std::string& user_id) {
  auto row = db.one("SELECT billing_account FROM users WHERE id = ?", {user_id});
  if (!row) return fail(row.error());
  if (!*row || (*row)->is_null(0)) return fail(ErrorCode::not_found, "user " + user_id + " has no billing account");
  return load_account(db, (*row)->text(0));
}

Result<Entry> post_entry(store::Database& db, const std::string& account_id, const NewEntry& in, SysTime now) {
  auto posted = post_entries(db, account_id, {in}, now);
  if (!posted) return fail(posted.error());
  return std::move(posted->front());
}

Result<std::vector<Entry>> post_entries(store::Database& db, const std::string& account_id,
                                        const std::vector<NewEntry>& in, SysTime now) {
  std::vector<Entry> out;
  if (in.empty()) return out;
  auto before = load_account(db, account_id);
  if (!before) return fail(before.error());
  std::int64_t total = 0;
  for (const auto& e : in) total += e.amount;
  // The compare-and-set on `entries`: a writer that read the account before another append
  // fails here instead of chaining two entries after one balance.
  if (auto s = db.run("UPDATE billing_accounts SET balance = balance + ?, entries = entries + ? WHERE id = ? AND entries = ?",
                      {total, static_cast<std::int64_t>(in.size()), account_id, before->entries});
      !s)
    return fail(s.error());
  if (db.changes() != 1) return fail(ErrorCode::conflict, "billing account " + account_id + " changed; try again");
  db.note_billing_change(account_id);
  out.reserve(in.size());
  std::int64_t balance = before->balance, seq = before->entries;
  for (const auto& n : in) {
    Entry e;
    e.id = new_id("le");
    e.account_id = account_id;
    e.seq = ++seq;
    e.user_id = n.user_id;
    e.time = now;
    e.amount = n.amount;
    e.balance_after = balance += n.amount;
    e.kind = n.kind;
    e.resource = n.resource;
    e.resource_kind = n.resource_kind;
    e.quantity = n.quantity;
    e.description = n.description;
    if (auto s = db.run("INSERT INTO ledger_entries (id, account_id, seq, user_id, time, amount, balance_after, kind, "
                        "resource, resource_kind, quantity, description, lines) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        {e.id, account_id, e.seq, e.user_id, to_unix_micros(now), e.amount, e.balance_after,
                         std::string(to_string(e.kind)), e.resource, e.resource_kind, e.quantity, e.description,
                         std::string()});
        !s)
      return fail(s.error());
    out.push_back(std::move(e));
  }
  // Within one batch the balance moves one way for charges, so testing the final balance
  // finds the same crossings as testing each entry.
  if (auto s = follow_balance(db, *before, balance, total, out.back().user_id, now); !s) return fail(s.error());
  return out;
}

Status apply_inserted_entries(store::Database& db, const Account& before, std::int64_t total, std::int64_t count,
                              const std::optional<std::string>& user_id, SysTime now) {
  if (auto s = db.run("UPDATE billing_accounts SET balance = balance + ?, entries = entries + ? WHERE id = ? AND entries = ?",
                      {total, count, before.id, before.entries});
      !s)
    return s;
  if (db.changes() != 1) return fail(ErrorCode::conflict, "billing account " + before.id + " changed; try again");
  db.note_billing_change(before.id);
  return follow_balance(db, before, before.balance + total, total, user_id, now);
}

Result<std::map<std::string, Account>> load_accounts(store::Database& db,
                                                     const std::optional<std::pair<std::string, std::string>>& range) {
  auto rows = range ? db.all(std::string(kAccountColumns) + "WHERE id >= ? AND id <= ?", {range->first, range->second})
                    : db.all(std::string(kAccountColumns));
  if (!rows) return fail(rows.error());
  std::map<std::string, Account> out;
  for (const auto& r : *rows) {
    Account a = account_from(r);
    out.emplace(a.id, std::move(a));
  }
  return out;
}

namespace {
// Rows per multi-row statement: 200 ledger rows are 2,600 parameters, far inside SQLite's
// (32,766) and PostgreSQL's (65,535) limits.
constexpr std::size_t kRowsPerStatement = 200;

std::string values_list(std::size_t rows, std::size_t columns) {
  std::string row = "(";
  for (std::size_t c = 0; c < columns; ++c) row += c ? ", ?" : "?";
  row += ")";
  std::string out;
  out.reserve(rows * (row.size() + 2));
  for (std::size_t r = 0; r < rows; ++r) {
    if (r) out += ", ";
    out += row;
  }
  return out;
}
}  // namespace

Status insert_chained_entries(store::Database& db, const std::vector<ChainedEntry>& entries, SysTime now) {
  const std::int64_t at = to_unix_micros(now);
  std::vector<store::Arg> args;
  for (std::size_t start = 0; start < entries.size(); start += kRowsPerStatement) {
    const std::size_t n = std::min(kRowsPerStatement, entries.size() - start);
    args.clear();
    args.reserve(n * 13);
    for (std::size_t i = start; i < start + n; ++i) {
      const ChainedEntry& e = entries[i];
      for (store::Arg a : {store::Arg(e.id), store::Arg(e.account_id), store::Arg(e.seq), store::Arg(e.user_id),
                           store::Arg(at), store::Arg(e.amount), store::Arg(e.balance_after),
                           store::Arg(std::string(to_string(e.kind))), store::Arg(e.resource), store::Arg(e.resource_kind),
                           store::Arg(e.quantity), store::Arg(e.description), store::Arg(e.lines)})
        args.push_back(std::move(a));
    }
    if (auto s = db.run_args("INSERT INTO ledger_entries (id, account_id, seq, user_id, time, amount, balance_after, kind, "
                             "resource, resource_kind, quantity, description, lines) VALUES " + values_list(n, 13),
                             args);
        !s)
      return s;
  }
  return ok();
}

Status apply_appends(store::Database& db, const std::vector<AccountAppend>& appends, SysTime now) {
  std::vector<store::Arg> args;
  for (std::size_t start = 0; start < appends.size(); start += kRowsPerStatement) {
    const std::size_t n = std::min(kRowsPerStatement, appends.size() - start);
    args.clear();
    args.reserve(n * 4);
    for (std::size_t i = start; i < start + n; ++i) {
      const AccountAppend& a = appends[i];
      for (store::Arg arg : {store::Arg(a.before.id), store::Arg(a.total), store::Arg(a.count), store::Arg(a.before.entries)})
        args.push_back(std::move(arg));
    }
    // The compare-and-set on `entries`, as post_entries: an account another writer appended to
    // since it was read is not matched, and the whole pass is tried again.
    if (auto s = db.run_args("UPDATE billing_accounts SET balance = balance + v.column2, entries = entries + v.column3 "
                             "FROM (VALUES " + values_list(n, 4) + ") AS v "
                             "WHERE billing_accounts.id = v.column1 AND billing_accounts.entries = v.column4",
                             args);
        !s)
      return s;
    if (static_cast<std::size_t>(db.changes()) != n)
      return fail(ErrorCode::conflict, "billing accounts changed during their settlement; try again");
  }
  for (const AccountAppend& a : appends) {
    db.note_billing_change(a.before.id);
    if (auto s = follow_balance(db, a.before, a.before.balance + a.total, a.total, a.user_id, now); !s) return s;
  }
  return ok();
}

Result<std::vector<Entry>> list_entries(store::Database& db, const std::string& account_id, const LedgerQuery& q) {
  const std::int64_t since = q.since ? to_unix_micros(*q.since) : INT64_MIN;
  const std::int64_t until = q.until ? to_unix_micros(*q.until) : INT64_MAX;
  const auto limit = static_cast<std::int64_t>(q.limit);
  // Newest first is the chain read backwards (entries at one instant keep their order).
  if (q.before_seq)
    return entries(db,
                   std::string(kEntryColumns) +
                       "WHERE account_id = ? AND time >= ? AND time < ? AND seq < ? ORDER BY seq DESC LIMIT ?",
                   {account_id, since, until, *q.before_seq, limit});
  return entries(db, std::string(kEntryColumns) + "WHERE account_id = ? AND time >= ? AND time < ? ORDER BY seq DESC LIMIT ?",
                 {account_id, since, until, limit});
}

Result<std::vector<Entry>> entries_between(store::Database& db, const std::string& account_id, SysTime since,
                                           SysTime until) {
  return entries(db, std::string(kEntryColumns) + "WHERE account_id = ? AND time >= ? AND time < ? ORDER BY seq",
                 {account_id, to_unix_micros(since), to_unix_micros(until)});
}

Result<std::int64_t> balance_before(store::Database& db, const std::string& account_id, SysTime t) {
  auto row = db.one("SELECT balance_after FROM ledger_entries WHERE account_id = ? AND time < ? ORDER BY seq DESC LIMIT 1",
                    {account_id, to_unix_micros(t)});
  if (!row) return fail(row.error());
  return *row ? (*row)->int64(0) : 0;
}

Status set_alert(store::Database& db, const std::string& account_id, std::optional<std::int64_t> threshold,
                 std::optional<std::string> webhook_url, std::int64_t pending, const std::optional<std::string>& owner,
                 SysTime now) {
  auto account = load_account(db, account_id);
  if (!account) return fail(account.error());
  const std::int64_t balance = account->balance - pending;
  // A threshold already above the balance is a crossing now: notified once, at once (not
  // when the same alert is set again while it is still below).
  const bool below = threshold && balance < *threshold;
  const bool fresh = !account->alert_threshold || *account->alert_threshold != *threshold || account->alert_armed;
  if (auto s = db.run("UPDATE billing_accounts SET alert_threshold = ?, alert_webhook_url = ?, alert_armed = ? WHERE id = ?",
                      {threshold, webhook_url, !below, account_id});
      !s)
    return s;
  db.note_billing_change(account_id);  // the account's timer plans the next crossing
  if (!below || !fresh) return ok();
  Account now_set = *account;
  now_set.alert_threshold = threshold;
  now_set.alert_webhook_url = webhook_url;
  return notify_low_balance(db, now_set, balance, *threshold, owner, now);
}

std::string account_state(const Account& a, std::int64_t pending) {
  const std::int64_t balance = a.balance - pending;
  if (a.arrears_since || balance < 0) return "arrears";
  if (a.alert_threshold && balance < *a.alert_threshold) return "low";
  return "ok";
}

json::object account_json(const Account& a, const std::string& currency, std::int64_t pending) {
  json::value alert = nullptr;
  if (a.alert_threshold)
    alert = json::object{{"threshold", *a.alert_threshold},
                         {"webhook_url", a.alert_webhook_url ? json::value(*a.alert_webhook_url) : json::value(nullptr)}};
  return {{"id", a.id},
          {"kind", a.kind},
          {"balance", a.balance - pending},
          {"settled_balance", a.balance},
          {"unsettled", pending},
          {"currency", currency},
          {"state", account_state(a, pending)},
          {"alert", alert},
          {"arrears_since", a.arrears_since ? json::value(format_rfc3339(*a.arrears_since)) : json::value(nullptr)}};
}

json::object entry_json(const Entry& e) {
  json::object o{{"id", e.id},
          {"seq", e.seq},
          {"time", format_rfc3339(e.time)},
          {"amount", e.amount},
          {"balance_after", e.balance_after},
          {"kind", std::string(to_string(e.kind))},
          {"resource", e.resource ? json::value(*e.resource) : json::value(nullptr)},
          {"resource_kind", e.resource_kind ? json::value(*e.resource_kind) : json::value(nullptr)},
          {"quantity", e.quantity},
          {"description", e.description}};
  if (!e.lines.empty()) {
    json::array lines;
    for (const auto& l : e.lines)
      lines.push_back(json::object{
          {"resource", l.resource}, {"resource_kind", l.resource_kind}, {"quantity", l.quantity}, {"amount", l.amount}});
    o["lines"] = std::move(lines);
  }
  return o;
}

}  // namespace gpucloud::billing
