#include "store/database.h"

#include <sqlite3.h>

namespace gpucloud::store {

std::int64_t Row::int64(std::size_t i) const {
  const Value& v = values_.at(i);
  if (auto* p = std::get_if<std::int64_t>(&v)) return *p;
  if (auto* d = std::get_if<double>(&v)) return static_cast<std::int64_t>(*d);
  return 0;
}

std::string Row::text(std::size_t i) const {
  const Value& v = values_.at(i);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* p = std::get_if<std::int64_t>(&v)) return std::to_string(*p);
  return {};
}

std::optional<std::string> Row::opt_text(std::size_t i) const {
  if (is_null(i)) return std::nullopt;
  return text(i);
}

std::optional<std::int64_t> Row::opt_int64(std::size_t i) const {
  if (is_null(i)) return std::nullopt;
  return int64(i);
}

std::optional<double> Row::opt_double(std::size_t i) const {
  const Value& v = values_.at(i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* p = std::get_if<std::int64_t>(&v)) return static_cast<double>(*p);
  return std::nullopt;
}

namespace {

// The row a SQLite statement is on.
class SqliteRowView final : public RowView {
 public:
  explicit SqliteRowView(sqlite3_stmt* stmt) : stmt_(stmt) {}
  bool is_null(int i) const override { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  std::int64_t int64(int i) const override { return sqlite3_column_int64(stmt_, i); }
  std::string_view text(int i) const override {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, i))) : std::string_view();
  }

 private:
  sqlite3_stmt* stmt_;
};

}  // namespace

// One SQLite connection.
class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(sqlite3* db, std::string path) : Database(std::move(path)), db_(db) {}
  ~SqliteDatabase() override;
  Status exec_script(std::string_view sql) override;
  Status run(std::string_view sql, std::initializer_list<Arg> args) override;
  Status run_args(std::string_view sql, std::span<const Arg> args) override;
  Result<std::optional<Row>> one(std::string_view sql, std::initializer_list<Arg> args) override;
  Result<std::vector<Row>> all(std::string_view sql, std::initializer_list<Arg> args) override;
  Status each(std::string_view sql, std::initializer_list<Arg> args,
              const std::function<bool(const RowView&)>& fn) override;
  std::int64_t changes() const override;
  Dialect dialect() const override { return Dialect::sqlite; }
  std::string_view begin_write() const override { return "BEGIN IMMEDIATE"; }
  std::string_view begin_read() const override { return "BEGIN"; }
  void set_wal_pages(int pages) { wal_pages_ = pages; }

 private:
  Result<sqlite3_stmt*> prepare(std::string_view sql, std::span<const Arg> args);
  Error error(std::string_view what) const;

  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

Result<std::unique_ptr<Database>> Database::open(const std::string& path, bool read_only) {
  sqlite3* raw = nullptr;
  int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
              SQLITE_OPEN_NOMUTEX;  // one thread uses a connection at a time
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return fail(ErrorCode::unavailable, "cannot open store " + path + ": " + message);
  }
  auto db = std::make_unique<SqliteDatabase>(raw, path);
  sqlite3_busy_timeout(raw, 5000);
  std::string pragmas = "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;";
  // The writer keeps up to 64 MiB of pages: an hourly settlement rewrites every open meter's
  // row, and with the default 2 MiB it reads back through pread the pages it just spilled.
  if (!read_only) pragmas += "PRAGMA journal_mode=WAL; PRAGMA cache_size=-65536;";
  if (auto s = db->exec_script(pragmas); !s) return fail(s.error());
  // The writer does not checkpoint at its commits (SQLite's default, past 1,000 pages, copies
  // the WAL into the file and fsyncs it while the writer waits): the hook replaces that and
  // only counts, and the Store checkpoints on a thread of its own.
  if (!read_only)
    sqlite3_wal_hook(
        raw,
        [](void* self, sqlite3*, const char*, int pages) {
          static_cast<SqliteDatabase*>(self)->set_wal_pages(pages);
          return SQLITE_OK;
        },
        db.get());
  return std::unique_ptr<Database>(std::move(db));
}

SqliteDatabase::~SqliteDatabase() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Error SqliteDatabase::error(std::string_view what) const {
  int code = sqlite3_extended_errcode(db_);
  ErrorCode ec = ErrorCode::internal;
  if ((code & 0xff) == SQLITE_CONSTRAINT) ec = ErrorCode::conflict;
  if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED) ec = ErrorCode::unavailable;
  return Error{ec, std::string(what) + ": " + sqlite3_errmsg(db_), {}, 0};
}

Status SqliteDatabase::exec_script(std::string_view sql) {
  char* message = nullptr;
  std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string detail = message ? message : "unknown error";
    sqlite3_free(message);
    return fail(ErrorCode::internal, "store: " + detail);
  }
  return ok();
}

Result<sqlite3_stmt*> SqliteDatabase::prepare(std::string_view sql, std::span<const Arg> args) {
  sqlite3_stmt* stmt = nullptr;
  std::string key(sql);
  if (auto it = statements_.find(key); it != statements_.end()) {
    stmt = it->second;
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  } else {
    if (sqlite3_prepare_v3(db_, key.c_str(), static_cast<int>(key.size()), SQLITE_PREPARE_PERSISTENT,
                           &stmt, nullptr) != SQLITE_OK)
      return tl::unexpected(error("prepare"));
    statements_.emplace(std::move(key), stmt);
  }
  int index = 1;
  for (const Arg& arg : args) {
    int rc = SQLITE_OK;
    if (std::holds_alternative<std::nullptr_t>(arg.value)) {
      rc = sqlite3_bind_null(stmt, index);
    } else if (auto* i = std::get_if<std::int64_t>(&arg.value)) {
      rc = sqlite3_bind_int64(stmt, index, *i);
    } else if (auto* d = std::get_if<double>(&arg.value)) {
      rc = sqlite3_bind_double(stmt, index, *d);
    } else if (auto* s = std::get_if<std::string>(&arg.value)) {
      rc = sqlite3_bind_text(stmt, index, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    }
    if (rc != SQLITE_OK) return tl::unexpected(error("bind"));
    ++index;
  }
  return stmt;
}

Status SqliteDatabase::run(std::string_view sql, std::initializer_list<Arg> args) {
  return run_args(sql, std::span<const Arg>(args.begin(), args.size()));
}

Status SqliteDatabase::run_args(std::string_view sql, std::span<const Arg> args) {
  auto stmt = prepare(sql, args);
  if (!stmt) return fail(stmt.error());
  int rc;
  while ((rc = sqlite3_step(*stmt)) == SQLITE_ROW) {
  }
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return tl::unexpected(error("step"));
  return ok();
}

namespace {
std::vector<Value> read_row(sqlite3_stmt* stmt) {
  int n = sqlite3_column_count(stmt);
  std::vector<Value> values;
  values.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    switch (sqlite3_column_type(stmt, i)) {
      case SQLITE_INTEGER: values.emplace_back(std::int64_t{sqlite3_column_int64(stmt, i)}); break;
      case SQLITE_FLOAT: values.emplace_back(sqlite3_column_double(stmt, i)); break;
      case SQLITE_NULL: values.emplace_back(nullptr); break;
      default: {
        auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
        values.emplace_back(std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(stmt, i))));
      }
    }
  }
  return values;
}
}  // namespace

Result<std::optional<Row>> SqliteDatabase::one(std::string_view sql, std::initializer_list<Arg> args) {
  auto stmt = prepare(sql, std::span<const Arg>(args.begin(), args.size()));
  if (!stmt) return fail(stmt.error());
  int rc = sqlite3_step(*stmt);
  std::optional<Row> row;
  if (rc == SQLITE_ROW) row.emplace(read_row(*stmt));
  else if (rc != SQLITE_DONE) {
    auto e = error("step");
    sqlite3_reset(*stmt);
    return tl::unexpected(e);
  }
  sqlite3_reset(*stmt);
  return row;
}

Result<std::vector<Row>> SqliteDatabase::all(std::string_view sql, std::initializer_list<Arg> args) {
  auto stmt = prepare(sql, std::span<const Arg>(args.begin(), args.size()));
  if (!stmt) return fail(stmt.error());
  std::vector<Row> rows;
  int rc;
  while ((rc = sqlite3_step(*stmt)) == SQLITE_ROW) rows.emplace_back(read_row(*stmt));
  if (rc != SQLITE_DONE) {
    auto e = error("step");
    sqlite3_reset(*stmt);
    return tl::unexpected(e);
  }
  sqlite3_reset(*stmt);
  return rows;
}

Status SqliteDatabase::each(std::string_view sql, std::initializer_list<Arg> args,
                      const std::function<bool(const RowView&)>& fn) {
  auto stmt = prepare(sql, std::span<const Arg>(args.begin(), args.size()));
  if (!stmt) return fail(stmt.error());
  const SqliteRowView row(*stmt);
  int rc;
  while ((rc = sqlite3_step(*stmt)) == SQLITE_ROW)
    if (!fn(row)) {
      rc = SQLITE_DONE;
      break;
    }
  if (rc != SQLITE_DONE) {
    auto e = error("step");
    sqlite3_reset(*stmt);
    return tl::unexpected(e);
  }
  sqlite3_reset(*stmt);
  return ok();
}

std::int64_t SqliteDatabase::changes() const { return sqlite3_changes64(db_); }

}  // namespace gpucloud::store
