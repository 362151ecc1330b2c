#pragma once
// Which replica leads the background work when several gpucloudd share one PostgreSQL store
// (issue 27): settlement, reconcile, timers, alerts, retention run on the leader alone; every
// replica answers the API. The lease (store/leader_lease.h) is claimed on a connection of its
// own that also holds a session advisory lock: a killed leader's session ends, its lock goes,
// and a standby takes over at its next poll (250 ms) instead of waiting out the term (3 s, the
// bound for a leader paused or cut off from the database). A leader renews every second; one
// that finds the lease moved on, or cannot renew it within its term, is deposed. Its writes
// are fenced meanwhile: the store checks the epoch before every commit of the leader.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "store/leader_lease.h"
#include "store/pg_database.h"
#include "store/store.h"

namespace gpucloud::server {

class Leadership {
 public:
  struct Options {
    std::chrono::milliseconds term{3000};
    std::chrono::milliseconds renew_every{1000};
    std::chrono::milliseconds standby_poll{250};
  };
  Leadership(boost::asio::any_io_executor loop, store::PgConnectOptions pg, std::string holder, Options options);
  ~Leadership();
  Leadership(const Leadership&) = delete;

  // One claim now (at start-up): whether this replica leads.
  boost::asio::awaitable<bool> try_lead();
  // From here on a standby keeps claiming and calls `elected(epoch)` once it leads; a leader
  // renews and calls `deposed(why)` once, when the lease moved on or stayed unrenewed for its
  // term. Both on the loop.
  void run(std::function<void(std::int64_t)> elected, std::function<void(std::string)> deposed);
  void stop();

  std::optional<std::int64_t> epoch() const { return epoch_; }
  const std::string& holder() const { return holder_; }
  // The store's commit fence for `epoch`: a refused commit also reports the deposition.
  store::Store::CommitFence fence(std::int64_t epoch);

 private:
  boost::asio::awaitable<void> loop(std::function<void(std::int64_t)> elected, std::function<void(std::string)> deposed);
  boost::asio::awaitable<Result<store::LeaseClaim>> claim();
  Result<store::LeaseClaim> claim_blocking(std::optional<std::int64_t> held);  // pool thread

  boost::asio::any_io_executor loop_;
  store::PgConnectOptions pg_;
  std::string holder_;
  Options options_;
  std::optional<std::int64_t> epoch_;  // loop thread
  std::int64_t seen_epoch_ = -1;        // the last leader's epoch a standby logged
  std::chrono::steady_clock::time_point renewed_at_;
  std::function<void(std::string)> deposed_;
  bool deposed_called_ = false;
  bool stopped_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  boost::asio::steady_timer timer_;
  std::unique_ptr<store::Database> db_;  // pool thread only
  boost::asio::thread_pool pool_{1};
};

}  // namespace gpucloud::server
