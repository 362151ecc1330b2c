// The password pool answers `unavailable` with Retry-After once max_jobs are queued or running.
#include <future>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "server/password_pool.h"

namespace gpucloud::server {
namespace {
namespace asio = boost::asio;

TEST(PasswordPool, RefusesPastMaxJobsAndRecoversAfter) {
  asio::io_context loop;
  auto work = asio::make_work_guard(loop);  // the loop waits for the pool's answers
  PasswordPool pool(1, 3);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<Result<int>> results;
  auto blocked = [gate]() -> Result<int> {
    gate.wait();
    return 7;
  };
  auto run_one = [&]() -> asio::awaitable<void> { results.push_back(co_await pool.run<int>(blocked)); };
  for (int i = 0; i < 4; ++i) asio::co_spawn(loop, run_one(), asio::detached);
  // Run until the fourth has been answered: it must not wait for the blocked three.
  while (results.empty()) loop.run_one();
  ASSERT_FALSE(results[0]);
  EXPECT_EQ(results[0].error().code, ErrorCode::unavailable);
  EXPECT_EQ(results[0].error().retry_after_seconds, 1);
  EXPECT_EQ(pool.jobs(), 3u);
  release.set_value();
  while (results.size() < 4) loop.run_one();
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(results[i].value_or(0), 7);
  EXPECT_EQ(pool.jobs(), 0u);
  asio::co_spawn(loop, run_one(), asio::detached);
  while (results.size() < 5) loop.run_one();
  EXPECT_EQ(results.back().value_or(0), 7);
}

}  // namespace
}  // namespace gpucloud::server
