#include "core/platform_clock.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace gpucloud {
namespace asio = boost::asio;

PlatformClock::PlatformClock(asio::any_io_executor loop, bool test_mode, SysTime test_start)
    : loop_(loop), test_mode_(test_mode), test_now_(test_start), wake_(loop) {}

SysTime PlatformClock::now() const { return test_mode_ ? test_now_.load() : system_now(); }

void PlatformClock::restore_test_time(SysTime t) {
  if (test_mode_ && t > test_now_.load()) test_now_ = t;
}

PlatformClock::TimerId PlatformClock::schedule_at(SysTime deadline, std::string name, TimerFn fn) {
  TimerId id = next_id_++;
  timers_.emplace(deadline, Timer{id, std::move(name), std::move(fn)});
  if (!test_mode_) arm_real_timer();
  return id;
}

PlatformClock::TimerId PlatformClock::schedule_after(std::chrono::microseconds delay, std::string name,
                                                     TimerFn fn) {
  return schedule_at(now() + delay, std::move(name), std::move(fn));
}

void PlatformClock::cancel(TimerId id) {
  for (auto it = timers_.begin(); it != timers_.end(); ++it) {
    if (it->second.id == id) {
      timers_.erase(it);
      return;
    }
  }
}

void PlatformClock::arm_real_timer() {
  if (timers_.empty() || firing_) return;
  auto delay = timers_.begin()->first - system_now();
  wake_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      delay.count() > 0 ? delay : std::chrono::microseconds{0}));
  wake_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;  // re-armed or shut down
    asio::co_spawn(loop_, fire_due_real(), asio::detached);
  });
}

asio::awaitable<void> PlatformClock::fire_due_real() {
  if (firing_) co_return;
  firing_ = true;
  while (!timers_.empty() && timers_.begin()->first <= system_now()) {
    auto node = timers_.extract(timers_.begin());
    try {
      co_await node.mapped().fn();
    } catch (const std::exception& e) {
      spdlog::error("timer {} failed: {}", node.mapped().name, e.what());
    }
  }
  firing_ = false;
  arm_real_timer();
}

asio::awaitable<Result<SysTime>> PlatformClock::advance(std::chrono::microseconds delta) {
  if (!test_mode_) co_return fail(ErrorCode::forbidden, "the platform clock moves only under --test-clock");
  if (delta.count() < 0) co_return fail(ErrorCode::invalid_argument, "advance_seconds: must not be negative");
  if (advancing_) co_return fail(ErrorCode::conflict, "another clock advance is in progress");
  advancing_ = true;
  SysTime target = test_now_.load() + delta;
  // Timers scheduled by a firing timer at or before the target fire in this same call.
  while (!timers_.empty() && timers_.begin()->first <= target) {
    auto node = timers_.extract(timers_.begin());
    if (node.key() > test_now_.load()) test_now_ = node.key();
    try {
      co_await node.mapped().fn();
    } catch (const std::exception& e) {
      spdlog::error("timer {} failed: {}", node.mapped().name, e.what());
    }
  }
  test_now_ = target;
  advancing_ = false;
  co_return test_now_.load();
}

}  // namespace gpucloud
