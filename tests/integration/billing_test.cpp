// Billing end to end with --test-clock: a run, a stop and a run again charge exactly
// floor(P × run_seconds / 3600); a balance that runs out stops the instance at its projected
// zero, creates are refused with 402, the grace releases it and the data disk waits for the
// second grace; a top-up lifts the block; a kill -9 inside a settlement neither skips nor
// repeats a charge; credits are idempotent; a real local receiver gets one webhook per
// downward crossing, and one after it recovers from a failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/capabilities.h"
#include "shared_daemon.h"
#include "support/billing_config.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
using std::chrono::seconds;

DaemonOptions options(std::int64_t signup_credit_fen = -1) {
  DaemonOptions o;
  o.config_toml = billing_test_config(signup_credit_fen);
  o.test_clock = true;
  return o;
}

HttpResult advance(const TestDaemon& d, std::int64_t s) {
  auto r = d.post("/api/v1/admin/clock", {{"advance_seconds", s}}, d.admin_token());
  EXPECT_EQ(r.status, 200) << r.body;
  return r;
}

json::object account(const TestDaemon& d, const std::string& token) {
  auto r = d.get("/api/v1/billing/account", token);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json().as_object();
}

// Every entry of the ledger, oldest first (following the cursor).
std::vector<json::object> ledger(const TestDaemon& d, const std::string& token) {
  std::vector<json::object> out;
  std::string cursor;
  for (int page = 0; page < 100; ++page) {
    auto r = d.get("/api/v1/billing/ledger?limit=50" + (cursor.empty() ? "" : "&cursor=" + cursor), token);
    EXPECT_EQ(r.status, 200) << r.body;
    json::value doc = r.json();
    for (const auto& e : doc.at("items").as_array()) out.push_back(e.as_object());
    if (doc.at("next_cursor").is_null()) break;
    cursor = std::string(doc.at("next_cursor").as_string());
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The ledger sums to the balance and chains without gaps.
void expect_ledger_consistent(const TestDaemon& d, const std::string& token) {
  auto entries = ledger(d, token);
  ASSERT_FALSE(entries.empty());
  std::int64_t sum = 0, seq = 0;
  for (const auto& e : entries) {
    sum += e.at("amount").as_int64();
    EXPECT_EQ(e.at("seq").as_int64(), ++seq);
    EXPECT_EQ(e.at("balance_after").as_int64(), sum);
  }
  EXPECT_EQ(sum, account(d, token).at("settled_balance").as_int64());
}

std::string credit(const TestDaemon& d, const std::string& user, std::int64_t amount, const std::string& key = "") {
  std::map<std::string, std::string> headers;
  if (!key.empty()) headers["Idempotency-Key"] = key;
  auto r = d.request("POST", "/api/v1/admin/users/" + user + "/credit",
                     json::serialize(json::object{{"amount", amount}, {"note", "test"}}), d.admin_token(), headers);
  EXPECT_EQ(r.status, 201) << r.body;
  return r.body;
}

HttpResult create_no_gpu(const TestDaemon& d, const std::string& token, const std::string& name, json::object extra = {}) {
  json::object body{{"name", name}, {"gpu_count", 0}};
  for (auto& [k, v] : extra) body[k] = v;
  return d.post("/api/v1/instances", body, token);
}

// A daemon per BillingTest case: each moves the test clock (hours to months, settling every
// account on the daemon) or kills the daemon.
TEST(BillingTest, DOCKER_RunStopRunChargesFloorOfPriceTimesRunSeconds) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options());
  d.start();
  const std::string alice = d.register_and_login("bill-alice");
  const std::int64_t start_balance = account(d, alice).at("balance").as_int64();
  auto r = create_no_gpu(d, alice, "meter");
  ASSERT_EQ(r.status, 202) << r.body;
  d.wait_for_state("meter", "running", alice);
  advance(d, 1000);
  ASSERT_EQ(d.post("/api/v1/instances/meter/stop", json::object{}, alice).status, 202);
  d.wait_for_state("meter", "stopped", alice);
  advance(d, 500);  // stopped: no compute
  ASSERT_EQ(d.post("/api/v1/instances/meter/start", json::object{}, alice).status, 202);
  d.wait_for_state("meter", "running", alice);
  advance(d, 777);
  ASSERT_EQ(d.post("/api/v1/instances/meter/stop", json::object{}, alice).status, 202);
  auto stopped = d.wait_for_state("meter", "stopped", alice);
  const std::int64_t run_seconds = stopped.at("run_seconds").as_int64();
  EXPECT_EQ(run_seconds, 1777);
  EXPECT_EQ(stopped.at("charged").as_int64(), 3600 * run_seconds / 3600);
  EXPECT_EQ(stopped.at("billing").at("price_per_hour").as_int64(), 3600);
  // The balance moved by exactly the compute (the 30 GiB system disk is within the free allowance).
  EXPECT_EQ(account(d, alice).at("balance").as_int64(), start_balance - 1777);
  expect_ledger_consistent(d, alice);
  // Usage by resource says the same.
  auto usage = d.get("/api/v1/billing/usage?group_by=resource", alice).json();
  std::int64_t seconds_used = 0, amount = 0;
  for (const auto& u : usage.at("items").as_array())
    if (u.at("kind") == "compute_no_gpu") {
      seconds_used += u.at("quantity").as_int64();
      amount += u.at("amount").as_int64();
    }
  EXPECT_EQ(seconds_used, 1777);
  EXPECT_EQ(amount, 1777);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/meter", "", alice).status, 202);
  d.wait_for_state("meter", "released", alice);
}

TEST(BillingTest, DOCKER_ArrearsStopAtTheProjectedZeroRefuseCreatesAndReleaseAfterTheGrace) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options(0));
  d.start();
  const std::string bob = d.register_and_login("bill-bob");
  // A new user at zero cannot create: one hour of the price is needed.
  auto refused = create_no_gpu(d, bob, "broke");
  EXPECT_EQ(refused.status, 402) << refused.body;
  EXPECT_EQ(refused.code(), "insufficient_balance");
  credit(d, "bill-bob", 3700);  // one hour and 100 s
  auto r = create_no_gpu(d, bob, "runner", {{"data_disks", json::array{json::object{{"size_gib", 1}}}}});
  ASSERT_EQ(r.status, 202) << r.body;
  d.wait_for_state("runner", "running", bob);
  auto disks = d.get("/api/v1/disks", bob).json().at("items").as_array();
  ASSERT_EQ(disks.size(), 1u);
  const std::string disk_id = std::string(disks[0].at("id").as_string());
  advance(d, 3600);  // still 100 fen left (less the disk's storage, well under one fen)
  EXPECT_EQ(d.get("/api/v1/instances/runner", bob).json().at("state"), "running");
  advance(d, 150);  // the projected zero passed inside this advance
  auto stopped = d.wait_for_state("runner", "stopped", bob);
  EXPECT_EQ(stopped.at("state_reason"), "arrears");
  // It stopped at the zero, not at the end of the advance: run_seconds ≈ 3700.
  EXPECT_LE(stopped.at("run_seconds").as_int64(), 3701);
  EXPECT_GE(stopped.at("run_seconds").as_int64(), 3690);
  auto acct = account(d, bob);
  EXPECT_EQ(acct.at("state"), "arrears");
  EXPECT_FALSE(acct.at("arrears_since").is_null());
  // Creates and starts are refused while in arrears.
  EXPECT_EQ(create_no_gpu(d, bob, "again").status, 402);
  EXPECT_EQ(d.post("/api/v1/instances/runner/start", json::object{}, bob).status, 402);
  // The warning events came first.
  auto events = d.get("/api/v1/events?limit=1000", bob).json().at("items").as_array();
  bool warned_stop = false, arrears = false;
  for (const auto& e : events) {
    if (e.at("type") == "billing.arrears_warning" && e.at("data").at("step") == "stop") warned_stop = true;
    if (e.at("type") == "billing.arrears") arrears = true;
  }
  EXPECT_TRUE(warned_stop);
  EXPECT_TRUE(arrears);
  // After the first grace (2 days) the stopped instance is released; the detached data disk stays.
  advance(d, 2 * 86400 + 60);
  d.wait_for_state("runner", "released", bob);
  auto disk = d.get("/api/v1/disks/" + disk_id, bob);
  ASSERT_EQ(disk.status, 200) << disk.body;
  EXPECT_EQ(disk.json().at("state"), "available");
  // After the second grace (4 days) it goes to the recycle bin.
  advance(d, 2 * 86400);
  auto binned = d.get("/api/v1/disks/" + disk_id, bob).json();
  EXPECT_EQ(binned.at("state"), "deleted");
  expect_ledger_consistent(d, bob);
  // A top-up lifts the block (and restarts nothing).
  credit(d, "bill-bob", 100000);
  EXPECT_EQ(account(d, bob).at("state"), "ok");
  auto fresh = create_no_gpu(d, bob, "again");
  EXPECT_EQ(fresh.status, 202) << fresh.body;
  d.wait_for_state("again", "running", bob);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/again", "", bob).status, 202);
  d.wait_for_state("again", "released", bob);
}

TEST(BillingTest, DOCKER_ASpendLimitWarnsAtEightyPercentAndStopsAtTheLimit) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options());
  d.start();
  const std::string fay = d.register_and_login("bill-fay");
  EXPECT_EQ(create_no_gpu(d, fay, "bad", {{"spend_limit", -5}}).status, 400);
  auto r = create_no_gpu(d, fay, "capped", {{"spend_limit", 100}});  // 100 s at one fen a second
  ASSERT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(r.json().at("spend_limit").as_int64(), 100);
  d.wait_for_state("capped", "running", fay);
  auto warnings = [&] {
    int n = 0;
    const json::value events = d.get("/api/v1/events?limit=1000", fay).json();  // named: at() into a temporary dangles
    for (const auto& e : events.at("items").as_array())
      if (e.at("type") == "instance.spend_limit_warning") ++n;
    return n;
  };
  advance(d, 79);
  EXPECT_EQ(warnings(), 0);
  advance(d, 2);  // 81 s: past 80 %
  EXPECT_EQ(warnings(), 1);
  EXPECT_EQ(d.get("/api/v1/instances/capped", fay).json().at("state"), "running");
  advance(d, 60);  // the limit is reached at 100 s, inside this advance
  auto stopped = d.wait_for_state("capped", "stopped", fay);
  EXPECT_EQ(stopped.at("state_reason"), "spend_limit");
  EXPECT_EQ(stopped.at("run_seconds").as_int64(), 100);
  EXPECT_EQ(stopped.at("charged").as_int64(), 100);
  EXPECT_EQ(warnings(), 1);
  // A new limit is set by PATCH, and null removes it.
  auto patched = d.request("PATCH", "/api/v1/instances/capped", R"({"spend_limit": 500})", fay);
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json().at("spend_limit").as_int64(), 500);
  auto cleared = d.request("PATCH", "/api/v1/instances/capped", R"({"spend_limit": null})", fay);
  EXPECT_TRUE(cleared.json().at("spend_limit").is_null());
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/capped", "", fay).status, 202);
  d.wait_for_state("capped", "released", fay);
}

// A month of a typical user's life in seconds of test clock: an instance with a 40 GiB system
// disk (10 GiB billed) and a 50 GiB data disk runs four days, stops one, six times over; the
// statements' lines explain every fen: opening + lines = closing, and per kind the charges are
// exactly floor(rate × time) of what ran and existed.
TEST(BillingTest, DOCKER_SLOW_AMonthOfATypicalUserIsExplainedByItsStatements) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options());
  d.start();
  const std::string hal = d.register_and_login("bill-hal");
  credit(d, "bill-hal", 3'000'000);  // 24 days at ¥36 a hour
  const std::int64_t start_balance = account(d, hal).at("balance").as_int64();
  const std::string first_month =
      std::string(d.post("/api/v1/admin/clock", {{"advance_seconds", 0}}, d.admin_token()).json().at("now").as_string())
          .substr(0, 7);
  auto r = create_no_gpu(d, hal, "life",
                         {{"system_disk_gib", 40}, {"data_disks", json::array{json::object{{"size_gib", 50}}}}});
  ASSERT_EQ(r.status, 202) << r.body;
  d.wait_for_state("life", "running", hal);
  std::int64_t lived = 0;
  for (int cycle = 0; cycle < 6; ++cycle) {
    advance(d, 4 * 86400);
    ASSERT_EQ(d.post("/api/v1/instances/life/stop", json::object{}, hal).status, 202);
    d.wait_for_state("life", "stopped", hal);
    advance(d, 86400);
    ASSERT_EQ(d.post("/api/v1/instances/life/start", json::object{}, hal).status, 202);
    d.wait_for_state("life", "running", hal);
    lived += 5 * 86400;
  }
  ASSERT_EQ(d.post("/api/v1/instances/life/stop", json::object{}, hal).status, 202);
  auto stopped = d.wait_for_state("life", "stopped", hal);
  advance(d, 3600);  // the last storage hour settles
  const std::int64_t run = stopped.at("run_seconds").as_int64();
  EXPECT_EQ(run, 6 * 4 * 86400);
  std::map<std::string, std::int64_t> by_kind;
  std::int64_t lines_total = 0;
  const std::string now = std::string(d.post("/api/v1/admin/clock", {{"advance_seconds", 0}}, d.admin_token()).json().at("now").as_string());
  std::vector<std::string> months{first_month};
  if (now.substr(0, 7) != first_month) months.push_back(now.substr(0, 7));
  std::int64_t previous_closing = start_balance;
  for (const auto& month : months) {
    auto st = d.get("/api/v1/billing/statements/" + month, hal);
    ASSERT_EQ(st.status, 200) << st.body;
    const json::value doc = st.json();
    std::int64_t sum = 0;
    for (const auto& line : doc.at("lines").as_array()) {
      const auto& l = line.as_object();
      sum += l.at("amount").as_int64();
      if (l.at("kind") == "charge") by_kind[std::string(l.at("resource_kind").as_string())] += -l.at("amount").as_int64();
    }
    EXPECT_EQ(doc.at("opening_balance").as_int64() + sum, doc.at("closing_balance").as_int64()) << month;
    if (month != first_month) {
      EXPECT_EQ(doc.at("opening_balance").as_int64(), previous_closing);
    }
    previous_closing = doc.at("closing_balance").as_int64();
    lines_total += sum;
  }
  // Compute: 1 fen a second of running. Storage: floor(GiB × micros × seconds / 3.6e9).
  EXPECT_EQ(by_kind["compute_no_gpu"], run);
  const std::int64_t storage_seconds = lived + 3600;
  EXPECT_NEAR(static_cast<double>(by_kind["data_disk"]), 50.0 * 20000 * storage_seconds / 3.6e9, 1.0);
  EXPECT_NEAR(static_cast<double>(by_kind["system_disk"]), 10.0 * 20000 * storage_seconds / 3.6e9, 1.0);
  EXPECT_EQ(account(d, hal).at("settled_balance").as_int64(), previous_closing);
  expect_ledger_consistent(d, hal);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/life", "", hal).status, 202);
  d.wait_for_state("life", "released", hal);
}

// A weekly subscription: paid up front (402 when the balance does not cover it), the term
// starts at the first `running`, the GPU stays reserved while stopped, it renews 24 h before
// the end, and, auto_renew off, it ends as a stopped pay-as-you-go instance with its GPU freed.
TEST(BillingTest, DOCKER_AWeeklySubscriptionRenewsThenExpiresIntoPayAsYouGo) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options(0));
  d.start();
  const std::string ivy = d.register_and_login("bill-ivy");
  json::object weekly{{"gpu_model", "RTX 4090"}, {"gpu_count", 1},
                      {"billing", json::object{{"mode", "weekly"}, {"auto_renew", true}}}};
  credit(d, "bill-ivy", 26000);  // below one week (26,600)
  auto refused = d.post("/api/v1/instances", json::object{{"name", "sub"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1},
                                                          {"billing", weekly.at("billing")}},
                        ivy);
  EXPECT_EQ(refused.status, 402) << refused.body;
  credit(d, "bill-ivy", 60000);  // 86,000: two weeks and change
  auto r = d.post("/api/v1/instances", json::object{{"name", "sub"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1},
                                                    {"billing", weekly.at("billing")}},
                  ivy);
  ASSERT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(account(d, ivy).at("balance").as_int64(), 86000 - 26600) << "paid up front";
  auto running = d.wait_for_state("sub", "running", ivy);
  ASSERT_FALSE(running.at("billing").at("expires_at").is_null());
  const std::string first_end = std::string(running.at("billing").at("expires_at").as_string());
  // Stopped inside the term, it keeps its GPU; it starts again on it, paying nothing more.
  ASSERT_EQ(d.post("/api/v1/instances/sub/stop", json::object{}, ivy).status, 202);
  auto stopped = d.wait_for_state("sub", "stopped", ivy);
  EXPECT_EQ(stopped.at("gpus").as_array().size(), 1u) << "a subscription keeps its GPU while stopped";
  ASSERT_EQ(d.post("/api/v1/instances/sub/start", json::object{}, ivy).status, 202) ;
  d.wait_for_state("sub", "running", ivy);
  advance(d, 6 * 86400 + 3600);  // past the renewal point (24 h before the end)
  auto renewed = d.get("/api/v1/instances/sub", ivy).json();
  EXPECT_NE(std::string(renewed.at("billing").at("expires_at").as_string()), first_end) << "renewed for a week";
  EXPECT_EQ(account(d, ivy).at("balance").as_int64(), 86000 - 2 * 26600);
  EXPECT_EQ(renewed.at("charged").as_int64(), 0) << "no per-second compute inside a paid term";
  {
    // GET /billing/subscriptions: the active term, its expiry and what was paid (two weeks).
    auto subs = d.get("/api/v1/billing/subscriptions", ivy);
    ASSERT_EQ(subs.status, 200) << subs.body;
    const json::value listed = subs.json();
    const auto& items = listed.at("items").as_array();
    ASSERT_EQ(items.size(), 1u) << subs.body;
    const auto& sub = items[0].as_object();
    EXPECT_EQ(sub.at("name"), "sub");
    EXPECT_EQ(sub.at("term"), "weekly");
    EXPECT_EQ(sub.at("status"), "active");
    EXPECT_EQ(sub.at("expires_at"), renewed.at("billing").at("expires_at"));
    EXPECT_TRUE(sub.at("auto_renew").as_bool());
    EXPECT_EQ(sub.at("payments").as_int64(), 2);
    EXPECT_EQ(sub.at("paid").as_int64(), 2 * 26600);
    EXPECT_TRUE(sub.at("started_at").is_string()) << "its first running";
    const std::string other = d.register_and_login("bill-ivy-2");
    EXPECT_TRUE(d.get("/api/v1/billing/subscriptions", other).json().at("items").as_array().empty()) << "own only";
  }
  // auto_renew off: at the end of the second week it becomes a stopped pay-as-you-go instance.
  auto patched = d.request("PATCH", "/api/v1/instances/sub", R"({"billing": {"auto_renew": false}})", ivy);
  ASSERT_EQ(patched.status, 200) << patched.body;
  advance(d, 8 * 86400);  // past the end of the renewed term (day 14)
  auto expired = d.wait_for_state("sub", "stopped", ivy);
  EXPECT_EQ(expired.at("billing").at("mode"), "hourly");
  EXPECT_EQ(expired.at("state_reason"), "subscription_expired");
  EXPECT_TRUE(expired.at("gpus").as_array().empty()) << "its GPU is free again";
  EXPECT_EQ(account(d, ivy).at("balance").as_int64(), 86000 - 2 * 26600) << "no third week";
  bool warned = false;
  const json::value events = d.get("/api/v1/events?limit=1000", ivy).json();
  for (const auto& e : events.at("items").as_array())
    if (e.at("type") == "billing.subscription_expiring") warned = true;
  EXPECT_TRUE(warned) << "an event before the end";
  expect_ledger_consistent(d, ivy);
  {
    // Ended: still listed (the term it was, what was paid), no expiry, no renewal.
    auto subs = d.get("/api/v1/billing/subscriptions", ivy).json();
    ASSERT_EQ(subs.at("items").as_array().size(), 1u) << subs;
    const auto& sub = subs.at("items").as_array()[0].as_object();
    EXPECT_EQ(sub.at("status"), "ended");
    EXPECT_EQ(sub.at("term"), "weekly");
    EXPECT_TRUE(sub.at("expires_at").is_null());
    EXPECT_FALSE(sub.at("auto_renew").as_bool());
    EXPECT_EQ(sub.at("paid").as_int64(), 2 * 26600);
  }
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/sub", "", ivy).status, 202);
  d.wait_for_state("sub", "released", ivy);
}

TEST(BillingTest, DOCKER_KillNineInsideASettlementNeitherSkipsNorRepeatsACharge) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(options());
  d.start();
  const std::string carol = d.register_and_login("bill-carol");
  const std::int64_t start_balance = account(d, carol).at("balance").as_int64();
  ASSERT_EQ(create_no_gpu(d, carol, "crash").status, 202);
  d.wait_for_state("crash", "running", carol);
  d.stop();
  d.start("billing.settle.after_ledger_insert");
  // The hourly settlement comes due inside this advance; the daemon dies in it.
  const std::string admin = d.admin_token();
  try {
    d.request("POST", "/api/v1/admin/clock", R"({"advance_seconds": 3700})", admin);
  } catch (const std::exception&) {
    // the daemon died answering: expected
  }
  ASSERT_TRUE(d.killed_at("billing.settle.after_ledger_insert"));
  d.start();
  // Nothing of the killed settlement remains; the next one charges the whole hour once.
  EXPECT_EQ(account(d, carol).at("settled_balance").as_int64(), start_balance);
  advance(d, 3600);
  ASSERT_EQ(d.post("/api/v1/instances/crash/stop", json::object{}, carol).status, 202);
  auto stopped = d.wait_for_state("crash", "stopped", carol);
  // The killed advance never moved the persisted clock: the run is the hour advanced since,
  // plus the real seconds the restarts took (the test clock starts from the wall clock).
  const std::int64_t run = stopped.at("run_seconds").as_int64();
  EXPECT_GE(run, 3600);
  EXPECT_LT(run, 3600 + 120);
  EXPECT_EQ(stopped.at("charged").as_int64(), run);
  EXPECT_EQ(account(d, carol).at("settled_balance").as_int64(), start_balance - run);
  expect_ledger_consistent(d, carol);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/crash", "", carol).status, 202);
  d.wait_for_state("crash", "released", carol);
}

// One daemon for the suite (shared_daemon.h), with the test clock but never moved here: no
// test restarts it, and each has a user of its own, whose ledger and alert are its own.
class BillingApiTest : public SharedDaemonTest<BillingApiTest> {
 public:
  static DaemonOptions daemon_options() { return options(0); }
};

TEST_F(BillingApiTest, CreditsAreIdempotentAndOnlyTheOperatorCredits) {
  TestDaemon& d = daemon_;
  const std::string dave_name = unique_name("bill-dave");
  const std::string dave = d.register_and_login(dave_name);
  credit(d, dave_name, 500, "topup-1");
  credit(d, dave_name, 500, "topup-1");  // a retry: applied once
  EXPECT_EQ(account(d, dave).at("balance").as_int64(), 500);
  auto replay = d.request("POST", "/api/v1/admin/users/" + dave_name + "/credit",
                          json::serialize(json::object{{"amount", 500}, {"note", "test"}}), d.admin_token(),
                          {{"Idempotency-Key", "topup-1"}});
  EXPECT_EQ(replay.status, 201) << replay.body;
  EXPECT_EQ(replay.headers["idempotent-replayed"], "true");
  // Another body with the same key is a conflict; a user cannot credit themselves.
  EXPECT_EQ(d.request("POST", "/api/v1/admin/users/" + dave_name + "/credit", R"({"amount": 900})", d.admin_token(),
                      {{"Idempotency-Key", "topup-1"}})
                .status,
            409);
  EXPECT_EQ(d.post("/api/v1/admin/users/" + dave_name + "/credit", {{"amount", 100}}, dave).status, 403);
  // Bad input changes nothing.
  EXPECT_EQ(d.post("/api/v1/admin/users/" + dave_name + "/credit", {{"amount", 0}}, d.admin_token()).status, 400);
  EXPECT_EQ(d.post("/api/v1/admin/users/" + dave_name + "/credit", {{"amount", "5"}}, d.admin_token()).status, 400);
  EXPECT_EQ(d.post("/api/v1/admin/users/" + unique_name("nobody") + "/credit", {{"amount", 5}}, d.admin_token()).status, 404);
  credit(d, dave_name, -200);  // an adjustment
  auto entries = ledger(d, dave);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].at("kind"), "credit");
  EXPECT_EQ(entries[1].at("kind"), "adjustment");
  EXPECT_EQ(entries[1].at("balance_after").as_int64(), 300);
  // The estimate before creating; statements need a month.
  auto est = d.post("/api/v1/billing/estimate", {{"gpu_model", "RTX 4090"}, {"gpu_count", 2}}, dave);
  ASSERT_EQ(est.status, 200) << est.body;
  EXPECT_EQ(est.json().at("per_hour").as_int64(), 396);
  EXPECT_EQ(est.json().at("per_day").as_int64(), 396 * 24);
  EXPECT_EQ(est.json().at("subscription").at("per_month").as_int64(), 2 * 99800);
  EXPECT_EQ(d.get("/api/v1/billing/statements/2026-13", dave).status, 400);
  auto month = d.post("/api/v1/admin/clock", {{"advance_seconds", 0}}, d.admin_token()).json().at("now");
  const std::string ym = std::string(month.as_string()).substr(0, 7);
  auto st = d.get("/api/v1/billing/statements/" + ym, dave);
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(st.json().at("closing_balance").as_int64(), 300);
  EXPECT_EQ(st.json().at("credits").as_int64(), 500);
}

// The operator's revenue for a month, by day: every day of the month in billing_timezone
// (UTC here), today's credit on today, the days adding up to the month; operator only.
TEST_F(BillingApiTest, RevenueByDayListsEveryDayOfTheMonthAndAddsUpToIt) {
  TestDaemon& d = daemon_;
  const std::string fay_name = unique_name("bill-fay");
  const std::string fay = d.register_and_login(fay_name);
  credit(d, fay_name, 700);
  const std::string now(d.post("/api/v1/admin/clock", {{"advance_seconds", 0}}, d.admin_token()).json().at("now").as_string());
  const std::string ym = now.substr(0, 7), today = now.substr(0, 10);
  auto r = d.get("/api/v1/admin/billing/summary?month=" + ym, d.admin_token());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto doc = r.json().as_object();
  EXPECT_EQ(doc.at("timezone").as_string(), "UTC");
  const auto& days = doc.at("days").as_array();
  const int y = std::stoi(ym.substr(0, 4)), m = std::stoi(ym.substr(5, 2));
  const int length = m == 2 ? ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28)
                            : (m == 4 || m == 6 || m == 9 || m == 11 ? 30 : 31);
  ASSERT_EQ(days.size(), static_cast<std::size_t>(length)) << r.body;
  EXPECT_EQ(days.front().at("day").as_string(), ym + "-01");
  std::int64_t charged = 0, received = 0;
  bool saw_today = false;
  for (const auto& day : days) {
    charged += day.at("charged").as_int64();
    received += day.at("received").as_int64();
    if (day.at("day").as_string() == today) {
      saw_today = true;
      EXPECT_GE(day.at("received").as_int64(), 700) << "fay's credit is on today";
    }
  }
  EXPECT_TRUE(saw_today) << today << " " << r.body;
  EXPECT_EQ(charged, doc.at("charged").as_int64());
  EXPECT_EQ(received, doc.at("received").as_int64());
  EXPECT_EQ(d.get("/api/v1/admin/billing/summary?month=" + ym, fay).status, 403);
  EXPECT_EQ(d.get("/api/v1/admin/billing/summary?month=2026-13", d.admin_token()).status, 400);
}

// The CLI against the real daemon's billing answers (its unit tests use hand-written JSON).
TEST_F(BillingApiTest, TheCliShowsBalanceLedgerUsageStatementIdleAndAlerts) {
  TestDaemon& d = daemon_;
  const std::string gus_name = unique_name("bill-gus");
  const std::string gus = d.register_and_login(gus_name);
  const std::string home = d.dir() + "/" + gus_name;
  std::filesystem::create_directories(home);
  const std::map<std::string, std::string> env = {{"GPUCLOUD_ENDPOINT", d.endpoint()}, {"GPUCLOUD_TOKEN", gus},
                                                  {"HOME", home}, {"XDG_CONFIG_HOME", home}};
  auto admin_env = env;
  admin_env["GPUCLOUD_TOKEN"] = d.admin_token();
  auto credited = run_cli({"admin", "credit", gus_name, "12.34", "--note", "welcome"}, admin_env);
  ASSERT_EQ(credited.exit_code, 0) << credited.err;
  EXPECT_NE(credited.out.find("¥12.34"), std::string::npos) << credited.out;
  auto balance = run_cli({"balance"}, env);
  ASSERT_EQ(balance.exit_code, 0) << balance.err;
  EXPECT_NE(balance.out.find("¥12.34"), std::string::npos) << balance.out;
  EXPECT_NE(balance.out.find("ok"), std::string::npos) << balance.out;
  auto as_json = run_cli({"balance", "--json"}, env);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(json::parse(as_json.out).at("balance").as_int64(), 1234) << "--json keeps integers";
  auto entries = run_cli({"ledger"}, env);
  ASSERT_EQ(entries.exit_code, 0) << entries.err;
  EXPECT_NE(entries.out.find("credit"), std::string::npos) << entries.out;
  EXPECT_NE(entries.out.find("+¥12.34"), std::string::npos) << entries.out;
  EXPECT_EQ(run_cli({"usage", "--by", "day"}, env).exit_code, 0);
  const std::string month = format_rfc3339(system_now()).substr(0, 7);
  auto st = run_cli({"statement", month}, env);
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(st.out.find("¥12.34"), std::string::npos) << st.out;
  EXPECT_EQ(run_cli({"statement", "2026-13"}, env).exit_code, 2);
  auto idle = run_cli({"idle"}, env);
  ASSERT_EQ(idle.exit_code, 0) << idle.err;
  auto est = run_cli({"estimate", "--gpu", "RTX 4090:1"}, env);
  ASSERT_EQ(est.exit_code, 0) << est.err;
  EXPECT_NE(est.out.find("¥1.98"), std::string::npos) << est.out;
  auto alert = run_cli({"alert", "set", "--below", "5", "--webhook", "http://127.0.0.1:9/x"}, env);
  ASSERT_EQ(alert.exit_code, 0) << alert.err;
  EXPECT_EQ(account(d, gus).at("alert").at("threshold").as_int64(), 500);
  auto refused = run_cli({"alert", "set", "--below", "5", "--webhook", "gopher://x"}, env);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.err.find("webhook_url"), std::string::npos) << refused.err;
  EXPECT_EQ(run_cli({"alert", "clear"}, env).exit_code, 0);
  // A user has no operator commands.
  EXPECT_EQ(run_cli({"admin", "credit", gus_name, "1"}, env).exit_code, 1);
}

// A minimal HTTP receiver: counts POSTs; the first `fail_first` answer 500.
class Receiver {
 public:
  explicit Receiver(int fail_first) : fail_first_(fail_first) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Receiver() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int delivered() const { return delivered_; }
  int attempts() const { return attempts_; }
  std::string last_body() {
    std::lock_guard l(m_);
    return last_;
  }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      // Read headers, then Content-Length bytes.
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, n);
      }
      auto head_end = req.find("\r\n\r\n");
      std::size_t length = 0;
      auto cl = req.find("Content-Length: ");
      if (cl == std::string::npos) cl = req.find("content-length: ");
      if (cl != std::string::npos) length = std::stoul(req.substr(cl + 16));
      while (head_end != std::string::npos && req.size() < head_end + 4 + length) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, n);
      }
      const int attempt = ++attempts_;
      const bool fail = attempt <= fail_first_;
      if (!fail) {
        std::lock_guard l(m_);
        last_ = head_end == std::string::npos ? "" : req.substr(head_end + 4);
        ++delivered_;
      }
      std::string answer = fail ? "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                : "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
      (void)::write(c, answer.data(), answer.size());
      ::close(c);
    }
  }
  int fd_ = -1, port_ = 0, fail_first_ = 0;
  std::atomic<int> delivered_{0}, attempts_{0};
  std::atomic<bool> stop_{false};
  std::mutex m_;
  std::string last_;
  std::thread thread_;
};

bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ok();
}

TEST_F(BillingApiTest, TheAlertPostsOncePerDownwardCrossingAndRetriesAFailingReceiver) {
  TestDaemon& d = daemon_;
  const std::string erin_name = unique_name("bill-erin");
  const std::string erin = d.register_and_login(erin_name);
  credit(d, erin_name, 10000);
  Receiver hook(1);  // the first delivery fails with 500; the retry succeeds
  const std::string url = "http://127.0.0.1:" + std::to_string(hook.port()) + "/alert";
  auto set = d.request("PUT", "/api/v1/billing/alert",
                       json::serialize(json::object{{"threshold", 5000}, {"webhook_url", url}}), erin);
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_EQ(set.json().at("alert").at("threshold").as_int64(), 5000);
  credit(d, erin_name, -3000);  // 7000: above
  credit(d, erin_name, -3000);  // 4000: crossed
  ASSERT_TRUE(eventually([&] { return hook.delivered() == 1; }, std::chrono::seconds(20)))
      << "attempts " << hook.attempts();
  EXPECT_EQ(hook.attempts(), 2);
  auto body = json::parse(hook.last_body());
  EXPECT_EQ(body.at("event"), "balance_low");
  EXPECT_EQ(body.at("balance").as_int64(), 4000);
  EXPECT_EQ(body.at("threshold").as_int64(), 5000);
  credit(d, erin_name, -1000);  // 3000: still below: nothing more
  credit(d, erin_name, 5000);   // 8000: back above, armed
  credit(d, erin_name, -4000);  // 4000: crossed again
  ASSERT_TRUE(eventually([&] { return hook.delivered() == 2; }, std::chrono::seconds(20)));
  EXPECT_EQ(account(d, erin).at("state"), "low");
  // Private targets are refused where the operator did not allow them (see the unit tests);
  // a malformed URL is refused here.
  EXPECT_EQ(d.request("PUT", "/api/v1/billing/alert", R"({"threshold": 1, "webhook_url": "ftp://x"})", erin).status, 400);
  EXPECT_EQ(d.request("DELETE", "/api/v1/billing/alert", "", erin).status, 204);
  EXPECT_TRUE(account(d, erin).at("alert").is_null());
}

}  // namespace
}  // namespace gpucloud::testing
