#pragma once
// The billing clock's side, on the event loop: settles every open meter at least every
// `[billing] settle_interval` (one write transaction for the pass), and keeps one platform
// clock timer per account that needs watching — the warning before its projected zero, the
// projected zero itself (running pay-as-you-go instances stop then, not at the next
// settlement), and the arrears graces. Accounts are re-planned after every commit that
// changed them (Store::on_billing_commit), so a create, a stop or a top-up moves the timer
// at once. All of it runs on the platform clock, so --test-clock drives it.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "billing/arrears.h"
#include "billing/meters.h"
#include "billing/webhook_sender.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "store/store.h"

namespace gpucloud::billing {

class BillingService {
 public:
  struct Hooks {
    std::function<void(const std::string&)> kick_instance;  // the engine follows a stop or release
    std::function<void(const std::string&)> kick_disk;
    // Everything due for one account (subscriptions, spend limits, arrears), in the store's
    // write transaction: policy::enforce_account, wired by the server, because it calls the
    // resources' actions and billing calls none.
    std::function<Result<ArrearsOutcome>(store::Database&, const std::string& account_id, SysTime now)> enforce_account;
  };
  BillingService(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store,
                 PlatformClock& clock, Hooks hooks, WebhookSender::Options webhook_options = {});
  ~BillingService();

  // Arms the settlement timer and plans every account with open meters or in arrears.
  boost::asio::awaitable<void> start();
  void stop();
  // A standby replica (issue 27): commits' hooks plan nothing here until start() (the
  // leader's background work) runs.
  void defer_background() { background_ = false; }
  // From the store's writer thread: re-plan these accounts on the loop.
  void accounts_changed(std::vector<std::string> account_ids);
  // Plans every account that accrues, is in arrears or has a subscription (start, and a
  // leader that may have missed other replicas' notes).
  boost::asio::awaitable<void> plan_watched();
  // Re-plans one account now (awaited by handlers so a test clock advanced right after sees it).
  boost::asio::awaitable<void> plan(std::string account_id);
  // Returns once no account is waiting to be planned (bounded by `limit`): the test clock
  // awaits it before it moves, so a timer an earlier commit asked for is in place.
  boost::asio::awaitable<void> quiesce(std::chrono::milliseconds limit = std::chrono::seconds(2));
  // One settlement pass over every open meter, now: one transaction per span of accounts
  // holding about this many open meters (at ~10 µs a meter, ~0.2 s of writer time each).
  static constexpr std::size_t kSettlementSpanMeters = 20'000;
  boost::asio::awaitable<Result<SettlementSummary>> settle_all();

 private:
  void arm_settlement();
  boost::asio::awaitable<void> settlement_fired();
  boost::asio::awaitable<void> account_due(std::string account_id);
  boost::asio::awaitable<void> plan_pending();
  // Balance alerts waiting in webhook_outbox (written in the transaction that crossed the
  // threshold, so none is lost to a crash) go to the sender; delivered ones are marked.
  boost::asio::awaitable<void> dispatch_outbox();

  boost::asio::any_io_executor loop_;
  const config::Config& config_;
  store::Store& store_;
  PlatformClock& clock_;
  Hooks hooks_;
  bool stopped_ = false;
  bool background_ = true;
  std::optional<PlatformClock::TimerId> settlement_timer_;
  std::map<std::string, std::pair<PlatformClock::TimerId, SysTime>> account_timers_;
  std::set<std::string> to_plan_;
  bool planning_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<WebhookSender> webhooks_;
  std::set<std::string> webhooks_in_flight_;
};

}  // namespace gpucloud::billing
