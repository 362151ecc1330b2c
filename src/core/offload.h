#pragma once
// Runs blocking work (SQLite, Argon2, NVML) on a bounded pool and resumes the awaiting
// coroutine on its own executor: the event loop never blocks.
#include <functional>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace gpucloud {

// Note: callers pass a named callable, never a lambda written inside the co_await
// expression (g++ 12 can destroy such temporaries twice).
template <class R, class Executor, class F>
boost::asio::awaitable<R> offload(Executor pool, F work) {
  auto initiation = [pool](auto handler, F fn) mutable {
    boost::asio::post(pool, [handler = std::move(handler), fn = std::move(fn)]() mutable {
      R result = fn();
      auto resume_on = boost::asio::get_associated_executor(handler);
      boost::asio::post(resume_on, [handler = std::move(handler), result = std::move(result)]() mutable {
        std::move(handler)(std::move(result));
      });
    });
  };
  return boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(R)>(
      std::move(initiation), boost::asio::use_awaitable, std::move(work));
}

}  // namespace gpucloud
