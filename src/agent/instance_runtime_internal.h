#pragma once
// What the instance runtime's source files (src/agent/instance_runtime*.cpp) share and nothing
// else includes: the per-instance slot and its lock, and a few small helpers. The class itself
// is in instance_runtime.h; which file holds what is listed in docs/architecture.md.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/value.hpp>

#include "agent/instance_runtime.h"
#include "agent/log_text.h"
#include "core/result.h"

namespace gpucloud::agent {

// ---- an awaitable mutex for coroutines on one strand ---------------------------------------

// Shared with the guards that hold it: a coroutine destroyed with the io_context after the
// runtime (a SIGTERM while it waited or held the lock) unlocks a lock that still exists.
class InstanceRuntime::AsyncLock : public std::enable_shared_from_this<InstanceRuntime::AsyncLock> {
 public:
  boost::asio::awaitable<void> lock() {
    while (locked_) {
      auto timer = std::make_shared<boost::asio::steady_timer>(co_await boost::asio::this_coro::executor,
                                                               boost::asio::steady_timer::time_point::max());
      waiters_.push_back(timer);
      boost::system::error_code ec;
      co_await timer->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    locked_ = true;
  }
  void unlock() {
    locked_ = false;
    if (!waiters_.empty()) {
      waiters_.front()->cancel();
      waiters_.pop_front();
    }
  }

 private:
  bool locked_ = false;
  std::deque<std::shared_ptr<boost::asio::steady_timer>> waiters_;
};

struct InstanceRuntime::Instance {
  std::optional<InstanceRecord> record;  // nullopt: no record (the slot exists for its lock)
  std::shared_ptr<AsyncLock> lock = std::make_shared<AsyncLock>();
};

namespace runtime_detail {

// Releases an AsyncLock-like object when the scope ends (co_return included); keeps it alive
// until then (see AsyncLock).
template <class Lock>
class Unlocker {
 public:
  explicit Unlocker(Lock& lock) : lock_(lock.shared_from_this()) {}
  ~Unlocker() { lock_->unlock(); }
  Unlocker(const Unlocker&) = delete;
  Unlocker& operator=(const Unlocker&) = delete;

 private:
  std::shared_ptr<Lock> lock_;
};

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

inline std::string error_text(const Error& e) { return q(std::string(to_string(e.code)) + ": " + e.detail); }

inline boost::json::value nullable(const std::string& s) {
  return s.empty() ? boost::json::value(nullptr) : boost::json::value(s);
}

// Incus's revert helper (shared/revert/revert.go) for coroutines: each step that changed
// something registers how to undo it; a failure undoes them newest first, success forgets
// them. Undo steps never fail (they log what they could not undo).
class Revert {
 public:
  using Step = std::function<boost::asio::awaitable<void>()>;
  void add(Step step) { steps_.push_back(std::move(step)); }
  void add_sync(std::function<void()> step) {
    steps_.push_back([step = std::move(step)]() { return run_now(step); });
  }
  boost::asio::awaitable<void> undo() {
    while (!steps_.empty()) {
      Step step = std::move(steps_.back());
      steps_.pop_back();
      co_await step();
    }
  }
  void success() { steps_.clear(); }

 private:
  static boost::asio::awaitable<void> run_now(std::function<void()> step) {
    step();
    co_return;
  }
  std::vector<Step> steps_;
};

// What instance.ensure writes into the instance's config directory besides the record.
struct Secrets {
  std::string authorized_keys;
  std::optional<std::string> password_hash;
  // For an image with Jupyter: its token and base URL, written to config/jupyter_token and
  // config/jupyter_base_url for the init (absent: both files removed).
  std::optional<std::pair<std::string, std::string>> jupyter;
};

}  // namespace runtime_detail

// One instance.ensure's state, shared by its steps (instance_runtime_ensure*.cpp): each is a
// member coroutine taking it by reference, and it lives in ensure()'s frame until ensure's
// revert is done with it.
struct InstanceRuntime::EnsureRun {
  EnsureRun(const InstanceSpec& desired_spec, const std::string& instance_id,
            const runtime_detail::Secrets& desired_secrets, std::int64_t desired_generation, Instance& instance_slot,
            bool ports_applied_first)
      : spec(desired_spec),
        id(instance_id),
        secrets(desired_secrets),
        generation(desired_generation),
        slot(instance_slot),
        firewall_first(ports_applied_first),
        had_record(instance_slot.record.has_value()),
        old_record(instance_slot.record) {
    if (had_record) {
      record = *slot.record;
    } else {
      record.desired.instance_id = id;
    }
  }

  const InstanceSpec& spec;
  const std::string& id;
  const runtime_detail::Secrets& secrets;
  const std::int64_t generation;
  Instance& slot;
  const bool firewall_first;  // step 0 applied the new ports' table
  const bool had_record;
  std::optional<InstanceRecord> old_record;  // what the revert restores
  InstanceRecord record;                     // what the steps make true, saved as they go
  runtime_detail::Revert revert;             // each step registers its undo here

  // What the steps found and did, in order.
  ContainerStatus container;       // 1: as found; kept in line with what the steps do to it
  bool on_holder = false;          // 3: the record names a network holder
  bool config_changed = false;     // 4: the init's keys or password changed
  bool new_filesystem = false;     // 4: the container is made from the spec's image
  bool key_with_create = false;    // 4: the host key is made while the engine creates
  std::string config_host_key;     // 4: the host key in the config directory ("" when none)
  bool renamed = false;                       // 5
  std::optional<ContainerStatus> holder_now;  // 5: the holder, running
  bool holder_moved = false;                  // 5: the container joined another holder
  bool created = false, booted = false, rebuilt = false;
  bool cpus_capped = false;
  bool resave = false;
  bool published = false;
};

}  // namespace gpucloud::agent
