// Hosts, the market and reservations through the real daemon: three simulated hosts, free
// counts that follow reservations made by the store and scheduler.
#include <fstream>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// Three hosts with 60 ports each from one block of the test port allocator.
std::string three_hosts() {
  static const int base = port_block();
  auto range = [](int from) { return std::to_string(from) + "-" + std::to_string(from + 59); };
  return R"(
[[zones]]
name = "zone-a"
[[zones]]
name = "zone-b"

[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 32
memory_gib = 128
port_range = ")" + range(base) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 4 } ]

[[hosts]]
name = "node-2"
zone = "zone-a"
cpu = 16            # CPU for only 2 of its 4 GPUs at 8 cores each
memory_gib = 128
port_range = ")" + range(base + 60) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 4 } ]

[[hosts]]
name = "node-3"
zone = "zone-b"
cpu = 64
memory_gib = 512
port_range = ")" + range(base + 120) + R"("
simulated_gpus = [ { model = "A100", memory_gib = 80, count = 2 } ]

[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 8
memory_gib_per_gpu = 32
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800

[[offers]]
gpu_model = "A100"
cpu_per_gpu = 16
memory_gib_per_gpu = 128
price_per_gpu_hour = 798
price_per_gpu_week = 100000
price_per_gpu_month = 390000
)";
}
const std::string kThreeHosts = three_hosts();

json::object find_offer(const json::value& market, const std::string& zone, const std::string& model) {
  for (const auto& item : market.at("items").as_array()) {
    const auto& o = item.as_object();
    if (o.at("zone").as_string() == zone && o.at("gpu_model").is_string() && o.at("gpu_model").as_string() == model)
      return o;
  }
  return {};
}

// A daemon per test: three tests restart it with an edited config, and the other two count
// the market's free GPUs and its prices from a fresh installation.
class MarketTest : public ::testing::Test {
 protected:
  MarketTest() : daemon_(DaemonOptions{kThreeHosts}) {}
  void SetUp() override {
    daemon_.start();
    user_ = daemon_.register_and_login("marketuser");
  }
  TestDaemon daemon_;
  std::string user_;
};

TEST_F(MarketTest, OffersCountOnlyGpusWithTheirCpuAndMemory) {
  auto market = daemon_.get("/api/v1/market", user_);
  ASSERT_EQ(market.status, 200) << market.body;
  auto m = market.json();
  auto rtx = find_offer(m, "zone-a", "RTX 4090");
  ASSERT_FALSE(rtx.empty()) << market.body;
  EXPECT_EQ(rtx.at("gpus_total").as_int64(), 8);
  EXPECT_EQ(rtx.at("gpus_free").as_int64(), 4 + 2);  // node-2 has CPU for only 2
  EXPECT_EQ(rtx.at("max_gpus_per_instance").as_int64(), 4);
  EXPECT_TRUE(rtx.at("simulated").as_bool());
  EXPECT_EQ(rtx.at("price_per_gpu_hour").as_int64(), 198);
  EXPECT_EQ(rtx.at("gpu_memory_gib").as_int64(), 24);
  auto a100 = find_offer(m, "zone-b", "A100");
  EXPECT_EQ(a100.at("gpus_free").as_int64(), 2);
  EXPECT_TRUE(find_offer(m, "zone-b", "RTX 4090").empty());
  bool no_gpu = false;
  for (const auto& item : m.at("items").as_array())
    if (item.at("gpu_model").is_null()) {
      no_gpu = true;
      EXPECT_TRUE(item.as_object().contains("price_per_hour"));
    }
  EXPECT_TRUE(no_gpu);
  auto zones = daemon_.get("/api/v1/zones", user_).json();
  EXPECT_EQ(zones.at("items").as_array().size(), 2u);
}

// Through instances, as users reserve GPUs: the reconciler frees any reservation that no
// instance explains, so reservations made behind the daemon's back do not last (the store and
// scheduler alone are covered by market/reservations_test.cpp).
TEST_F(MarketTest, DOCKER_ROOT_FreeCountsFollowInstancesCreatedAndReleased) {
  GPUCLOUD_NEED_ENGINE();
  auto free_rtx = [&] {
    return find_offer(daemon_.get("/api/v1/market", user_).json(), "zone-a", "RTX 4090").at("gpus_free").as_int64();
  };
  auto create = [&](const std::string& name, int gpus) {
    return daemon_.post("/api/v1/instances", {{"name", name}, {"zone", "zone-a"}, {"gpu_model", "RTX 4090"}, {"gpu_count", gpus}},
                        user_);
  };
  // Only node-1 has CPU for 3 GPUs (node-2 has 16 cores: enough for 2), so "a" lands there
  // whatever the tie-breaks; node-1 keeps 1, node-2 still offers 2.
  ASSERT_EQ(create("a", 3).status, 202);
  EXPECT_EQ(free_rtx(), 1 + 2);
  // 2 GPUs fit only on node-2 now, which uses up its CPU.
  ASSERT_EQ(create("b", 2).status, 202);
  EXPECT_EQ(free_rtx(), 1);
  auto refused = create("c", 2);
  ASSERT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(refused.code(), "no_capacity");
  // node-2 still has 2 GPUs but no CPU left for them; the message names the shortage.
  EXPECT_NE(refused.json().at("detail").as_string().find("no host in zone-a has 16 free CPU cores for 2 RTX 4090"),
            std::string::npos)
      << refused.body;

  auto hosts = daemon_.get("/api/v1/admin/hosts", daemon_.admin_token());
  ASSERT_EQ(hosts.status, 200);
  int held = 0;
  auto parsed_hosts = hosts.json();
  ASSERT_EQ(parsed_hosts.at("items").as_array().size(), 3u);
  for (const auto& h : parsed_hosts.at("items").as_array())
    for (const auto& g : h.at("gpus").as_array())
      if (g.at("instance").is_string()) ++held;
  EXPECT_EQ(held, 5);

  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/a", "", user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("a", "released", user_).at("state").as_string(), "released");
  EXPECT_EQ(free_rtx(), 4) << "node-1 whole again; node-2's 2 remaining GPUs have no CPU; b is "
                           << json::serialize(daemon_.get("/api/v1/instances/b", user_).json());
}

// The config seeds the price table; PUT /admin/prices changes it and the change survives
// restarts, until the operator edits that price in the config, which then wins.
TEST_F(MarketTest, PricesFromTheApiLastUntilTheConfigPriceChanges) {
  std::string admin = daemon_.admin_token();
  auto prices = daemon_.get("/api/v1/admin/prices", admin).json().as_object();
  for (auto& g : prices.at("gpus").as_array())
    if (g.at("gpu_model").as_string() == "RTX 4090") g.as_object()["price_per_gpu_hour"] = 250;
  prices.erase("currency");
  ASSERT_EQ(daemon_.request("PUT", "/api/v1/admin/prices", json::serialize(prices), admin).status, 200);
  auto price_of = [&](const char* zone, const char* model) {
    return find_offer(daemon_.get("/api/v1/market", user_).json(), zone, model).at("price_per_gpu_hour").as_int64();
  };
  EXPECT_EQ(price_of("zone-a", "RTX 4090"), 250);

  daemon_.restart();
  user_ = daemon_.login("marketuser", "password-123");
  EXPECT_EQ(price_of("zone-a", "RTX 4090"), 250) << "an unchanged config keeps the operator's API price";

  std::string config = kThreeHosts;
  auto at = config.find("price_per_gpu_hour = 198");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, std::string("price_per_gpu_hour = 198").size(), "price_per_gpu_hour = 300");
  std::ofstream(daemon_.dir() + "/gpucloud.toml") << config;
  daemon_.restart();
  user_ = daemon_.login("marketuser", "password-123");
  EXPECT_EQ(price_of("zone-a", "RTX 4090"), 300) << "the edited config price applies";
  EXPECT_EQ(price_of("zone-b", "A100"), 798) << "untouched prices stay";
}

// A host taken out of the config is unreachable after the restart (nothing placed there,
// nothing counted free), and ready again when it comes back.
TEST_F(MarketTest, AHostNoLongerRegisteredIsUnreachable) {
  std::string config = kThreeHosts;
  auto begin = config.find("[[hosts]]\nname = \"node-3\"");
  auto end = config.find("[[offers]]");
  ASSERT_NE(begin, std::string::npos);
  std::ofstream(daemon_.dir() + "/gpucloud.toml") << config.substr(0, begin) + config.substr(end);
  daemon_.restart();
  std::string admin = daemon_.admin_token();
  user_ = daemon_.login("marketuser", "password-123");
  auto state_of = [&](const std::string& name) {
    auto hosts = daemon_.get("/api/v1/admin/hosts", admin).json();
    for (const auto& h : hosts.at("items").as_array())
      if (h.at("name").as_string() == name) return std::string(h.at("state").as_string());
    return std::string("absent");
  };
  EXPECT_EQ(state_of("node-3"), "unreachable");
  EXPECT_EQ(state_of("node-1"), "ready");
  auto a100 = find_offer(daemon_.get("/api/v1/market", user_).json(), "zone-b", "A100");
  if (!a100.empty()) {
    EXPECT_EQ(a100.at("gpus_free").as_int64(), 0);
  }
  auto refused = daemon_.post("/api/v1/instances", {{"name", "x"}, {"zone", "zone-b"}, {"gpu_model", "A100"}, {"gpu_count", 1}}, user_);
  EXPECT_EQ(refused.status, 409) << refused.body;
  bool told = false;
  auto events = daemon_.get("/api/v1/events?limit=1000", admin).json();
  for (const auto& e : events.at("items").as_array())
    told = told || (e.at("type").as_string() == "host.unreachable" && std::string(e.at("message").as_string()).find("node-3") != std::string::npos);
  EXPECT_TRUE(told);

  std::ofstream(daemon_.dir() + "/gpucloud.toml") << config;
  daemon_.restart();
  admin = daemon_.admin_token();
  EXPECT_EQ(state_of("node-3"), "ready");
}

TEST_F(MarketTest, AdminHostsAndPricesAreForTheOperator) {
  EXPECT_EQ(daemon_.get("/api/v1/admin/hosts", user_).status, 403);
  EXPECT_EQ(daemon_.get("/api/v1/admin/prices", user_).status, 403);
  std::string admin = daemon_.admin_token();
  auto hosts = daemon_.get("/api/v1/admin/hosts", admin).json();
  ASSERT_EQ(hosts.at("items").as_array().size(), 3u);
  const auto& node1 = hosts.at("items").as_array()[0].as_object();
  EXPECT_EQ(node1.at("name").as_string(), "node-1");
  EXPECT_EQ(node1.at("state").as_string(), "ready");
  EXPECT_TRUE(node1.at("simulated").as_bool());
  EXPECT_TRUE(node1.at("id").as_string().starts_with("h-"));
  EXPECT_EQ(node1.at("gpus").as_array().size(), 4u);
  EXPECT_TRUE(node1.at("gpus").as_array()[0].at("uuid").as_string().starts_with("GPU-sim-"));
  EXPECT_TRUE(node1.at("gpus").as_array()[0].at("instance").is_null());

  auto prices = daemon_.get("/api/v1/admin/prices", admin);
  ASSERT_EQ(prices.status, 200);
  auto table = prices.json().as_object();
  for (auto& g : table["gpus"].as_array())
    if (g.at("gpu_model").as_string() == "RTX 4090") g.as_object()["price_per_gpu_hour"] = 250;
  auto put = daemon_.request("PUT", "/api/v1/admin/prices", json::serialize(table), admin);
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(find_offer(daemon_.get("/api/v1/market", user_).json(), "zone-a", "RTX 4090").at("price_per_gpu_hour").as_int64(), 250);
  table["no_gpu_price_per_hour"] = -1;
  EXPECT_EQ(daemon_.request("PUT", "/api/v1/admin/prices", json::serialize(table), admin).status, 400);
  // Prices survive a restart (the store, not the config, holds them once set).
  daemon_.restart();
  EXPECT_EQ(find_offer(daemon_.get("/api/v1/market", daemon_.login("marketuser", "password-123")).json(), "zone-a", "RTX 4090")
                .at("price_per_gpu_hour").as_int64(), 250);
}

TEST(MarketConfigTest, OverlappingPortRangesOnOneEngineAreRefusedAtStart) {
  std::string config = R"(
[[hosts]]
name = "a"
cpu = 4
memory_gib = 8
port_range = "30000-30100"
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[hosts]]
name = "b"
cpu = 4
memory_gib = 8
port_range = "30050-30150"
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 1
price_per_gpu_week = 1
price_per_gpu_month = 1
)";
  TestDaemon daemon(DaemonOptions{config});
  try {
    daemon.start();
    FAIL() << "overlapping port ranges must stop the daemon";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("port"), std::string::npos) << e.what();
  }
}

TEST(MarketNvmlTest, WithoutADriverTheDefaultHostHasNoGpusAndSaysWhy) {
  TestDaemon daemon;  // no [[hosts]]: one host named after the machine, GPUs from NVML
  daemon.start();
  auto hosts = daemon.get("/api/v1/admin/hosts", daemon.admin_token()).json();
  ASSERT_EQ(hosts.at("items").as_array().size(), 1u);
  const auto& h = hosts.at("items").as_array()[0].as_object();
  if (h.at("gpus").as_array().empty()) {
    EXPECT_FALSE(h.at("simulated").as_bool());
    ASSERT_TRUE(h.at("inventory_error").is_string());
    EXPECT_NE(std::string(h.at("inventory_error").as_string()).find("NVML"), std::string::npos);
  }
}

}  // namespace
}  // namespace gpucloud::testing
