// Instances on network holders ([agent] network_holders, the default) for real: the daemon,
// the Docker Engine, nftables and OpenSSH on this machine. The instance's container joins a
// pre-started holder's network namespace (NetworkMode container:HOLDER).
#include <gtest/gtest.h>

#include "support/ssh_client.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string holder_config(int pool) {
  static const std::string ports = port_range();  // one block per test process
  return R"(
[[hosts]]
name = "node-1"
cpu = 2
memory_gib = 8
port_range = ")" + ports + R"("
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[agent]
network_holders = true
network_pool_size = )" + std::to_string(pool) + "\n";
}

std::string inspect_field(const std::string& container, const std::string& format) {
  std::string out = shell("docker inspect -f '" + format + "' " + container + " 2>/dev/null");
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

class NetworkHolderIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GPUCLOUD_NEED_ENGINE(); }
  void TearDown() override {
    if (!key_.dir.empty()) shell("rm -rf '" + key_.dir + "'");
  }
  void start(int pool, const std::string& fault = "") {
    daemon_ = std::make_unique<TestDaemon>(DaemonOptions{holder_config(pool)});
    daemon_->start(fault);
    user_ = daemon_->register_and_login("alice");
    key_ = make_key();
    auto r = daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, user_);
    ASSERT_EQ(r.status, 201) << r.body;
  }
  HttpResult create(const std::string& name) {
    return daemon_->post("/api/v1/instances",
                         json::object{{"name", name}, {"gpu_count", 0}, {"ssh_keys", json::array{"laptop"}}}, user_);
  }
  std::string container_of(const json::value& instance) const {
    return "gpucloud-" + daemon_->installation_id() + "-" + std::string(instance.at("id").as_string());
  }
  // The ids of this installation's network holders.
  std::vector<std::string> holders() const {
    std::string out = shell("docker ps -aq --no-trunc --filter label=gpucloud.installation=" + daemon_->installation_id() +
                            " --filter label=gpucloud.network-holder=1");
    std::vector<std::string> ids;
    for (std::size_t pos = 0; pos < out.size();) {
      auto nl = out.find('\n', pos);
      if (nl == std::string::npos) nl = out.size();
      if (nl > pos) ids.push_back(out.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return ids;
  }
  std::unique_ptr<TestDaemon> daemon_;
  std::string user_;
  KeyPair key_;
};

TEST_F(NetworkHolderIntegrationTest, DOCKER_ROOT_SshHostnameHolderKilledIsRepairedReleaseLeavesNoHolder) {
  start(1);
  ASSERT_EQ(create("holder-box").status, 202);
  auto running = daemon_->wait_for_state("holder-box", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  const std::string container = container_of(running);
  const std::string mode = inspect_field(container, "{{.HostConfig.NetworkMode}}");
  ASSERT_TRUE(mode.starts_with("container:")) << "the instance joins a holder: " << mode;
  const std::string holder = mode.substr(10);
  EXPECT_EQ(inspect_field(holder, "{{index .Config.Labels \"gpucloud.network-holder\"}}"), "1");
  EXPECT_EQ(inspect_field(holder, "{{.HostConfig.CapDrop}}"), "[ALL]");
  EXPECT_EQ(inspect_field(holder, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"),
            std::string(running.at("ipv4").as_string()))
      << "the instance's address is its holder's";

  int rc = -1;
  std::string out = ssh_run(running, key_, "hostname; cat /etc/hostname; grep -c holder-box /etc/hosts", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "holder-box\nholder-box\n1\n") << "hostname, /etc/hostname and /etc/hosts name the instance";

  // The holder dies: the instance "runs" on with no network until the agent repairs it.
  shell("docker kill " + holder + " >/dev/null 2>&1");
  ASSERT_TRUE(wait_until(
      [&] {
        int code = -1;
        std::string answer = ssh_run(running, key_, "hostname", &code);
        return code == 0 && answer == "holder-box\n";
      },
      std::chrono::seconds(45), "SSH into the instance again after its holder was killed", std::chrono::milliseconds(500)));
  EXPECT_EQ(inspect_field(holder, "{{.State.Running}}"), "true");
  EXPECT_EQ(daemon_->get("/api/v1/instances/holder-box", user_).json().at("state").as_string(), "running");

  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/holder-box", "", user_).status, 202);
  ASSERT_EQ(daemon_->wait_for_state("holder-box", "released", user_).at("state").as_string(), "released");
  EXPECT_EQ(inspect_field(holder, "{{.Id}}"), "") << "release removes the instance's holder";
  EXPECT_EQ(inspect_field(container, "{{.Id}}"), "");
  EXPECT_LE(holders().size(), 1u) << "only the pool's holder is left";
}

TEST_F(NetworkHolderIntegrationTest, DOCKER_ROOT_KillNineAfterTheHolderIsRecordedThenRestartConverges) {
  start(1, "agent.ensure.after_holder_recorded");
  try {
    create("victim");
  } catch (...) {
  }
  ASSERT_TRUE(daemon_->killed_at("agent.ensure.after_holder_recorded"));
  daemon_->start();
  auto running = daemon_->wait_for_state("victim", "running", user_, std::chrono::seconds(30));
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  const std::string mode = inspect_field(container_of(running), "{{.HostConfig.NetworkMode}}");
  ASSERT_TRUE(mode.starts_with("container:")) << mode;
  int rc = -1;
  std::string out = ssh_run(running, key_, "hostname", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "victim\n");
  // No holder leaked: the instance's own and at most the pool's one.
  ASSERT_TRUE(wait_until([&] { return holders().size() == 2; }, std::chrono::seconds(15), "the pool refilled"));
  std::set<std::string> ips;
  for (const auto& h : holders()) ips.insert(inspect_field(h, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"));
  EXPECT_EQ(ips.size(), 2u);
  EXPECT_TRUE(ips.contains(std::string(running.at("ipv4").as_string())));
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/victim", "", user_).status, 202);
  ASSERT_EQ(daemon_->wait_for_state("victim", "released", user_).at("state").as_string(), "released");
  EXPECT_EQ(holders().size(), 1u) << "only the pool's holder is left";
}

}  // namespace
}  // namespace gpucloud::testing
