// Host states (issue 26) through the real daemon and the real CLI: drain, undrain and remove,
// what `gpucloud admin hosts` shows of each host's agent, and a drained host's instance that
// keeps running and starts there again.
#include <fstream>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string host_states_config() {
  static const int base = port_block();
  auto range = [](int from) { return std::to_string(from) + "-" + std::to_string(from + 29); };
  return R"(
[[zones]]
name = "zone-a"

[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 16
memory_gib = 64
port_range = ")" + range(base) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]

[[hosts]]
name = "node-2"
zone = "zone-a"
cpu = 16
memory_gib = 64
port_range = ")" + range(base + 30) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]

[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 4
memory_gib_per_gpu = 16
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
)";
}

// A daemon per test: each restarts it (a drain must survive a restart; a removed host still in
// the config registers again).
class HostStatesTest : public ::testing::Test {
 protected:
  HostStatesTest() : daemon_(DaemonOptions{host_states_config()}) {}
  void SetUp() override {
    daemon_.start();
    admin_ = daemon_.admin_token();
    home_ = daemon_.dir() + "/cli-home";
  }
  CliResult admin_cli(std::vector<std::string> args) {
    return run_cli(args, {{"XDG_CONFIG_HOME", home_},
                          {"HOME", home_},
                          {"GPUCLOUD_ENDPOINT", daemon_.endpoint()},
                          {"GPUCLOUD_TOKEN", admin_}});
  }
  // The host as `gpucloud admin hosts --json` lists it (null when not listed).
  json::value listed(const std::string& name, bool include_removed = false) {
    std::vector<std::string> args{"admin", "hosts", "--json"};
    if (include_removed) args.push_back("--include-removed");
    auto r = admin_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    boost::system::error_code ec;
    auto doc = json::parse(r.out, ec);
    if (ec) {
      ADD_FAILURE() << "not JSON: " << r.out;
      return nullptr;
    }
    for (const auto& h : doc.at("items").as_array())
      if (h.at("name").as_string() == name) return h;
    return nullptr;
  }
  std::int64_t free_rtx(const std::string& token) {
    auto market = daemon_.get("/api/v1/market", token).json();
    for (const auto& o : market.at("items").as_array())
      if (o.at("gpu_model").is_string()) return o.at("gpus_free").as_int64();
    return -1;
  }
  std::string state_of(const std::string& host) {
    auto h = listed(host, true);
    return h.is_object() ? std::string(h.at("state").as_string()) : std::string("not listed");
  }

  TestDaemon daemon_;
  std::string admin_;
  std::string home_;
};

TEST_F(HostStatesTest, AdminHostsShowsTheAgentAndAnEmptyHostDrainsUndrainsAndIsRemoved) {
  std::string user = daemon_.register_and_login("hoststates");
  auto node1 = listed("node-1");
  ASSERT_TRUE(node1.is_object());
  EXPECT_EQ(node1.at("state").as_string(), "ready");
  EXPECT_EQ(node1.at("liveness").as_string(), "ready");
  EXPECT_EQ(node1.at("admin_state").as_string(), "active");
  const auto& agent = node1.at("agent").as_object();
  EXPECT_EQ(agent.at("kind").as_string(), "in_process");
  EXPECT_EQ(agent.at("version").as_string(), GPUCLOUD_VERSION);
  EXPECT_TRUE(agent.at("address").is_null());
  EXPECT_TRUE(agent.at("connected_since").is_string());
  EXPECT_TRUE(agent.at("last_heartbeat_at").is_string());
  EXPECT_TRUE(agent.at("certificate_expires_at").is_null());
  auto table = admin_cli({"admin", "hosts"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("agent: in_process " GPUCLOUD_VERSION ", connected since "), std::string::npos) << table.out;
  EXPECT_EQ(free_rtx(user), 4);

  auto drained = admin_cli({"admin", "host", "drain", "node-2"});
  ASSERT_EQ(drained.exit_code, 0) << drained.err;
  EXPECT_NE(drained.out.find("node-2 is draining"), std::string::npos) << drained.out;
  EXPECT_EQ(state_of("node-2"), "draining");
  EXPECT_EQ(free_rtx(user), 2) << "a draining host's free GPUs are not offered";
  // Operator routes only; bad input changes nothing.
  EXPECT_EQ(daemon_.post("/api/v1/admin/hosts/node-1/drain", json::object{}, user).status, 403);
  EXPECT_EQ(daemon_.post("/api/v1/admin/hosts/nowhere/drain", json::object{}, admin_).status, 404);
  EXPECT_EQ(daemon_.get("/api/v1/admin/hosts?include_removed=maybe", admin_).status, 400);

  // A restart registers every host again: the drain stays.
  daemon_.restart();
  admin_ = daemon_.admin_token();
  user = daemon_.login("hoststates", "password-123");
  EXPECT_EQ(state_of("node-2"), "draining");
  auto undrained = admin_cli({"admin", "host", "undrain", "node-2"});
  ASSERT_EQ(undrained.exit_code, 0) << undrained.err;
  EXPECT_EQ(state_of("node-2"), "ready");
  EXPECT_EQ(free_rtx(user), 4);

  auto removed = admin_cli({"admin", "host", "remove", "node-2"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_NE(removed.out.find("node-2 is removed"), std::string::npos) << removed.out;
  EXPECT_TRUE(listed("node-2").is_null()) << "a removed host is not listed by default";
  auto kept = listed("node-2", true);
  ASSERT_TRUE(kept.is_object());
  EXPECT_EQ(kept.at("state").as_string(), "removed");
  EXPECT_EQ(free_rtx(user), 2);
  auto events = daemon_.get("/api/v1/events?resource=" + std::string(kept.at("id").as_string()), admin_).json();
  std::vector<std::string> types;
  for (const auto& e : events.at("items").as_array()) types.emplace_back(e.at("type").as_string());
  for (const char* t : {"host.drained", "host.undrained", "host.removed"})
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;

  // Still in the config: its name joins again at the next start, ready.
  daemon_.restart();
  admin_ = daemon_.admin_token();
  EXPECT_EQ(state_of("node-2"), "ready");
}

TEST_F(HostStatesTest, DOCKER_ROOT_ADrainedHostKeepsItsInstanceAndTakesNoNewOneUntilUndrained) {
  GPUCLOUD_NEED_ENGINE();
  std::string user = daemon_.register_and_login("drainuser");
  auto create = [&](const std::string& name) {
    return daemon_.post("/api/v1/instances",
                        {{"name", name}, {"zone", "zone-a"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 2}}, user);
  };
  // node-2 out of the way: everything lands on node-1.
  ASSERT_EQ(admin_cli({"admin", "host", "drain", "node-2"}).exit_code, 0);
  ASSERT_EQ(create("a").status, 202);
  auto a = daemon_.wait_for_state("a", "running", user);
  ASSERT_EQ(a.at("host").as_string(), "node-1");
  EXPECT_FALSE(a.at("host_unreachable").as_bool());
  ASSERT_EQ(admin_cli({"admin", "host", "drain", "node-1"}).exit_code, 0);

  auto refused = create("b");
  ASSERT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(refused.code(), "no_capacity");
  EXPECT_EQ(daemon_.get("/api/v1/instances/a", user).json().at("state").as_string(), "running");
  // A stop and a start of its instance are no new placement: it comes back on node-1.
  ASSERT_EQ(daemon_.post("/api/v1/instances/a/stop", json::object{}, user).status, 202);
  daemon_.wait_for_state("a", "stopped", user);
  ASSERT_EQ(daemon_.post("/api/v1/instances/a/start", json::object{}, user).status, 202);
  EXPECT_EQ(daemon_.wait_for_state("a", "running", user).at("host").as_string(), "node-1");

  // Nothing may be removed from under it.
  auto remove = admin_cli({"admin", "host", "remove", "node-1"});
  EXPECT_EQ(remove.exit_code, 1);
  auto id = std::string(a.at("id").as_string());
  EXPECT_NE(remove.err.find(id), std::string::npos) << remove.err;
  auto problem = daemon_.request("DELETE", "/api/v1/admin/hosts/node-1", "", admin_);
  ASSERT_EQ(problem.status, 409) << problem.body;
  EXPECT_EQ(problem.code(), "conflict");
  EXPECT_EQ(problem.json().at("instances").as_int64(), 1);
  EXPECT_EQ(state_of("node-1"), "draining");

  ASSERT_EQ(admin_cli({"admin", "host", "undrain", "node-1"}).exit_code, 0);
  ASSERT_EQ(admin_cli({"admin", "host", "undrain", "node-2"}).exit_code, 0);
  ASSERT_EQ(create("b").status, 202);
  daemon_.wait_for_state("b", "running", user);

  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(daemon_.request("DELETE", std::string("/api/v1/instances/") + name, "", user).status, 202);
    daemon_.wait_for_state(name, "released", user);
  }
  auto gone = admin_cli({"admin", "host", "remove", "node-1"});
  ASSERT_EQ(gone.exit_code, 0) << gone.err;
  EXPECT_EQ(state_of("node-1"), "removed");
  // Everything new goes elsewhere now.
  ASSERT_EQ(create("c").status, 202);
  EXPECT_EQ(daemon_.wait_for_state("c", "running", user).at("host").as_string(), "node-2");
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/c", "", user).status, 202);
  daemon_.wait_for_state("c", "released", user);
}

}  // namespace
}  // namespace gpucloud::testing
