#pragma once
// One connection to the store's database, SQLite or PostgreSQL, behind one interface: cached
// prepared statements, typed binds, rows copied out as values. Statements are written once, in
// the SQL both engines share, with `?` placeholders; the PostgreSQL connection translates the
// few spellings that differ (sql_dialect.h). Errors come back as Result, never as exceptions.
#include <cstdint>
#include <functional>
#include <utility>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"

namespace gpucloud::store {

using Value = std::variant<std::nullptr_t, std::int64_t, double, std::string>;

class Row {
 public:
  explicit Row(std::vector<Value> values) : values_(std::move(values)) {}
  bool is_null(std::size_t i) const { return std::holds_alternative<std::nullptr_t>(values_.at(i)); }
  std::int64_t int64(std::size_t i) const;
  std::string text(std::size_t i) const;  // "" for NULL
  std::optional<std::string> opt_text(std::size_t i) const;
  std::optional<std::int64_t> opt_int64(std::size_t i) const;
  std::optional<double> opt_double(std::size_t i) const;  // an integer column converts
  std::size_t size() const { return values_.size(); }

 private:
  std::vector<Value> values_;
};

// The row a statement is on, read in place: valid only inside Database::each's callback.
class RowView {
 public:
  virtual ~RowView() = default;
  virtual bool is_null(int i) const = 0;
  virtual std::int64_t int64(int i) const = 0;
  virtual std::string_view text(int i) const = 0;  // "" for NULL; points into the row
};

enum class Dialect { sqlite, postgres };

// One bound argument; implicit from the types handlers use.
struct Arg {
  Value value;
  Arg(std::nullptr_t) : value(nullptr) {}
  Arg(int v) : value(std::int64_t{v}) {}
  Arg(long v) : value(std::int64_t{v}) {}
  Arg(long long v) : value(std::int64_t{v}) {}
  Arg(unsigned v) : value(std::int64_t{v}) {}
  Arg(bool v) : value(std::int64_t{v ? 1 : 0}) {}
  Arg(double v) : value(v) {}
  Arg(const char* v) : value(std::string(v)) {}
  Arg(std::string_view v) : value(std::string(v)) {}
  Arg(const std::string& v) : value(v) {}
  Arg(std::string&& v) : value(std::move(v)) {}
  template <class T>
  Arg(const std::optional<T>& v) : value(v ? Arg(*v).value : Value{nullptr}) {}
};

class Database {
 public:
  // A SQLite file (created if missing unless read-only).
  static Result<std::unique_ptr<Database>> open(const std::string& path, bool read_only);
  virtual ~Database() = default;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  virtual Status exec_script(std::string_view sql) = 0;  // several statements, no binds
  virtual Status run(std::string_view sql, std::initializer_list<Arg> args = {}) = 0;
  // A statement whose arguments are counted at run time (a multi-row INSERT or VALUES list:
  // one round trip for many rows).
  virtual Status run_args(std::string_view sql, std::span<const Arg> args) = 0;
  virtual Result<std::optional<Row>> one(std::string_view sql, std::initializer_list<Arg> args = {}) = 0;
  virtual Result<std::vector<Row>> all(std::string_view sql, std::initializer_list<Arg> args = {}) = 0;
  // Every row of a query, read in place without copying it out (a settlement pass reads every
  // open meter). `fn` returning false stops early.
  virtual Status each(std::string_view sql, std::initializer_list<Arg> args,
                      const std::function<bool(const RowView&)>& fn) = 0;
  virtual std::int64_t changes() const = 0;
  virtual Dialect dialect() const = 0;
  // How a read-write transaction begins: SQLite takes the write lock at once (IMMEDIATE);
  // PostgreSQL runs it SERIALIZABLE, and the store re-runs one that lost a race.
  virtual std::string_view begin_write() const = 0;
  virtual std::string_view begin_read() const = 0;
  // True once when the last failure was a serialization failure or a deadlock (PostgreSQL's
  // 40001 and 40P01): the whole transaction may be run again. Reading clears it.
  virtual bool take_retryable_failure() { return false; }
  // Where the database is: a SQLite file's path, or a PostgreSQL URL (never with a password).
  const std::string& path() const { return path_; }
  // Pages in the write-ahead log after this connection's last commit (a SQLite writer only).
  int wal_pages() const { return wal_pages_; }

  // Set by whoever records an event in the open transaction; the store reads and clears it
  // after the commit, to wake event streams at once instead of at their next poll.
  void note_event_written() { event_written_ = true; }
  bool take_event_written() { return std::exchange(event_written_, false); }
  bool event_pending() const { return event_written_; }
  // Likewise for billing: the accounts whose balance or open meters the transaction changed,
  // so the billing service re-projects when each reaches zero (read after the commit).
  void note_billing_change(const std::string& account_id) { billing_changes_.push_back(account_id); }
  std::vector<std::string> take_billing_changes() { return std::exchange(billing_changes_, {}); }
  const std::vector<std::string>& billing_changes() const { return billing_changes_; }
  // An instance's cost-control deadline was written (instances/schedules.h): the earliest
  // one of the transaction reaches Store::on_schedule_commit after the commit.
  void note_schedule(SysTime at) {
    if (!schedule_noted_ || at < *schedule_noted_) schedule_noted_ = at;
  }
  std::optional<SysTime> take_schedule_noted() { return std::exchange(schedule_noted_, std::nullopt); }
  std::optional<SysTime> schedule_noted() const { return schedule_noted_; }

 protected:
  explicit Database(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int wal_pages_ = 0;

 private:
  bool event_written_ = false;
  std::vector<std::string> billing_changes_;
  std::optional<SysTime> schedule_noted_;
};

}  // namespace gpucloud::store
