#pragma once
// The platform clock: what billing, expiry, autostop and retention read (spec, "Time").
// Real mode follows the system clock; test mode moves only through advance(), which fires
// every due timer in deadline order, each seeing the clock at its own deadline.
// Timeouts and throttling do NOT use this clock: they use std::chrono::steady_clock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/result.h"
#include "core/time_format.h"

namespace gpucloud {

class PlatformClock {
 public:
  using TimerId = std::uint64_t;
  // A timer's work is a coroutine so it may await the store; it runs on the loop.
  using TimerFn = std::function<boost::asio::awaitable<void>()>;

  PlatformClock(boost::asio::any_io_executor loop, bool test_mode, SysTime test_start);

  SysTime now() const;
  bool test_mode() const { return test_mode_; }

  TimerId schedule_at(SysTime deadline, std::string name, TimerFn fn);
  TimerId schedule_after(std::chrono::microseconds delay, std::string name, TimerFn fn);
  void cancel(TimerId id);
  std::size_t pending_timers() const { return timers_.size(); }

  // Test mode only: moves the clock forward by `delta`, firing due timers in order; returns
  // once they all ran. Refused (forbidden) in real mode, conflict while another advance runs.
  boost::asio::awaitable<Result<SysTime>> advance(std::chrono::microseconds delta);

  // Test mode: the clock's time is restored from the store at start.
  void restore_test_time(SysTime t);

 private:
  struct Timer {
    TimerId id;
    std::string name;
    TimerFn fn;
  };
  void arm_real_timer();
  boost::asio::awaitable<void> fire_due_real();

  boost::asio::any_io_executor loop_;
  bool test_mode_;
  // Read from any thread (store jobs take the time); moved only on the loop.
  std::atomic<SysTime> test_now_;
  bool advancing_ = false;
  bool firing_ = false;
  TimerId next_id_ = 1;
  std::multimap<SysTime, Timer> timers_;  // ordered by deadline, then insertion
  boost::asio::steady_timer wake_;
};

}  // namespace gpucloud
