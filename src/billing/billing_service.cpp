#include "billing/billing_service.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "billing/arrears.h"
#include "billing/resource_meters.h"

namespace gpucloud::billing {
namespace asio = boost::asio;

BillingService::BillingService(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                               PlatformClock& clock, Hooks hooks, WebhookSender::Options webhook_options)
    : loop_(std::move(loop)),
      config_(config),
      store_(store),
      clock_(clock),
      hooks_(std::move(hooks)),
      webhooks_(std::make_unique<WebhookSender>(loop_, config.alerts.allow_private_webhook_targets,
                                                std::move(webhook_options))) {}

BillingService::~BillingService() {
  *alive_ = false;
  stop();
}

void BillingService::stop() {
  stopped_ = true;
  if (webhooks_) webhooks_->stop();
  if (settlement_timer_) clock_.cancel(*settlement_timer_);
  settlement_timer_.reset();
  for (const auto& [id, timer] : account_timers_) clock_.cancel(timer.first);
  account_timers_.clear();
}

asio::awaitable<void> BillingService::start() {
  stopped_ = false;
  background_ = true;
  // Every live resource has its meter (a store from before billing, a missed hook).
  auto reconcile = [now = clock_.now()](store::Database& db) { return reconcile_meters(db, now); };
  if (auto fixed = co_await store_.write(std::move(reconcile)); !fixed)
    spdlog::error(R"({{"event":"billing_reconcile_failed","detail":"{}"}})", fixed.error().detail);
  else if (*fixed > 0)
    spdlog::info(R"({{"event":"billing_meters_reconciled","changed":{}}})", *fixed);
  arm_settlement();
  co_await plan_watched();
  co_await dispatch_outbox();  // alerts queued before a restart
}

asio::awaitable<void> BillingService::plan_watched() {
  if (stopped_ || !background_) co_return;
  // Every account that accrues or is in arrears gets its timer (they are not persisted: the
  // store says what is due, so a restart plans them again).
  auto watched = [](store::Database& db) -> Result<std::vector<std::string>> {
    auto rows = db.all(
        "SELECT DISTINCT account_id FROM meters WHERE open_since IS NOT NULL UNION "
        "SELECT id FROM billing_accounts WHERE arrears_since IS NOT NULL UNION "
        "SELECT u.billing_account FROM instances i JOIN users u ON u.id = i.owner WHERE i.billing_mode != 'hourly' "
        "AND i.expires_at IS NOT NULL AND i.state != 'released' AND u.billing_account IS NOT NULL",
        {});
    if (!rows) return fail(rows.error());
    std::vector<std::string> out;
    for (const auto& r : *rows) out.push_back(r.text(0));
    return out;
  };
  auto ids = co_await store_.read(std::move(watched));
  if (!ids) {
    spdlog::error(R"({{"event":"billing_start_failed","detail":"{}"}})", ids.error().detail);
    co_return;
  }
  for (auto& id : *ids) to_plan_.insert(std::move(id));
  co_await plan_pending();
}

void BillingService::accounts_changed(std::vector<std::string> ids) {
  // Writer thread → loop. The token guards against a service destroyed meanwhile.
  asio::post(loop_, [this, alive = std::weak_ptr<bool>(alive_), ids = std::move(ids)]() mutable {
    auto live = alive.lock();
    if (!live || !*live || stopped_ || !background_) return;  // a standby replica: the leader plans
    for (auto& id : ids) to_plan_.insert(std::move(id));
    asio::co_spawn(loop_, plan_pending(), asio::detached);
  });
}

asio::awaitable<void> BillingService::plan_pending() {
  if (planning_) co_return;  // the running pass picks up what was added
  planning_ = true;
  while (!to_plan_.empty() && !stopped_) {
    std::string id = *to_plan_.begin();
    to_plan_.erase(to_plan_.begin());
    co_await plan(id);
  }
  planning_ = false;
  co_await dispatch_outbox();
}

asio::awaitable<void> BillingService::dispatch_outbox() {
  if (stopped_) co_return;
  auto pending = [](store::Database& db) -> Result<std::vector<store::Row>> {
    return db.all("SELECT id, url, body FROM webhook_outbox WHERE delivered_at IS NULL AND attempts = 0 "
                  "ORDER BY created_at LIMIT 100",
                  {});
  };
  auto rows = co_await store_.read(std::move(pending));
  if (!rows) co_return;
  for (const auto& r : *rows) {
    const std::string id = r.text(0);
    if (!webhooks_in_flight_.insert(id).second) continue;
    auto done = [this, alive = std::weak_ptr<bool>(alive_), id](bool delivered, std::string why) {
      auto live = alive.lock();
      if (!live || !*live) return;
      webhooks_in_flight_.erase(id);
      // The outcome is recorded once the sender is done with it (retries included).
      auto record = [id, delivered, why, now = clock_.now()](store::Database& db) {
        return db.run("UPDATE webhook_outbox SET delivered_at = ?, attempts = attempts + 1, last_error = ? WHERE id = ?",
                      {delivered ? std::optional<std::int64_t>(to_unix_micros(now)) : std::nullopt, why, id});
      };
      asio::co_spawn(loop_, [](store::Store& store, decltype(record) work) -> asio::awaitable<void> {
        (void)co_await store.write(std::move(work));
      }(store_, std::move(record)), asio::detached);
    };
    webhooks_->deliver(r.text(1), r.text(2), std::move(done));
  }
}

asio::awaitable<void> BillingService::plan(std::string account_id) {
  if (stopped_) co_return;
  const SysTime now = clock_.now();
  auto next_check = [this, account_id, now](store::Database& db) {
    return next_arrears_check(db, config_, account_id, now);
  };
  std::optional<SysTime> due;
  try {
    auto next = co_await store_.read(std::move(next_check));
    if (!next) {
      spdlog::warn(R"({{"event":"billing_plan_failed","account":"{}","detail":"{}"}})", account_id, next.error().detail);
      co_return;
    }
    due = *next;
  } catch (const std::exception& e) {
    spdlog::warn(R"({{"event":"billing_plan_failed","account":"{}","detail":"{}"}})", account_id, e.what());
    co_return;
  }
  auto existing = account_timers_.find(account_id);
  if (existing != account_timers_.end()) {
    if (due && existing->second.second == *due) co_return;  // already set for that moment
    clock_.cancel(existing->second.first);
    account_timers_.erase(existing);
  }
  if (!due) co_return;
  auto timer = clock_.schedule_at(*due, "billing-account", [this, account_id]() -> asio::awaitable<void> {
    co_await account_due(account_id);
  });
  account_timers_[account_id] = {timer, *due};
}

asio::awaitable<void> BillingService::account_due(std::string account_id) {
  account_timers_.erase(account_id);
  if (stopped_) co_return;
  const SysTime now = clock_.now();
  auto enforce = [this, account_id, now](store::Database& db) -> Result<ArrearsOutcome> {
    if (!hooks_.enforce_account) return ArrearsOutcome{};
    return hooks_.enforce_account(db, account_id, now);
  };
  try {
    auto outcome = co_await store_.write(std::move(enforce));
    if (!outcome) {
      spdlog::warn(R"({{"event":"billing_arrears_failed","account":"{}","detail":"{}"}})", account_id,
                   outcome.error().detail);
    } else {
      for (const auto& id : outcome->instances_to_kick)
        if (hooks_.kick_instance) hooks_.kick_instance(id);
      for (const auto& id : outcome->disks_to_kick)
        if (hooks_.kick_disk) hooks_.kick_disk(id);
    }
  } catch (const std::exception& e) {
    spdlog::warn(R"({{"event":"billing_arrears_failed","account":"{}","detail":"{}"}})", account_id, e.what());
  }
  // The commit re-plans the account when it changed it; when it did not (nothing was due
  // yet, a projection a second short), plan it here.
  co_await plan(account_id);
}

asio::awaitable<void> BillingService::quiesce(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  asio::steady_timer tick(loop_);
  while ((planning_ || !to_plan_.empty()) && std::chrono::steady_clock::now() < deadline && !stopped_) {
    tick.expires_after(std::chrono::milliseconds(2));
    boost::system::error_code ec;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void BillingService::arm_settlement() {
  if (stopped_) return;
  if (settlement_timer_) clock_.cancel(*settlement_timer_);
  settlement_timer_ = clock_.schedule_after(std::chrono::duration_cast<std::chrono::microseconds>(config_.billing.settle_interval),
                                            "billing-settlement",
                                            [this]() -> asio::awaitable<void> { co_await settlement_fired(); });
}

asio::awaitable<void> BillingService::settlement_fired() {
  settlement_timer_.reset();
  auto summary = co_await settle_all();
  if (!summary)
    spdlog::warn(R"({{"event":"billing_settlement_failed","detail":"{}"}})", summary.error().detail);
  arm_settlement();
}

asio::awaitable<Result<SettlementSummary>> BillingService::settle_all() {
  const SysTime now = clock_.now();
  // One transaction per span of accounts, so a pass over 100,000 instances holds the writer
  // for a fraction of a second at a time and API writes go in between.
  auto spans = co_await store_.read([now](store::Database& db) { return settlement_spans(db, now, kSettlementSpanMeters); });
  if (!spans) co_return fail(spans.error());
  SettlementSummary total;
  for (const auto& span : *spans) {
    if (stopped_) break;
    auto settle = [now, span](store::Database& db) { return settle_open_meters(db, now, span); };
    try {
      auto part = co_await store_.write(std::move(settle));
      if (!part) co_return fail(part.error());
      total.meters += part->meters;
      total.entries += part->entries;
      total.charged += part->charged;
    } catch (const std::exception& e) {
      co_return fail(ErrorCode::internal, std::string("settlement: ") + e.what());
    }
  }
  co_return total;
}

}  // namespace gpucloud::billing
