// Instances for real: the daemon, the Docker Engine, nftables and OpenSSH on this machine.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/time_format.h"

#include "support/netns_client.h"
#include "support/ssh_client.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// One CPU per GPU so the cgroup check means something on a 2-core machine.
std::string config_with_gpus(int gpus) {
  static const std::string ports = port_range();  // one block per test process
  return R"(
[[hosts]]
name = "node-1"
cpu = 4
memory_gib = 16
port_range = ")" + ports + R"("
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
memory_gib = 1
price_per_hour = 10
)";
}

// The GPUs of the first host as the operator sees them (never empty: a test that loops over
// them must not pass by finding none).
json::array host_gpus(const TestDaemon& daemon) {
  auto hosts = daemon.get("/api/v1/admin/hosts", daemon.admin_token()).json();
  EXPECT_TRUE(hosts.is_object() && !hosts.at("items").as_array().empty()) << json::serialize(hosts);
  if (!hosts.is_object() || hosts.at("items").as_array().empty()) return {};
  auto gpus = hosts.at("items").as_array()[0].at("gpus").as_array();
  EXPECT_FALSE(gpus.empty()) << "the host lists no GPUs";
  return gpus;
}

int reserved_gpus(const TestDaemon& daemon) {
  int reserved = 0;
  for (const auto& g : host_gpus(daemon)) reserved += g.at("reserved_by").is_string();
  return reserved;
}

// A bare container of this test on the shared engine (`sleep` an hour), started and running,
// or the engine's answers in the failure. It is on no network (NetworkMode none): it needs
// none, and the machine's default bridge is no part of what these tests check. Listed in
// `lease` so that it goes even when the test stops early. Returns its id ("" on failure).
::testing::AssertionResult run_bare_container(ResourceLease& lease, const std::string& name, json::object labels,
                                              std::string* id_out) {
  lease.add("container", name);
  json::object body{{"Image", "gpucloud/base:bookworm-2"},
                    {"Cmd", json::array{"sleep", "3600"}},
                    {"Labels", std::move(labels)},
                    {"HostConfig", json::object{{"NetworkMode", "none"}}}};
  const std::string created = docker_api("POST", "/containers/create?name=" + name, json::serialize(body));
  if (created.find("\"Id\"") == std::string::npos)
    return ::testing::AssertionFailure() << "the engine did not create " << name << ": " << created;
  const std::string started = docker_api("POST", "/containers/" + name + "/start");
  std::string inspect;
  auto running = [&] {
    inspect = docker_api("GET", "/containers/" + name + "/json");
    return inspect.find("\"Running\":true") != std::string::npos;
  };
  if (!wait_until(running, std::chrono::seconds(30), name + " to run"))
    return ::testing::AssertionFailure() << name << " did not run; start answered '" << started << "'; state: " << inspect;
  auto v = json::parse(inspect);
  *id_out = std::string(v.at("Id").as_string());
  return ::testing::AssertionSuccess();
}

// What a container's state says, for a failure message.
std::string container_state(const std::string& name) {
  boost::system::error_code ec;
  auto v = json::parse(docker_api("GET", "/containers/" + name + "/json"), ec);
  if (ec || !v.is_object() || !v.as_object().contains("State")) return "no such container";
  return json::serialize(v.at("State"));
}

// A daemon per test, started by the test with the GPUs it counts on (start(gpus)); some kill
// it with -9 or restart dockerd.
class InstancesTest : public ::testing::Test {
 protected:
  // Skipping here (not in start()) skips the test body too.
  void SetUp() override { GPUCLOUD_NEED_ENGINE(); }
  // The daemon's own things go with its TestDaemon (its lease); the key pair is ours.
  void TearDown() override {
    if (!key_.dir.empty()) shell("rm -rf '" + key_.dir + "'");
  }
  void start(int gpus) {
    daemon_ = std::make_unique<TestDaemon>(DaemonOptions{config_with_gpus(gpus)});
    daemon_->start();
    user_ = daemon_->register_and_login("alice");
    key_ = make_key();
    auto r = daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, user_);
    ASSERT_EQ(r.status, 201) << r.body;
  }
  HttpResult create(const std::string& name, const std::string& token, json::object extra = {}) {
    json::object body{{"name", name}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"ssh_keys", json::array{"laptop"}}};
    for (auto& [k, v] : extra) body[k] = v;
    return daemon_->post("/api/v1/instances", body, token);
  }
  std::unique_ptr<TestDaemon> daemon_;
  std::string user_;
  KeyPair key_;
};

TEST_F(InstancesTest, DOCKER_ROOT_CreateSshLimitsStopStartRelease) {
  start(2);
  auto created = create("train-1", user_);
  ASSERT_EQ(created.status, 202) << created.body;
  EXPECT_EQ(created.json().at("state").as_string(), "creating");
  auto running = daemon_->wait_for_state("train-1", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  EXPECT_TRUE(running.at("ssh").at("host_key").as_string().starts_with("ssh-ed25519 "));
  EXPECT_EQ(running.at("gpus").as_array().size(), 1u);
  EXPECT_TRUE(running.at("gpus").as_array()[0].at("simulated").as_bool());
  int rc = -1;
  std::string out = ssh_run(running, key_,
                            "hostname; (cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d\" \" -f1 /sys/fs/cgroup/cpu.max); "
                            "(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max); "
                            "cat /proc/1/environ | tr \"\\0\" \"\\n\" | grep NVIDIA_VISIBLE_DEVICES; echo kept > /root/file",
                            &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("train-1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("100000\n"), std::string::npos) << "1 CPU = 100000us quota per 100000us period: " << out;
  EXPECT_NE(out.find(std::to_string(1LL << 30) + "\n"), std::string::npos) << "1 GiB memory limit: " << out;
  EXPECT_NE(out.find("NVIDIA_VISIBLE_DEVICES=void"), std::string::npos) << out;

  ASSERT_EQ(daemon_->post("/api/v1/instances/train-1/stop", json::object{}, user_).status, 202);
  auto stopped = daemon_->wait_for_state("train-1", "stopped", user_);
  ASSERT_EQ(stopped.at("state").as_string(), "stopped");
  ASSERT_EQ(daemon_->post("/api/v1/instances/train-1/start", json::object{}, user_).status, 202);
  running = daemon_->wait_for_state("train-1", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running");
  out = ssh_run(running, key_, "cat /root/file", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "kept\n") << "the system disk survives stop/start";

  std::string host_port = std::to_string(running.at("ssh").at("port").as_int64());
  std::string id(running.at("id").as_string());
  // Its DNAT entry in the table's `published` map ("tcp . PORT comment ...").
  EXPECT_NE(shell("nft list table ip gpucloud-" + daemon_->installation_id()).find("tcp . " + host_port + " comment"), std::string::npos);
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/train-1", "", user_).status, 202);
  daemon_->wait_for_state("train-1", "released", user_);
  EXPECT_EQ(daemon_->get("/api/v1/instances/train-1", user_).json().at("state").as_string(), "released");
  EXPECT_EQ(daemon_->get("/api/v1/instances", user_).json().at("items").as_array().size(), 0u);
  EXPECT_EQ(docker_api("GET", "/containers/gpucloud-" + daemon_->installation_id() + "-" + id + "/json").find("\"Id\""),
            std::string::npos)
      << "the container is removed";
  EXPECT_EQ(shell("nft list table ip gpucloud-" + daemon_->installation_id() + " 2>/dev/null").find("tcp . " + host_port + " comment"),
            std::string::npos)
      << "its rules are removed";
}

// api.md: "ports ... apply to a running instance within 2 s".
TEST_F(InstancesTest, DOCKER_ROOT_APortAddedByPatchAnswersWithinTwoSeconds) {
  start(1);
  ASSERT_EQ(create("web", user_).status, 202);
  auto running = daemon_->wait_for_state("web", "running", user_);
  int rc = -1;
  ssh_run(running, key_, "cd /tmp && (setsid python3 -m http.server 8000 >/dev/null 2>&1 < /dev/null &) ; sleep 0.3", &rc);
  ASSERT_EQ(rc, 0);
  auto patched = daemon_->request("PATCH", "/api/v1/instances/web", R"({"ports": [22, 8000]})", user_);
  const auto answered = std::chrono::steady_clock::now();
  ASSERT_EQ(patched.status, 200) << patched.body;
  std::int64_t host_port = 0;
  const json::value answer = patched.json();  // named: a range-for over a temporary's part dangles
  for (const auto& p : answer.at("ports").as_array())
    if (p.at("port").as_int64() == 8000) host_port = p.at("host_port").as_int64();
  ASSERT_NE(host_port, 0) << patched.body;
  std::string code;
  const bool served = static_cast<bool>(wait_until(
      [&] {
        code = shell("curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:" + std::to_string(host_port) + "/");
        return code == "200";
      },
      std::chrono::seconds(2), "the new port to answer", std::chrono::milliseconds(50)));
  EXPECT_TRUE(served) << "last answer " << code << " after "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - answered).count()
                      << " ms";
}

// The in-process agent, called directly (every other daemon test goes through the JSON
// loopback transport): the same create, SSH and release.
TEST_F(InstancesTest, DOCKER_ROOT_TheInProcessAgentWithoutTheJsonLoopbackRunsInstances) {
  DaemonOptions options{config_with_gpus(1)};
  options.env.erase("GPUCLOUD_AGENT_TRANSPORT");
  daemon_ = std::make_unique<TestDaemon>(options);
  daemon_->start();
  user_ = daemon_->register_and_login("alice");
  key_ = make_key();
  ASSERT_EQ(daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, user_).status, 201);
  ASSERT_EQ(create("direct", user_).status, 202);
  auto running = daemon_->wait_for_state("direct", "running", user_);
  int rc = -1;
  EXPECT_EQ(ssh_run(running, key_, "hostname", &rc), "direct\n");
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/direct", "", user_).status, 202);
  auto released = daemon_->wait_for_state("direct", "released", user_);
  EXPECT_EQ(released.at("state").as_string(), "released");
}

TEST_F(InstancesTest, DOCKER_ROOT_PasswordLoginOnlyWhenGivenAndNeverInTheContainerConfig) {
  start(2);
  const std::string password = "s3cret-pass-word";
  ASSERT_EQ(create("with-pw", user_, {{"password", password}}).status, 202);
  ASSERT_EQ(create("no-pw", user_, {{"gpu_count", 0}, {"gpu_model", nullptr}}).status, 202);
  auto with_pw = daemon_->wait_for_state("with-pw", "running", user_);
  auto no_pw = daemon_->wait_for_state("no-pw", "running", user_);
  ASSERT_EQ(with_pw.at("state").as_string(), "running") << json::serialize(with_pw);
  ASSERT_EQ(no_pw.at("state").as_string(), "running") << json::serialize(no_pw);
  auto login = [&](const json::value& instance) {
    std::string dir = "/tmp/gpucloud-pw-" + random_suffix();
    shell("mkdir -p " + dir + " && printf '#!/bin/sh\\necho " + password + "\\n' > " + dir + "/askpass && chmod +x " + dir + "/askpass");
    const auto& ssh = instance.at("ssh").as_object();
    std::string port = std::to_string(ssh.at("port").as_int64());
    std::ofstream(dir + "/kh") << "[127.0.0.1]:" << port << " " << std::string(ssh.at("host_key").as_string()) << "\n";
    return shell("SSH_ASKPASS=" + dir + "/askpass SSH_ASKPASS_REQUIRE=force DISPLAY=none timeout 20 setsid ssh -p " + port +
                 " -o UserKnownHostsFile=" + dir + "/kh -o StrictHostKeyChecking=yes -o PubkeyAuthentication=no "
                 "-o PreferredAuthentications=password,keyboard-interactive -o NumberOfPasswordPrompts=1 root@127.0.0.1 "
                 "echo logged-in 2>/dev/null");
  };
  EXPECT_EQ(login(with_pw), "logged-in\n");
  EXPECT_EQ(login(no_pw), "");
  std::string inspect = docker_api("GET", "/containers/gpucloud-" + daemon_->installation_id() + "-" +
                                              std::string(with_pw.at("id").as_string()) + "/json");
  ASSERT_NE(inspect.find("\"Id\""), std::string::npos);
  EXPECT_EQ(inspect.find(password), std::string::npos);
  EXPECT_EQ(inspect.find("$6$"), std::string::npos) << "not even the hash is in the container's config";
  EXPECT_EQ(with_pw.as_object().count("password"), 0u);
}

TEST(SshKeysTest, InjectedOptionsNewlinesAndDsaAreRefused) {
  TestDaemon daemon;
  daemon.start();
  std::string user = daemon.register_and_login("bob");
  const std::string good = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKAntDtSWmyFqyZq2NPt45hLtG6cDJP3d5EerbbdOl3H me@laptop";
  auto ok = daemon.post("/api/v1/ssh-keys", {{"name", "good"}, {"public_key", good}}, user);
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_TRUE(ok.json().at("fingerprint").as_string().starts_with("SHA256:"));
  for (const std::string& bad : {"command=\"/bin/sh\" " + good, "from=\"*\" " + good, good + "\nssh-ed25519 AAAA evil",
                                 std::string("ssh-dss AAAAB3NzaC1kc3MAAACBAP me"), std::string("ssh-ed25519 !!notbase64!!"),
                                 std::string("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIKAntDtSWmyFqyZq2NPt45hLtG6cDJP3d5EerbbdOl3H")}) {
    auto r = daemon.post("/api/v1/ssh-keys", {{"name", "bad"}, {"public_key", bad}}, user);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.code(), "invalid_argument") << bad;
  }
  auto list = daemon.get("/api/v1/ssh-keys", user).json();
  ASSERT_EQ(list.at("items").as_array().size(), 1u);
  EXPECT_EQ(list.at("items").as_array()[0].at("public_key").as_string(), good);
  std::string other = daemon.register_and_login("carol");
  EXPECT_EQ(daemon.request("DELETE", "/api/v1/ssh-keys/good", "", other).status, 404);
  EXPECT_EQ(daemon.request("DELETE", "/api/v1/ssh-keys/good", "", user).status, 204);
}

TEST_F(InstancesTest, DOCKER_ROOT_TwoUsersRacingForTheLastGpuExactlyOneWins) {
  start(1);
  std::string bob = daemon_->register_and_login("bob");
  daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, bob);
  HttpResult a, b;
  std::thread ta([&] { a = create("race", user_); });
  std::thread tb([&] { b = create("race", bob); });
  ta.join();
  tb.join();
  EXPECT_EQ((a.status == 202) + (b.status == 202), 1) << a.body << "\n" << b.body;
  const HttpResult& loser = a.status == 202 ? b : a;
  EXPECT_EQ(loser.status, 409);
  EXPECT_EQ(loser.code(), "no_capacity");
  EXPECT_NE(loser.json().at("detail").as_string().find("RTX 4090"), std::string::npos);
  std::string winner = a.status == 202 ? user_ : bob;
  EXPECT_EQ(daemon_->wait_for_state("race", "running", winner).at("state").as_string(), "running");
}

TEST_F(InstancesTest, DOCKER_ROOT_StopFreesTheGpuThenStartHasNoCapacityButNoGpuStartWorks) {
  start(1);
  ASSERT_EQ(create("first", user_).status, 202);
  ASSERT_EQ(daemon_->wait_for_state("first", "running", user_).at("state").as_string(), "running");
  ASSERT_EQ(daemon_->post("/api/v1/instances/first/stop", json::object{}, user_).status, 202);
  ASSERT_EQ(daemon_->wait_for_state("first", "stopped", user_).at("state").as_string(), "stopped");
  std::string bob = daemon_->register_and_login("bob");
  daemon_->post("/api/v1/ssh-keys", {{"name", "laptop"}, {"public_key", key_.public_key}}, bob);
  ASSERT_EQ(create("second", bob).status, 202) << "the stopped instance's GPU is free for someone else";
  ASSERT_EQ(daemon_->wait_for_state("second", "running", bob).at("state").as_string(), "running");
  auto refused = daemon_->post("/api/v1/instances/first/start", json::object{}, user_);
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(refused.code(), "no_capacity");
  EXPECT_NE(refused.json().at("detail").as_string().find("no_gpu"), std::string::npos) << refused.body;
  EXPECT_EQ(daemon_->get("/api/v1/instances/first", user_).json().at("state").as_string(), "stopped");
  auto no_gpu = daemon_->post("/api/v1/instances/first/start", json::object{{"no_gpu", true}}, user_);
  ASSERT_EQ(no_gpu.status, 202) << no_gpu.body;
  auto running = daemon_->wait_for_state("first", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running");
  EXPECT_TRUE(running.at("no_gpu").as_bool());
  EXPECT_TRUE(running.at("gpus").as_array().empty());
  EXPECT_EQ(running.at("billing").at("price_per_hour").as_int64(), 10);
}

TEST_F(InstancesTest, DOCKER_ROOT_OthersGet404WrongStatesConflictRepeatsAre202AndCreateIsIdempotent) {
  start(2);
  std::map<std::string, std::string> key{{"Idempotency-Key", "create-once"}};
  std::string body = R"({"name":"mine","gpu_model":"RTX 4090","gpu_count":1,"ssh_keys":["laptop"]})";
  auto first = daemon_->request("POST", "/api/v1/instances", body, user_, key);
  ASSERT_EQ(first.status, 202) << first.body;
  auto replay = daemon_->request("POST", "/api/v1/instances", body, user_, key);
  EXPECT_EQ(replay.status, 202);
  EXPECT_EQ(replay.json().at("id"), first.json().at("id"));
  EXPECT_EQ(daemon_->get("/api/v1/instances", user_).json().at("items").as_array().size(), 1u);
  ASSERT_EQ(daemon_->wait_for_state("mine", "running", user_).at("state").as_string(), "running");

  std::string bob = daemon_->register_and_login("bob");
  std::string id(first.json().at("id").as_string());
  for (const std::string& target : {id, std::string("mine")}) {
    EXPECT_EQ(daemon_->get("/api/v1/instances/" + target, bob).status, 404);
    for (const char* action : {"stop", "start", "restart"})
      EXPECT_EQ(daemon_->post("/api/v1/instances/" + target + "/" + action, json::object{}, bob).status, 404) << action;
    EXPECT_EQ(daemon_->request("DELETE", "/api/v1/instances/" + target, "", bob).status, 404);
    EXPECT_EQ(daemon_->request("PATCH", "/api/v1/instances/" + target, R"({"name":"stolen"})", bob).status, 404);
  }
  EXPECT_TRUE(daemon_->get("/api/v1/instances", bob).json().at("items").as_array().empty());

  auto start_running = daemon_->post("/api/v1/instances/mine/start", json::object{}, user_);
  EXPECT_EQ(start_running.status, 409);
  EXPECT_EQ(start_running.code(), "conflict");
  EXPECT_NE(start_running.json().at("detail").as_string().find("running"), std::string::npos);
  EXPECT_EQ(daemon_->post("/api/v1/instances/mine/stop", json::object{}, user_).status, 202);
  // A repeat while the stop is under way answers 202 (the engine's stop takes far longer than
  // one more request; the state-machine tests cover the ordering without an engine).
  auto again = daemon_->post("/api/v1/instances/mine/stop", json::object{}, user_);
  EXPECT_EQ(again.status, 202) << again.body;
  daemon_->wait_for_state("mine", "stopped", user_);
  EXPECT_EQ(daemon_->post("/api/v1/instances/mine/stop", json::object{}, user_).status, 409);
  auto dup = create("mine", user_);
  EXPECT_EQ(dup.status, 409) << "names are unique per owner";
  EXPECT_EQ(create("Bad_Name", user_).status, 400);
  EXPECT_EQ(create("x", user_, {{"gpu_model", "H100"}}).code(), "invalid_argument");
  EXPECT_EQ(create("x", user_, {{"ports", json::array{22, 70000}}}).code(), "invalid_argument");
}

// From inside an instance, nothing on the host answers (its gateway is the host; a listener
// of this test on the host's 0.0.0.0 is what must stay closed), while a host out on the
// network (a client namespace) does: the daemon's table guards its bridge. A TCP handshake
// is what counts (the instance's own python3, 2 s).
TEST_F(InstancesTest, DOCKER_ROOT_AnInstanceReachesNoHostServiceButTheNetwork) {
  start(1);
  std::string error;
  auto remote = ClientHost::make(subnet_prefix(), 0, &error);
  GPUCLOUD_NEED("root", remote != nullptr, "cannot make a network namespace here: " + error);
  const int port = port_block();
  auto listen_on = [&](const std::string& ns, const std::string& ip) {
    const int fd = socket_in(ns, SOCK_STREAM);
    EXPECT_GE(fd, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(fd, 16), 0);
    return fd;
  };
  const int host_fd = listen_on("", "0.0.0.0");
  const int remote_fd = listen_on(remote->netns(), remote->ip());
  ASSERT_EQ(create("guarded", user_, {{"gpu_count", 0}, {"gpu_model", nullptr}}).status, 202);
  auto running = daemon_->wait_for_state("guarded", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running") << running;
  auto connects = [&](const std::string& ip) {
    int rc = -1;
    // (ssh_run single-quotes the command: no single quote inside.)
    const std::string out = ssh_run(running, key_,
                                    "python3 -c \"import socket; socket.create_connection((\\\"" + ip + "\\\", " +
                                        std::to_string(port) + "), 2); print(24680)\" 2>&1",
                                    &rc);
    return out.find("24680") != std::string::npos;
  };
  int rc = -1;
  const std::string route = ssh_run(running, key_, "ip route show default", &rc);  // "default via GW dev eth0"
  ASSERT_EQ(rc, 0);
  const auto via = route.find("via ");
  ASSERT_NE(via, std::string::npos) << route;
  const std::string gateway = route.substr(via + 4, route.find(' ', via + 4) - via - 4);
  EXPECT_TRUE(connects(remote->ip())) << "the control: the instance reaches a host on the network";
  EXPECT_FALSE(connects(gateway)) << "the host's listener answered through the gateway " << gateway;
  EXPECT_FALSE(connects(remote->host_ip())) << "the host's listener answered on another of its addresses";
  ::close(host_fd);
  ::close(remote_fd);
}

// Revoking a key reaches the instances that run with it: deleted, it no longer logs in to
// them within 2 s (the control plane sends the key set again, the agent installs it live);
// the other key keeps working, and the instance was not restarted.
TEST_F(InstancesTest, DOCKER_ROOT_ADeletedKeyNoLongerLogsInToRunningInstancesWithin2s) {
  start(1);
  KeyPair other = make_key();
  auto added = daemon_->post("/api/v1/ssh-keys", {{"name", "other"}, {"public_key", other.public_key}}, user_);
  ASSERT_EQ(added.status, 201) << added.body;
  const std::string other_id(added.json().at("id").as_string());
  ASSERT_EQ(create("keys", user_, {{"gpu_count", 0}, {"gpu_model", nullptr}, {"ssh_keys", json::array{"laptop", "other"}}}).status, 202);
  auto running = daemon_->wait_for_state("keys", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running") << running;
  int rc = -1;
  // The control: both keys log in before the delete.
  EXPECT_EQ(ssh_run(running, other, "echo in", &rc), "in\n");
  ASSERT_EQ(rc, 0);
  const std::string container = "gpucloud-" + daemon_->installation_id() + "-" + std::string(running.at("id").as_string());
  auto started_at = [&] {
    auto inspected = json::parse(docker_api("GET", "/containers/" + container + "/json"));
    return std::string(inspected.at("State").at("StartedAt").as_string());
  };
  const std::string boot = started_at();

  auto deleted = daemon_->request("DELETE", "/api/v1/ssh-keys/" + other_id, "", user_);
  ASSERT_EQ(deleted.status, 204) << deleted.body;
  const auto at = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_until(
      [&] {
        int code = -1;
        ssh_run(running, other, "true", &code);
        return code != 0;
      },
      std::chrono::seconds(2), "the deleted key to stop logging in", std::chrono::milliseconds(50)))
      << "still logs in "
      << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - at).count() << " ms later";
  EXPECT_EQ(ssh_run(running, key_, "echo in", &rc), "in\n");
  EXPECT_EQ(rc, 0) << "the remaining key still logs in";
  EXPECT_EQ(started_at(), boot) << "the same boot, not a restart";
  EXPECT_EQ(ssh_run(running, key_, "grep -c ssh- /root/.ssh/authorized_keys", &rc), "1\n");
  shell("rm -rf '" + other.dir + "'");
}

// A run that ends by itself ends at the engine's FinishedAt, exactly (real clock): killed
// ~3 s after `running`, the instance records run_seconds ~3 and stopped_at is FinishedAt,
// however long the reconcile pass that noticed it took.
TEST_F(InstancesTest, DOCKER_ROOT_ARunThatEndsByItselfEndsAtTheEnginesFinishedAt) {
  start(1);
  ASSERT_EQ(create("short", user_, {{"gpu_count", 0}, {"gpu_model", nullptr}}).status, 202);
  auto running = daemon_->wait_for_state("short", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running") << running;
  const auto started = parse_rfc3339(std::string(running.at("started_at").as_string()));
  ASSERT_TRUE(started);
  const std::string container = "gpucloud-" + daemon_->installation_id() + "-" + std::string(running.at("id").as_string());
  // The run's length is what is measured: wait until 3 s have passed on the platform's clock.
  ASSERT_TRUE(wait_until([&] { return system_now() - *started >= std::chrono::seconds(3); }, std::chrono::seconds(10),
                         "3 s of run", std::chrono::milliseconds(20)));
  docker_api("POST", "/containers/" + container + "/kill?signal=KILL");
  auto stopped = daemon_->wait_for_state("short", "stopped", user_, std::chrono::seconds(30));
  ASSERT_EQ(stopped.at("state").as_string(), "stopped") << stopped;
  const auto inspected = json::parse(docker_api("GET", "/containers/" + container + "/json"));
  const auto finished = parse_rfc3339(std::string(inspected.at("State").at("FinishedAt").as_string()));
  ASSERT_TRUE(finished) << inspected;
  const auto stopped_at = parse_rfc3339(std::string(stopped.at("stopped_at").as_string()));
  ASSERT_TRUE(stopped_at) << stopped;
  EXPECT_LE(std::chrono::abs(*stopped_at - *finished), std::chrono::milliseconds(1))
      << "stopped_at " << stopped.at("stopped_at") << ", the engine's FinishedAt "
      << inspected.at("State").at("FinishedAt");
  const auto expected = std::chrono::duration_cast<std::chrono::seconds>(*finished - *started).count();
  EXPECT_GE(expected, 3);
  EXPECT_EQ(stopped.at("run_seconds").as_int64(), expected) << stopped;
}

TEST_F(InstancesTest, DOCKER_ROOT_AContainerThatExitsBecomesStoppedAndUnknownContainersAreStoppedNotDeleted) {
  start(2);
  ASSERT_EQ(create("dies", user_).status, 202);
  auto running = daemon_->wait_for_state("dies", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running");
  // A container gpucloud did not make, and one carrying this installation's label but no record.
  ResourceLease bare;  // this test's own containers, removed whatever happens
  struct Clean {
    ResourceLease& lease;
    ~Clean() { lease.clean(); }
  } clean{bare};
  std::string install = daemon_->installation_id();
  std::string foreign = "gpucloud-it-foreign-" + random_suffix(), foreign_id;
  ASSERT_TRUE(run_bare_container(bare, foreign, json::object{}, &foreign_id));
  std::string stray = "gpucloud-it-stray-" + random_suffix(), stray_id;
  ASSERT_TRUE(run_bare_container(bare, stray, json::object{{"gpucloud.installation", install}}, &stray_id));

  int rc = -1;
  const auto killed = std::chrono::steady_clock::now();
  ssh_run(running, key_, "kill 1", &rc);
  auto stopped = daemon_->wait_for_state("dies", "stopped", user_, std::chrono::seconds(30));
  ASSERT_EQ(stopped.at("state").as_string(), "stopped") << json::serialize(stopped);
  // The engine's die event brings the reconcile pass forward: not up to its 10 s period later.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(5));
  EXPECT_FALSE(stopped.at("state_reason").is_null());
  EXPECT_NE(std::string(stopped.at("state_reason").as_string()).find("exited"), std::string::npos);
  // Its GPU is free again.
  EXPECT_EQ(reserved_gpus(*daemon_), 0);

  // The stray is stopped beside the passes (`sleep` ignores SIGTERM: the 10 s grace, then KILL).
  EXPECT_TRUE(wait_until(
      [&] { return docker_api("GET", "/containers/" + stray + "/json").find("\"Running\":false") != std::string::npos; },
      std::chrono::seconds(30), "the unknown container to be stopped"));
  EXPECT_NE(docker_api("GET", "/containers/" + foreign + "/json").find("\"Running\":true"), std::string::npos)
      << "a container of no installation is never touched; its state: " << container_state(foreign);
  // The operator is told, once (later reconciles find it stopped and stay quiet); users are not.
  // A second stray, made now, is stopped by a later reconcile pass: once it is reported, that
  // pass has run too and must not have reported the first one again.
  std::string admin = daemon_->admin_token();
  auto unknown_reports = [&](const std::string& container) {
    auto reports = daemon_->get("/api/v1/events?limit=1000", admin).json();
    int n = 0;
    for (const auto& e : reports.at("items").as_array())
      if (e.at("type").as_string() == "host.unknown_container" &&
          e.at("data").at("container_id").as_string() == container)
        ++n;
    return n;
  };
  std::string later = "gpucloud-it-stray-" + random_suffix(), later_id;
  ASSERT_TRUE(run_bare_container(bare, later, json::object{{"gpucloud.installation", install}}, &later_id));
  EXPECT_TRUE(wait_until([&] { return unknown_reports(later_id) == 1; }, std::chrono::seconds(30),
                         "a later reconcile pass to report the second stray container"));
  auto reports = daemon_->get("/api/v1/events?limit=1000", admin).json();
  int registered = 0, unknown = 0;
  ASSERT_FALSE(reports.at("items").as_array().empty());
  for (const auto& e : reports.at("items").as_array()) {
    if (e.at("type").as_string() == "host.unknown_container") {
      ++unknown;
      EXPECT_TRUE(e.at("user").is_null());
      EXPECT_NE(std::string(e.at("message").as_string()).find("stopped, not deleted"), std::string::npos) << e;
    }
    if (e.at("type").as_string() == "host.registered") ++registered;
  }
  EXPECT_EQ(unknown_reports(stray_id), 1) << "reported once, not again by the later pass";
  EXPECT_EQ(unknown, 2);
  EXPECT_EQ(registered, 1) << "one host, registered once at start";
  auto users_view = daemon_->get("/api/v1/events?limit=1000", user_).json();
  ASSERT_FALSE(users_view.at("items").as_array().empty()) << "the user sees their instance's events";
  for (const auto& e : users_view.at("items").as_array()) EXPECT_TRUE(e.at("type").as_string().starts_with("instance.")) << e;
}

TEST_F(InstancesTest, DOCKER_ROOT_KillNineAfterTheReservationCommitThenRestartConverges) {
  start(1);
  daemon_->stop();
  // Restart the same daemon with the fault armed: it dies right after committing the create.
  daemon_->start("create.after_reservation_commit");
  json::object body{{"name", "crashy"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"ssh_keys", json::array{"laptop"}}};
  try {
    daemon_->post("/api/v1/instances", body, user_);
  } catch (...) {
    // the connection dies with the daemon
  }
  ASSERT_TRUE(daemon_->killed_at("create.after_reservation_commit"));
  daemon_->start();
  auto running = daemon_->wait_for_state("crashy", "running", user_, std::chrono::seconds(10));
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  EXPECT_EQ(reserved_gpus(*daemon_), 1) << "one GPU, held once";
  int rc = -1;
  ssh_run(running, key_, "true", &rc);
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace gpucloud::testing

namespace gpucloud::testing {
namespace {

// kill -9 at each named step, restart, and within 10 s the instance is in a true state with
// its GPU held exactly as that state says and no container left over.
struct InstanceCrashCase {
  const char* fault;
  const char* action;  // what triggers the step
  const char* expected_state;
};

class InstanceCrashTest : public InstancesTest, public ::testing::WithParamInterface<InstanceCrashCase> {};

TEST_P(InstanceCrashTest, DOCKER_ROOT_KillNineAtTheStepThenRestartConverges) {
  const InstanceCrashCase& c = GetParam();
  start(1);
  std::string action = c.action;
  if (action == "rebuild") {
    // Renamed while stopped, so the start rebuilds the container (the crash comes mid-way).
    ASSERT_EQ(create("before", user_).status, 202);
    ASSERT_EQ(daemon_->wait_for_state("before", "running", user_).at("state").as_string(), "running");
    shell("docker exec gpucloud-" + daemon_->installation_id() + "-" +
          std::string(daemon_->get("/api/v1/instances/before", user_).json().at("id").as_string()) +
          " sh -c 'echo kept > /root/disk-file'");
    daemon_->post("/api/v1/instances/before/stop", json::object{}, user_);
    ASSERT_EQ(daemon_->wait_for_state("before", "stopped", user_).at("state").as_string(), "stopped");
    ASSERT_EQ(daemon_->request("PATCH", "/api/v1/instances/before", R"({"name":"victim"})", user_).status, 200);
  } else if (action != "create") {
    ASSERT_EQ(create("victim", user_).status, 202);
    ASSERT_EQ(daemon_->wait_for_state("victim", "running", user_).at("state").as_string(), "running");
    if (action == "start") {
      daemon_->post("/api/v1/instances/victim/stop", json::object{}, user_);
      ASSERT_EQ(daemon_->wait_for_state("victim", "stopped", user_).at("state").as_string(), "stopped");
    }
  }
  daemon_->stop();
  daemon_->start(c.fault);
  try {
    if (action == "create") create("victim", user_);
    else if (action == "release") daemon_->request("DELETE", "/api/v1/instances/victim", "", user_);
    else if (action == "rebuild") daemon_->post("/api/v1/instances/victim/start", json::object{}, user_);
    else daemon_->post("/api/v1/instances/victim/" + action, json::object{}, user_);
  } catch (...) {
  }
  // The point fires once the step before it is done; the daemon must die there and say so.
  ASSERT_TRUE(daemon_->killed_at(c.fault));
  daemon_->start();
  auto settled = daemon_->wait_for_state("victim", c.expected_state, user_, std::chrono::seconds(10));
  ASSERT_EQ(settled.at("state").as_string(), c.expected_state) << json::serialize(settled);
  const std::string expected = c.expected_state;
  const std::string id(settled.at("id").as_string());
  const std::string install = daemon_->installation_id();
  EXPECT_EQ(reserved_gpus(*daemon_), expected == "running" ? 1 : 0) << "no leaked or double-booked GPU";
  // Instance containers of this installation (network holders aside): one for a live
  // instance, none once released.
  std::string list = docker_api("GET", "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22gpucloud.installation%3D" +
                                           install + "%22%2C%22gpucloud.instance%22%5D%7D");
  std::size_t containers = 0;
  for (std::size_t pos = 0; (pos = list.find("\"Id\"", pos)) != std::string::npos; ++pos) ++containers;
  EXPECT_EQ(containers, expected == "released" ? 0u : 1u) << list;
  // Host ports: held while the instance lives (the SSH port), freed once it is released.
  std::string held = shell("sqlite3 '" + daemon_->data_dir() + "/gpucloud.db' \"SELECT host_port FROM instance_ports WHERE instance_id = '" +
                           id + "'\"");
  std::string table = shell("nft list table ip gpucloud-" + install + " 2>/dev/null");
  if (expected == "released") {
    EXPECT_EQ(held, "") << "its ports are freed";
  } else {
    const std::string ssh_port = std::to_string(settled.at("ssh").at("port").as_int64());
    EXPECT_EQ(held, ssh_port + "\n") << "exactly its SSH port is held";
    // The firewall publishes the port exactly when the instance runs.
    if (expected == "running") {
      EXPECT_NE(table.find("tcp . " + ssh_port + " comment"), std::string::npos) << table;
      int rc = -1;
      ssh_run(settled, key_, "true", &rc);
      EXPECT_EQ(rc, 0) << "it answers SSH on its published port";
    } else {
      EXPECT_EQ(table.find("tcp . " + ssh_port + " comment"), std::string::npos) << table;
    }
  }
  if (expected == "released") {
    // The table's rules are fixed; what is published lives in its maps and sets, so none of
    // them may keep an element (a port, an address, a source).
    EXPECT_EQ(table.find("elements"), std::string::npos) << "nothing stays published: " << table;
  }
  // Events (oldest first): created once, no transition recorded twice in a row (a replayed
  // commit), and the newest one says the state it settled in.
  auto events = daemon_->get("/api/v1/events?limit=1000&resource=" + id, user_).json();
  const auto& items = events.at("items").as_array();
  ASSERT_FALSE(items.empty()) << json::serialize(events);
  int created = 0;
  std::string previous;
  for (const auto& e : items) {
    std::string type(e.at("type").as_string());
    created += type == "instance.created";
    EXPECT_NE(type, previous) << "recorded twice: " << json::serialize(events);
    previous = type;
  }
  EXPECT_EQ(created, 1) << json::serialize(events);
  EXPECT_EQ(items.back().at("type").as_string(), "instance." + expected) << json::serialize(events);
  if (action == "rebuild") {
    std::string container = "gpucloud-" + daemon_->installation_id() + "-" + std::string(settled.at("id").as_string());
    EXPECT_EQ(shell("docker exec " + container + " sh -c 'hostname; cat /root/disk-file'"), "victim\nkept\n");
    // The crashed attempt committed r1; the restarted one found the old container and made r2.
    EXPECT_NE(docker_api("GET", "/images/json?filters=%7B%22label%22%3A%5B%22gpucloud.installation%3D" + daemon_->installation_id() +
                                    "%22%5D%7D")
                  .find(":r2\""),
              std::string::npos);
    ASSERT_EQ(daemon_->request("DELETE", "/api/v1/instances/victim", "", user_).status, 202);
    ASSERT_EQ(daemon_->wait_for_state("victim", "released", user_).at("state").as_string(), "released");
    EXPECT_EQ(docker_api("GET", "/images/json?filters=%7B%22label%22%3A%5B%22gpucloud.installation%3D" + daemon_->installation_id() +
                                    "%22%5D%7D"),
              "[]\n")
        << "release removes every system image, the crashed rebuild's too";
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, InstanceCrashTest,
                         ::testing::Values(InstanceCrashCase{"create.after_engine", "create", "running"},
                                           InstanceCrashCase{"agent.ensure.after_record_saved", "create", "running"},
                                           InstanceCrashCase{"agent.ensure.after_container_create", "create", "running"},
                                           InstanceCrashCase{"agent.ensure.before_firewall_apply", "create", "running"},
                                           InstanceCrashCase{"agent.ensure.after_firewall_apply", "create", "running"},
                                           InstanceCrashCase{"stop.before_state_commit", "stop", "stopped"},
                                           InstanceCrashCase{"start.after_engine", "start", "running"},
                                           InstanceCrashCase{"rebuild.after_commit", "rebuild", "running"},
                                           InstanceCrashCase{"release.before_state_commit", "release", "released"}),
                         [](const auto& info) {
                           std::string name = info.param.fault;
                           for (char& ch : name) if (ch == '.') ch = '_';
                           return name;
                         });

// SERIAL_: it restarts dockerd, so no other test may run meanwhile (tests/ctest_properties.cmake).
TEST_F(InstancesTest, DOCKER_ROOT_SERIAL_DockerdRestartKeepsInstancesRunning) {
  GPUCLOUD_NEED("dockerd-restart", shell("test -f /var/run/gpucloud/dockerd.pid && echo ours") == "ours\n",
                "dockerd was not started by scripts/start-dockerd.sh; not restarting someone else's engine");
  start(1);
  ASSERT_EQ(create("survivor", user_).status, 202);
  auto running = daemon_->wait_for_state("survivor", "running", user_);
  ASSERT_EQ(running.at("state").as_string(), "running");
  shell(std::string("sh ") + GPUCLOUD_SOURCE_DIR + "/scripts/stop-dockerd.sh >/dev/null 2>&1; sh " + GPUCLOUD_SOURCE_DIR +
        "/scripts/start-dockerd.sh >/dev/null 2>&1");
  // A reconcile pass after the restart: it stops a labelled container that has no record, so
  // once this one is stopped a pass has looked at the survivor too.
  ResourceLease bare;
  struct Clean {
    ResourceLease& lease;
    ~Clean() { lease.clean(); }
  } clean{bare};
  std::string probe = "gpucloud-it-probe-" + random_suffix(), probe_id;
  ASSERT_TRUE(run_bare_container(bare, probe, json::object{{"gpucloud.installation", daemon_->installation_id()}}, &probe_id));
  EXPECT_TRUE(wait_until([&] { return docker_api("GET", "/containers/" + probe + "/json").find("\"Running\":false") != std::string::npos; },
                         std::chrono::seconds(30), "a reconcile pass to stop the probe container"));
  docker_api("DELETE", "/containers/" + probe + "?force=1");
  EXPECT_EQ(daemon_->get("/api/v1/instances/survivor", user_).json().at("state").as_string(), "running");
  int rc = -1;
  ssh_run(running, key_, "true", &rc);
  EXPECT_EQ(rc, 0) << "the container (and its published port) survived the engine restart";
}

TEST_F(InstancesTest, DOCKER_ROOT_CliSshPinsTheHostKeyAndFailsLoudlyOnAMismatch) {
  start(1);
  std::string home = daemon_->dir() + "/xdg";
  std::map<std::string, std::string> env{{"XDG_CONFIG_HOME", home}, {"HOME", home},
                                         {"GPUCLOUD_ENDPOINT", daemon_->endpoint()}, {"GPUCLOUD_TOKEN", user_}};
  auto created = run_cli({"create", "cli-vm", "--gpu", "RTX 4090:1", "--image", "debian-12-base", "--key", "laptop"}, env);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  auto ok = run_cli({"ssh", "cli-vm", "--identity", key_.private_key, "--", "echo", "via-cli"}, env);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out, "via-cli\n");
  auto config = run_cli({"ssh-config", "cli-vm"}, env);
  EXPECT_NE(config.out.find("StrictHostKeyChecking yes"), std::string::npos) << config.out;
  EXPECT_EQ(config.out.find("StrictHostKeyChecking no"), std::string::npos);
  // Give the running sshd a new host key behind the platform's back (the agent keeps it in
  // the instance's config directory; sshd reloads on SIGHUP, which docker-init forwards):
  // the key the platform pinned no longer matches.
  auto instance = daemon_->get("/api/v1/instances/cli-vm", user_).json();
  const std::string host_key = daemon_->data_dir() + "/agent/instances/" +
                               std::string(instance.at("id").as_string()) + "/config/ssh_host_ed25519_key";
  ASSERT_EQ(shell("rm -f " + host_key + " " + host_key + ".pub && ssh-keygen -q -t ed25519 -N '' -f " + host_key +
                  " >/dev/null && echo made"),
            "made\n");
  ssh_run(instance, key_, "kill -HUP 1");
  CliResult refused;
  EXPECT_TRUE(wait_until(
      [&] {
        refused = run_cli({"ssh", "cli-vm", "--identity", key_.private_key, "--", "true"}, env);
        return refused.exit_code == 255;
      },
      std::chrono::seconds(15), "sshd to serve its new host key", std::chrono::milliseconds(200)))
      << refused.out << refused.err;
  EXPECT_NE(refused.err.find("IDENTIFICATION HAS CHANGED"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace gpucloud::testing
