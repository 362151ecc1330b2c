// The instance API's contract at its edges: refusals that change nothing, the state of a
// released instance, a stop during a restart, names wherever ids go, the operator's list,
// and lists that honour limit and cursor.
#include <thread>

#include <gtest/gtest.h>

#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string config_no_gpu() {
  static const int base = port_block();  // 200 ports: 100 per host
  return R"(
[[zones]]
name = "zone-a"
[[zones]]
name = "zone-b"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[hosts]]
name = "node-2"
zone = "zone-b"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base + 100) + "-" + std::to_string(base + 199) + R"("
simulated_gpus = [ { model = "A100", memory_gib = 80, count = 2 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[[offers]]
gpu_model = "A100"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 798
price_per_gpu_week = 100000
price_per_gpu_month = 390000
[no_gpu_offer]
cpu = 1
memory_gib = 2      # differs from 1 GPU's share: a no-GPU start needs another container size
price_per_hour = 10
[quotas]
gpus = 2
instances = 4
[[images]]
name = "not-here"
engine_image = "gpucloud-no-such-registry.invalid/nothing:1"
description = "An operator image the engine does not hold and cannot pull"
os = "Ubuntu 22.04"
)";
}

// A daemon per test: these place instances on two small hosts and count on their whole GPUs
// and cores (quotas, ports, restarts on the same GPUs), and one stops the daemon mid-step.
class InstanceApiTest : public ::testing::Test {
 protected:
  InstanceApiTest() : daemon_(DaemonOptions{config_no_gpu()}) {}
  void SetUp() override {
    daemon_.start();
    user_ = daemon_.register_and_login("apiuser");
  }
  json::value create_running(const std::string& name) {
    auto r = daemon_.post("/api/v1/instances", {{"name", name}, {"gpu_count", 0}}, user_);
    EXPECT_EQ(r.status, 202) << r.body;
    return daemon_.wait_for_state(name, "running", user_);
  }
  TestDaemon daemon_;
  std::string user_;
};

// One daemon for the suite (shared_daemon.h): no engine needed, nothing restarts it, and each
// test has a user of its own; what a test creates has settled before the next one reads the
// market.
class InstanceApiContractTest : public SharedDaemonTest<InstanceApiContractTest> {
 public:
  static DaemonOptions daemon_options() { return DaemonOptions{config_no_gpu()}; }

 protected:
  void SetUp() override {
    SharedDaemonTest::SetUp();
    user_ = daemon_.register_and_login(unique_name("apiuser"));
  }
  // No engine step of this test's instances is still under way: one that ends (running, or
  // error without an engine) would move the market's free counts under the next test.
  void TearDown() override {
    if (!user_.empty() && alive(daemon_.pid())) {
      EXPECT_TRUE(wait_until(
          [&] {
            const json::value listed = daemon_.get("/api/v1/instances?all=true&limit=100", user_).json();
            if (!listed.is_object()) return false;
            for (const auto& i : listed.at("items").as_array()) {
              const auto& state = i.at("state").as_string();
              if (state != "running" && state != "stopped" && state != "error" && state != "released") return false;
            }
            return true;
          },
          std::chrono::seconds(60), "this test's instances to settle", std::chrono::milliseconds(100)));
    }
    SharedDaemonTest::TearDown();
  }
  std::string user_;
};

TEST_F(InstanceApiContractTest, ListsTakeLimitAndCursorAndRefuseBadFilters) {
  // Fixed-order lists page like the others.
  for (const std::string path : {"/api/v1/zones", "/api/v1/market"}) {
    auto first = daemon_.get(path + "?limit=1", user_);
    ASSERT_EQ(first.status, 200) << first.body;
    auto doc = first.json();
    ASSERT_EQ(doc.at("items").as_array().size(), 1u) << path;
    ASSERT_TRUE(doc.at("next_cursor").is_string()) << path;
    auto all = daemon_.get(path, user_).json();
    std::vector<std::string> seen{json::serialize(doc.at("items").as_array()[0])};
    std::string cursor(doc.at("next_cursor").as_string());
    while (!cursor.empty()) {
      auto next = daemon_.get(path + "?limit=1&cursor=" + cursor, user_);
      ASSERT_EQ(next.status, 200) << next.body;
      auto page = next.json();
      for (const auto& item : page.at("items").as_array()) seen.push_back(json::serialize(item));
      cursor = page.at("next_cursor").is_string() ? std::string(page.at("next_cursor").as_string()) : "";
    }
    ASSERT_EQ(seen.size(), all.at("items").as_array().size()) << path;
    for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], json::serialize(all.at("items").as_array()[i])) << path;
    EXPECT_EQ(daemon_.get(path + "?limit=abc", user_).code(), "invalid_argument") << path;
    EXPECT_EQ(daemon_.get(path + "?limit=0", user_).code(), "invalid_argument") << path;
  }
  auto hosts = daemon_.get("/api/v1/admin/hosts?limit=1", daemon_.admin_token());
  ASSERT_EQ(hosts.status, 200);
  EXPECT_EQ(hosts.json().at("items").as_array().size(), 1u);
  EXPECT_TRUE(hosts.json().at("next_cursor").is_string());

  auto bad_state = daemon_.get("/api/v1/instances?state=bogus", user_);
  EXPECT_EQ(bad_state.status, 400);
  EXPECT_NE(bad_state.json().at("detail").as_string().find("state"), std::string::npos);
  EXPECT_EQ(daemon_.get("/api/v1/admin/instances", user_).status, 403);
  EXPECT_EQ(daemon_.get("/api/v1/admin/instances", daemon_.admin_token()).status, 200);
}

TEST_F(InstanceApiContractTest, CreateRefusesWhatThisInstallationCannotHonour) {
  auto body = [](const char* field, json::value v) {
    json::object o{{"name", "x1"}, {"gpu_count", 0}};
    o[field] = std::move(v);
    return o;
  };
  // A group the caller does not have is not found, like another user's (security_group_api_test).
  auto sg = daemon_.post("/api/v1/instances", body("security_group", "sg-nope"), user_);
  EXPECT_EQ(sg.status, 404) << sg.body;
  EXPECT_NE(sg.json().at("detail").as_string().find("security_group"), std::string::npos);
  auto empty_sg = daemon_.post("/api/v1/instances", body("security_group", ""), user_);
  EXPECT_EQ(empty_sg.status, 400) << empty_sg.body;
  auto autostop = daemon_.post("/api/v1/instances", body("autostop", json::object{{"idle_minutes", "soon"}}), user_);
  EXPECT_EQ(autostop.status, 400) << autostop.body;
  EXPECT_NE(autostop.json().at("detail").as_string().find("autostop.idle_minutes"), std::string::npos);
  EXPECT_EQ(daemon_.get("/api/v1/instances", user_).json().at("items").as_array().size(), 0u);
}

TEST_F(InstanceApiTest, DOCKER_ROOT_PatchRefusalsChangeNothing) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  create_running("p1");
  auto patch = [&](const json::value& body) {
    return daemon_.request("PATCH", "/api/v1/instances/p1", json::serialize(body), user_);
  };
  for (const json::value& bad : {json::value(json::object{{"bogus", 1}}),
                                 json::value(json::object{{"name", "renamed"}, {"autostop", "bogus"}}),
                                 json::value(json::object{{"name", "renamed"}, {"security_group", 7}}),
                                 json::value(json::object{{"name", "renamed"}, {"stop_at", "garbage"}}),
                                 json::value(json::object{{"name", "renamed"}, {"billing", json::object{{"auto_renew", "x"}}}}),
                                 json::value(json::object{{"name", "renamed"}, {"ports", json::array{22, 22}}})}) {
    auto r = patch(bad);
    EXPECT_EQ(r.status, 400) << json::serialize(bad) << " -> " << r.body;
    EXPECT_EQ(r.code(), "invalid_argument");
  }
  auto unknown_group = patch(json::object{{"name", "renamed"}, {"security_group", "nonexistent"}});
  EXPECT_EQ(unknown_group.status, 404) << unknown_group.body;
  auto still = daemon_.get("/api/v1/instances/p1", user_);
  ASSERT_EQ(still.status, 200);
  EXPECT_EQ(still.json().at("name").as_string(), "p1");
  EXPECT_EQ(still.json().at("image_name").as_string(), "debian-12-base");
  EXPECT_TRUE(still.json().at("image").as_string().starts_with("img-"));
  EXPECT_EQ(daemon_.get("/api/v1/instances/renamed", user_).status, 404);

  auto renew = patch(json::object{{"billing", json::object{{"auto_renew", false}}}});
  ASSERT_EQ(renew.status, 200) << renew.body;
  EXPECT_FALSE(renew.json().at("billing").at("auto_renew").as_bool());
  EXPECT_FALSE(daemon_.get("/api/v1/instances/p1", user_).json().at("billing").at("auto_renew").as_bool());
}

TEST_F(InstanceApiTest, DOCKER_ROOT_AReleasedInstanceAnswersReleasedAndEventsTakeItsName) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto created = create_running("r1");
  std::string id(created.at("id").as_string());
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/r1", "", user_).status, 202);
  auto released = daemon_.wait_for_state("r1", "released", user_);
  EXPECT_EQ(released.at("state").as_string(), "released");
  auto by_id = daemon_.get("/api/v1/instances/" + id, user_);
  ASSERT_EQ(by_id.status, 200) << by_id.body;
  EXPECT_EQ(by_id.json().at("state").as_string(), "released");
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/instances/" + id, "", user_).status, 202);  // a repeat
  auto stop = daemon_.post("/api/v1/instances/" + id + "/stop", json::object{}, user_);
  EXPECT_EQ(stop.status, 409);
  EXPECT_NE(stop.json().at("detail").as_string().find("released"), std::string::npos);
  EXPECT_EQ(daemon_.get("/api/v1/instances", user_).json().at("items").as_array().size(), 0u);
  auto with_released = daemon_.get("/api/v1/instances?all=true", user_).json();
  ASSERT_EQ(with_released.at("items").as_array().size(), 1u) << "a user's ?all=true includes their released ones";
  EXPECT_EQ(with_released.at("items").as_array()[0].at("state").as_string(), "released");

  // Events by name: the released instance's whole history.
  auto events = daemon_.get("/api/v1/events?resource=r1", user_);
  ASSERT_EQ(events.status, 200);
  std::vector<std::string> types;
  auto history = events.json();
  for (const auto& e : history.at("items").as_array()) {
    EXPECT_EQ(e.at("resource").as_string(), id);
    types.emplace_back(e.at("type").as_string());
  }
  EXPECT_EQ(types, (std::vector<std::string>{"instance.created", "instance.running", "instance.releasing", "instance.released"}));

  // The name is free again; the live instance wins it.
  auto again = create_running("r1");
  EXPECT_NE(again.at("id").as_string(), id);
  EXPECT_EQ(daemon_.get("/api/v1/instances/r1", user_).json().at("id"), again.at("id"));
  auto live_events = daemon_.get("/api/v1/events?resource=r1", user_).json();
  for (const auto& e : live_events.at("items").as_array()) EXPECT_EQ(e.at("resource"), again.at("id"));
  // Another user does not see it by name either.
  std::string other = daemon_.register_and_login("apiother");
  EXPECT_EQ(daemon_.get("/api/v1/events?resource=r1", other).json().at("items").as_array().size(), 0u);
  EXPECT_EQ(daemon_.get("/api/v1/instances/" + id, other).status, 404);
}

TEST_F(InstanceApiTest, DOCKER_ROOT_StopDuringARestartWins) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  create_running("s1");
  auto restart = daemon_.post("/api/v1/instances/s1/restart", json::object{}, user_);
  ASSERT_EQ(restart.status, 202) << restart.body;
  auto stop = daemon_.post("/api/v1/instances/s1/stop", json::object{}, user_);
  if (stop.status == 409) {
    // Only when the engine finished the restart's stop before this request came in.
    EXPECT_NE(stop.json().at("detail").as_string().find("starting"), std::string::npos) << stop.body;
    return;
  }
  ASSERT_EQ(stop.status, 202) << stop.body;
  auto stopped = daemon_.wait_for_state("s1", "stopped", user_);
  EXPECT_EQ(stopped.at("state").as_string(), "stopped");
  EXPECT_TRUE(stopped.at("state_reason").is_null()) << stopped;  // a plain stop, not a restart
}

// [quotas] instances counts every live instance, whatever its state; a refusal changes nothing.
TEST_F(InstanceApiContractTest, TheInstancesQuotaRefusesTheOneTooMany) {
  for (int n = 0; n < 4; ++n) {
    auto r = daemon_.post("/api/v1/instances", {{"name", "q" + std::to_string(n)}, {"gpu_count", 0}}, user_);
    ASSERT_EQ(r.status, 202) << r.body;
  }
  auto fifth = daemon_.post("/api/v1/instances", {{"name", "q4"}, {"gpu_count", 0}}, user_);
  EXPECT_EQ(fifth.status, 403) << fifth.body;
  EXPECT_EQ(fifth.code(), "quota_exceeded");
  EXPECT_NE(fifth.json().at("detail").as_string().find("4 instances"), std::string::npos) << fifth.body;
  EXPECT_EQ(daemon_.get("/api/v1/instances/q4", user_).status, 404);
  const json::value listed = daemon_.get("/api/v1/instances", user_).json();
  EXPECT_EQ(listed.at("items").as_array().size(), 4u);
  // Releasing one makes room again.
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/q0", "", user_).status, 202);
  daemon_.wait_for_state("q0", "released", user_);
  auto again = daemon_.post("/api/v1/instances", {{"name", "q4"}, {"gpu_count", 0}}, user_);
  EXPECT_EQ(again.status, 202) << again.body;
}

// A restart goes stopping -> starting -> running on the same GPUs, and counts as one instance.
TEST_F(InstanceApiTest, DOCKER_ROOT_RestartReachesRunningOnTheSameGpus) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto r = daemon_.post("/api/v1/instances", {{"name", "rs"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}}, user_);
  ASSERT_EQ(r.status, 202) << r.body;
  auto before = daemon_.wait_for_state("rs", "running", user_);
  ASSERT_EQ(before.at("state").as_string(), "running") << before;
  auto restart = daemon_.post("/api/v1/instances/rs/restart", json::object{}, user_);
  ASSERT_EQ(restart.status, 202) << restart.body;
  EXPECT_EQ(restart.json().at("state").as_string(), "stopping");
  // Wait for the restart to go through: a new start time, running again.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  json::value after;
  while (std::chrono::steady_clock::now() < deadline) {
    after = daemon_.get("/api/v1/instances/rs", user_).json();
    if (after.at("state").as_string() == "running" && after.at("started_at") != before.at("started_at")) break;
    ASSERT_NE(after.at("state").as_string(), "error") << after;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // poll interval, not a wait for time
  }
  ASSERT_EQ(after.at("state").as_string(), "running") << after;
  EXPECT_NE(after.at("started_at"), before.at("started_at"));
  EXPECT_EQ(after.at("gpus"), before.at("gpus"));
}

// A port dropped from a stopped instance frees its host port in the store; the agent must
// agree, so the next instance that gets that host port runs (it used to go to `error`:
// "host port ... is already published").
TEST_F(InstanceApiTest, DOCKER_ROOT_PortsDroppedWhileStoppedAreFreeForTheNextInstance) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto a = daemon_.post("/api/v1/instances", {{"name", "pa"}, {"gpu_count", 0}, {"ports", json::array{22, 8888}}}, user_);
  ASSERT_EQ(a.status, 202) << a.body;
  daemon_.wait_for_state("pa", "running", user_);
  ASSERT_EQ(daemon_.post("/api/v1/instances/pa/stop", json::object{}, user_).status, 202);
  daemon_.wait_for_state("pa", "stopped", user_);
  auto before = daemon_.get("/api/v1/instances/pa", user_).json();
  std::int64_t freed = 0;
  for (const auto& p : before.at("ports").as_array())
    if (p.at("port").as_int64() == 8888) freed = p.at("host_port").as_int64();
  ASSERT_NE(freed, 0) << before;
  auto patched = daemon_.request("PATCH", "/api/v1/instances/pa", R"({"ports": [22]})", user_);
  ASSERT_EQ(patched.status, 200) << patched.body;
  auto b = daemon_.post("/api/v1/instances", {{"name", "pb"}, {"gpu_count", 0}, {"ports", json::array{8888}}}, user_);
  ASSERT_EQ(b.status, 202) << b.body;
  ASSERT_EQ(b.json().at("ports").as_array().size(), 1u);
  EXPECT_EQ(b.json().at("ports").at(0).at("host_port").as_int64(), freed) << "the lowest free host port is the freed one";
  auto running = daemon_.wait_for_state("pb", "running", user_);
  EXPECT_EQ(running.at("state").as_string(), "running") << running;
  // And the stopped one starts again with the ports it kept.
  ASSERT_EQ(daemon_.post("/api/v1/instances/pa/start", json::object{}, user_).status, 202);
  auto again = daemon_.wait_for_state("pa", "running", user_);
  EXPECT_EQ(again.at("state").as_string(), "running") << again;
  EXPECT_EQ(again.at("ports").as_array().size(), 1u);
}

// SIGTERM while the engine is creating a container: the daemon waits for the step, exits 0,
// and (under the sanitizers in CI) reports no use-after-free; the next start finishes it.
TEST_F(InstanceApiTest, DOCKER_ROOT_SigtermWithEngineWorkInFlightExitsCleanly) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto a = daemon_.post("/api/v1/instances", {{"name", "term"}, {"gpu_count", 0}}, user_);
  ASSERT_EQ(a.status, 202) << a.body;
  EXPECT_EQ(daemon_.stop(), 0) << daemon_.log();
  auto log = daemon_.log();
  EXPECT_EQ(log.find("AddressSanitizer"), std::string::npos) << log;
  EXPECT_EQ(log.find("runtime error:"), std::string::npos) << log;
  daemon_.start();
  auto running = daemon_.wait_for_state("term", "running", daemon_.login("apiuser", "password-123"));
  EXPECT_EQ(running.at("state").as_string(), "running") << running;
}

// The name is the hostname, and a no-GPU start runs at the no-GPU size: a stopped container
// that cannot take either is rebuilt from its own filesystem, which keeps the system disk.
TEST_F(InstanceApiTest, DOCKER_ROOT_RenameAndNoGpuStartRebuildTheContainerKeepingTheSystemDisk) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto created = daemon_.post("/api/v1/instances", {{"name", "g1"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}}, user_);
  ASSERT_EQ(created.status, 202) << created.body;
  auto running = daemon_.wait_for_state("g1", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running");
  const std::string id(running.at("id").as_string());
  const std::string host_key(running.at("ssh").at("host_key").as_string());
  const std::string container = "gpucloud-" + daemon_.installation_id() + "-" + id;
  auto in_container = [&](const std::string& command) {
    return shell("docker exec " + container + " sh -c '" + command + "' 2>&1");
  };
  auto memory_limit = [&] {
    return in_container("cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max");
  };
  EXPECT_EQ(in_container("hostname"), "g1\n");
  EXPECT_EQ(memory_limit(), std::to_string(1LL << 30) + "\n");
  in_container("echo kept > /root/system-disk-file");

  auto renamed = daemon_.request("PATCH", "/api/v1/instances/g1", R"({"name":"g2"})", user_);
  ASSERT_EQ(renamed.status, 200) << renamed.body;
  ASSERT_EQ(daemon_.post("/api/v1/instances/g2/stop", json::object{}, user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("g2", "stopped", user_).at("state").as_string(), "stopped");
  ASSERT_EQ(daemon_.post("/api/v1/instances/g2/start", json::object{{"no_gpu", true}}, user_).status, 202);
  auto no_gpu = daemon_.wait_for_state("g2", "running", user_);
  ASSERT_EQ(no_gpu.at("state").as_string(), "running") << no_gpu;
  EXPECT_TRUE(no_gpu.at("no_gpu").as_bool());
  EXPECT_EQ(in_container("hostname"), "g2\n");
  EXPECT_EQ(memory_limit(), std::to_string(2LL << 30) + "\n") << "the no-GPU size";
  EXPECT_EQ(in_container("cat /root/system-disk-file"), "kept\n");
  EXPECT_EQ(no_gpu.at("ssh").at("host_key").as_string(), host_key) << "the same instance keeps its host key";

  // Back to its GPU size, still the same disk.
  ASSERT_EQ(daemon_.post("/api/v1/instances/g2/stop", json::object{}, user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("g2", "stopped", user_).at("state").as_string(), "stopped");
  ASSERT_EQ(daemon_.post("/api/v1/instances/g2/start", json::object{}, user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("g2", "running", user_).at("state").as_string(), "running");
  EXPECT_EQ(memory_limit(), std::to_string(1LL << 30) + "\n");
  EXPECT_EQ(in_container("cat /root/system-disk-file"), "kept\n");

  // Release takes the rebuilds' images with it.
  const std::string images_of_instance =
      "/images/json?filters=" + std::string("%7B%22label%22%3A%5B%22gpucloud.instance%3D") + id + "%22%5D%7D";
  EXPECT_NE(docker_api("GET", images_of_instance).find("gpucloud-system/"), std::string::npos);
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/g2", "", user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("g2", "released", user_).at("state").as_string(), "released");
  EXPECT_EQ(docker_api("GET", images_of_instance).find("gpucloud-system/"), std::string::npos);
}

// The GPU limit binds a start as it binds a create, and never a no-GPU instance.
TEST_F(InstanceApiTest, DOCKER_ROOT_GpuQuotaHoldsForStartsAndNotForNoGpuInstances) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto create = [&](const std::string& name, const json::object& extra) {
    json::object body{{"name", name}};
    for (const auto& [k, v] : extra) body[k] = v;
    return daemon_.post("/api/v1/instances", body, user_);
  };
  ASSERT_EQ(create("q1", {{"gpu_model", "RTX 4090"}, {"gpu_count", 2}}).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("q1", "running", user_).at("state").as_string(), "running");
  auto over = create("q2", {{"gpu_model", "A100"}, {"zone", "zone-b"}, {"gpu_count", 1}});
  EXPECT_EQ(over.status, 403) << over.body;
  EXPECT_EQ(over.code(), "quota_exceeded");
  auto no_gpu = create("q3", {{"gpu_count", 0}});
  ASSERT_EQ(no_gpu.status, 202) << "a no-GPU instance adds no GPU: " << no_gpu.body;
  ASSERT_EQ(daemon_.wait_for_state("q3", "running", user_).at("state").as_string(), "running");

  // q1 stops (its GPUs go back), q4 takes one A100, then q1's start would hold 3.
  ASSERT_EQ(daemon_.post("/api/v1/instances/q1/stop", json::object{}, user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("q1", "stopped", user_).at("state").as_string(), "stopped");
  ASSERT_EQ(create("q4", {{"gpu_model", "A100"}, {"zone", "zone-b"}, {"gpu_count", 1}}).status, 202);
  auto start = daemon_.post("/api/v1/instances/q1/start", json::object{}, user_);
  EXPECT_EQ(start.status, 403) << start.body;
  EXPECT_EQ(start.code(), "quota_exceeded");
  EXPECT_NE(start.json().at("detail").as_string().find("you hold 1"), std::string::npos) << start.body;
  EXPECT_EQ(daemon_.get("/api/v1/instances/q1", user_).json().at("state").as_string(), "stopped") << "nothing changed";
  // Without its GPUs it may start.
  ASSERT_EQ(daemon_.post("/api/v1/instances/q1/start", json::object{{"no_gpu", true}}, user_).status, 202);
  EXPECT_EQ(daemon_.wait_for_state("q1", "running", user_).at("state").as_string(), "running");
}

TEST_F(InstanceApiTest, DOCKER_ROOT_TheImageMarketSaysWhatTheEngineHolds) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  auto find = [&](const std::string& name) {
    auto images = daemon_.get("/api/v1/images", user_).json();
    for (const auto& i : images.at("items").as_array())
      if (i.at("name").as_string() == name) return i;
    return json::value();
  };
  json::value missing;
  EXPECT_TRUE(wait_until(  // the pull fails within seconds (no such registry)
      [&] {
        missing = find("not-here");
        return !missing.is_null() && missing.at("state").as_string() == "error" &&
               find("debian-12-base").at("size_bytes").as_int64() > 0;
      },
      std::chrono::seconds(30), "the image refresh to fail the missing image and size the base one",
      std::chrono::milliseconds(200)));
  ASSERT_FALSE(missing.is_null());
  EXPECT_EQ(missing.at("state").as_string(), "error") << missing;
  EXPECT_NE(missing.at("state_reason").as_string().find("gpucloud-no-such-registry.invalid/nothing:1"), std::string::npos)
      << missing;
  EXPECT_TRUE(missing.at("cuda").is_null());
  EXPECT_EQ(missing.at("os").as_string(), "Ubuntu 22.04");
  auto base = find("debian-12-base");
  EXPECT_EQ(base.at("state").as_string(), "available");
  EXPECT_GT(base.at("size_bytes").as_int64(), 10'000'000) << base;  // the real image, ~230 MB

  auto refused = daemon_.post("/api/v1/instances", {{"name", "nope"}, {"gpu_count", 0}, {"image", "not-here"}}, user_);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.json().at("detail").as_string().find("not available"), std::string::npos) << refused.body;
  EXPECT_EQ(daemon_.get("/api/v1/instances", user_).json().at("items").as_array().size(), 0u);
}

}  // namespace
}  // namespace gpucloud::testing
