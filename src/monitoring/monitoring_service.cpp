#include "monitoring/monitoring_service.h"

#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "instances/instance_record.h"
#include "monitoring/cost_control.h"

namespace gpucloud::monitoring {
namespace asio = boost::asio;

namespace {
// Due instances handled per write transaction, and per pass before the timer re-arms.
constexpr int kDueBatch = 200;
}  // namespace

MonitoringService::MonitoringService(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                                     PlatformClock& clock, Hooks hooks)
    : loop_(loop), config_(config), store_(store), clock_(clock), hooks_(std::move(hooks)),
      retention_{config.monitoring.raw_retention, config.monitoring.downsampled_retention} {}

MonitoringService::~MonitoringService() {
  *alive_ = false;
  stop();
}

void MonitoringService::stop() {
  stopped_ = true;
  if (timer_) clock_.cancel(timer_->first);
  timer_.reset();
}

asio::awaitable<void> MonitoringService::start() {
  background_ = true;
  co_await arm_earliest();
}

asio::awaitable<void> MonitoringService::arm_earliest() {
  if (stopped_ || !background_) co_return;
  auto earliest = co_await store_.read([](store::Database& db) { return instances::earliest_schedule(db); });
  if (!earliest) {
    spdlog::error("monitoring: cannot read the cost-control schedule: {}", earliest.error().detail);
    co_return;
  }
  if (*earliest) arm(**earliest);
}

void MonitoringService::ingest(agent::SampleReport report) {
  if (stopped_) return;
  std::string host = report.host_name;
  pending_[host] = std::move(report);
  if (!writing_) asio::co_spawn(loop_, write_pending(), asio::detached);
}

asio::awaitable<void> MonitoringService::write_pending() {
  if (writing_) co_return;
  writing_ = true;
  while (!pending_.empty() && !stopped_) {
    auto node = pending_.extract(pending_.begin());
    agent::SampleReport report = std::move(node.mapped());
    const SysTime at = clock_.now();
    const auto seen = std::chrono::steady_clock::now();
    auto written = co_await store_.write([&report, at, retention = retention_](store::Database& db) {
      return ingest_round(db, report, at, retention);
    });
    if (!*alive_) co_return;
    if (!written) {
      spdlog::warn("monitoring: a sampling round of host {} was not stored: {}", report.host_name,
                   written.error().detail);
      continue;
    }
    latest_.record(report, at, seen);
    ++rounds_written_;
  }
  writing_ = false;
}

std::optional<agent::InstanceSample> MonitoringService::fresh_reading(const std::string& id) const {
  const auto* r = latest_.instance(id);
  if (!r) return std::nullopt;
  const auto limit = 3 * config_.monitoring.sample_interval + std::chrono::seconds(2);
  if (std::chrono::steady_clock::now() - r->seen > limit) return std::nullopt;
  return r->sample;
}

void MonitoringService::schedule_noted(SysTime at) {
  // Writer thread → loop.
  asio::post(loop_, [this, alive = std::weak_ptr<bool>(alive_), at] {
    auto live = alive.lock();
    if (!live || !*live || stopped_ || !background_) return;  // a standby replica: the leader runs them
    if (at <= clock_.now()) {
      // Already due (a reading arrived after its deadline): no timer needs to fire first.
      asio::co_spawn(loop_, run_due(), asio::detached);
      return;
    }
    arm(at);
  });
}

void MonitoringService::arm(SysTime at) {
  if (stopped_) return;
  if (timer_ && timer_->second <= at) return;  // an earlier wake-up covers it
  if (timer_) clock_.cancel(timer_->first);
  auto id = clock_.schedule_at(at, "cost-control", [this, alive = std::weak_ptr<bool>(alive_)]() -> asio::awaitable<void> {
    auto live = alive.lock();
    if (!live || !*live) co_return;
    timer_.reset();
    co_await run_due();
  });
  timer_ = std::make_pair(id, at);
}

asio::awaitable<void> MonitoringService::run_due() {
  if (running_due_) {
    rerun_due_ = true;
    co_return;
  }
  running_due_ = true;
  do {
    rerun_due_ = false;
    const SysTime now = clock_.now();
    // Each instance gets a few steps per pass (a warning, then its stop); one that keeps
    // failing waits for the next pass rather than spinning.
    std::map<std::string, int> steps;
    for (;;) {
      auto due = co_await store_.read([now](store::Database& db) { return instances::instances_due(db, now, kDueBatch); });
      if (!*alive_) co_return;
      if (!due) {
        spdlog::error("monitoring: cannot read due instances: {}", due.error().detail);
        break;
      }
      std::vector<std::string> ids;
      for (const auto& id : *due)
        if (steps[id] < 4) ids.push_back(id);
      if (ids.empty()) break;
      // The readings are copied here, on the loop, for the writer thread.
      std::map<std::string, std::optional<agent::InstanceSample>> readings;
      for (const auto& id : ids) readings[id] = fresh_reading(id);
      // The actions are copied for the writer thread: the service may go while it writes.
      auto outcome = co_await store_.write([act = hooks_.act, &ids, &readings, now](store::Database& db) -> Result<std::vector<std::string>> {
        std::vector<std::string> kicks;
        for (const auto& id : ids) {
          auto step = run_due_step(db, id, now, readings[id], act);
          if (!step) return fail(step.error());
          if (step->engine_follows) kicks.push_back(id);
        }
        return kicks;
      });
      if (!*alive_) co_return;
      for (const auto& id : ids) ++steps[id];
      if (!outcome) {
        // One instance's failure must not hold back the others: take them one at a time.
        spdlog::warn("monitoring: a cost-control pass failed ({}); retrying one by one", outcome.error().detail);
        for (const auto& id : ids) {
          auto one = co_await store_.write(
              [act = hooks_.act, &id, &readings, now](store::Database& db) { return run_due_step(db, id, now, readings[id], act); });
          if (!*alive_) co_return;
          if (!one) {
            spdlog::warn("monitoring: cost control of {} failed: {}", id, one.error().detail);
            steps[id] = 4;
          } else if (one->engine_follows && hooks_.kick_instance) {
            hooks_.kick_instance(id);
          }
        }
        continue;
      }
      if (hooks_.kick_instance)
        for (const auto& id : *outcome) hooks_.kick_instance(id);
    }
  } while (rerun_due_ && !stopped_);
  running_due_ = false;
  // The next deadline (commits during the pass armed theirs already; this covers the rest).
  auto earliest = co_await store_.read([](store::Database& db) { return instances::earliest_schedule(db); });
  if (!*alive_) co_return;
  if (earliest && *earliest && **earliest > clock_.now()) arm(**earliest);
}

}  // namespace gpucloud::monitoring
