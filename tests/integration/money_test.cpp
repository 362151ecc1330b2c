// Issue 23's money repairs, end to end through the API on the test clock: the live balance
// and an instance's cost so far between settlements, the alert crossing on that live figure
// (and at once when set above it), a create that counts an hour of what already runs, a
// failed subscription refunded in full with no system disk billed, an early release refunded
// pro rata and netted in the statement, a restart at the new price, a disabled user's
// instances stopped; and without the engine: idempotency keys scoped to the resource, every
// route authenticating before it judges its parameters, the operator's users with their
// balances and ledgers.
#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/capabilities.h"
#include "support/test_daemon.h"
#include "support/test_resources.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// One fen a second for the no-GPU size, so seconds read as fen; the system disk beyond 30 GiB
// bills 0.5 fen per GiB-hour.
std::string money_config(const std::string& doomed_image = "") {
  static const int base = port_block();
  std::string c = R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 8
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 3600
[storage_prices]
system_disk_free_gib = 30
system_disk_per_gib_hour = 0.5
)";
  if (!doomed_image.empty())
    c += "[[images]]\nname = \"doomed\"\nengine_image = \"" + doomed_image + "\"\ndescription = \"nothing runs in it\"\n";
  return c;
}

DaemonOptions money_options(std::int64_t signup_credit, const std::string& doomed_image = "") {
  DaemonOptions o;
  o.config_toml = money_config(doomed_image);
  o.test_clock = true;
  o.signup_credit = signup_credit;
  return o;
}

void advance(const TestDaemon& d, std::int64_t s) {
  auto r = d.post("/api/v1/admin/clock", {{"advance_seconds", s}}, d.admin_token());
  ASSERT_EQ(r.status, 200) << r.body;
}

json::object account(const TestDaemon& d, const std::string& token) {
  auto r = d.get("/api/v1/billing/account", token);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json().as_object();
}

std::int64_t count_events(const TestDaemon& d, const std::string& token, const std::string& type) {
  const json::value events = d.get("/api/v1/events?limit=1000", token).json();
  std::int64_t n = 0;
  for (const auto& e : events.at("items").as_array())
    if (e.at("type") == json::value(type)) ++n;
  return n;
}

// Every ledger entry of the caller, oldest first.
std::vector<json::object> entries(const TestDaemon& d, const std::string& token) {
  const json::value page = d.get("/api/v1/billing/ledger?limit=1000", token).json();
  std::vector<json::object> out;
  for (const auto& e : page.at("items").as_array()) out.push_back(e.as_object());
  std::reverse(out.begin(), out.end());
  return out;
}

TEST(MoneyTest, DOCKER_TheLiveBalanceCostSoFarAndTheAlertFollowTheRunBetweenSettlements) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(money_options(10000));
  d.start();
  const std::string alice = d.register_and_login("money-live");
  ASSERT_EQ(d.request("PUT", "/api/v1/billing/alert", R"({"threshold": 9000})", alice).status, 200);
  EXPECT_EQ(count_events(d, alice, "billing.low_balance"), 0) << "10,000 is above 9,000";
  ASSERT_EQ(d.post("/api/v1/instances", {{"name", "live"}, {"gpu_count", 0}}, alice).status, 202);
  d.wait_for_state("live", "running", alice);
  advance(d, 600);
  auto a = account(d, alice);
  EXPECT_EQ(a.at("balance").as_int64(), 10000 - 600) << json::serialize(a);
  EXPECT_EQ(a.at("settled_balance").as_int64(), 10000) << "no hourly settlement yet";
  EXPECT_EQ(a.at("unsettled").as_int64(), 600);
  EXPECT_EQ(d.get("/api/v1/instances/live", alice).json().at("charged").as_int64(), 600) << "its cost so far";
  EXPECT_EQ(count_events(d, alice, "billing.low_balance"), 0);
  // The live balance crosses 9,000 at 1,001 s: the alert fires then, not at the next hour.
  advance(d, 500);
  EXPECT_TRUE(wait_until([&] { return count_events(d, alice, "billing.low_balance") == 1; }, std::chrono::seconds(10),
                         "the low-balance alert at the live crossing"));
  a = account(d, alice);
  EXPECT_EQ(a.at("state"), "low") << json::serialize(a);
  // A threshold set above the balance is a crossing now: one notification at once.
  ASSERT_EQ(d.request("PUT", "/api/v1/billing/alert", R"({"threshold": 50000})", alice).status, 200);
  EXPECT_EQ(count_events(d, alice, "billing.low_balance"), 2);
  ASSERT_EQ(d.request("PUT", "/api/v1/billing/alert", R"({"threshold": 50000})", alice).status, 200);
  EXPECT_EQ(count_events(d, alice, "billing.low_balance"), 2) << "the same alert again: not again";
}

TEST(MoneyTest, DOCKER_ACreateCountsAnHourOfWhatTheUserAlreadyRuns) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(money_options(10000));
  d.start();
  const std::string bob = d.register_and_login("money-hour");
  ASSERT_EQ(d.post("/api/v1/instances", {{"name", "one"}, {"gpu_count", 0}}, bob).status, 202);
  ASSERT_EQ(d.post("/api/v1/instances", {{"name", "two"}, {"gpu_count", 0}}, bob).status, 202);
  // 10,000 covers two hours of 3,600, not three.
  auto third = d.post("/api/v1/instances", {{"name", "three"}, {"gpu_count", 0}}, bob);
  EXPECT_EQ(third.status, 402) << third.body;
  EXPECT_EQ(third.code(), "insufficient_balance");
  EXPECT_NE(third.body.find("already run"), std::string::npos) << third.body;
  d.wait_for_state("one", "running", bob);
  d.wait_for_state("two", "running", bob);
}

TEST(MoneyTest, DOCKER_AFailedSubscriptionIsRefundedAndAnEarlyReleaseRefundsTheUnusedTerm) {
  GPUCLOUD_NEED_ENGINE();
  // An image the engine holds but nothing can run in (an empty filesystem): its create fails
  // at the engine, while the image itself stays available.
  const std::string doomed = "gpucloud-test/doomed:" + random_suffix();
  shell("tar -cf - --files-from /dev/null | docker import - " + doomed + " >/dev/null");
  struct Untag {
    std::string image;
    ~Untag() { shell("docker rmi " + image + " >/dev/null 2>&1"); }
  } untag{doomed};
  TestDaemon d(money_options(100000, doomed));
  d.start();
  const std::string carol = d.register_and_login("money-sub");
  const json::value images = d.get("/api/v1/images", carol).json();
  std::string doomed_id;
  for (const auto& i : images.at("items").as_array())
    if (i.at("name") == "doomed") doomed_id = std::string(i.at("id").as_string());
  ASSERT_FALSE(doomed_id.empty()) << json::serialize(images);
  auto failed = d.post("/api/v1/instances",
                       {{"name", "failed"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"image", doomed_id},
                        {"system_disk_gib", 50}, {"billing", {{"mode", "weekly"}}}},
                       carol);
  ASSERT_EQ(failed.status, 202) << failed.body;
  auto errored = d.wait_for_state("failed", "error", carol, std::chrono::seconds(90));
  EXPECT_NE(std::string(errored.at("state_reason").as_string()).find("create failed"), std::string::npos) << errored;
  EXPECT_EQ(account(d, carol).at("settled_balance").as_int64(), 100000) << "the whole price came back";
  advance(d, 3 * 3600);
  EXPECT_EQ(account(d, carol).at("balance").as_int64(), 100000) << "a create that never ran bills no system disk";
  std::int64_t paid = 0, refunded = 0;
  for (const auto& e : entries(d, carol)) {
    if (e.at("kind") == "subscription") paid += e.at("amount").as_int64();
    if (e.at("kind") == "refund") refunded += e.at("amount").as_int64();
    EXPECT_NE(e.at("resource_kind"), "system_disk") << json::serialize(e);
  }
  EXPECT_EQ(paid, -26600);
  EXPECT_EQ(refunded, 26600);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/failed", "", carol).status, 202);
  d.wait_for_state("failed", "released", carol);
  EXPECT_EQ(account(d, carol).at("balance").as_int64(), 100000) << "released: nothing more refunded";

  // A day into a paid week, released: six sevenths come back.
  ASSERT_EQ(d.post("/api/v1/instances",
                   {{"name", "week"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"billing", {{"mode", "weekly"}}}},
                   carol)
                .status,
            202);
  d.wait_for_state("week", "running", carol);
  advance(d, 86400);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/week", "", carol).status, 202);
  d.wait_for_state("week", "released", carol);
  std::int64_t back = 0;
  for (const auto& e : entries(d, carol))
    if (e.at("kind") == "refund" && e.at("description").as_string().find("released early") != std::string::npos)
      back += e.at("amount").as_int64();
  EXPECT_EQ(back, 26600 - 26600 / 7);
  EXPECT_EQ(account(d, carol).at("balance").as_int64(), 100000 - 26600 / 7);
}

TEST(MoneyTest, DOCKER_ARestartTakesTheNewPriceAndDisablingAUserStopsTheirInstances) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(money_options(100000));
  d.start();
  const std::string dave = d.register_and_login("money-dave");
  ASSERT_EQ(d.post("/api/v1/instances", {{"name", "box"}, {"gpu_count", 0}}, dave).status, 202);
  d.wait_for_state("box", "running", dave);
  const std::string op = d.admin_token();
  json::value prices = d.get("/api/v1/admin/prices", op).json();
  prices.as_object()["no_gpu_price_per_hour"] = 7200;
  ASSERT_EQ(d.request("PUT", "/api/v1/admin/prices", json::serialize(prices), op).status, 200);
  ASSERT_EQ(d.post("/api/v1/instances/box/restart", json::object{}, dave).status, 202);
  ASSERT_TRUE(wait_until(
      [&] {
        auto i = d.get("/api/v1/instances/box", dave).json();
        return i.at("state") == "running" && i.at("billing").at("price_per_hour").as_int64() == 7200;
      },
      std::chrono::seconds(60), "the restarted run at the new price"))
      << d.get("/api/v1/instances/box", dave).body;

  // Disabled: the running pay-as-you-go instance stops (nothing deleted).
  const std::string dave_id(d.get("/api/v1/me", dave).json().at("id").as_string());
  ASSERT_EQ(d.request("PATCH", "/api/v1/admin/users/" + dave_id, R"({"disabled": true})", op).status, 200);
  ASSERT_TRUE(wait_until(
      [&] {
        const json::value list = d.get("/api/v1/admin/instances", op).json();
        for (const auto& i : list.at("items").as_array())
          if (i.at("name") == "box") return i.at("state") == "stopped" && i.at("state_reason") == "user_disabled";
        return false;
      },
      std::chrono::seconds(60), "the disabled user's instance stopped"))
      << d.get("/api/v1/admin/instances", op).body;
}

// Without the engine: what the review found in the API's edges.
TEST(MoneyApiTest, KeysAreScopedToTheResourceRoutesAuthenticateFirstAndTheOperatorSeesBalances) {
  TestDaemon d(money_options(5000));
  d.start();
  const std::string erin = d.register_and_login("money-erin");
  const std::string op = d.admin_token();
  const std::string erin_id(d.get("/api/v1/me", erin).json().at("id").as_string());
  // One Idempotency-Key, the user named by id and by name: one credit.
  const std::string body = R"({"amount": 700, "note": "top-up"})";
  auto first = d.request("POST", "/api/v1/admin/users/" + erin_id + "/credit", body, op, {{"Idempotency-Key", "k-1"}});
  auto second = d.request("POST", "/api/v1/admin/users/money-erin/credit", body, op, {{"Idempotency-Key", "k-1"}});
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(second.status, 201) << second.body;
  EXPECT_EQ(second.headers["idempotent-replayed"], "true");
  EXPECT_EQ(account(d, erin).at("balance").as_int64(), 5700);

  // Parameters are judged after authentication: 401 without a token, 400 with one.
  EXPECT_EQ(d.get("/api/v1/billing/statements/{month}").status, 401);
  EXPECT_EQ(d.get("/api/v1/billing/statements/2026-13").status, 401);
  auto bad = d.get("/api/v1/billing/statements/{month}", erin);
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("month"), std::string::npos) << bad.body;

  // The operator's users carry their balance and its state; a user's ledger by name.
  const json::value users = d.get("/api/v1/admin/users", op).json();
  bool seen = false;
  for (const auto& u : users.at("items").as_array())
    if (u.at("username") == "money-erin") {
      seen = true;
      EXPECT_EQ(u.at("balance").as_int64(), 5700);
      EXPECT_EQ(u.at("billing_state"), "ok");
    }
  EXPECT_TRUE(seen) << json::serialize(users);
  auto ledger = d.get("/api/v1/admin/users/money-erin/ledger", op);
  ASSERT_EQ(ledger.status, 200) << ledger.body;
  EXPECT_EQ(ledger.json().at("items").as_array().size(), 2u) << "sign-up credit and one top-up";
  EXPECT_EQ(d.get("/api/v1/admin/users/money-erin/ledger", erin).status, 403);
  EXPECT_EQ(d.get("/api/v1/admin/users/nobody-here/ledger", op).status, 404);
  auto cli = run_cli({"admin", "ledger", "money-erin"}, {{"GPUCLOUD_ENDPOINT", d.endpoint()}, {"GPUCLOUD_TOKEN", op}});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find("top-up"), std::string::npos) << cli.out;
  auto users_cli = run_cli({"admin", "users"}, {{"GPUCLOUD_ENDPOINT", d.endpoint()}, {"GPUCLOUD_TOKEN", op}});
  EXPECT_EQ(users_cli.exit_code, 0) << users_cli.err;
  EXPECT_NE(users_cli.out.find("¥57.00"), std::string::npos) << users_cli.out;
}

}  // namespace
}  // namespace gpucloud::testing
