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
#include "billing/reports.h"
#include "billing/resource_meters.h"
#include "config/config.h"
#include "core/unique_temp_dir.h"
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
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-spans");
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

// An hourly pass writes one entry per account, user and meter kind. User 0 has one instance and
// its disk: two entries naming them, as before. User 2 has three instances: one compute entry
// with no resource and a line per instance, and one data-disk entry with a line per disk; the
// lines add up to the entries, usage reads them per resource, and the API shows them.
TEST(SettlementSpansTest, AnHourlyPassGroupsAnAccountsMetersOfOneKindIntoOneEntryWithLines) {
  SpannedStore s(3);  // users 0, 1, 2: 1, 2, 3 instances, each with a 100 GiB data disk
  const SysTime t = s.t0 + hours(1) + seconds(30);
  auto pass = s.store().write_now([&](store::Database& db) { return settle_open_meters(db, t); });
  ASSERT_TRUE(pass) << pass.error().detail;
  EXPECT_EQ(pass->meters, 12u);
  EXPECT_EQ(pass->entries, 6u) << "two kinds for each of three accounts";
  auto entries_of = [&](int k) {
    auto e = s.store().write_now([&](store::Database& db) {
      return entries_between(db, account_id_for_user(s.users[k]), s.t0 + seconds(1), t + hours(1));
    });
    EXPECT_TRUE(e);
    return e ? *e : std::vector<Entry>{};
  };

  const auto one = entries_of(0);
  ASSERT_EQ(one.size(), 2u);
  for (const auto& e : one) {
    EXPECT_TRUE(e.lines.empty());
    ASSERT_TRUE(e.resource);
    EXPECT_EQ(lines_of(e).size(), 1u);
    EXPECT_FALSE(entry_json(e).contains("lines"));
  }
  EXPECT_EQ(*one[0].resource, "i-0-0");
  EXPECT_EQ(one[0].amount, -(198 * 3630 / 3600));
  EXPECT_EQ(one[0].description, "compute 3630 s at 198 per hour");
  EXPECT_EQ(*one[1].resource, "d-i-0-0");

  const auto three = entries_of(2);
  ASSERT_EQ(three.size(), 2u);
  const Entry& compute = three[0];
  EXPECT_EQ(compute.kind, EntryKind::charge);
  EXPECT_FALSE(compute.resource);
  EXPECT_EQ(compute.resource_kind, "compute");
  EXPECT_EQ(compute.quantity, 3 * 3630);
  ASSERT_EQ(compute.lines.size(), 3u);
  std::int64_t sum = 0;
  for (int i = 0; i < 3; ++i) {
    const auto& l = compute.lines[static_cast<std::size_t>(i)];
    EXPECT_EQ(l.resource, "i-2-" + std::to_string(i));
    EXPECT_EQ(l.resource_kind, "compute");
    EXPECT_EQ(l.quantity, 3630);
    EXPECT_EQ(l.amount, -(200 * 3630 / 3600));
    sum += l.amount;
  }
  EXPECT_EQ(sum, compute.amount);
  EXPECT_EQ(compute.balance_after, 1'000'000 + compute.amount);
  const Entry& disks = three[1];
  EXPECT_EQ(disks.resource_kind, "data_disk");
  EXPECT_EQ(disks.lines.size(), 3u);
  EXPECT_EQ(disks.balance_after, compute.balance_after + disks.amount);
  EXPECT_EQ(entry_json(compute).at("lines").as_array().size(), 3u);

  // Usage by resource: each instance and disk on its own line, the amounts the lines'.
  auto items = s.store().write_now([&](store::Database& db) {
    return usage(db, account_id_for_user(s.users[2]), s.t0, t + hours(1), false, TimeZone::utc());
  });
  ASSERT_TRUE(items);
  ASSERT_EQ(items->size(), 6u);
  std::int64_t usage_total = 0;
  for (const auto& item : *items) usage_total += item.at("amount").as_int64();
  EXPECT_EQ(usage_total, -(compute.amount + disks.amount));

  EXPECT_EQ(s.accounts()[2].second, 1 + 2) << "the sign-up credit and the two entries";

  // The month's statement: the grouped entry is one line with its shares under it (storage
  // quantities in GiB-hours there), and the charges by kind are the entries'.
  auto month = s.store().write_now([&](store::Database& db) {
    return statement(db, account_id_for_user(s.users[2]), format_rfc3339(s.t0).substr(0, 7), TimeZone::utc(), "CNY");
  });
  ASSERT_TRUE(month) << month.error().detail;
  const auto& lines = month->at("lines").as_array();
  ASSERT_EQ(lines.size(), 3u);
  const auto& disk_shares = lines[2].at("lines").as_array();
  ASSERT_EQ(disk_shares.size(), 3u);
  EXPECT_DOUBLE_EQ(disk_shares[0].at("quantity").as_double(), 100.0 * 3630 / 3600);
  EXPECT_EQ(month->at("charges").at("compute").as_int64(), -compute.amount);
  EXPECT_EQ(month->at("charges").at("data_disk").as_int64(), -disks.amount);
}

TEST(LedgerLines, EncodeAndDecodeRoundTripAndMalformedTextIsAnError) {
  const std::vector<EntryLine> lines{{"i-a", "compute", 3600, -198}, {"i-b", "compute", 1, 0}};
  auto back = decode_lines(encode_lines(lines));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, lines);
  EXPECT_TRUE(decode_lines("")->empty());
  for (const char* bad : {"i-a compute 3600", "i-a compute x -1", "i-a compute 1 2 3", " compute 1 2"})
    EXPECT_FALSE(decode_lines(bad)) << bad;
}

}  // namespace
}  // namespace gpucloud::billing
