#include "store/store_copy.h"

#include <cstdio>
#include <map>
#include <set>

#include "store/migrations.h"

namespace gpucloud::store {
namespace {

// Rows go across as literal VALUES lists, this many to a statement.
constexpr std::int64_t kRowsPerInsert = 500;

std::string quoted_identifier(const std::string& name) { return "\"" + name + "\""; }

std::string sql_literal(const Value& v) {
  if (std::holds_alternative<std::nullptr_t>(v)) return "NULL";
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    return buf;
  }
  std::string out = "'";
  for (char c : std::get<std::string>(v)) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// A Row keeps SQLite's own type for each value: a number reads back as a double (a REAL), or
// as text that is its decimal digits (an INTEGER); text is not a number at all.
Value value_of(const Row& row, std::size_t c) {
  if (row.is_null(c)) return nullptr;
  auto number = row.opt_double(c);
  if (!number) return row.text(c);
  if (row.text(c).empty()) return *number;
  return row.int64(c);
}

// The source's tables (not the schema's own bookkeeping), each after the tables it references.
Result<std::vector<std::string>> tables_in_copy_order(Database& from) {
  auto names = from.all(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'schema_version' "
      "ORDER BY name");
  if (!names) return fail(names.error());
  std::map<std::string, std::set<std::string>> references;
  for (const Row& row : *names) {
    const std::string table = row.text(0);
    auto refs = from.all("SELECT \"table\" FROM pragma_foreign_key_list(?)", {table});
    if (!refs) return fail(refs.error());
    auto& set = references[table];
    for (const Row& r : *refs)
      if (r.text(0) != table) set.insert(r.text(0));
  }
  std::vector<std::string> order;
  std::set<std::string> placed;
  while (order.size() < references.size()) {
    bool progressed = false;
    for (const auto& [table, refs] : references) {
      if (placed.count(table)) continue;
      bool ready = true;
      for (const auto& r : refs)
        if (!placed.count(r) && references.count(r)) ready = false;
      if (!ready) continue;
      order.push_back(table);
      placed.insert(table);
      progressed = true;
    }
    if (!progressed) return fail(ErrorCode::internal, "migrate-store: the tables' references form a cycle");
  }
  return order;
}

Result<std::int64_t> count_rows(Database& db, const std::string& table) {
  auto row = db.one("SELECT COUNT(*) FROM " + quoted_identifier(table));
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

// account -> "entries:sum"
Result<std::map<std::string, std::string>> ledger_totals(Database& db) {
  auto rows = db.all("SELECT account_id, COUNT(*), SUM(amount) FROM ledger_entries GROUP BY account_id");
  if (!rows) return fail(rows.error());
  std::map<std::string, std::string> totals;
  for (const Row& r : *rows) totals[r.text(0)] = std::to_string(r.int64(1)) + ":" + std::to_string(r.int64(2));
  return totals;
}

Status copy_table(Database& from, Database& to, const std::string& table, std::int64_t& copied) {
  auto columns = from.all("SELECT name FROM pragma_table_info(?) ORDER BY cid", {table});
  if (!columns) return fail(columns.error());
  std::string list;
  for (const Row& c : *columns) list += (list.empty() ? "" : ", ") + quoted_identifier(c.text(0));
  const std::string insert = "INSERT INTO " + quoted_identifier(table) + " (" + list + ") VALUES ";
  for (std::int64_t offset = 0;; offset += kRowsPerInsert) {
    auto rows = from.all("SELECT " + list + " FROM " + quoted_identifier(table) + " LIMIT ? OFFSET ?",
                         {kRowsPerInsert, offset});
    if (!rows) return fail(rows.error());
    if (rows->empty()) break;
    std::string sql = insert;
    for (std::size_t r = 0; r < rows->size(); ++r) {
      const Row& row = (*rows)[r];
      sql += r ? ", (" : "(";
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (c) sql += ", ";
        sql += sql_literal(value_of(row, c));
      }
      sql += ")";
    }
    if (auto s = to.exec_script(sql); !s)
      return fail(ErrorCode::internal, "migrate-store: copying " + table + ": " + s.error().detail);
    copied += static_cast<std::int64_t>(rows->size());
    if (static_cast<std::int64_t>(rows->size()) < kRowsPerInsert) break;
  }
  return ok();
}

}  // namespace

Result<StoreCopyReport> copy_store(Database& from, Database& to) {
  if (from.dialect() != Dialect::sqlite || to.dialect() != Dialect::postgres)
    return fail(ErrorCode::invalid_argument, "migrate-store copies a sqlite:// store into a postgresql:// one");
  auto from_version = apply_migrations(from, schema_migrations());
  if (!from_version) return fail(from_version.error());
  auto to_version = apply_migrations(to, schema_migrations());
  if (!to_version) return fail(to_version.error());
  auto order = tables_in_copy_order(from);
  if (!order) return fail(order.error());

  StoreCopyReport report;
  report.schema_version = *from_version;
  // One snapshot of the source (a daemon still running on it would be a mistake, but a copy
  // must not mix two moments) and one transaction on the target.
  if (auto s = from.exec_script("BEGIN"); !s) return fail(s.error());
  if (auto s = to.exec_script("BEGIN ISOLATION LEVEL SERIALIZABLE"); !s) return fail(s.error());
  auto abort = [&](Error e) -> Result<StoreCopyReport> {
    (void)to.exec_script("ROLLBACK");
    (void)from.exec_script("ROLLBACK");
    return fail(std::move(e));
  };
  auto users = count_rows(to, "users");
  if (!users) return abort(users.error());
  if (*users > 0)
    return abort(Error{ErrorCode::conflict,
                       "migrate-store: the target already holds an installation (" + std::to_string(*users) +
                           " users): copy into an empty database",
                       {}, 0});
  // The migrations' own rows (the platform's billing accounts, ...) come from the source.
  for (auto it = order->rbegin(); it != order->rend(); ++it)
    if (auto s = to.exec_script("DELETE FROM " + quoted_identifier(*it)); !s) return abort(s.error());
  for (const std::string& table : *order) {
    std::int64_t copied = 0;
    if (auto s = copy_table(from, to, table, copied); !s) return abort(s.error());
    report.tables.push_back({table, copied});
    report.rows += copied;
  }
  // Identity columns (the event sequence) continue after the copied rows.
  auto identities = to.all(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
      "AND is_identity = 'YES'");
  if (!identities) return abort(identities.error());
  for (const Row& r : *identities) {
    const std::string table = r.text(0), column = r.text(1);
    auto s = to.exec_script("SELECT setval(pg_get_serial_sequence('" + table + "', '" + column + "'), COALESCE((SELECT MAX(" +
                            quoted_identifier(column) + ") FROM " + quoted_identifier(table) + "), 0) + 1, false)");
    if (!s) return abort(s.error());
  }
  // The check: every table's count, and every account's ledger (entries and sum).
  for (const CopiedTable& t : report.tables) {
    auto source = count_rows(from, t.name);
    auto target = count_rows(to, t.name);
    if (!source || !target) return abort(source ? target.error() : source.error());
    if (*source != *target || *source != t.rows)
      return abort(Error{ErrorCode::internal,
                         "migrate-store: " + t.name + " has " + std::to_string(*source) + " rows in the source and " +
                             std::to_string(*target) + " in the copy",
                         {}, 0});
  }
  auto source_ledgers = ledger_totals(from);
  auto target_ledgers = ledger_totals(to);
  if (!source_ledgers || !target_ledgers) return abort(source_ledgers ? target_ledgers.error() : source_ledgers.error());
  if (*source_ledgers != *target_ledgers)
    return abort(Error{ErrorCode::internal, "migrate-store: the copied ledgers differ from the source's", {}, 0});
  report.ledger_accounts = static_cast<std::int64_t>(source_ledgers->size());
  for (const auto& [account, total] : *source_ledgers) report.ledger_entries += std::stoll(total.substr(0, total.find(':')));
  if (auto s = to.exec_script("COMMIT"); !s) return abort(s.error());
  (void)from.exec_script("ROLLBACK");
  return report;
}

}  // namespace gpucloud::store
