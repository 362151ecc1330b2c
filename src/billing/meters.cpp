#include "billing/meters.h"

#include <algorithm>
#include <map>

#include "billing/ledger.h"
#include "core/fault_points.h"
#include "core/ids.h"

namespace gpucloud::billing {

namespace {

constexpr const char* kMeterColumns =
    "SELECT id, account_id, user_id, resource, kind, divisor, rate, gib, open_since, accrued, quantity, charged, "
    "settled_quantity, settled_until, generation, created_at, held_since FROM meters ";

Meter meter_from(const store::Row& r) {
  Meter m;
  m.id = r.text(0);
  m.account_id = r.text(1);
  m.user_id = r.text(2);
  m.resource = r.text(3);
  m.kind = parse_meter_kind(r.text(4)).value_or(MeterKind::compute);
  m.divisor = r.int64(5);
  m.rate = r.int64(6);
  m.gib = r.int64(7);
  if (auto t = r.opt_int64(8)) m.open_since = from_unix_micros(*t);
  m.accrued = r.int64(9);
  m.quantity = r.int64(10);
  m.charged = r.int64(11);
  m.settled_quantity = r.int64(12);
  m.settled_until = from_unix_micros(r.int64(13));
  m.generation = r.int64(14);
  m.created_at = from_unix_micros(r.int64(15));
  if (auto t = r.opt_int64(16)) m.held_since = from_unix_micros(*t);
  return m;
}

Result<std::vector<Meter>> meters(store::Database& db, const std::string& sql, std::initializer_list<store::Arg> args) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<Meter> out;
  out.reserve(rows->size());
  for (const auto& r : *rows) out.push_back(meter_from(r));
  return out;
}

std::int64_t whole_seconds(SysTime from, SysTime to) {
  return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(to - from).count());
}

std::int64_t quantity_per_second(const Meter& m) { return is_compute(m.kind) ? 1 : m.gib; }

std::string describe(const Meter& m, std::int64_t quantity) {
  if (is_compute(m.kind))
    return std::string(to_string(m.kind)) + " " + std::to_string(quantity) + " s at " + std::to_string(m.rate) +
           " per hour";
  return std::string(to_string(m.kind)) + " " + std::to_string(m.gib) + " GiB, " + std::to_string(quantity) +
         " GiB-s";
}

// The charge a settlement at `t` makes, and the meter row it leaves (not yet written).
struct Settlement {
  NewEntry entry;
  std::int64_t charged = 0, settled_quantity = 0;
};
std::optional<Settlement> settlement_of(const Meter& m, SysTime t) {
  const std::int64_t due = due_at(m, t);
  if (due <= 0) return std::nullopt;
  const std::int64_t quantity = quantity_at(m, t) - m.settled_quantity;
  Settlement s;
  s.entry = NewEntry{EntryKind::charge, -due, m.user_id, m.resource, std::string(to_string(m.kind)), quantity,
                     describe(m, quantity)};
  s.charged = m.charged + due;
  s.settled_quantity = quantity_at(m, t);
  return s;
}

Status write_settled(store::Database& db, const Meter& m, const Settlement& s, SysTime t) {
  if (auto r = db.run("UPDATE meters SET charged = ?, settled_quantity = ?, settled_until = ?, generation = generation + 1 "
                      "WHERE id = ? AND generation = ?",
                      {s.charged, s.settled_quantity, to_unix_micros(t), m.id, m.generation});
      !r)
    return r;
  if (db.changes() != 1) return fail(ErrorCode::conflict, "meter " + m.id + " changed during its settlement");
  return ok();
}

}  // namespace

std::string_view to_string(MeterKind kind) {
  switch (kind) {
    case MeterKind::compute: return "compute";
    case MeterKind::compute_no_gpu: return "compute_no_gpu";
    case MeterKind::system_disk: return "system_disk";
    case MeterKind::data_disk: return "data_disk";
    case MeterKind::snapshot: return "snapshot";
    case MeterKind::image: return "image";
  }
  return "compute";
}

std::optional<MeterKind> parse_meter_kind(std::string_view t) {
  for (auto k : {MeterKind::compute, MeterKind::compute_no_gpu, MeterKind::system_disk, MeterKind::data_disk,
                 MeterKind::snapshot, MeterKind::image})
    if (to_string(k) == t) return k;
  return std::nullopt;
}

bool is_compute(MeterKind kind) { return kind == MeterKind::compute || kind == MeterKind::compute_no_gpu; }

namespace {
// A held meter accrues nothing past held_since.
SysTime counted_until(const Meter& m, SysTime t) { return m.held_since && *m.held_since < t ? *m.held_since : t; }
}  // namespace

std::int64_t accrued_at(const Meter& m, SysTime t) {
  if (!m.open_since) return m.accrued;
  return m.accrued + m.rate * whole_seconds(*m.open_since, counted_until(m, t));
}

std::int64_t quantity_at(const Meter& m, SysTime t) {
  if (!m.open_since) return m.quantity;
  return m.quantity + quantity_per_second(m) * whole_seconds(*m.open_since, counted_until(m, t));
}

std::int64_t due_at(const Meter& m, SysTime t) {
  return std::max<std::int64_t>(0, accrued_at(m, t) / m.divisor - m.charged);
}

Result<std::optional<Meter>> load_meter(store::Database& db, const std::string& resource, MeterKind kind) {
  auto found = meters(db, std::string(kMeterColumns) + "WHERE resource = ? AND kind = ?",
                      {resource, std::string(to_string(kind))});
  if (!found) return fail(found.error());
  if (found->empty()) return std::optional<Meter>{};
  return std::optional<Meter>{std::move(found->front())};
}

Result<std::vector<Meter>> meters_of_resource(store::Database& db, const std::string& resource) {
  return meters(db, std::string(kMeterColumns) + "WHERE resource = ? ORDER BY kind", {resource});
}

Result<std::vector<Meter>> open_meters(store::Database& db) {
  return meters(db, std::string(kMeterColumns) + "WHERE open_since IS NOT NULL ORDER BY account_id, id", {});
}

Result<std::vector<Meter>> open_meters_of_account(store::Database& db, const std::string& account_id) {
  return meters(db, std::string(kMeterColumns) + "WHERE account_id = ? AND open_since IS NOT NULL ORDER BY id",
                {account_id});
}

Status open_meter(store::Database& db, const std::string& user_id, const std::string& resource, MeterKind kind,
                  std::int64_t rate, std::int64_t gib, SysTime since) {
  auto existing = load_meter(db, resource, kind);
  if (!existing) return fail(existing.error());
  if (!*existing) {
    auto account = account_of_user(db, user_id);
    if (!account) return fail(account.error());
    db.note_billing_change(account->id);
    return db.run("INSERT INTO meters (id, account_id, user_id, resource, kind, divisor, rate, gib, open_since, "
                  "settled_until, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  {new_id("m"), account->id, user_id, resource, std::string(to_string(kind)),
                   is_compute(kind) ? kComputeDivisor : kStorageDivisor, rate, gib, to_unix_micros(since),
                   to_unix_micros(since), to_unix_micros(since)});
  }
  const Meter& m = **existing;
  if (m.open_since && m.rate == rate && m.gib == gib) return ok();
  // Fold the open interval into the closed totals, then open again at the new rate.
  if (auto s = db.run("UPDATE meters SET accrued = ?, quantity = ?, rate = ?, gib = ?, open_since = ?, held_since = NULL, "
                      "generation = generation + 1 WHERE id = ? AND generation = ?",
                      {accrued_at(m, since), quantity_at(m, since), rate, gib, to_unix_micros(since), m.id, m.generation});
      !s)
    return s;
  if (db.changes() != 1) return fail(ErrorCode::conflict, "meter " + m.id + " changed while opening");
  db.note_billing_change(m.account_id);
  return ok();
}

Status close_meter(store::Database& db, const std::string& resource, MeterKind kind, SysTime until, SysTime now) {
  auto existing = load_meter(db, resource, kind);
  if (!existing) return fail(existing.error());
  if (!*existing || !(*existing)->open_since) return ok();
  Meter m = **existing;
  m.held_since.reset();  // the run's real end is known: it counts to it
  const SysTime end = std::max(until, *m.open_since);
  if (auto s = db.run("UPDATE meters SET accrued = ?, quantity = ?, open_since = NULL, held_since = NULL, "
                      "generation = generation + 1 "
                      "WHERE id = ? AND generation = ?",
                      {accrued_at(m, end), quantity_at(m, end), m.id, m.generation});
      !s)
    return s;
  if (db.changes() != 1) return fail(ErrorCode::conflict, "meter " + m.id + " changed while closing");
  db.note_billing_change(m.account_id);
  m.accrued = accrued_at(m, end);
  m.quantity = quantity_at(m, end);
  m.open_since.reset();
  m.generation += 1;
  return settle_meter(db, m, std::max(now, end));
}

Status void_meter(store::Database& db, const std::string& resource, MeterKind kind, SysTime now) {
  auto existing = load_meter(db, resource, kind);
  if (!existing) return fail(existing.error());
  if (!*existing) return ok();
  Meter m = **existing;
  if (!m.open_since && m.accrued == 0 && m.quantity == 0 && m.charged == 0) return ok();
  if (auto s = db.run("UPDATE meters SET accrued = 0, quantity = 0, open_since = NULL, generation = generation + 1 "
                      "WHERE id = ? AND generation = ?",
                      {m.id, m.generation});
      !s)
    return s;
  if (db.changes() != 1) return fail(ErrorCode::conflict, "meter " + m.id + " changed while voiding it");
  db.note_billing_change(m.account_id);
  m.accrued = 0;
  m.quantity = 0;
  m.open_since.reset();
  m.generation += 1;
  return settle_meter(db, m, now);  // charged above 0: refunded
}

Status follow_storage(store::Database& db, const std::string& user_id, const std::string& resource, MeterKind kind,
                      std::optional<std::int64_t> gib, std::int64_t micros_per_gib_hour, SysTime now) {
  if (!gib || *gib <= 0) return close_meter(db, resource, kind, now, now);
  return open_meter(db, user_id, resource, kind, *gib * micros_per_gib_hour, *gib, now);
}

Status settle_meter(store::Database& db, const Meter& m, SysTime t) {
  // Charged past what accrued: a run closed at an exit the daemon saw after a settlement had
  // already charged beyond it. The difference goes back as a refund on the same resource
  // (negative quantity: the seconds or GiB-seconds returned), so charged = floor(accrued ÷ unit).
  if (const std::int64_t owed = accrued_at(m, t) / m.divisor; owed < m.charged) {
    const std::int64_t quantity = quantity_at(m, t) - m.settled_quantity;
    Settlement back;
    back.entry = NewEntry{EntryKind::refund, m.charged - owed, m.user_id, m.resource, std::string(to_string(m.kind)),
                          quantity, std::string(to_string(m.kind)) + " charged past its end: " + describe(m, -quantity) +
                                        " returned"};
    back.charged = owed;
    back.settled_quantity = quantity_at(m, t);
    if (auto posted = post_entry(db, m.account_id, back.entry, t); !posted) return fail(posted.error());
    return write_settled(db, m, back, t);
  }
  auto s = settlement_of(m, t);
  if (!s) return ok();
  if (auto posted = post_entry(db, m.account_id, s->entry, t); !posted) return fail(posted.error());
  return write_settled(db, m, *s, t);
}

namespace {

// Every selected open meter's due and quantity at T, as SQL: the same integer arithmetic as
// accrued_at/due_at (whole seconds; integer division floors for these non-negative values),
// portable to PostgreSQL. Binds: T, T, T, T, then the span's first and last when there is one.
std::string owing_meters_sql(bool spanned) {
  const std::string amount = "(accrued + rate * ((? - open_since) / 1000000)) / divisor - charged";
  return "SELECT account_id, user_id, resource, kind, rate, gib, " + amount +
         ", quantity + (CASE WHEN kind IN ('compute', 'compute_no_gpu') THEN 1 ELSE gib END) * "
         "((? - open_since) / 1000000) - settled_quantity "
         "FROM meters WHERE open_since IS NOT NULL AND held_since IS NULL AND open_since <= ? AND " +
         amount + " > 0" + (spanned ? " AND account_id >= ? AND account_id <= ?" : "") + " ORDER BY account_id";
}

// One open meter's share of a pass.
struct Owed {
  std::string resource;
  MeterKind kind = MeterKind::compute;
  std::int64_t rate = 0, gib = 0, amount = 0, quantity = 0;
};
struct OwingAccount {
  std::string id;
  std::map<std::pair<std::string, MeterKind>, std::vector<Owed>> by_user_and_kind;
};

// The entry for one (user, kind) group of an account: a single meter's entry reads as
// settle_meter's would; several meters' become one entry with a line each.
struct GroupEntry {
  NewEntry entry;
  std::vector<EntryLine> lines;
};
GroupEntry group_entry(const std::string& user_id, MeterKind kind, std::vector<Owed>& owed) {
  std::int64_t amount = 0, quantity = 0;
  for (const auto& o : owed) {
    amount += o.amount;
    quantity += o.quantity;
  }
  const std::string kind_text(to_string(kind));
  if (owed.size() == 1) {
    Meter m;
    m.kind = kind;
    m.rate = owed.front().rate;
    m.gib = owed.front().gib;
    return {NewEntry{EntryKind::charge, -amount, user_id, owed.front().resource, kind_text, quantity, describe(m, quantity)},
            {}};
  }
  std::sort(owed.begin(), owed.end(), [](const Owed& a, const Owed& b) { return a.resource < b.resource; });
  GroupEntry g{NewEntry{EntryKind::charge, -amount, user_id, std::nullopt, kind_text, quantity,
                        kind_text + ": " + std::to_string(owed.size()) + " resources, " + std::to_string(quantity) +
                            (is_compute(kind) ? " s" : " GiB-s")},
               {}};
  g.lines.reserve(owed.size());
  for (const auto& o : owed) g.lines.push_back(EntryLine{o.resource, kind_text, o.quantity, -o.amount});
  return g;
}

// Held meters (an unreachable host's instances, few and brief) are settled one by one, each
// up to its held_since.
Status settle_held(store::Database& db, SysTime t, const std::optional<AccountSpan>& span, SettlementSummary& summary) {
  const std::string where = "WHERE open_since IS NOT NULL AND held_since IS NOT NULL AND open_since <= ?";
  auto held = span ? meters(db, std::string(kMeterColumns) + where + " AND account_id >= ? AND account_id <= ? ORDER BY id",
                            {to_unix_micros(t), span->first, span->last})
                   : meters(db, std::string(kMeterColumns) + where + " ORDER BY id", {to_unix_micros(t)});
  if (!held) return fail(held.error());
  for (const Meter& m : *held) {
    const std::int64_t due = due_at(m, t);
    if (due <= 0) continue;
    if (auto s = settle_meter(db, m, t); !s) return s;
    summary.meters += 1;
    summary.entries += 1;
    summary.charged += due;
  }
  return ok();
}

// A pass over the selected accounts: every owing meter read once, one ledger entry per
// (account, user, meter kind) appended after the account's chain (seq and balance_after
// computed here, then the compare-and-set on the account), and every meter's settled mark
// moved by one set-based UPDATE with the same arithmetic. Rows written grow with accounts and
// kinds, not meters: 100,000 instances over 10,000 users are 20,000 entries, not 200,000.
// `span` nullopt: every account.
Result<SettlementSummary> settle_selected(store::Database& db, SysTime t, const std::optional<AccountSpan>& span) {
  const std::int64_t T = to_unix_micros(t);
  std::vector<OwingAccount> accounts;
  std::optional<std::string> bad_kind;
  auto collect = [&](const store::RowView& r) {
    const auto kind = parse_meter_kind(r.text(3));
    if (!kind) {
      bad_kind = std::string(r.text(3));
      return false;
    }
    if (accounts.empty() || accounts.back().id != r.text(0)) accounts.push_back(OwingAccount{std::string(r.text(0)), {}});
    accounts.back().by_user_and_kind[{std::string(r.text(1)), *kind}].push_back(
        Owed{std::string(r.text(2)), *kind, r.int64(4), r.int64(5), r.int64(6), r.int64(7)});
    return true;
  };
  const std::string sql = owing_meters_sql(span.has_value());
  if (auto s = span ? db.each(sql, {T, T, T, T, span->first, span->last}, collect) : db.each(sql, {T, T, T, T}, collect); !s)
    return fail(s.error());
  if (bad_kind) return fail(ErrorCode::internal, "meter kind " + *bad_kind + " is unknown");
  SettlementSummary summary;
  // Every owing account read at once, its entries chained here, then inserted and the
  // accounts moved a chunk of rows per statement (a round trip each on PostgreSQL).
  std::optional<std::pair<std::string, std::string>> range;
  if (span) range.emplace(span->first, span->last);
  auto loaded = accounts.empty() ? Result<std::map<std::string, Account>>() : load_accounts(db, range);
  if (!loaded) return fail(loaded.error());
  std::vector<ChainedEntry> rows;
  std::vector<AccountAppend> appends;
  appends.reserve(accounts.size());
  for (auto& a : accounts) {
    auto found = loaded->find(a.id);
    if (found == loaded->end()) return fail(ErrorCode::not_found, "billing account " + a.id + " not found");
    const Account& before = found->second;
    std::int64_t seq = before.entries, balance = before.balance, total = 0;
    for (auto& [key, owed] : a.by_user_and_kind) {
      const GroupEntry g = group_entry(key.first, key.second, owed);
      const NewEntry& e = g.entry;
      ++seq;
      balance += e.amount;
      total += e.amount;
      rows.push_back(ChainedEntry{"le-" + a.id.substr(std::min<std::size_t>(3, a.id.size())) + "-" + std::to_string(seq),
                                  a.id, seq, e.amount, balance, EntryKind::charge, e.user_id, e.resource,
                                  e.resource_kind, e.quantity, e.description, encode_lines(g.lines)});
      summary.meters += owed.size();
    }
    appends.push_back(AccountAppend{before, total, seq - before.entries, a.by_user_and_kind.begin()->first.first});
    summary.entries += static_cast<std::size_t>(seq - before.entries);
    summary.charged += -total;
  }
  if (auto s = insert_chained_entries(db, rows, t); !s) return fail(s.error());
  if (auto s = apply_appends(db, appends, t); !s) return fail(s.error());
  if (accounts.empty()) {
    if (auto s = settle_held(db, t, span, summary); !s) return fail(s.error());
    return summary;
  }
  fault_point("billing.settle.after_ledger_insert");
  const std::string update_sql = std::string("UPDATE meters SET charged = (accrued + rate * ((? - open_since) / 1000000)) / divisor, "
                      "settled_quantity = quantity + (CASE WHEN kind IN ('compute', 'compute_no_gpu') THEN 1 ELSE gib END) * "
                      "((? - open_since) / 1000000), settled_until = ?, generation = generation + 1 "
                      "WHERE open_since IS NOT NULL AND held_since IS NULL AND open_since <= ?") +
      (span ? " AND account_id >= ? AND account_id <= ?" : "") +
      " AND (accrued + rate * ((? - open_since) / 1000000)) / divisor > charged";
  if (auto s = span ? db.run(update_sql, {T, T, T, T, span->first, span->last, T}) : db.run(update_sql, {T, T, T, T, T});
      !s)
    return fail(s.error());
  if (static_cast<std::size_t>(db.changes()) != summary.meters)
    return fail(ErrorCode::conflict, "meters changed during their settlement; try again");
  if (auto s = settle_held(db, t, span, summary); !s) return fail(s.error());
  return summary;
}

}  // namespace

Result<SettlementSummary> settle_open_meters(store::Database& db, SysTime t, const std::optional<std::string>& account_id) {
  if (!account_id) return settle_selected(db, t, std::nullopt);
  return settle_selected(db, t, AccountSpan{*account_id, *account_id});
}

Result<SettlementSummary> settle_open_meters(store::Database& db, SysTime t, const AccountSpan& span) {
  return settle_selected(db, t, span);
}

Result<std::vector<AccountSpan>> settlement_spans(store::Database& db, SysTime t, std::size_t max_meters) {
  auto rows = db.all("SELECT account_id, COUNT(*) FROM meters WHERE open_since IS NOT NULL AND open_since <= ? "
                     "GROUP BY account_id ORDER BY account_id",
                     {to_unix_micros(t)});
  if (!rows) return fail(rows.error());
  std::vector<AccountSpan> spans;
  std::size_t in_span = 0;
  for (const auto& r : *rows) {
    const auto count = static_cast<std::size_t>(r.int64(1));
    if (spans.empty() || (in_span > 0 && in_span + count > max_meters)) {
      spans.push_back(AccountSpan{r.text(0), r.text(0)});
      in_span = 0;
    }
    spans.back().last = r.text(0);
    in_span += count;
  }
  return spans;
}

Result<std::int64_t> compute_charged(store::Database& db, const std::string& instance_id) {
  auto row = db.one("SELECT COALESCE(SUM(charged), 0) FROM meters WHERE resource = ? AND kind IN ('compute', "
                    "'compute_no_gpu')",
                    {instance_id});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

Result<std::int64_t> compute_cost_at(store::Database& db, const std::string& instance_id, SysTime now) {
  auto all = meters_of_resource(db, instance_id);
  if (!all) return fail(all.error());
  std::int64_t total = 0;
  for (const auto& m : *all)
    if (is_compute(m.kind)) total += m.charged + due_at(m, now);
  return total;
}

Result<std::int64_t> unsettled_of_account(store::Database& db, const std::string& account_id, SysTime now) {
  auto open = open_meters_of_account(db, account_id);
  if (!open) return fail(open.error());
  std::int64_t total = 0;
  for (const auto& m : *open) total += due_at(m, now);
  return total;
}

Status hold_compute_meters(store::Database& db, const std::vector<std::string>& instance_ids, SysTime since) {
  for (const auto& id : instance_ids) {
    if (auto s = db.run("UPDATE meters SET held_since = ?, generation = generation + 1 WHERE resource = ? AND kind IN "
                        "('compute', 'compute_no_gpu') AND open_since IS NOT NULL AND held_since IS NULL",
                        {to_unix_micros(since), id});
        !s)
      return s;
  }
  return ok();
}

Status release_compute_meters(store::Database& db, const std::vector<std::string>& instance_ids) {
  for (const auto& id : instance_ids) {
    if (auto s = db.run("UPDATE meters SET held_since = NULL, generation = generation + 1 WHERE resource = ? AND kind IN "
                        "('compute', 'compute_no_gpu') AND held_since IS NOT NULL",
                        {id});
        !s)
      return s;
  }
  return ok();
}

}  // namespace gpucloud::billing
