#include "server/leadership.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "core/offload.h"

namespace gpucloud::server {
namespace asio = boost::asio;

Leadership::Leadership(asio::any_io_executor loop, store::PgConnectOptions pg, std::string holder, Options options)
    : loop_(loop), pg_(std::move(pg)), holder_(std::move(holder)), options_(options), timer_(loop) {}

Leadership::~Leadership() {
  *alive_ = false;
  stopped_ = true;
  timer_.cancel();
  // The connection closes on its own thread: its advisory lock goes with the session.
  asio::post(pool_, [this] { db_.reset(); });
  pool_.join();
}

void Leadership::stop() {
  stopped_ = true;
  timer_.cancel();
}

Result<store::LeaseClaim> Leadership::claim_blocking(std::optional<std::int64_t> held) {
  if (!db_) {
    pg_.application_name = "gpucloudd-lease";
    auto made = store::connect_postgres(pg_);
    if (!made) return fail(made.error());
    db_ = std::move(*made);
    // A claim waits at most a second for a row another claim holds: the next poll tries again.
    if (auto s = db_->exec_script("SET lock_timeout = '1s'"); !s) {
      db_.reset();
      return fail(s.error());
    }
  }
  // Asked again at every claim (a session holds it once taken; asking again only counts it):
  // the answer is true exactly while this session holds it, even across a reconnect.
  auto locked = db_->one("SELECT CASE WHEN pg_try_advisory_lock(?) THEN 1 ELSE 0 END", {store::kBackgroundLeaseLockKey});
  if (!locked) {
    db_.reset();  // a new session next time: whatever it held went with the old one
    return fail(locked.error());
  }
  const bool holds_lock = *locked && (*locked)->int64(0) == 1;
  const std::int64_t term_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.term).count();
  // A renewal is one statement outside any transaction: a leader paused mid-renewal holds no
  // row lock that would hold up the replica taking over.
  if (held) return store::renew_lease(*db_, store::kBackgroundLease, holder_, *held, holds_lock, term_us);
  if (auto s = db_->exec_script(db_->begin_write()); !s) {
    db_.reset();
    return fail(s.error());
  }
  auto claim = store::take_lease(*db_, store::kBackgroundLease, holder_, holds_lock, term_us);
  if (!claim) {
    (void)db_->exec_script("ROLLBACK");
    return claim;
  }
  if (auto s = db_->exec_script("COMMIT"); !s) {
    (void)db_->exec_script("ROLLBACK");
    return fail(s.error());
  }
  return claim;
}

asio::awaitable<Result<store::LeaseClaim>> Leadership::claim() {
  auto work = [this, held = epoch_] { return claim_blocking(held); };
  co_return co_await offload<Result<store::LeaseClaim>>(pool_.get_executor(), std::move(work));
}

asio::awaitable<bool> Leadership::try_lead() {
  auto claimed = co_await claim();
  if (!claimed) {
    // Two standbys taking an expired lease at once: one loses (a serialization failure).
    spdlog::debug(R"({{"event":"leader_claim_failed","detail":{}}})",
                  boost::json::serialize(boost::json::value(boost::json::string(claimed.error().detail))));
    co_return false;
  }
  if (claimed->outcome != store::LeaseClaim::Outcome::leading) {
    // Said once per leader, not at every poll.
    if (claimed->epoch != seen_epoch_)
      spdlog::info(R"({{"event":"leader_standby","leader":"{}","epoch":{}}})", claimed->holder, claimed->epoch);
    seen_epoch_ = claimed->epoch;
    co_return false;
  }
  epoch_ = claimed->epoch;
  renewed_at_ = std::chrono::steady_clock::now();
  spdlog::info(R"({{"event":"leader_elected","holder":"{}","epoch":{}}})", holder_, *epoch_);
  co_return true;
}

void Leadership::run(std::function<void(std::int64_t)> elected, std::function<void(std::string)> deposed) {
  deposed_ = deposed;
  asio::co_spawn(loop_, loop(std::move(elected), std::move(deposed)), asio::detached);
}

asio::awaitable<void> Leadership::loop(std::function<void(std::int64_t)> elected, std::function<void(std::string)> deposed) {
  const std::shared_ptr<bool> live = alive_;
  while (!stopped_) {
    timer_.expires_after(epoch_ ? options_.renew_every : options_.standby_poll);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*live || stopped_) co_return;
    if (!epoch_) {
      if (co_await try_lead()) {
        if (!*live) co_return;
        elected(*epoch_);
      }
      if (!*live) co_return;
      continue;
    }
    auto claimed = co_await claim();
    if (!*live || stopped_) co_return;
    if (claimed && claimed->outcome == store::LeaseClaim::Outcome::leading) {
      renewed_at_ = std::chrono::steady_clock::now();
      continue;
    }
    std::string why;
    if (claimed)
      why = "the lease moved to " + claimed->holder + " (epoch " + std::to_string(claimed->epoch) + ")";
    else if (std::chrono::steady_clock::now() - renewed_at_ >= options_.term)
      why = "the lease could not be renewed within its term: " + claimed.error().detail;
    else
      continue;  // try again at the next renewal, still inside the term
    if (!deposed_called_) {
      deposed_called_ = true;
      deposed(why);
    }
    co_return;
  }
}

store::Store::CommitFence Leadership::fence(std::int64_t epoch) {
  // `refused` runs on the store's writer thread: the deposition is reported on the loop.
  return {store::lease_fence_sql(store::kBackgroundLease, epoch),
          [this, epoch, live = std::weak_ptr<bool>(alive_)](const Error& refusal) {
            spdlog::warn(R"({{"event":"leader_write_refused","epoch":{},"detail":{}}})", epoch,
                         boost::json::serialize(boost::json::value(boost::json::string(refusal.detail))));
            asio::post(loop_, [this, live, why = refusal.detail] {
              auto alive = live.lock();
              if (!alive || !*alive || deposed_called_ || !deposed_) return;
              deposed_called_ = true;
              stopped_ = true;
              timer_.cancel();
              deposed_(why);
            });
          }};
}

}  // namespace gpucloud::server
