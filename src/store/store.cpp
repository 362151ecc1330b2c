#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include <boost/asio/post.hpp>

#include "store/background_notes.h"
#include "store/leader_lease.h"
#include "store/migrations.h"

namespace gpucloud::store {

Store::Store(std::string path, std::unique_ptr<Database> writer, int readers, Connect connect_reader)
    : path_(std::move(path)),
      writer_(std::move(writer)),
      dialect_(writer_->dialect()),
      connect_reader_(std::move(connect_reader)),
      reader_pool_(static_cast<std::size_t>(readers)) {}

Store::~Store() {
  writer_pool_.join();
  reader_pool_.join();
  checkpoint_pool_.join();
}

void Store::pause_before_retry(int attempt) {
  thread_local std::minstd_rand random{std::random_device{}()};
  const int ceiling_us = 200 * std::min(attempt + 1, 25);  // up to 5 ms
  std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, ceiling_us)(random)));
}

Status Store::commit_write() {
  std::string script;
  if (dialect_ == Dialect::postgres) {
    if (commit_fence_) script += commit_fence_->sql + ";\n";
    if (forward_background_notes_) script += background_notes_sql(*writer_);
    // Other replicas' event streams hear of it at the commit (pg_listener.h).
    if (writer_->event_pending()) script += "NOTIFY gpucloud_events;\n";
  }
  script += "COMMIT";
  auto committed = writer_->exec_script(script);
  if (committed) return ok();
  if (commit_fence_ && commit_fence_->refused && is_lease_fence_refusal(committed.error()))
    commit_fence_->refused(committed.error());
  abandon_write();
  return committed;
}

void Store::request_checkpoint() {
  if (dialect_ != Dialect::sqlite || checkpoint_pending_.exchange(true)) return;
  boost::asio::post(checkpoint_pool_, [this] {
    if (!checkpointer_)
      if (auto db = Database::open(path_, false)) checkpointer_ = std::move(*db);
    // A failed or partial checkpoint is retried at a later commit; the log only grows meanwhile.
    if (checkpointer_) (void)checkpointer_->exec_script("PRAGMA wal_checkpoint(PASSIVE)");
    checkpoint_pending_ = false;
  });
}

Result<std::unique_ptr<Store>> Store::open(const std::string& path, int readers) {
  // SQLite takes "" (and ":memory:") as a private throwaway database: never a store.
  if (path.empty() || path == ":memory:") return fail(ErrorCode::invalid_argument, "store: no database path");
  auto writer = Database::open(path, false);
  if (!writer) return fail(writer.error());
  auto version = apply_migrations(**writer, schema_migrations());
  if (!version) return fail(version.error());
  if (readers < 1) readers = 1;
  auto connect_reader = [path]() { return Database::open(path, true); };
  std::unique_ptr<Store> store(new Store(path, std::move(*writer), readers, std::move(connect_reader)));
  return store;
}

Result<std::unique_ptr<Store>> Store::open_postgres(const PgConnectOptions& options, int readers) {
  auto writer = connect_postgres(options);
  if (!writer) return fail(writer.error());
  auto version = apply_migrations(**writer, schema_migrations());
  if (!version) return fail(version.error());
  if (readers < 1) readers = 1;
  auto connect_reader = [options]() { return connect_postgres(options); };
  std::string where = (*writer)->path();
  std::unique_ptr<Store> store(new Store(where, std::move(*writer), readers, std::move(connect_reader)));
  return store;
}

std::unique_ptr<Database> Store::take_reader() {
  {
    std::lock_guard lock(readers_mutex_);
    if (!readers_.empty()) {
      auto db = std::move(readers_.back());
      readers_.pop_back();
      return db;
    }
  }
  // Opened lazily, at most one per pool thread in practice.
  auto db = connect_reader_();
  return db ? std::move(*db) : nullptr;
}

void Store::give_back_reader(std::unique_ptr<Database> db) {
  std::lock_guard lock(readers_mutex_);
  readers_.push_back(std::move(db));
}

}  // namespace gpucloud::store
