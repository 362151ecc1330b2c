#include "store/pg_database.h"

#include <libpq-fe.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "store/leader_lease.h"
#include "store/sql_dialect.h"

namespace gpucloud::store {
namespace {

// Type OIDs from PostgreSQL's catalog (pg_type.dat): stable across versions.
constexpr Oid kBoolOid = 16, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kFloat4Oid = 700, kFloat8Oid = 701,
              kNumericOid = 1700;

std::int64_t parse_int64(std::string_view text) {
  std::int64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// One column of a result, converted as its type says.
Value read_value(const PGresult* result, int row, int column) {
  if (PQgetisnull(result, row, column)) return nullptr;
  const char* p = PQgetvalue(result, row, column);
  std::string_view text(p, static_cast<std::size_t>(PQgetlength(result, row, column)));
  switch (PQftype(result, column)) {
    case kInt8Oid:
    case kInt4Oid:
    case kInt2Oid: return parse_int64(text);
    case kBoolOid: return std::int64_t{text == "t" ? 1 : 0};
    case kFloat4Oid:
    case kFloat8Oid: return std::strtod(p, nullptr);
    case kNumericOid:
      // SUM over BIGINT is NUMERIC: a whole number stays exact.
      if (text.find_first_of(".eE") == std::string_view::npos) return parse_int64(text);
      return std::strtod(p, nullptr);
    default: return std::string(text);
  }
}

class PgRowView final : public RowView {
 public:
  PgRowView(const PGresult* result, int row) : result_(result), row_(row) {}
  void move_to(int row) { row_ = row; }
  bool is_null(int i) const override { return PQgetisnull(result_, row_, i) != 0; }
  std::int64_t int64(int i) const override {
    if (is_null(i)) return 0;
    if (PQftype(result_, i) == kBoolOid) return text(i) == "t" ? 1 : 0;
    return parse_int64(text(i));
  }
  std::string_view text(int i) const override {
    return std::string_view(PQgetvalue(result_, row_, i), static_cast<std::size_t>(PQgetlength(result_, row_, i)));
  }

 private:
  const PGresult* result_;
  int row_;
};

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// One statement prepared on this connection.
struct Prepared {
  std::string name;
};

}  // namespace

class PgDatabase final : public Database {
 public:
  PgDatabase(PGconn* conn, std::string url) : Database(std::move(url)), conn_(conn) {}
  ~PgDatabase() override { PQfinish(conn_); }

  Status exec_script(std::string_view sql) override {
    reconnect_if_lost();
    ResultPtr result(PQexec(conn_, to_postgres(sql).c_str()));
    if (auto s = check(result.get(), "store"); !s) return s;
    if (sql.ends_with("COMMIT")) unique_retries_ = 0;
    return ok();
  }
  Status run(std::string_view sql, std::initializer_list<Arg> args) override {
    return run_args(sql, std::span<const Arg>(args.begin(), args.size()));
  }
  Status run_args(std::string_view sql, std::span<const Arg> args) override {
    auto result = execute(sql, args);
    if (!result) return fail(result.error());
    return ok();
  }
  Result<std::optional<Row>> one(std::string_view sql, std::initializer_list<Arg> args) override {
    auto result = execute(sql, std::span<const Arg>(args.begin(), args.size()));
    if (!result) return fail(result.error());
    std::optional<Row> row;
    if (PQntuples(result->get()) > 0) row.emplace(read_row(result->get(), 0));
    return row;
  }
  Result<std::vector<Row>> all(std::string_view sql, std::initializer_list<Arg> args) override {
    auto result = execute(sql, std::span<const Arg>(args.begin(), args.size()));
    if (!result) return fail(result.error());
    std::vector<Row> rows;
    const int n = PQntuples(result->get());
    rows.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) rows.emplace_back(read_row(result->get(), r));
    return rows;
  }
  Status each(std::string_view sql, std::initializer_list<Arg> args,
              const std::function<bool(const RowView&)>& fn) override {
    auto result = execute(sql, std::span<const Arg>(args.begin(), args.size()));
    if (!result) return fail(result.error());
    PgRowView view(result->get(), 0);
    const int n = PQntuples(result->get());
    for (int r = 0; r < n; ++r) {
      view.move_to(r);
      if (!fn(view)) break;
    }
    return ok();
  }
  std::int64_t changes() const override { return changes_; }
  Dialect dialect() const override { return Dialect::postgres; }
  std::string_view begin_write() const override { return "BEGIN ISOLATION LEVEL SERIALIZABLE"; }
  std::string_view begin_read() const override { return "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"; }
  bool take_retryable_failure() override { return std::exchange(retryable_, false); }

 private:
  static std::vector<Value> read_row(const PGresult* result, int row) {
    const int columns = PQnfields(result);
    std::vector<Value> values;
    values.reserve(static_cast<std::size_t>(columns));
    for (int c = 0; c < columns; ++c) values.push_back(read_value(result, row, c));
    return values;
  }

  // An error from the server, classified by its SQLSTATE.
  Error error_of(const PGresult* result, std::string_view what) {
    const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    std::string_view code = state ? state : "";
    ErrorCode ec = ErrorCode::internal;
    if (code.substr(0, 2) == "23") ec = ErrorCode::conflict;  // integrity: unique, check, foreign key
    if (code == "40001" || code == "40P01") {
      ec = ErrorCode::unavailable;
      retryable_ = true;
    }
    // A unique key taken by a transaction that committed meanwhile (two replicas appending
    // the same account's next ledger entry) comes back as a unique violation, not as a
    // serialization failure: run again, it sees that row. A key that is simply taken fails
    // the same way each time, so this is tried only kUniqueRetries times in a row.
    if (code == "23505" && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      if (++unique_retries_ <= kUniqueRetries) retryable_ = true;
      else unique_retries_ = 0;
    }
    if (code.substr(0, 2) == "08" || PQstatus(conn_) == CONNECTION_BAD) ec = ErrorCode::unavailable;
    if (code == kLeaseFenceRefused) {  // gpucloud_lease_fence (migration 31): the message is the answer
      const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
      return Error{ErrorCode::conflict, primary ? primary : "the lease moved on", {}, 0};
    }
    std::string message = result ? PQresultErrorMessage(result) : PQerrorMessage(conn_);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    return Error{ec, std::string(what) + ": " + message, {}, 0};
  }

  Status check(const PGresult* result, std::string_view what) {
    const auto status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return ok();
    return fail(error_of(result, what));
  }

  // Prepared once per statement and per kind of arguments: an integer is declared BIGINT and
  // a real DOUBLE PRECISION, so `CASE WHEN ... THEN ? ELSE ? END` added to a BIGINT column is
  // integer arithmetic (undeclared, PostgreSQL would take it for text); text and NULL stay
  // undeclared, typed by where they stand.
  // A connection the server closed (a restart, a failover behind a proxy) is opened again
  // before the next statement; a transaction that was open on it failed with it. Never
  // re-run here: a COMMIT whose answer was lost may have committed.
  void reconnect_if_lost() {
    if (PQstatus(conn_) != CONNECTION_BAD) return;
    PQreset(conn_);
    statements_.clear();  // prepared statements died with the old session
    if (PQstatus(conn_) == CONNECTION_OK) {
      ResultPtr zone(PQexec(conn_, "SET TIME ZONE 'UTC'"));
    }
  }

  Result<const Prepared*> prepare(std::string_view sql, std::span<const Arg> args) {
    reconnect_if_lost();
    std::string key(sql);
    key += '\0';
    std::vector<Oid> types;
    types.reserve(args.size());
    for (const Arg& arg : args) {
      if (std::holds_alternative<std::int64_t>(arg.value)) {
        types.push_back(kInt8Oid);
        key += 'i';
      } else if (std::holds_alternative<double>(arg.value)) {
        types.push_back(kFloat8Oid);
        key += 'd';
      } else {
        types.push_back(0);
        key += 'u';
      }
    }
    if (auto it = statements_.find(key); it != statements_.end()) return &it->second;
    Prepared prepared{"s" + std::to_string(statements_.size() + 1)};
    ResultPtr result(PQprepare(conn_, prepared.name.c_str(), to_postgres(sql).c_str(), static_cast<int>(types.size()),
                               types.empty() ? nullptr : types.data()));
    if (auto s = check(result.get(), "prepare"); !s) return fail(s.error());
    return &statements_.emplace(std::move(key), std::move(prepared)).first->second;
  }

  Result<ResultPtr> execute(std::string_view sql, std::span<const Arg> args) {
    auto prepared = prepare(sql, args);
    if (!prepared) return fail(prepared.error());
    // Every parameter travels as text; PostgreSQL parses it as the type it inferred.
    std::vector<std::string> texts;
    texts.reserve(args.size());
    std::vector<const char*> values;
    values.reserve(args.size());
    for (const Arg& arg : args) {
      if (std::holds_alternative<std::nullptr_t>(arg.value)) {
        texts.emplace_back();
        values.push_back(nullptr);
        continue;
      }
      if (auto* i = std::get_if<std::int64_t>(&arg.value)) {
        texts.push_back(std::to_string(*i));
      } else if (auto* d = std::get_if<double>(&arg.value)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", *d);
        texts.emplace_back(buf);
      } else {
        texts.push_back(std::get<std::string>(arg.value));
      }
      values.push_back(nullptr);
    }
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!std::holds_alternative<std::nullptr_t>(args[i].value)) values[i] = texts[i].c_str();
    ResultPtr result(PQexecPrepared(conn_, (*prepared)->name.c_str(), static_cast<int>(values.size()), values.data(),
                                    nullptr, nullptr, 0));
    if (auto s = check(result.get(), "step"); !s) return fail(s.error());
    const char* tuples = PQcmdTuples(result.get());
    changes_ = tuples && *tuples ? parse_int64(tuples) : 0;
    return result;
  }

  PGconn* conn_;
  std::unordered_map<std::string, Prepared> statements_;
  static constexpr int kUniqueRetries = 3;
  std::int64_t changes_ = 0;
  bool retryable_ = false;
  int unique_retries_ = 0;
};

bool is_postgres_url(std::string_view url) {
  return url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
}

std::string redacted_url(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  auto at = url.find('@', scheme + 3);
  auto slash = url.find('/', scheme + 3);
  if (at == std::string_view::npos || (slash != std::string_view::npos && slash < at)) return std::string(url);
  auto colon = url.find(':', scheme + 3);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return std::string(url.substr(0, colon)) + ":***" + std::string(url.substr(at));
}

Result<PGconn*> open_pg_connection(const PgConnectOptions& options) {
  const char* keywords[] = {"dbname", "password", "application_name", "connect_timeout", nullptr};
  const char* values[] = {options.url.c_str(), options.password.empty() ? nullptr : options.password.c_str(),
                          options.application_name.c_str(), "10", nullptr};
  // A NULL value ends libpq's list: leave the password out when there is none.
  if (options.password.empty()) {
    keywords[1] = "application_name";
    values[1] = options.application_name.c_str();
    keywords[2] = "connect_timeout";
    values[2] = "10";
    keywords[3] = nullptr;
    values[3] = nullptr;
  }
  PGconn* conn = PQconnectdbParams(keywords, values, 1);
  if (!conn) return fail(ErrorCode::unavailable, "store: out of memory connecting to PostgreSQL");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    return fail(ErrorCode::unavailable, "cannot connect to store " + redacted_url(options.url) + ": " + message);
  }
  return conn;
}

Result<std::unique_ptr<Database>> connect_postgres(const PgConnectOptions& options) {
  auto opened = open_pg_connection(options);
  if (!opened) return fail(opened.error());
  PGconn* conn = *opened;
  // Notices (a CREATE ... IF NOT EXISTS that found the table) are not errors: say nothing.
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  auto db = std::make_unique<PgDatabase>(conn, redacted_url(options.url));
  if (auto s = db->exec_script("SET TIME ZONE 'UTC'"); !s) return fail(s.error());
  // A transaction of ours never waits on anything outside it: one idle for 20 s belongs to a
  // process that was stopped or cut off (a deposed leader), and its row locks would hold up
  // the replica that took over. The server ends such a session; its work is refused anyway.
  if (auto s = db->exec_script("SET idle_in_transaction_session_timeout = '20s'"); !s) return fail(s.error());
  return std::unique_ptr<Database>(std::move(db));
}

}  // namespace gpucloud::store
