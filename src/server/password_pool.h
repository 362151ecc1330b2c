#pragma once
// The threads that run Argon2id and crypt(3), apart from the store's readers, with a bounded
// queue: a flood of logins is answered `unavailable` (Retry-After) instead of queueing
// without limit. run() is called and resumed on the event loop, which owns the counter.
#include <cstddef>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/offload.h"
#include "core/result.h"

namespace gpucloud::server {

class PasswordPool {
 public:
  static constexpr std::size_t kDefaultMaxJobs = 64;
  explicit PasswordPool(std::size_t threads, std::size_t max_jobs = kDefaultMaxJobs)
      : pool_(threads), max_jobs_(max_jobs) {}

  // Runs `job() -> Result<R>` on the pool, unless max_jobs are already queued or running.
  template <class R, class F>
  boost::asio::awaitable<Result<R>> run(F job) {
    if (jobs_ >= max_jobs_)
      co_return tl::unexpected(Error{ErrorCode::unavailable, "too many password checks at once; try again shortly", {}, 1});
    ++jobs_;
    struct Done {
      std::size_t& jobs;
      ~Done() { --jobs; }
    } done{jobs_};
    co_return co_await offload<Result<R>>(pool_.get_executor(), std::move(job));
  }

  std::size_t jobs() const { return jobs_; }
  // Unbounded use, for callers that have not moved to run() yet.
  boost::asio::thread_pool::executor_type get_executor() { return pool_.get_executor(); }

 private:
  boost::asio::thread_pool pool_;
  std::size_t max_jobs_;
  std::size_t jobs_ = 0;
};

}  // namespace gpucloud::server
