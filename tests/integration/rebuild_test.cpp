// GPUs by UUID across daemon restarts, and what a start of a stopped instance costs: the
// same GPUs when free (no rebuild), another size changed in place (no commit), and a
// rebuild past the layer bound flattened to one layer.
#include <fstream>

#include <gtest/gtest.h>

#include "support/capabilities.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string rebuild_config(int gpus) {
  static int base = 36000 + static_cast<int>(std::hash<std::string>{}(random_suffix()) % 20) * 100;
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = )" + std::to_string(gpus) + R"( } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 2
price_per_hour = 10
[quotas]
gpus = 4
instances = 4
)";
}

// A daemon per test: two tests restart it with a GPU gone, and each counts on the host's two
// GPUs being free.
class RebuildTest : public ::testing::Test {
 protected:
  explicit RebuildTest(std::map<std::string, std::string> env = {})
      : daemon_(DaemonOptions{rebuild_config(2), false, "admin-password-1", with_transport(std::move(env))}) {}
  static std::map<std::string, std::string> with_transport(std::map<std::string, std::string> env) {
    env["GPUCLOUD_AGENT_TRANSPORT"] = "loopback-json";
    return env;
  }
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    daemon_.start();
    user_ = daemon_.register_and_login("rebuilder");
  }
  void TearDown() override {
    // The system images this installation's instances left (released ones remove theirs).
    for (const auto& id : instance_ids_) {
      for (const auto& ref : system_images(id)) docker_api("DELETE", "/images/" + ref + "?force=1");
    }
  }
  json::value create(const std::string& name, int gpus) {
    auto r = daemon_.post("/api/v1/instances", {{"name", name}, {"gpu_model", "RTX 4090"}, {"gpu_count", gpus}}, user_);
    EXPECT_EQ(r.status, 202) << r.body;
    auto running = daemon_.wait_for_state(name, "running", user_);
    EXPECT_EQ(running.at("state").as_string(), "running") << running;
    instance_ids_.emplace_back(running.at("id").as_string());
    return running;
  }
  void stop(const std::string& name) {
    ASSERT_EQ(daemon_.post("/api/v1/instances/" + name + "/stop", json::object{}, user_).status, 202);
    ASSERT_EQ(daemon_.wait_for_state(name, "stopped", user_).at("state").as_string(), "stopped");
  }
  json::value start(const std::string& name, bool no_gpu = false) {
    auto r = daemon_.post("/api/v1/instances/" + name + "/start", json::object{{"no_gpu", no_gpu}}, user_);
    EXPECT_EQ(r.status, 202) << r.body;
    // A flattening rebuild copies the whole filesystem: slow on a busy test machine.
    auto running = daemon_.wait_for_state(name, "running", user_, std::chrono::minutes(3));
    EXPECT_EQ(running.at("state").as_string(), "running") << running;
    return running;
  }
  std::string container_of(const json::value& instance) const {
    return "gpucloud-" + daemon_.installation_id() + "-" + std::string(instance.at("id").as_string());
  }
  std::string container_id(const json::value& instance) const {
    return shell("docker inspect -f '{{.Id}}' " + container_of(instance) + " 2>&1");
  }
  std::string in_container(const json::value& instance, const std::string& command) const {
    return shell("docker exec " + container_of(instance) + " sh -c '" + command + "' 2>&1");
  }
  std::string memory_limit(const json::value& instance) const {
    return in_container(instance,
                        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max");
  }
  // "repo:tag" of every gpucloud-system image of the instance.
  std::vector<std::string> system_images(const std::string& instance_id) const {
    std::string out = shell("docker images --filter label=gpucloud.instance=" + instance_id +
                            " --format '{{.Repository}}:{{.Tag}}' | grep '^gpucloud-system/' || true");
    std::vector<std::string> refs;
    std::stringstream lines(out);
    for (std::string l; std::getline(lines, l);)
      if (!l.empty()) refs.push_back(l);
    return refs;
  }
  static std::string gpu_uuid(const json::value& instance) {
    const auto& gpus = instance.at("gpus").as_array();
    return gpus.empty() ? std::string() : std::string(gpus[0].at("uuid").as_string());
  }

  TestDaemon daemon_;
  std::string user_;
  std::vector<std::string> instance_ids_;
};

// A plain stop/start gets the GPUs it had back, so its container is not rebuilt, even when
// lower-numbered GPUs are free by then.
TEST_F(RebuildTest, DOCKER_ROOT_StopStartTakesItsOwnGpusBackAndKeepsItsContainer) {
  auto a = create("a", 1);
  auto b = create("b", 1);
  const std::string b_gpu = gpu_uuid(b);
  ASSERT_NE(b_gpu, gpu_uuid(a));
  const std::string b_container = container_id(b);
  stop("a");
  stop("b");
  auto again = start("b");
  EXPECT_EQ(gpu_uuid(again), b_gpu) << again;
  EXPECT_EQ(container_id(again), b_container);
  EXPECT_TRUE(system_images(std::string(b.at("id").as_string())).empty()) << "no commit";
}

// Another size (a no-GPU start, and back) changes the stopped container's limits in place:
// the same container, no new image layer.
TEST_F(RebuildTest, DOCKER_ROOT_ANoGpuStartChangesLimitsWithoutACommit) {
  auto g = create("g", 1);
  const std::string id(g.at("id").as_string());
  const std::string container = container_id(g);
  EXPECT_EQ(memory_limit(g), std::to_string(1LL << 30) + "\n");
  in_container(g, "echo kept > /root/system-disk-file");
  stop("g");
  auto no_gpu = start("g", true);
  EXPECT_TRUE(no_gpu.at("no_gpu").as_bool());
  EXPECT_EQ(memory_limit(no_gpu), std::to_string(2LL << 30) + "\n") << "the no-GPU size";
  EXPECT_EQ(container_id(no_gpu), container) << "resized in place, not rebuilt";
  EXPECT_EQ(in_container(no_gpu, "cat /root/system-disk-file"), "kept\n");
  EXPECT_EQ(shell("docker inspect -f '{{.HostConfig.MemorySwap}}' " + container_of(g)), std::to_string(2LL << 30) + "\n")
      << "still no swap";
  stop("g");
  auto back = start("g");
  EXPECT_EQ(memory_limit(back), std::to_string(1LL << 30) + "\n");
  EXPECT_EQ(container_id(back), container);
  EXPECT_TRUE(system_images(id).empty()) << "no commit";
}

// A daemon restarted with one GPU fewer keeps the missing one on record (health "missing"),
// keeps running, never places on it, and a start that needs it says so.
TEST_F(RebuildTest, DOCKER_ROOT_AGpuGoneAtRestartIsMissingAndAStartNamesIt) {
  auto a = create("a", 1);
  auto b = create("b", 1);
  const std::string b_gpu = gpu_uuid(b);
  stop("b");
  daemon_.stop();
  std::ofstream(daemon_.dir() + "/gpucloud.toml") << rebuild_config(1);
  daemon_.start();
  auto hosts = daemon_.get("/api/v1/admin/hosts", daemon_.admin_token());
  ASSERT_EQ(hosts.status, 200) << hosts.body;
  const json::value doc = hosts.json();
  const auto& gpus = doc.at("items").as_array()[0].at("gpus").as_array();
  ASSERT_EQ(gpus.size(), 2u) << hosts.body;
  bool seen_missing = false;
  for (const auto& g : gpus) {
    if (g.at("uuid").as_string() == b_gpu) {
      EXPECT_EQ(g.at("health").as_string(), "missing") << g;
      seen_missing = true;
    } else {
      EXPECT_EQ(g.at("health").as_string(), "ok") << g;
      EXPECT_EQ(g.at("instance"), a.at("id")) << "a keeps its GPU";
    }
  }
  EXPECT_TRUE(seen_missing) << hosts.body;
  auto refused = daemon_.post("/api/v1/instances/b/start", json::object{}, user_);
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(refused.code(), "no_capacity");
  EXPECT_NE(refused.json().at("detail").as_string().find(b_gpu + " (last seen as GPU 1) is missing"), std::string::npos)
      << refused.body;
  EXPECT_EQ(daemon_.get("/api/v1/instances/b", user_).json().at("state").as_string(), "stopped");
  EXPECT_EQ(daemon_.get("/api/v1/instances/a", user_).json().at("state").as_string(), "running");
}

// A running instance whose GPU is gone at a daemon restart keeps running and says so: its
// `degraded` names the GPU, its owner and the operator get one event each (a second restart
// adds none); a restart with the GPU back clears it with an event.
TEST_F(RebuildTest, DOCKER_ROOT_ARunningInstancesGpuGoneAtRestartIsFlaggedUntilItIsBack) {
  auto a = create("a", 1);
  auto b = create("b", 1);
  const std::string b_id(b.at("id").as_string());
  const std::string b_gpu = gpu_uuid(b);
  const std::string container = container_id(b);
  auto events_of = [&](const std::string& type, const std::string& token) {
    const json::value doc = daemon_.get("/api/v1/events?limit=1000", token).json();
    std::vector<json::object> out;
    for (const auto& e : doc.at("items").as_array())
      if (e.at("type").as_string() == type) out.push_back(e.as_object());
    return out;
  };
  auto restart_with = [&](int gpus) {
    daemon_.stop();
    std::ofstream(daemon_.dir() + "/gpucloud.toml") << rebuild_config(gpus);
    daemon_.start();
  };
  restart_with(1);  // GPU 1, b's, is gone
  for (int round = 0; round < 2; ++round) {
    const json::value shown = daemon_.get("/api/v1/instances/b", user_).json();
    EXPECT_EQ(shown.at("state").as_string(), "running") << shown;
    ASSERT_TRUE(shown.at("degraded").is_object()) << shown;
    ASSERT_EQ(shown.at("degraded").at("gpus").as_array().size(), 1u) << shown;
    EXPECT_EQ(shown.at("degraded").at("gpus").as_array()[0].as_string(), b_gpu);
    EXPECT_EQ(shown.at("gpus").as_array()[0].at("health").as_string(), "missing") << shown;
    EXPECT_TRUE(daemon_.get("/api/v1/instances/a", user_).json().at("degraded").is_null());
    auto lost = events_of("instance.gpu_lost", user_);
    ASSERT_EQ(lost.size(), 1u) << "round " << round;
    EXPECT_EQ(lost[0].at("resource").as_string(), b_id);
    EXPECT_EQ(lost[0].at("data").at("uuid").as_string(), b_gpu);
    auto operator_lost = events_of("host.gpu_lost", daemon_.admin_token());
    ASSERT_EQ(operator_lost.size(), 1u);
    EXPECT_EQ(operator_lost[0].at("data").at("instance").as_string(), b_id);
    if (round == 0) restart_with(1);  // the same report again: nothing new
  }
  EXPECT_EQ(container_id(b), container) << "the container was left alone";
  restart_with(2);
  const json::value back = daemon_.get("/api/v1/instances/b", user_).json();
  EXPECT_TRUE(back.at("degraded").is_null()) << back;
  EXPECT_EQ(back.at("state").as_string(), "running");
  EXPECT_EQ(gpu_uuid(back), b_gpu);
  EXPECT_EQ(events_of("instance.gpu_recovered", user_).size(), 1u);
  EXPECT_EQ(events_of("host.gpu_recovered", daemon_.admin_token()).size(), 1u);
}

class FlattenTest : public RebuildTest {
 protected:
  FlattenTest() : RebuildTest({{"GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS", "2"}}) {}
};

// With the bound at 2 layers over a 1-layer base: the first rename's rebuild commits (2
// layers), the second would make 3 and flattens to 1 instead; the disk, the host key and
// the image's config survive both.
TEST_F(FlattenTest, DOCKER_ROOT_SLOW_ARebuildPastTheLayerBoundFlattensToOneLayer) {
  const std::string base_layers =
      shell("docker image inspect -f '{{len .RootFS.Layers}}' gpucloud/base:bookworm-2");
  if (base_layers != "1\n") GTEST_SKIP() << "expects a one-layer base image, got " << base_layers;
  auto n = create("n1", 1);
  const std::string id(n.at("id").as_string());
  const std::string host_key(n.at("ssh").at("host_key").as_string());
  in_container(n, "echo kept > /root/system-disk-file; ln -s /root/system-disk-file /root/link");
  auto layers_of = [&](const std::string& ref) {
    return shell("docker image inspect -f '{{len .RootFS.Layers}}' " + ref + " 2>&1");
  };
  const std::string repo = "gpucloud-system/" + daemon_.installation_id() + "-" + id;
  std::string name = "n1";
  for (int round = 1; round <= 2; ++round) {
    std::string next = "n" + std::to_string(round + 1);
    auto renamed = daemon_.request("PATCH", "/api/v1/instances/" + name, R"({"name":")" + next + R"("})", user_);
    ASSERT_EQ(renamed.status, 200) << renamed.body;
    name = next;
    stop(name);
    auto running = start(name);
    EXPECT_EQ(in_container(running, "hostname"), name + "\n");
    EXPECT_EQ(in_container(running, "cat /root/link"), "kept\n");
    EXPECT_EQ(running.at("ssh").at("host_key").as_string(), host_key);
  }
  EXPECT_EQ(layers_of(repo + ":r1"), "2\n") << "a commit below the bound";
  EXPECT_EQ(layers_of(repo + ":r2"), "1\n") << "flattened";
  EXPECT_EQ(shell("docker image inspect -f '{{index .Config.Labels \"gpucloud.instance\"}}' " + repo + ":r2"), id + "\n");
  // The flattened image keeps its parent's config (r1's, which the engine's commit made).
  // (An empty Entrypoint comes back null: the same to a create, which sets its own.)
  for (const char* field : {".Config.Env", ".Config.Cmd", ".Config.WorkingDir", ".Config.User"}) {
    const std::string format = std::string(" -f '{{json ") + field + "}}' ";
    EXPECT_EQ(shell("docker image inspect" + format + repo + ":r2"), shell("docker image inspect" + format + repo + ":r1"))
        << field;
  }
  // Release takes the flattened image too.
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/" + name, "", user_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state(name, "released", user_).at("state").as_string(), "released");
  EXPECT_TRUE(system_images(id).empty());
}

}  // namespace
}  // namespace gpucloud::testing
