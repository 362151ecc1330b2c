// The account's enforcement (policy/account_enforcement.h) against a store: the "balance runs
// out" warning comes an hour before the projected zero, once, and again when spending moves
// that moment (a second instance starts), not at every pass.
#include <filesystem>

#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "billing/ledger.h"
#include "billing/resource_meters.h"
#include "config/config.h"
#include "core/unique_temp_dir.h"
#include "events/events.h"
#include "market/prices.h"
#include "policy/account_enforcement.h"
#include "store/store.h"

namespace gpucloud::policy {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

class AccountEnforcementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-enforce");
    auto s = store::Store::open((dir_ / "db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
    ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
      if (auto s = market::seed_prices(db, config_); !s) return s;
      auto u = auth::create_user(db, "spender", std::nullopt, "x", "user", t0_);
      if (!u) return fail(u.error());
      user_ = u->id;
      return billing::open_account(db, u->id, "spender", 5000, t0_);
    }));
    account_ = billing::account_id_for_user(user_);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void enforce(SysTime now) {
    auto r = store_->write_now([&](store::Database& db) { return enforce_account(db, config_, account_, now); });
    ASSERT_TRUE(r) << r.error().detail;
  }
  void run(const std::string& id, SysTime since) {
    ASSERT_TRUE(store_->write_now([&](store::Database& db) { return billing::open_run(db, id, user_, true, 3600, since); }));
  }
  std::vector<events::Event> warnings() {
    auto all = store_->write_now([&](store::Database& db) { return events::list(db, events::Query{}); });
    EXPECT_TRUE(all);
    std::vector<events::Event> out;
    for (auto& e : *all)
      if (e.type == "billing.arrears_warning") out.push_back(std::move(e));
    return out;
  }

  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
  std::string user_, account_;
  const SysTime t0_ = from_unix_micros(1'800'000'000'000'000);
};

TEST_F(AccountEnforcementTest, TheRunsOutWarningIsSentAgainWhenSpendingMovesTheMoment) {
  run("i-one", t0_);  // 1 fen a second: 5,000 fen run out at +5000 s
  enforce(t0_ + seconds(1000));
  EXPECT_TRUE(warnings().empty()) << "more than an hour to go";
  enforce(t0_ + seconds(2000));
  ASSERT_EQ(warnings().size(), 1u);
  enforce(t0_ + seconds(2100));
  EXPECT_EQ(warnings().size(), 1u) << "the same moment: not again";
  // A second instance doubles the spending: the money runs out at +3550 s now.
  run("i-two", t0_ + seconds(2100));
  enforce(t0_ + seconds(2100));
  auto sent = warnings();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_NE(sent.back().message.find("spending changed"), std::string::npos) << sent.back().message;
  EXPECT_NE(sent.back().message.find(format_rfc3339(t0_ + seconds(3550))), std::string::npos) << sent.back().message;
  enforce(t0_ + seconds(2200));
  EXPECT_EQ(warnings().size(), 2u);
}

}  // namespace
}  // namespace gpucloud::policy
