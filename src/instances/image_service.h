#pragma once
// The engine side of custom images: runs image.save on the instance's host after a save
// request committed (the image is `creating` until the agent answers), arms the recycle
// bin's timers on the platform clock (purge warning a day before, purge at
// deleted_at + [policy] recycle_days; under --test-clock, POST /admin/clock advance fires
// them), and removes the engine copy of a purged image once no live instance uses it
// (checked after each purge and every 30 s). Every timer's work is a compare-and-set on
// the deletion it was armed for, so a restore (or a second delete) makes old timers no-ops.
#include <functional>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/host_agent.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "instances/images.h"
#include "store/store.h"

namespace gpucloud::instances {

class ImageService {
 public:
  ImageService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store, PlatformClock& clock,
               agent::HostAgent& agent);
  ~ImageService();

  // Resumes saves left `creating` (a crash), arms the timers of every deleted image, starts
  // the engine sweep.
  boost::asio::awaitable<void> start();
  void stop();
  // After a save request committed: the agent commits the instance's system disk.
  void save(const std::string& image_id);
  // After a delete committed: the recycle bin's timers for this deletion. On a standby
  // replica (defer_background) the deletion is handed to the leader instead.
  void arm(const Image& deleted);
  // A standby replica (issue 27): the bin's timers are the leader's; `to_leader` tells it of
  // a deletion (by image id). start() ends this.
  void defer_background(std::function<void(std::string image_id)> to_leader) {
    background_ = false;
    to_leader_ = std::move(to_leader);
  }
  // The leader: arms the timers of the deleted image `image_id` (a standby's deletion), or of
  // every deleted image when `image_id` is empty (notes may have been missed).
  boost::asio::awaitable<void> arm_deleted(std::string image_id);
  bool busy() const { return !saving_.empty(); }

 private:
  boost::asio::awaitable<void> run_save(std::string image_id);
  boost::asio::awaitable<void> warn_timer(std::string image_id, SysTime deleted_at);
  boost::asio::awaitable<void> purge_timer(std::string image_id, SysTime deleted_at);
  boost::asio::awaitable<void> sweep();
  void schedule_sweep();
  boost::asio::awaitable<void> sweep_and_reschedule();

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  agent::HostAgent& agent_;
  std::set<std::string> saving_;
  bool sweeping_ = false;
  bool stopped_ = false;
  bool background_ = true;
  std::function<void(std::string)> to_leader_;
  boost::asio::steady_timer sweep_timer_;
};

}  // namespace gpucloud::instances
