#pragma once
// Waiting for a condition with a deadline, never for a fixed time.
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace gpucloud::testing {

// Polls `condition` every `interval` until it holds or `timeout` passes. The failure names
// what was awaited and how long, for ASSERT_TRUE(wait_until(...)).
inline ::testing::AssertionResult wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                                             const std::string& what,
                                             std::chrono::milliseconds interval = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(interval);  // the poll interval, not a wait for time to pass
  }
  return ::testing::AssertionFailure() << "timed out after " << timeout.count() << " ms waiting for " << what;
}

}  // namespace gpucloud::testing
