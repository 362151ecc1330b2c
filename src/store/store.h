#pragma once
// The state store: one SQLite file in WAL mode, or a PostgreSQL database (the cluster store,
// shared by several gpucloudd). Writes are serialised on one thread of this process (one
// writer connection, each call one transaction: IMMEDIATE on SQLite, SERIALIZABLE on
// PostgreSQL, where a transaction that lost a race to another process is run again whole);
// reads run on a bounded pool of read-only connections. Callers on the event loop co_await
// both; nothing blocks the loop.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "core/offload.h"
#include "store/database.h"
#include "store/pg_database.h"

namespace gpucloud::store {

class Store {
 public:
  static Result<std::unique_ptr<Store>> open(const std::string& path, int readers);
  // The cluster store: `readers` read connections beside the writer, opened as needed.
  static Result<std::unique_ptr<Store>> open_postgres(const PgConnectOptions& options, int readers);
  Dialect dialect() const { return dialect_; }
  ~Store();

  // Runs `work(Database&)` inside one transaction on the writer thread. `work` returns a
  // Result/Status; an error (or a failed COMMIT) rolls the whole transaction back.
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&, Database&>> write(F work) {
    using R = std::invoke_result_t<F&, Database&>;
    auto job = [this, work = std::move(work)]() mutable -> R { return run_write<R>(work); };
    return offload<R>(writer_pool_.get_executor(), std::move(job));
  }

  // Resumes once every write queued before it has ended (it runs no transaction itself): a
  // deposed leader lets its fenced writes be refused before it exits.
  boost::asio::awaitable<bool> drain_writes() {
    auto job = [] { return true; };
    return offload<bool>(writer_pool_.get_executor(), std::move(job));
  }

  // Runs `work(Database&)` on a read connection (a consistent snapshot per call).
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&, Database&>> read(F work) {
    using R = std::invoke_result_t<F&, Database&>;
    auto job = [this, work = std::move(work)]() mutable -> R { return run_read<R>(work); };
    return offload<R>(reader_pool_.get_executor(), std::move(job));
  }

  // Synchronous variants for start-up, tests and code already on a pool thread.
  template <class F>
  auto write_now(F work) {
    using R = std::invoke_result_t<F&, Database&>;
    std::lock_guard lock(writer_mutex_);
    return run_write_locked<R>(work);
  }

  template <class F>
  auto read_now(F work) {
    using R = std::invoke_result_t<F&, Database&>;
    return run_read<R>(work);
  }

  const std::string& path() const { return path_; }
  boost::asio::thread_pool& blocking_pool() { return reader_pool_; }
  // Called on the writer thread after each commit that recorded an event. Set before use.
  void on_event_commit(std::function<void()> callback) { on_event_commit_ = std::move(callback); }
  // Called on the writer thread after each commit that changed billing accounts (their ids).
  void on_billing_commit(std::function<void(std::vector<std::string>)> callback) {
    on_billing_commit_ = std::move(callback);
  }
  // Called on the writer thread after each commit that wrote an instance's cost-control
  // deadline (the earliest of them).
  void on_schedule_commit(std::function<void(SysTime)> callback) { on_schedule_commit_ = std::move(callback); }
  // The leader's commit fence (issue 27, PostgreSQL): a statement sent with every write
  // transaction's COMMIT, in the same round trip, that fails the transaction when this
  // replica's lease epoch is no longer the current one (a serialization failure re-runs the
  // whole transaction, fence included). `refused` hears of a refusal on the writer thread.
  // Set when this replica becomes the leader of background work.
  struct CommitFence {
    std::string sql;
    std::function<void(const Error&)> refused;
  };
  void set_commit_fence(CommitFence fence) {
    std::lock_guard lock(writer_mutex_);
    commit_fence_ = std::move(fence);
  }
  // A standby replica (issue 27): its commits that change billing accounts or cost-control
  // deadlines tell the leader through NOTIFY (pg_listener.h), since only the leader plans
  // them. Off on the leader, whose own commits plan them in-process.
  void forward_background_notes(bool on) { forward_background_notes_ = on; }

 private:
  using Connect = std::function<Result<std::unique_ptr<Database>>()>;
  Store(std::string path, std::unique_ptr<Database> writer, int readers, Connect connect_reader);
  std::unique_ptr<Database> take_reader();
  // The write-ahead log is copied back into the file on a thread of its own (PASSIVE: it
  // never waits for the writer or readers), once the log holds kCheckpointPages pages, so no
  // commit pays for a checkpoint and its fsync. One request runs at a time.
  static constexpr int kCheckpointPages = 1000;
  void request_checkpoint();
  void give_back_reader(std::unique_ptr<Database> db);

  template <class R, class F>
  R run_write(F& work) {
    std::lock_guard lock(writer_mutex_);
    return run_write_locked<R>(work);
  }
  // A transaction PostgreSQL refused as a serialization failure (another replica wrote what
  // it read) is run again from the start, this many times at most, after a short random pause
  // that grows with each try (two replicas retrying in lockstep would collide again). The
  // pause is on the writer thread, never on the event loop.
  static constexpr int kSerializationRetries = 50;
  static void pause_before_retry(int attempt);

  template <class R, class F>
  R run_write_locked(F& work) {
    for (int attempt = 0;; ++attempt) {
      R result = run_write_once<R>(work);
      if (result || !writer_->take_retryable_failure() || attempt + 1 >= kSerializationRetries) return result;
      pause_before_retry(attempt);
    }
  }
  template <class R, class F>
  R run_write_once(F& work) {
    (void)writer_->take_retryable_failure();
    if (auto s = writer_->exec_script(writer_->begin_write()); !s) return R(tl::unexpected(s.error()));
    std::optional<R> attempt;
    try {
      attempt.emplace(work(*writer_));
    } catch (const std::exception& e) {  // nothing escapes a transaction half-done
      attempt.emplace(tl::unexpected(Error{ErrorCode::internal, std::string("store: ") + e.what(), {}, 0}));
    }
    R result = std::move(*attempt);
    if (!result) {
      abandon_write();
      return result;
    }
    if (auto s = commit_write(); !s) return R(tl::unexpected(s.error()));
    if (writer_->wal_pages() >= kCheckpointPages) request_checkpoint();
    if (writer_->take_event_written() && on_event_commit_) on_event_commit_();
    if (auto changed = writer_->take_billing_changes(); !changed.empty() && on_billing_commit_)
      on_billing_commit_(std::move(changed));
    if (auto at = writer_->take_schedule_noted(); at && on_schedule_commit_) on_schedule_commit_(*at);
    return result;
  }
  // The end of a write transaction that succeeded: the fence, the notes for the other
  // replicas and the COMMIT, as one script (one round trip on PostgreSQL); rolled back whole
  // when any of it fails.
  Status commit_write();
  void abandon_write() {
    (void)writer_->exec_script("ROLLBACK");
    (void)writer_->take_event_written();
    (void)writer_->take_billing_changes();
    (void)writer_->take_schedule_noted();
  }
  template <class R, class F>
  R run_read(F& work) {
    auto db = take_reader();
    if (!db) return R(tl::unexpected(Error{ErrorCode::unavailable, "store: no read connection", {}, 0}));
    // One read transaction per call: every statement in `work` sees the same snapshot.
    if (auto s = db->exec_script(db->begin_read()); !s) {
      give_back_reader(std::move(db));
      return R(tl::unexpected(s.error()));
    }
    std::optional<R> attempt;
    try {
      attempt.emplace(work(*db));
    } catch (const std::exception& e) {
      attempt.emplace(tl::unexpected(Error{ErrorCode::internal, std::string("store: ") + e.what(), {}, 0}));
    }
    (void)db->exec_script("COMMIT");  // read-only: ends the snapshot, nothing to lose
    give_back_reader(std::move(db));
    R result = std::move(*attempt);
    return result;
  }

  std::string path_;
  std::function<void()> on_event_commit_;
  std::function<void(std::vector<std::string>)> on_billing_commit_;
  std::function<void(SysTime)> on_schedule_commit_;
  std::optional<CommitFence> commit_fence_;
  std::atomic<bool> forward_background_notes_{false};
  std::unique_ptr<Database> writer_;
  Dialect dialect_;
  Connect connect_reader_;
  std::mutex writer_mutex_;
  std::mutex readers_mutex_;
  std::vector<std::unique_ptr<Database>> readers_;
  std::atomic<bool> checkpoint_pending_{false};
  std::unique_ptr<Database> checkpointer_;  // used on checkpoint_pool_ only
  boost::asio::thread_pool writer_pool_{1};
  boost::asio::thread_pool checkpoint_pool_{1};
  boost::asio::thread_pool reader_pool_;
};

}  // namespace gpucloud::store
