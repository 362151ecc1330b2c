// A settlement pass cut into spans of accounts (one transaction each, as BillingService runs
// it): the spans cover every account once, never split one, and charge exactly what one
// whole-store transaction charges, also when the pass dies between two spans.
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "auth/accounts.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "config/config.h"
#include "market/prices.h"
#include "store/store.h"

namespace gpucloud::billing {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;
using std::chrono::seconds;

// A store with `accounts` users; user k has (k % 4) + 1 instances, each running with a
// 100 GiB data disk: 2 open meters per instance.
class SpannedStore {
 public:
  explicit SpannedStore(int accounts) {
    static int n = 0;
    dir_ = fs::temp_directory_path() / ("gpucloud-spans-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(dir_);
    auto s = store::Store::open((dir_ / "db").string(), 1);
    if (!s) throw std::runtime_error(s.error().detail);
    store_ = std::move(*s);
    config::Config config;
    auto seeded = store_->write_now([&](store::Database& db) -> Status {
      if (auto p = market::seed_prices(db, config); !p) return p;
      for (int k = 0; k < accounts; ++k) {
        auto u = auth::create_user(db, "spans" + std::to_string(k), std::nullopt, "x", "user", t0);
        if (!u) return fail(u.error());
        if (auto a = open_account(db, u->id, u->username, 1'000'000, t0); !a) return a;
        users.push_back(u->id);
        for (int i = 0; i <= k % 4; ++i) {
          const std::string id = "i-" + std::to_string(k) + "-" + std::to_string(i);
          if (auto m = open_run(db, id, u->id, false, 198 + k, t0); !m) return m;
          if (auto d = follow_data_disk(db, "d-" + id, u->id, 100, t0); !d) return d;
        }
      }
      return ok();
    });
    if (!seeded) throw std::runtime_error(seeded.error().detail);
  }
  ~SpannedStore() {
    store_.reset();
    fs::remove_all(dir_);
  }
  store::Store& store() { return *store_; }
  // Balance and entry count of every user's account, in the order the users were made.
  std::vector<std::pair<std::int64_t, std::int64_t>> accounts() {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const auto& u : users) {
      auto a = store_->write_now([&](store::Database& db) { return account_of_user(db, u); });
      EXPECT_TRUE(a);
      auto sum = store_->write_now([&](store::Database& db) {
        return db.one("SELECT COALESCE(SUM(amount), 0) FROM ledger_entries WHERE account_id = ?", {a->id});
      });
      EXPECT_TRUE(sum && *sum);
      EXPECT_EQ((*sum)->int64(0), a->balance) << "the ledger sums to the balance";
      out.emplace_back(a->balance, a->entries);
    }
    return out;
  }

  SysTime t0 = from_unix_micros(1'800'000'000'000'000);
  std::vector<std::string> users;

 private:
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
};

std::size_t open_meters_in(store::Database& db, const AccountSpan& span) {
  auto r = db.one("SELECT COUNT(*) FROM meters WHERE open_since IS NOT NULL AND account_id >= ? AND account_id <= ?",
                  {span.first, span.last});
  return r && *r ? static_cast<std::size_t>((*r)->int64(0)) : 0;
}

TEST(SettlementSpansTest, SpansCoverEveryAccountOnceInOrderAndNeverSplitOne) {
  SpannedStore s(37);  // 2, 4, 6 or 8 meters per account, 182 in all
  auto spans = s.store().write_now([&](store::Database& db) { return settlement_spans(db, s.t0 + hours(1), 20); });
  ASSERT_TRUE(spans);
  ASSERT_GT(spans->size(), 5u);
  std::size_t covered = 0;
  for (std::size_t i = 0; i < spans->size(); ++i) {
    const auto& span = (*spans)[i];
    EXPECT_LE(span.first, span.last);
    if (i > 0) {
      EXPECT_LT((*spans)[i - 1].last, span.first) << "spans are disjoint and ordered";
    }
    const auto meters = s.store().write_now([&](store::Database& db) -> Result<std::size_t> { return open_meters_in(db, span); });
    ASSERT_TRUE(meters);
    EXPECT_LE(*meters, 20u);
    EXPECT_GT(*meters, 0u);
    covered += *meters;
  }
  EXPECT_EQ(covered, 182u);

  // An account with more meters than a span holds gets a span of its own, whole.
  auto single = s.store().write_now([&](store::Database& db) { return settlement_spans(db, s.t0 + hours(1), 3); });
  ASSERT_TRUE(single);
  EXPECT_EQ(single->size(), 37u);
  for (const auto& span : *single) EXPECT_EQ(span.first, span.last);
}

TEST(SettlementSpansTest, ASpannedPassChargesExactlyWhatOneTransactionCharges) {
  SpannedStore whole(23), spanned(23);
  for (int h = 1; h <= 3; ++h) {
    const SysTime t = whole.t0 + hours(h) + seconds(17 * h);
    auto one = whole.store().write_now([&](store::Database& db) { return settle_open_meters(db, t); });
    ASSERT_TRUE(one);
    auto spans = spanned.store().write_now([&](store::Database& db) { return settlement_spans(db, t, 9); });
    ASSERT_TRUE(spans);
    ASSERT_GT(spans->size(), 3u);
    SettlementSummary total;
    for (const auto& span : *spans) {
      auto part = spanned.store().write_now([&](store::Database& db) { return settle_open_meters(db, t, span); });
      ASSERT_TRUE(part) << part.error().detail;
      total.meters += part->meters;
      total.entries += part->entries;
      total.charged += part->charged;
    }
    EXPECT_EQ(total.meters, one->meters);
    EXPECT_EQ(total.entries, one->entries);
    EXPECT_EQ(total.charged, one->charged);
    EXPECT_GT(one->charged, 0);
  }
  // Same users made in the same order in both stores: same balances, same number of entries.
  EXPECT_EQ(whole.accounts(), spanned.accounts());
}

TEST(SettlementSpansTest, APassThatDiesBetweenSpansNeitherSkipsNorRepeatsACharge) {
  SpannedStore whole(19), crashed(19);
  const SysTime t = whole.t0 + hours(1);
  ASSERT_TRUE(whole.store().write_now([&](store::Database& db) { return settle_open_meters(db, t); }));
  auto spans = crashed.store().write_now([&](store::Database& db) { return settlement_spans(db, t, 8); });
  ASSERT_TRUE(spans);
  ASSERT_GT(spans->size(), 2u);
  // The first two spans commit; the third dies half-way (after its ledger insert).
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(crashed.store().write_now([&](store::Database& db) { return settle_open_meters(db, t, (*spans)[i]); }));
  auto died = crashed.store().write_now([&](store::Database& db) -> Status {
    if (auto r = settle_open_meters(db, t, (*spans)[2]); !r) return fail(r.error());
    return fail(ErrorCode::internal, "killed");
  });
  EXPECT_FALSE(died);
  // The next pass, at the same moment, charges what is left and nothing twice.
  ASSERT_TRUE(crashed.store().write_now([&](store::Database& db) { return settle_open_meters(db, t); }));
  EXPECT_EQ(whole.accounts(), crashed.accounts());
}

}  // namespace
}  // namespace gpucloud::billing
