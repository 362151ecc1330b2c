// Billing's arithmetic and invariants, hermetic: meters, settlement, the ledger chain, arrears,
// alerts and statements. The property test over random sequences is billing_property_test.cpp.
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "billing/arrears.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/reports.h"
#include "billing/resource_meters.h"
#include "billing/subscriptions.h"
#include "config/config.h"
#include "core/timezone.h"
#include "core/unique_temp_dir.h"
#include "market/prices.h"
#include "store/meta.h"
#include "store/store.h"

namespace gpucloud::billing {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

class BillingTest : public ::testing::Test {
 protected:
  template <class F>
  auto write(F f) {
    return store_->write_now(std::move(f));
  }
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-billing");
    auto s = store::Store::open((dir_ / "db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
    ASSERT_TRUE(write([&](store::Database& db) { return market::seed_prices(db, config_); }));
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  std::string user(const std::string& name, std::int64_t credit = 0) {
    std::string id;
    EXPECT_TRUE(write([&](store::Database& db) -> Status {
      auto u = auth::create_user(db, name, std::nullopt, "x", "user", t0_);
      if (!u) return fail(u.error());
      id = u->id;
      return open_account(db, u->id, name, credit, t0_);
    }));
    return id;
  }
  Account account(const std::string& user_id) {
    auto a = write([&](store::Database& db) { return account_of_user(db, user_id); });
    EXPECT_TRUE(a) << a.error().detail;
    return *a;
  }
  std::vector<Entry> all_entries(const std::string& account_id) {
    auto e = write([&](store::Database& db) { return entries_between(db, account_id, SysTime{}, t0_ + hours(24 * 3650)); });
    EXPECT_TRUE(e);
    return *e;
  }
  // The sum of every entry equals the balance, and the chain has no gap.
  void expect_ledger_consistent(const std::string& user_id) {
    Account a = account(user_id);
    auto entries = all_entries(a.id);
    std::int64_t sum = 0, seq = 0;
    for (const auto& e : entries) {
      sum += e.amount;
      EXPECT_EQ(e.seq, ++seq);
      EXPECT_EQ(e.balance_after, sum);
    }
    EXPECT_EQ(sum, a.balance);
    EXPECT_EQ(seq, a.entries);
  }

  fs::path dir_;
  config::Config config_;
  std::unique_ptr<store::Store> store_;
  SysTime t0_ = from_unix_micros(1'800'000'000'000'000);
};

TEST_F(BillingTest, ARunChargesFloorOfPriceTimesSecondsHoweverItIsSplit) {
  const std::string u = user("alice", 100000);
  const std::int64_t price = 198;  // ¥1.98 per hour
  // 7 runs of odd lengths, each settled at odd moments: total = floor(198 × T / 3600).
  std::int64_t total_seconds = 0;
  SysTime t = t0_;
  std::mt19937 rng(7);
  for (int run = 0; run < 7; ++run) {
    ASSERT_TRUE(write([&](store::Database& db) { return open_run(db, "i-box", u, false, price, t); }));
    const std::int64_t length = std::uniform_int_distribution<std::int64_t>(1, 5000)(rng);
    for (int k = 0; k < 3; ++k) {
      SysTime mid = t + seconds(length * (k + 1) / 4) + milliseconds(333);
      ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, mid); }));
    }
    t += seconds(length);
    ASSERT_TRUE(write([&](store::Database& db) { return close_run(db, "i-box", t, t); }));
    total_seconds += length;
    t += seconds(100);  // stopped: nothing accrues
    ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t); }));
  }
  auto charged = write([&](store::Database& db) { return compute_charged(db, "i-box"); });
  ASSERT_TRUE(charged);
  EXPECT_EQ(*charged, price * total_seconds / 3600);
  EXPECT_EQ(account(u).balance, 100000 - price * total_seconds / 3600);
  expect_ledger_consistent(u);
}

TEST_F(BillingTest, ASubSecondRemainderIsNeverCharged) {
  const std::string u = user("alice", 1000);
  ASSERT_TRUE(write([&](store::Database& db) { return open_run(db, "i-x", u, false, 3600, t0_); }));
  // 2.9 s at 1 fen per second: 2 fen, the 0.9 s stays with the user.
  ASSERT_TRUE(write([&](store::Database& db) { return close_run(db, "i-x", t0_ + milliseconds(2900), t0_ + seconds(3)); }));
  EXPECT_EQ(account(u).balance, 998);
}

TEST_F(BillingTest, StorageBillsPerGibHourInMicrosAndFollowsGrowsAndDeletes) {
  const std::string u = user("alice", 100000);
  // 100 GiB at 20,000 micro-fen per GiB-hour = 2 fen per hour.
  ASSERT_TRUE(write([&](store::Database& db) { return follow_data_disk(db, "d-1", u, 100, t0_); }));
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + hours(10)); }));
  EXPECT_EQ(account(u).balance, 100000 - 20);
  // Grown to 250 GiB: 5 fen per hour from now.
  ASSERT_TRUE(write([&](store::Database& db) { return follow_data_disk(db, "d-1", u, 250, t0_ + hours(10)); }));
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + hours(12)); }));
  EXPECT_EQ(account(u).balance, 100000 - 20 - 10);
  // Deleted into the recycle bin: billing stops at once (and the last part is settled).
  ASSERT_TRUE(write([&](store::Database& db) { return follow_data_disk(db, "d-1", u, std::nullopt, t0_ + hours(13)); }));
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + hours(100)); }));
  EXPECT_EQ(account(u).balance, 100000 - 20 - 10 - 5);
  // The usage says how much: 100 GiB × 10 h + 250 GiB × 3 h = 1750 GiB-hours.
  const std::string account_id = account(u).id;
  auto items = write([&](store::Database& db) {
    return usage(db, account_id, SysTime{}, t0_ + hours(200), false, TimeZone::utc());
  });
  ASSERT_TRUE(items);
  ASSERT_EQ(items->size(), 1u);
  EXPECT_DOUBLE_EQ(items->at(0).at("quantity").as_double(), 1750.0);
  EXPECT_EQ(items->at(0).at("amount").as_int64(), 35);
  expect_ledger_consistent(u);
}

TEST_F(BillingTest, AStoragePriceChangeAppliesFromThenAndComputeKeepsItsRunsPrice) {
  const std::string u = user("alice", 100000);
  ASSERT_TRUE(write([&](store::Database& db) { return follow_data_disk(db, "d-1", u, 100, t0_); }));  // 2 fen/h
  ASSERT_TRUE(write([&](store::Database& db) { return open_run(db, "i-1", u, false, 360, t0_); }));    // 6 fen/min
  ASSERT_TRUE(write([&](store::Database& db) -> Status {
    auto p = market::load_prices(db);
    if (!p) return fail(p.error());
    p->data_disk_per_gib_hour_micros *= 3;  // 6 fen/h from now
    if (auto s = market::save_prices(db, *p); !s) return s;
    return rerate_storage(db, t0_ + hours(5));
  }));
  ASSERT_TRUE(write([&](store::Database& db) { return close_run(db, "i-1", t0_ + hours(10), t0_ + hours(10)); }));
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + hours(10)); }));
  // Disk: 5 h × 2 + 5 h × 6 = 40; compute: 10 h × 360 = 3600.
  EXPECT_EQ(account(u).balance, 100000 - 40 - 3600);
  expect_ledger_consistent(u);
}

TEST_F(BillingTest, ReconcileGivesEveryLiveResourceItsMeterAndStopsStrayOnes) {
  const std::string u = user("alice", 100000);
  // A store from before billing: rows without meters.
  ASSERT_TRUE(write([&](store::Database& db) -> Status {
    if (auto s = db.run("INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, memory_gib, "
                        "port_min, port_max, created_at) VALUES ('h-1', 'node-1', 'zone-a', 'ready', 1, 'simulated', "
                        "'unix:///x', 4, 16, 30000, 30099, 0)",
                        {});
        !s)
      return s;
    if (auto s = db.run("INSERT INTO disks (id, owner, name, zone, host_id, size_gib, state, generation, created_at) "
                        "VALUES ('d-old', ?, 'old', 'zone-a', 'h-1', 100, 'available', 1, 0)",
                        {u});
        !s)
      return s;
    return open_run(db, "i-gone", u, false, 3600, t0_);  // a compute meter for no running instance
  }));
  auto fixed = write([&](store::Database& db) { return reconcile_meters(db, t0_ + seconds(10)); });
  ASSERT_TRUE(fixed) << fixed.error().detail;
  EXPECT_EQ(*fixed, 2) << "the disk's meter opened, the stray compute meter closed";
  auto again = write([&](store::Database& db) { return reconcile_meters(db, t0_ + seconds(20)); });
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0) << "reconcile is idempotent";
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + seconds(10) + hours(10)); }));
  EXPECT_EQ(account(u).balance, 100000 - 10 - 20) << "10 s of the stray meter, then 100 GiB for 10 hours";
}

TEST_F(BillingTest, TheLedgerChainRefusesAWriterThatReadAStaleAccount) {
  const std::string u = user("alice", 500);
  auto r = write([&](store::Database& db) -> Status {
    auto a = account_of_user(db, u);
    if (!a) return fail(a.error());
    // Another writer appends meanwhile (same transaction here: what a second process would do).
    if (auto e = post_entry(db, a->id, NewEntry{EntryKind::credit, 100, u, {}, {}, 0, "x"}, t0_); !e) return fail(e.error());
    auto s = db.run("UPDATE billing_accounts SET balance = balance + 1, entries = entries + 1 WHERE id = ? AND entries = ?",
                    {a->id, a->entries});
    if (!s) return s;
    return db.changes() == 0 ? ok() : fail(ErrorCode::internal, "a stale append went through");
  });
  EXPECT_TRUE(r) << r.error().detail;
  // And the schema refuses two entries with one seq.
  const std::string account_id = account(u).id;
  auto dup = write([&](store::Database& db) {
    return db.run("INSERT INTO ledger_entries (id, account_id, seq, time, amount, balance_after, kind) "
                  "VALUES ('le-dup', ?, 1, 0, 1, 1, 'credit')",
                  {account_id});
  });
  EXPECT_FALSE(dup);
}

TEST_F(BillingTest, ArrearsBeginAtZeroAndATopUpLiftsThem) {
  const std::string u = user("alice", 100);
  ASSERT_TRUE(write([&](store::Database& db) { return open_run(db, "i-x", u, false, 3600, t0_); }));
  const std::string account_id = account(u).id;
  auto zero = write([&](store::Database& db) { return projected_zero(db, account_id, t0_); });
  ASSERT_TRUE(zero && *zero);
  EXPECT_EQ(**zero, t0_ + seconds(100)) << "100 fen at 1 fen per second";
  ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, t0_ + seconds(100)); }));
  Account a = account(u);
  EXPECT_EQ(a.balance, 0);
  ASSERT_TRUE(a.arrears_since);
  EXPECT_EQ(account_state(a), "arrears");
  ASSERT_TRUE(write([&](store::Database& db) {
    return post_entry(db, a.id, NewEntry{EntryKind::credit, 1000, u, {}, {}, 0, "top-up"}, t0_ + seconds(101));
  }));
  EXPECT_FALSE(account(u).arrears_since);
  EXPECT_EQ(account_state(account(u)), "ok");
}

TEST_F(BillingTest, TheAlertCrossesOnceDownwardAndRearmsOnlyAfterGoingBackUp) {
  const std::string u = user("alice", 1000);
  const std::string a = account(u).id;
  ASSERT_TRUE(write([&](store::Database& db) { return set_alert(db, a, 500, std::string("http://hooks.example/x"), 0, u, t0_); }));
  auto charge = [&](std::int64_t amount) {
    ASSERT_TRUE(write([&](store::Database& db) {
      return post_entry(db, a, NewEntry{amount < 0 ? EntryKind::charge : EntryKind::credit, amount, u, {}, {}, 0, ""}, t0_);
    }));
  };
  auto outbox = [&] {
    auto n = write([&](store::Database& db) -> Result<std::int64_t> {
      auto r = db.one("SELECT COUNT(*) FROM webhook_outbox WHERE account_id = ?", {a});
      if (!r) return fail(r.error());
      return (*r)->int64(0);
    });
    return n ? *n : -1;
  };
  charge(-400);  // 600: above
  EXPECT_EQ(outbox(), 0);
  charge(-200);  // 400: crossed
  EXPECT_EQ(outbox(), 1);
  charge(-100);  // 300: still below, no second one
  EXPECT_EQ(outbox(), 1);
  charge(+300);  // 600: back above, armed again
  charge(-200);  // 400: crossed again
  EXPECT_EQ(outbox(), 2);
}

TEST_F(BillingTest, AThresholdSetAboveTheBalanceNotifiesOnceAtOnce) {
  const std::string u = user("alice", 1000);
  const std::string a = account(u).id;
  auto outbox = [&] {
    auto n = write([&](store::Database& db) -> Result<std::int64_t> {
      auto r = db.one("SELECT COUNT(*) FROM webhook_outbox WHERE account_id = ?", {a});
      if (!r) return fail(r.error());
      return (*r)->int64(0);
    });
    return n ? *n : -1;
  };
  auto set = [&](std::int64_t threshold, std::int64_t pending) {
    ASSERT_TRUE(write([&](store::Database& db) {
      return set_alert(db, a, threshold, std::string("http://hooks.example/x"), pending, u, t0_);
    }));
  };
  set(2000, 0);  // 1000 is already below 2000: one notification now
  EXPECT_EQ(outbox(), 1);
  EXPECT_EQ(account_state(account(u)), "low");
  set(2000, 0);  // the same alert again, still below: no second one
  EXPECT_EQ(outbox(), 1);
  set(900, 200);  // 1000 settled, 200 accrued: 800 is below 900, a new threshold notifies
  EXPECT_EQ(outbox(), 2);
  set(500, 0);  // above: armed, nothing sent
  EXPECT_EQ(outbox(), 2);
  EXPECT_EQ(account_state(account(u)), "ok");
  EXPECT_EQ(account_state(account(u), 600), "low") << "the state is of the balance net of what has accrued";
}

TEST_F(BillingTest, AStatementExplainsEveryFenOfTheMonth) {
  const std::string u = user("alice", 0);
  const std::string a = account(u).id;
  auto tz = TimeZone::load("Asia/Shanghai");
  ASSERT_TRUE(tz) << tz.error().detail;
  auto bounds = month_bounds("2027-02", *tz);
  ASSERT_TRUE(bounds);
  EXPECT_EQ(format_rfc3339(bounds->first), "2027-01-31T16:00:00Z");
  ASSERT_TRUE(write([&](store::Database& db) {
    return post_entry(db, a, NewEntry{EntryKind::credit, 10000, u, {}, {}, 0, "top-up"}, bounds->first + hours(1));
  }));
  ASSERT_TRUE(write([&](store::Database& db) { return open_run(db, "i-x", u, false, 198, bounds->first + hours(2)); }));
  for (int h = 3; h < 30; ++h)
    ASSERT_TRUE(write([&](store::Database& db) { return settle_open_meters(db, bounds->first + hours(h)); }));
  ASSERT_TRUE(write([&](store::Database& db) { return close_run(db, "i-x", bounds->first + hours(30), bounds->first + hours(30)); }));
  auto doc = write([&](store::Database& db) { return statement(db, a, "2027-02", *tz, "CNY"); });
  ASSERT_TRUE(doc) << doc.error().detail;
  std::int64_t lines = 0;
  for (const auto& l : doc->at("lines").as_array()) lines += l.as_object().at("amount").as_int64();
  EXPECT_EQ(doc->at("opening_balance").as_int64() + lines, doc->at("closing_balance").as_int64());
  EXPECT_EQ(doc->at("charges").as_object().at("compute").as_int64(), 198 * 28);
  EXPECT_EQ(doc->at("closing_balance").as_int64(), 10000 - 198 * 28);
}

// The review's case: credits 10,000, an adjustment of -10,000, 480 charged at balance 0. Revenue
// is what was charged and paid for; money received, adjustments and arrears are apart.
TEST_F(BillingTest, RevenueKeepsMoneyReceivedChargesAdjustmentsAndArrearsApart) {
  const std::string u = user("alice", 0);
  const std::string a = account(u).id;
  auto tz = TimeZone::load("UTC");
  ASSERT_TRUE(tz);
  auto bounds = month_bounds("2027-03", *tz);
  ASSERT_TRUE(bounds);
  const SysTime t = bounds->first + hours(1);
  auto post = [&](EntryKind kind, std::int64_t amount, std::optional<std::string> rk) {
    ASSERT_TRUE(write([&](store::Database& db) {
      return post_entry(db, a, NewEntry{kind, amount, u, std::string("i-x"), rk, 0, "x"}, t);
    }));
  };
  post(EntryKind::credit, 10000, std::nullopt);
  post(EntryKind::adjustment, -10000, std::nullopt);
  post(EntryKind::charge, -480, std::string("compute"));
  auto doc = write([&](store::Database& db) { return revenue_summary(db, "2027-03", *tz, "CNY"); });
  ASSERT_TRUE(doc) << doc.error().detail;
  EXPECT_EQ(doc->at("received").as_int64(), 10000);
  EXPECT_EQ(doc->at("adjustments").as_int64(), -10000);
  EXPECT_EQ(doc->at("charged").as_int64(), 480);
  EXPECT_EQ(doc->at("arrears").as_int64(), 480) << "the user owes what was charged at balance 0";
  EXPECT_EQ(doc->at("revenue").as_int64(), 0) << "nothing charged was paid for";
  // A top-up pays the arrears: next month's revenue counts it.
  ASSERT_TRUE(write([&](store::Database& db) {
    return post_entry(db, a, NewEntry{EntryKind::credit, 1000, u, {}, {}, 0, "top-up"}, bounds->second + hours(1));
  }));
  auto april = write([&](store::Database& db) { return revenue_summary(db, "2027-04", *tz, "CNY"); });
  ASSERT_TRUE(april);
  EXPECT_EQ(april->at("arrears").as_int64(), 0);
  EXPECT_EQ(april->at("revenue").as_int64(), 480);
}

// Revenue by day: every local day of the month in billing_timezone (empty ones with zeros),
// entries on the day their local time falls in, refunds netted, and the days adding up to the
// month.
TEST_F(BillingTest, RevenueByDayFollowsTheBillingTimezonesDaysAndAddsUpToTheMonth) {
  const std::string u = user("alice", 0);
  const std::string a = account(u).id;
  auto tz = TimeZone::load("Asia/Shanghai");
  ASSERT_TRUE(tz) << tz.error().detail;
  auto bounds = month_bounds("2027-02", *tz);
  ASSERT_TRUE(bounds);
  const SysTime first = bounds->first;  // 2027-02-01T00:00+08:00
  auto post = [&](EntryKind kind, std::int64_t amount, std::optional<std::string> rk, std::int64_t quantity, SysTime t) {
    ASSERT_TRUE(write([&](store::Database& db) {
      return post_entry(db, a, NewEntry{kind, amount, u, std::string("r-1"), rk, quantity, "x"}, t);
    }));
  };
  post(EntryKind::charge, -999, std::string("compute"), 3600, first - std::chrono::seconds(1));  // January 31st
  post(EntryKind::credit, 10000, std::nullopt, 0, first + hours(1));
  post(EntryKind::charge, -480, std::string("compute"), 3600, first + hours(24) - std::chrono::seconds(1));
  post(EntryKind::charge, -300, std::string("data_disk"), 10 * 3600, first + hours(24));  // Feb 2nd, 00:00
  post(EntryKind::refund, 80, std::string("compute"), -600, first + hours(25));
  post(EntryKind::subscription, -5000, std::nullopt, 0, first + hours(27 * 24 + 1));  // Feb 28th
  post(EntryKind::adjustment, -7, std::nullopt, 0, first + hours(27 * 24 + 2));
  post(EntryKind::charge, -999, std::string("compute"), 3600, bounds->second);  // March 1st
  auto doc = write([&](store::Database& db) { return revenue_summary(db, "2027-02", *tz, "CNY"); });
  ASSERT_TRUE(doc) << doc.error().detail;
  const auto& days = doc->at("days").as_array();
  ASSERT_EQ(days.size(), 28u);
  auto day = [&](std::size_t i) { return days[i].as_object(); };
  EXPECT_EQ(day(0).at("day").as_string(), "2027-02-01");
  EXPECT_EQ(day(27).at("day").as_string(), "2027-02-28");
  EXPECT_EQ(day(0).at("charged").as_int64(), 480);
  EXPECT_EQ(day(0).at("received").as_int64(), 10000);
  EXPECT_EQ(day(0).at("usage").as_object().at("compute").as_int64(), 3600);
  EXPECT_EQ(day(1).at("charged").as_int64(), 300 - 80) << "the refund nets against the day's charges";
  EXPECT_EQ(day(1).at("by_kind").as_object().at("compute").as_int64(), -80);
  EXPECT_EQ(day(1).at("by_kind").as_object().at("data_disk").as_int64(), 300);
  EXPECT_EQ(day(1).at("refunds").as_int64(), 80);
  EXPECT_EQ(day(1).at("usage").as_object().at("compute").as_int64(), -600);
  EXPECT_DOUBLE_EQ(day(1).at("usage").as_object().at("data_disk").as_double(), 10.0) << "GiB-hours";
  EXPECT_EQ(day(5).at("charged").as_int64(), 0);
  EXPECT_TRUE(day(5).at("by_kind").as_object().empty());
  EXPECT_EQ(day(27).at("by_kind").as_object().at("subscription").as_int64(), 5000);
  EXPECT_EQ(day(27).at("adjustments").as_int64(), -7);
  std::int64_t charged = 0, received = 0;
  for (const auto& d : days) {
    charged += d.at("charged").as_int64();
    received += d.at("received").as_int64();
  }
  EXPECT_EQ(charged, doc->at("charged").as_int64());
  EXPECT_EQ(received, doc->at("received").as_int64());
  EXPECT_EQ(charged, 480 + 300 - 80 + 5000);
}

// A refund reduces the charges it refunds; it is not a credit.
TEST_F(BillingTest, AStatementNetsRefundsAgainstTheirCharges) {
  const std::string u = user("alice", 30000);
  const std::string a = account(u).id;
  auto tz = TimeZone::load("UTC");
  ASSERT_TRUE(tz);
  auto bounds = month_bounds("2027-03", *tz);
  ASSERT_TRUE(bounds);
  const SysTime t = bounds->first + hours(1);
  ASSERT_TRUE(write([&](store::Database& db) {
    return post_entry(db, a, NewEntry{EntryKind::subscription, -26600, u, std::string("i-x"), std::string("subscription"), 0, "paid"}, t);
  }));
  ASSERT_TRUE(write([&](store::Database& db) {
    return post_entry(db, a, NewEntry{EntryKind::refund, 22800, u, std::string("i-x"), std::string("subscription"), 0, "back"},
                      t + hours(24));
  }));
  auto doc = write([&](store::Database& db) { return statement(db, a, "2027-03", *tz, "CNY"); });
  ASSERT_TRUE(doc) << doc.error().detail;
  EXPECT_EQ(doc->at("credits").as_int64(), 0);
  EXPECT_EQ(doc->at("charges").as_object().at("subscription").as_int64(), 3800);
  EXPECT_EQ(doc->at("charges_total").as_int64(), 3800);
  EXPECT_EQ(doc->at("refunds").as_int64(), 22800);
}

// Monthly terms count from the anchor: 31 Jan -> 28 Feb -> 31 Mar -> 30 Apr (not 28 Mar, 28 Apr).
TEST_F(BillingTest, MonthlyRenewalsKeepTheAnchorDay) {
  ASSERT_TRUE(write([&](store::Database& db) { return store::set_meta(db, "billing_timezone", "UTC"); }));
  instances::Instance i;
  i.billing_mode = "monthly";
  i.term_anchor = *parse_rfc3339("2027-01-31T10:00:00Z");
  SysTime end = *parse_rfc3339("2027-02-28T10:00:00Z");
  std::vector<std::string> ends;
  for (int n = 0; n < 3; ++n) {
    auto next = write([&](store::Database& db) { return next_term_end(db, i, end); });
    ASSERT_TRUE(next) << next.error().detail;
    ends.push_back(format_rfc3339(*next));
    end = *next;
  }
  EXPECT_EQ(ends, (std::vector<std::string>{"2027-03-31T10:00:00Z", "2027-04-30T10:00:00Z", "2027-05-31T10:00:00Z"}));
}

// Released a day into a week: the unused six sevenths come back (the used part is charged
// floored, so rounding never favours the platform); a second call refunds nothing more.
TEST_F(BillingTest, AnEarlyReleaseRefundsTheUnusedTermProRata) {
  const std::string u = user("alice", 30000);
  instances::Instance i;
  i.id = "i-sub";
  i.name = "sub";
  i.owner = u;
  i.billing_mode = "weekly";
  ASSERT_TRUE(write([&](store::Database& db) { return pay_subscription(db, i, 26600, "the", t0_); }));
  i.term_anchor = t0_ + hours(1);
  i.expires_at = *i.term_anchor + hours(24 * 7);
  const SysTime release = *i.term_anchor + hours(24);
  auto back = write([&](store::Database& db) { return refund_subscription(db, i, release, "released early"); });
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(*back, 26600 - 26600 / 7);
  auto again = write([&](store::Database& db) { return refund_subscription(db, i, release + hours(1), "again"); });
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(account(u).balance, 30000 - 26600 / 7);
  expect_ledger_consistent(u);

  // Never ran: everything back.
  const std::string v = user("bob", 30000);
  instances::Instance never = i;
  never.id = "i-never";
  never.owner = v;
  never.term_anchor.reset();
  never.expires_at.reset();
  ASSERT_TRUE(write([&](store::Database& db) { return pay_subscription(db, never, 26600, "the", t0_); }));
  auto all = write([&](store::Database& db) { return refund_subscription(db, never, t0_ + hours(1), "failed"); });
  ASSERT_TRUE(all);
  EXPECT_EQ(*all, 26600);
  EXPECT_EQ(account(v).balance, 30000);
}

TEST_F(BillingTest, TimeZonesFindLocalDaysAndCalendarMonths) {
  auto tz = TimeZone::load("America/New_York");
  ASSERT_TRUE(tz) << tz.error().detail;
  // 2027-03-14 is the spring-forward day: its midnight is still EST (-5).
  EXPECT_EQ(format_rfc3339(tz->start_of({2027, 3, 14})), "2027-03-14T05:00:00Z");
  EXPECT_EQ(format_rfc3339(tz->start_of({2027, 3, 15})), "2027-03-15T04:00:00Z");
  // A calendar month from Jan 31 ends on the last day of February.
  auto jan31 = tz->start_of({2027, 1, 31}) + hours(10);
  EXPECT_EQ(format_rfc3339(tz->add_months(jan31, 1)), "2027-02-28T15:00:00Z");
  EXPECT_FALSE(TimeZone::load("Nowhere/Land"));
}

}  // namespace
}  // namespace gpucloud::billing
