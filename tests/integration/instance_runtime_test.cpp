// The agent's instance runtime (src/agent/instance_runtime.h) against a real Docker Engine and
// the real nftables: instance.ensure/remove/status/stop_unknown/exec run through LocalAgent,
// as the control plane will send them. Tests named DOCKER_ROOT_* skip themselves with a
// message when not root, when no engine answers on /var/run/docker.sock, when the base image
// or nft is missing (scripts/start-dockerd.sh, scripts/build-base-image.sh).
//
// Each test has its own random installation id (so its own network, labels and container
// names), state directory and nftables table "gpucloud-rt-<random>"; TearDown removes the
// containers with that installation's label, the network, the table and the directory.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/agent_protocol.h"
#include "agent/disk_runtime.h"
#include "agent/disks/disk_tools.h"
#include "agent/firewall/nftables.h"
#include "agent/instance_runtime.h"
#include "agent/local_agent.h"
#include "agent/runtime/docker_engine_driver.h"
#include "config/config.h"
#include "support/capabilities.h"
#include "support/test_resources.h"

#ifndef GPUCLOUD_SOURCE_DIR
#define GPUCLOUD_SOURCE_DIR "."
#endif

namespace {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using gpucloud::agent::Command;
using gpucloud::agent::CommandOutcome;
using gpucloud::agent::ContainerSpec;
using gpucloud::agent::DiskRuntime;
using gpucloud::agent::DockerEngineDriver;
using gpucloud::agent::InstanceRuntime;
using gpucloud::agent::LocalAgent;
using Clock = std::chrono::steady_clock;

template <class T>
net::awaitable<std::optional<T>> optional_result(net::awaitable<T> work) {
  co_return co_await std::move(work);
}

// Runs one coroutine to completion on `ioc`.
template <class T>
T run(net::io_context& ioc, net::awaitable<T> work, std::chrono::milliseconds limit = 120s) {
  auto future = net::co_spawn(ioc, optional_result(std::move(work)), net::use_future);
  const auto deadline = Clock::now() + limit;
  ioc.restart();
  while (future.wait_for(0s) != std::future_status::ready) {
    ioc.run_one_for(50ms);
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "operation did not finish within " << limit.count() << " ms";
      break;
    }
  }
  while (future.wait_for(0s) != std::future_status::ready) ioc.run_one_for(50ms);
  return *future.get();
}

std::string random_hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(digits[rng() % 16]);
  return out;
}

// A host port no other test process uses (a block of the cross-process allocator).
int random_port() { return gpucloud::testing::port_block(); }

std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The engine's API over its socket (curl): the answer's body.
std::string gpucloud_docker(const std::string& method, const std::string& path, const std::string& body = "");

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kSocket = [] {
  const char* env = std::getenv("GPUCLOUD_TEST_DOCKER_SOCK");
  return std::string(env && *env ? env : "/var/run/docker.sock");
}();
std::string test_image() {
  const char* env = std::getenv("GPUCLOUD_TEST_IMAGE");
  return env && *env ? env : "gpucloud/base:bookworm-2";
}
const std::string kInitPath = GPUCLOUD_SOURCE_DIR "/scripts/instance-init/gpucloud-init.sh";
// SHA-512 crypt(3) of "pw123".
const std::string kPasswordHash =
    "$6$Uk5x.GhIiNQsY3Is$geNzFzpgLcJ0lsbKKnbwYFjxQsxEh/0lBVf.t4ij15AF.zQxf6IuWUpPdXKlvg5dB7oJ6JaTmGL8Mm3fMLtVt1";

std::string gpucloud_docker(const std::string& method, const std::string& path, const std::string& body) {
  std::string cmd = "curl -s --max-time 60 --unix-socket " + kSocket + " -X " + method + " 'http://x/v1.41" + path + "'";
  if (!body.empty()) cmd += " -H 'Content-Type: application/json' --data-binary @- <<'GPUCLOUD_EOF'\n" + body + "\nGPUCLOUD_EOF";
  return shell(cmd).second;
}

DockerEngineDriver::Options driver_options() {
  DockerEngineDriver::Options o;
  o.engine.socket_path = kSocket;
  o.init_path = kInitPath;
  return o;
}

gpucloud::config::Config one_host_config() {
  gpucloud::config::Config config;
  gpucloud::config::Host host;
  host.name = "test-host";
  host.zone = "zone-a";
  host.cpu = 2;
  host.memory_gib = 4;
  host.simulated_gpus = {{"RTX 4090", 24, 1}};
  config.hosts = {host};
  return config;
}

// ---------------------------------------------------------------------------------------
// No engine needed: bad input is refused before anything is touched.
// ---------------------------------------------------------------------------------------

TEST(InstanceRuntimeInput, RefusesBadDesiredState) {
  net::io_context ioc;
  const auto dir = fs::temp_directory_path() / ("gpucloud-rt-input-" + random_hex(8));
  auto driver = std::make_unique<DockerEngineDriver>(ioc.get_executor(), driver_options());
  InstanceRuntime runtime(ioc.get_executor(), "input", dir.string(), std::move(driver), kInitPath,
                          "gpucloud-rt-input");
  LocalAgent agent(ioc.get_executor(), one_host_config());
  runtime.register_handlers(agent);
  const json::object good{{"instance_id", "i1"}, {"name", "box"},   {"state", "running"},
                          {"image", "img"},      {"cpu", 1},        {"memory_gib", 1}};
  auto check = [&](json::object desired, const std::string& kind, const std::string& mention) {
    Command c{"c-" + random_hex(6), "test-host", kind, std::move(desired)};
    auto outcome = run(ioc, agent.execute(c));
    ASSERT_TRUE(outcome);
    EXPECT_FALSE(outcome->ok);
    EXPECT_EQ(outcome->error_code, "invalid_argument") << outcome->error_detail;
    EXPECT_NE(outcome->error_detail.find(mention), std::string::npos) << outcome->error_detail;
  };
  auto with = [&](const char* key, json::value v) {
    json::object d = good;
    d[key] = std::move(v);
    return d;
  };
  check(with("instance_id", "../etc"), "instance.ensure", "instance_id");
  check(with("state", "paused"), "instance.ensure", "state");
  check(with("cpu", "two"), "instance.ensure", "cpu");
  check(with("memory_gib", 0), "instance.ensure", "memory_gib");
  check(with("name", "-bad-"), "instance.ensure", "name");
  check(with("password_hash", "plain\nsecond"), "instance.ensure", "password_hash");
  check(with("ports", json::array{json::object{{"container_port", 22}, {"host_port", 70000}}}),
        "instance.ensure", "host_port");
  check(with("ports", json::array{json::object{
                          {"container_port", 22}, {"host_port", 30001}, {"allowed", json::array{"10.0.0.1/8"}}}}),
        "instance.ensure", "allowed");
  check(with("ports", json::array{json::object{{"container_port", 22}, {"host_port", 30001}},
                                  json::object{{"container_port", 80}, {"host_port", 30001}}}),
        "instance.ensure", "30001");
  check(json::object{}, "instance.remove", "instance_id");
  check(json::object{{"instance_id", "i1"}, {"argv", json::array{}}}, "instance.exec", "argv");
  check(json::object{}, "instance.stop_unknown", "container_id");
  EXPECT_FALSE(fs::exists(dir / "instances" / "i1"));
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

// ---------------------------------------------------------------------------------------
// Against the engine and the kernel's nftables
// ---------------------------------------------------------------------------------------

class InstanceRuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string;
    if (::geteuid() != 0) {
      *skip_reason_ = "needs root (nftables)";
      skip_capability_ = "root";
      return;
    }
    if (shell("command -v nft >/dev/null 2>&1").first != 0) {
      *skip_reason_ = "nft is not installed (apt-get install nftables)";
      skip_capability_ = "root";
      return;
    }
    net::io_context ioc;
    DockerEngineDriver driver(ioc.get_executor(), driver_options());
    if (auto pong = run(ioc, driver.ping()); !pong) {
      *skip_reason_ = "no Docker engine answers on " + kSocket + " (" + pong.error().detail +
                      "); run scripts/start-dockerd.sh";
      return;
    }
    auto present = run(ioc, driver.image_present(test_image()));
    if (!present || !*present) {
      *skip_reason_ = "base image " + test_image() + " is absent; run scripts/build-base-image.sh";
      return;
    }
    if (!fs::exists(kInitPath)) *skip_reason_ = "init script not found at " + kInitPath;
  }

  void SetUp() override {
    GPUCLOUD_NEED(skip_capability_, skip_reason_->empty(), *skip_reason_);
    installation_ = "rt" + random_hex(8);
    table_ = "gpucloud-rt-" + random_hex(8);
    // What this test makes, for the next run's sweep should this process die first.
    lease_ = std::make_unique<gpucloud::testing::ResourceLease>();
    lease_->add("containers-label", "gpucloud.installation=" + installation_);
    lease_->add("images-label", "gpucloud.installation=" + installation_);
    lease_->add("network", "gpucloud-" + installation_);
    lease_->add("nft-table", "ip " + table_);
    lease_->add("iptables-comment", "DOCKER-USER gpucloud:" + table_);
    work_dir_ = fs::temp_directory_path() / ("gpucloud-rt-" + installation_);
    lease_->add("disk-dir", work_dir_.string());  // data disks' mounts and loop devices
    state_dir_ = work_dir_ / "state";
    fs::create_directories(work_dir_);
    driver_ = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), driver_options());
    boot();
  }

  void TearDown() override {
    if (!skip_reason_->empty()) return;
    agent_.reset();
    runtime_.reset();
    disks_.reset();
    // Everything this test's installation made, whatever state the test left it in.
    if (auto ours = run(ioc_, driver_->list({{"gpucloud.installation", installation_}}))) {
      for (const auto& c : *ours) (void)run(ioc_, driver_->remove(c.id));
    }
    (void)run(ioc_, driver_->remove_network("gpucloud-" + installation_));
    gpucloud::agent::firewall::NftablesFirewall firewall(table_);
    auto removed = firewall.remove_table();
    EXPECT_TRUE(removed) << (removed ? "" : removed.error().detail);
    lease_->clean();  // data disks still mounted (the containers are gone): unmounted, detached
    std::error_code ignored;
    fs::remove_all(work_dir_, ignored);
  }

  // A runtime and an agent on the state directory, as a daemon (re)start makes them, with
  // loop-ext4 data disks under WORK_DIR/agent.
  void boot() {
    agent_.reset();
    runtime_.reset();
    disks_.reset();
    disks_ = std::make_unique<DiskRuntime>(ioc_.get_executor(), (work_dir_ / "agent").string(),
                                           std::vector<DiskRuntime::HostDriver>{{"test-host", "loop-ext4"}});
    auto disks_started = run(ioc_, disks_->start());
    ASSERT_TRUE(disks_started) << disks_started.error().detail;
    auto driver = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), driver_options());
    runtime_ = std::make_unique<InstanceRuntime>(ioc_.get_executor(), installation_, state_dir_.string(),
                                                 std::move(driver), kInitPath, table_, runtime_options_);
    runtime_->set_disk_runtime(disks_.get());
    auto started = run(ioc_, runtime_->start());
    ASSERT_TRUE(started) << started.error().detail;
    agent_ = std::make_unique<LocalAgent>(ioc_.get_executor(), one_host_config());
    runtime_->register_handlers(*agent_);
    disks_->register_handlers(*agent_);
  }

  CommandOutcome execute(const std::string& kind, json::object desired, std::string id = {}) {
    Command c{id.empty() ? "cmd-" + random_hex(10) : std::move(id), "test-host", kind, std::move(desired)};
    auto outcome = run(ioc_, agent_->execute(std::move(c)));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : CommandOutcome{};
  }

  // Runs a command that must succeed; its observed state.
  json::object must(const std::string& kind, json::object desired, std::string id = {}) {
    auto outcome = execute(kind, std::move(desired), std::move(id));
    EXPECT_TRUE(outcome.ok) << kind << ": " << outcome.error_code << ": " << outcome.error_detail;
    return outcome.observed;
  }

  // An SSH client key; its public half is what instances authorize.
  std::string client_key() {
    const auto key = work_dir_ / "id_ed25519";
    if (!fs::exists(key)) {
      auto [rc, out] = shell("ssh-keygen -q -t ed25519 -N '' -C gpucloud-rt-test -f " + key.string() + " 2>&1");
      EXPECT_EQ(rc, 0) << out;
    }
    return key.string();
  }
  std::string public_key() { return read_file(client_key() + ".pub"); }

  json::object desired(const std::string& id, const std::string& state, int host_port) {
    return json::object{
        {"instance_id", id},
        {"name", "box-" + id},
        {"host", "test-host"},
        {"state", state},
        {"image", test_image()},
        {"cpu", 1},
        {"memory_gib", 1},
        {"gpu_uuids", json::array{"GPU-sim-0000"}},
        {"gpus_simulated", true},
        {"ports", json::array{json::object{{"container_port", 22},
                                           {"host_port", host_port},
                                           {"protocol", "tcp"},
                                           {"allowed", json::array{"0.0.0.0/0"}}}}},
        {"authorized_keys", public_key()},
        {"password_hash", kPasswordHash},
    };
  }

  json::object exec(const std::string& instance, std::vector<std::string> argv) {
    json::array a;
    for (auto& s : argv) a.emplace_back(s);
    return must("instance.exec", json::object{{"instance_id", instance}, {"argv", std::move(a)}});
  }

  // A published tcp port shows as its DNAT entry in the table's `published` map:
  // "tcp . PORT comment \"INSTANCE\" : ADDRESS . PORT". This runtime's own table only: other
  // tests' daemons publish ports from their own ranges, which may include this test's.
  std::string ruleset() { return shell("nft list table ip " + table_ + " 2>&1").second; }

  // The instance's entry in instance.status.
  json::object status_of(const std::string& instance) {
    auto observed = must("instance.status", json::object{});
    for (const auto& e : observed.at("instances").as_array()) {
      if (e.at("instance_id").as_string() == instance) return e.as_object();
    }
    return {};
  }

  static inline std::string* skip_reason_ = nullptr;
  InstanceRuntime::Options runtime_options_;
  static inline const char* skip_capability_ = "docker";
  std::unique_ptr<gpucloud::testing::ResourceLease> lease_;
  std::string installation_;
  std::string table_;
  fs::path work_dir_, state_dir_;
  net::io_context ioc_;
  std::unique_ptr<DockerEngineDriver> driver_;
  std::unique_ptr<DiskRuntime> disks_;  // before runtime_: outlives it
  std::unique_ptr<InstanceRuntime> runtime_;
  std::unique_ptr<LocalAgent> agent_;  // after runtime_: destroyed first (holds its handlers)
};

std::string str(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_EnsureRunningPublishesSshAndIsIdempotent) {
  GPUCLOUD_NEED("docker", shell("command -v ssh >/dev/null 2>&1").first == 0, "no ssh client installed");
  const int port = random_port();
  const auto t0 = Clock::now();
  const auto first = must("instance.ensure", desired("i1", "running", port), "ensure-1");
  const double ensure_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::cout << "[ timing ] ensure (create + start + host key + firewall): " << ensure_ms << " ms\n";
  ASSERT_TRUE(first.at("running").as_bool()) << json::serialize(first);
  EXPECT_TRUE(first.at("created").as_bool());
  const std::string container = str(first, "container_id");
  const std::string ip = str(first, "ipv4");
  // The runtime's subnet, chosen among 10.200-254.x.0/24; the first instance gets .2.
  const std::string subnet = runtime_->subnet();
  ASSERT_EQ(subnet.rfind("10.", 0), 0u) << subnet;
  EXPECT_EQ(subnet.substr(subnet.size() - 5), ".0/24");
  EXPECT_EQ(ip, subnet.substr(0, subnet.size() - 4) + "2");
  const std::string host_key = str(first, "host_key");
  ASSERT_EQ(host_key.rfind("ssh-ed25519 AAAA", 0), 0u) << json::serialize(first);
  EXPECT_EQ(first.at("cpus").as_double(), 1.0);
  EXPECT_FALSE(first.at("cpus_capped").as_bool());
  EXPECT_EQ(first.at("exit_code").as_int64(), 0);
  EXPECT_FALSE(first.at("oom_killed").as_bool());

  // What the engine has: name, hostname, labels, fixed address, limits, no device request.
  auto c = run(ioc_, driver_->inspect(container));
  ASSERT_TRUE(c && c->exists);
  EXPECT_TRUE(c->running);
  EXPECT_EQ(c->name, "gpucloud-" + installation_ + "-i1");
  EXPECT_EQ(c->ipv4, ip);
  EXPECT_EQ(c->labels.at("gpucloud.installation"), installation_);
  EXPECT_EQ(c->labels.at("gpucloud.instance"), "i1");
  EXPECT_EQ(c->memory_bytes, 1ll << 30);
  EXPECT_EQ(c->nano_cpus, 1'000'000'000);
  const std::string inspected = shell("docker inspect " + container).second;
  EXPECT_NE(inspected.find("\"Hostname\": \"box-i1\""), std::string::npos);
  EXPECT_EQ(inspected.find("DeviceRequests\": [{"), std::string::npos);  // simulated GPUs: none
  EXPECT_NE(inspected.find("NVIDIA_VISIBLE_DEVICES=void"), std::string::npos);
  // The password hash is nowhere in the container's configuration (env, labels, command),
  // nor in the agent's record; only in the 0600 config file the init reads.
  EXPECT_EQ(inspected.find(kPasswordHash), std::string::npos);
  EXPECT_EQ(inspected.find("$6$"), std::string::npos);
  const auto instance_dir = state_dir_ / "instances" / "i1";
  EXPECT_EQ(read_file(instance_dir / "instance.json").find(kPasswordHash), std::string::npos);
  EXPECT_EQ(read_file(instance_dir / "config" / "password_hash"), kPasswordHash + "\n");
  EXPECT_EQ(read_file(instance_dir / "config" / "authorized_keys"), public_key());
  for (const char* f : {"password_hash", "authorized_keys", "../instance.json"}) {
    struct stat st {};
    ASSERT_EQ(::stat((instance_dir / "config" / f).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }

  // SSH through the published host port on 127.0.0.1, with a generated key; the host key
  // ssh sees is the one the ensure reported.
  const auto known_hosts = work_dir_ / "known_hosts";
  const std::string ssh = "ssh -p " + std::to_string(port) +
                          " -o BatchMode=yes -o ConnectTimeout=3 -o StrictHostKeyChecking=accept-new"
                          " -o HashKnownHosts=no -o IdentitiesOnly=yes -o LogLevel=ERROR"
                          " -o UserKnownHostsFile=" + known_hosts.string() +
                          " -o HostKeyAlias=gpucloud-i1 -i " + client_key() +
                          " root@127.0.0.1 'echo ssh-ok; hostname' 2>&1";
  int rc = -1;
  std::string out;
  const auto t1 = Clock::now();
  while (Clock::now() - t1 < 15s) {
    std::tie(rc, out) = shell(ssh);
    if (rc == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(rc, 0) << out << "\n" << ruleset();
  EXPECT_EQ(out, "ssh-ok\nbox-i1\n");
  std::ifstream kh(known_hosts);
  std::string alias, type, blob;
  kh >> alias >> type >> blob;
  EXPECT_EQ(alias, "gpucloud-i1");
  EXPECT_EQ(type + " " + blob, host_key);

  // The same command id again: the first outcome, nothing re-run.
  const auto again = execute("instance.ensure", desired("i1", "running", port), "ensure-1");
  EXPECT_TRUE(again.ok);
  EXPECT_EQ(again.observed, first);
  // A new command with the same desired state: no new container, nothing restarted.
  const auto second = must("instance.ensure", desired("i1", "running", port));
  EXPECT_FALSE(second.at("created").as_bool());
  EXPECT_EQ(str(second, "container_id"), container);
  EXPECT_EQ(str(second, "ipv4"), ip);
  EXPECT_EQ(str(second, "host_key"), host_key);
  EXPECT_EQ(str(second, "started_at"), str(first, "started_at"));
  EXPECT_FALSE(second.at("config_changed").as_bool());
  EXPECT_EQ(second.at("drift").as_array().size(), 0u);
  auto all = run(ioc_, driver_->list({{"gpucloud.installation", installation_}}));
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 1u);

  // A second instance gets the next address and its own port.
  const int port2 = port + 1;
  const auto other = must("instance.ensure", desired("i2", "running", port2));
  EXPECT_EQ(str(other, "ipv4"), subnet.substr(0, subnet.size() - 4) + "3");
  // Its host port may not be taken by another instance.
  const auto clash = execute("instance.ensure", desired("i3", "running", port));
  EXPECT_FALSE(clash.ok);
  EXPECT_EQ(clash.error_code, "conflict") << clash.error_detail;
  EXPECT_FALSE(fs::exists(state_dir_ / "instances" / "i3"));
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_StopKeepsFilesystemAndRestartReattaches) {
  const int port = random_port();
  const auto first = must("instance.ensure", desired("s1", "running", port));
  ASSERT_TRUE(first.at("running").as_bool());
  const std::string container = str(first, "container_id");
  const std::string host_key = str(first, "host_key");
  ASSERT_FALSE(host_key.empty());
  EXPECT_EQ(exec("s1", {"sh", "-c", "echo kept > /root/marker.txt"}).at("exit_code").as_int64(), 0);
  EXPECT_NE(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);

  // Stopped: the container stays (its filesystem is the system disk) and publishes nothing.
  const auto stopped = must("instance.ensure", desired("s1", "stopped", port));
  EXPECT_FALSE(stopped.at("running").as_bool());
  EXPECT_EQ(str(stopped, "container_id"), container);
  EXPECT_FALSE(str(stopped, "finished_at").empty());
  EXPECT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);
  auto status = status_of("s1");
  EXPECT_TRUE(status.at("exists").as_bool());
  EXPECT_FALSE(status.at("running").as_bool());
  EXPECT_EQ(str(status, "state_reason"), "stopped");
  // Stopping again changes nothing.
  EXPECT_FALSE(must("instance.ensure", desired("s1", "stopped", port)).at("running").as_bool());

  // Running again: same container, same file, same host key, published again.
  const auto restarted = must("instance.ensure", desired("s1", "running", port));
  EXPECT_TRUE(restarted.at("running").as_bool());
  EXPECT_FALSE(restarted.at("created").as_bool());
  EXPECT_EQ(str(restarted, "container_id"), container);
  EXPECT_EQ(str(restarted, "host_key"), host_key);
  EXPECT_EQ(str(exec("s1", {"cat", "/root/marker.txt"}), "stdout"), "kept\n");
  EXPECT_NE(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);

  // A changed key set is written for the next boot.
  auto changed = desired("s1", "running", port);
  changed["authorized_keys"] = public_key() + "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExtraKeyForTest extra\n";
  changed["password_hash"] = nullptr;
  const auto rekeyed = must("instance.ensure", changed);
  EXPECT_TRUE(rekeyed.at("config_changed").as_bool());
  EXPECT_FALSE(fs::exists(state_dir_ / "instances" / "s1" / "config" / "password_hash"));
  EXPECT_NE(read_file(state_dir_ / "instances" / "s1" / "config" / "authorized_keys").find("ExtraKeyForTest"),
            std::string::npos);

  // The daemon restarts: a new runtime on the same state directory re-attaches to the running
  // container without touching it (same id, same start time) and republishes its port.
  const std::string started_at = str(restarted, "started_at");
  gpucloud::agent::firewall::NftablesFirewall(table_).remove_table();  // as after a reboot of nft
  ASSERT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);
  boot();
  EXPECT_NE(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);
  status = status_of("s1");
  EXPECT_TRUE(status.at("running").as_bool());
  EXPECT_EQ(str(status, "container_id"), container);
  EXPECT_EQ(str(status, "started_at"), started_at);
  EXPECT_EQ(str(status, "host_key"), host_key);
  const auto reattached = must("instance.ensure", changed);
  EXPECT_FALSE(reattached.at("created").as_bool());
  EXPECT_EQ(str(reattached, "container_id"), container);
  EXPECT_EQ(str(reattached, "started_at"), started_at);
  EXPECT_EQ(str(reattached, "ipv4"), str(first, "ipv4"));
  EXPECT_EQ(str(reattached, "host_key"), host_key);
  EXPECT_EQ(str(exec("s1", {"cat", "/root/marker.txt"}), "stdout"), "kept\n");
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_StatusReportsDeadAndUnknownContainers) {
  const int port = random_port();
  const auto first = must("instance.ensure", desired("d1", "running", port));
  ASSERT_TRUE(first.at("running").as_bool());

  // The instance's main process ends by itself (the engine's init forwards the TERM to sshd).
  (void)execute("instance.exec", json::object{{"instance_id", "d1"}, {"argv", json::array{"kill", "1"}}});
  json::object status;
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < 15s) {
    status = status_of("d1");
    if (!status.empty() && !status.at("running").as_bool()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(status.empty());
  EXPECT_TRUE(status.at("exists").as_bool());
  EXPECT_FALSE(status.at("running").as_bool()) << json::serialize(status);
  EXPECT_EQ(str(status, "desired_state"), "running");
  EXPECT_FALSE(str(status, "finished_at").empty());
  const auto exit_code = status.at("exit_code").as_int64();
  if (exit_code == 137) {
    EXPECT_EQ(str(status, "state_reason"), "killed (out of memory?)");
  } else {
    EXPECT_EQ(str(status, "state_reason"), "exited " + std::to_string(exit_code));
  }
  std::cout << "[ info ] after kill 1: " << json::serialize(status) << "\n";
  // ensure running brings it back, same container.
  const auto revived = must("instance.ensure", desired("d1", "running", port));
  EXPECT_TRUE(revived.at("running").as_bool());
  EXPECT_EQ(str(revived, "container_id"), str(first, "container_id"));

  // A container of this installation with no record: reported, stopped on request, kept.
  ContainerSpec stray;
  stray.name = "gpucloud-" + installation_ + "-stray";
  stray.image = test_image();
  stray.hostname = "stray";
  stray.labels = {{"gpucloud.installation", installation_}, {"gpucloud.instance", "ghost"}};
  stray.command = {"sleep", "3600"};
  stray.cpus = 0.5;
  stray.memory_bytes = 128ll << 20;
  // On no network: it needs none, and the machine's default bridge is no part of this test.
  stray.network = "none";
  auto made = run(ioc_, driver_->create(stray));
  ASSERT_TRUE(made) << made.error().detail;
  auto started = run(ioc_, driver_->start(made->id));
  if (!started) {
    auto state = run(ioc_, driver_->inspect(made->id));
    FAIL() << "the stray did not start: " << started.error().detail
           << (state && state->exists ? "; state " + state->state + ", exit " + std::to_string(state->exit_code) : "");
  }

  auto observed = must("instance.status", json::object{});
  const auto& unknown = observed.at("unknown_containers").as_array();
  ASSERT_EQ(unknown.size(), 1u) << json::serialize(observed);
  EXPECT_EQ(str(unknown[0].as_object(), "container_id"), made->id);
  EXPECT_EQ(str(unknown[0].as_object(), "name"), stray.name);
  EXPECT_EQ(str(unknown[0].as_object(), "instance_label"), "ghost");
  EXPECT_TRUE(unknown[0].at("running").as_bool());
  EXPECT_EQ(observed.at("instances").as_array().size(), 1u);

  // A known instance's container is not "unknown": refused.
  const auto refused = execute("instance.stop_unknown", json::object{{"container_id", str(first, "container_id")}});
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.error_code, "conflict");

  const auto stopped = must("instance.stop_unknown", json::object{{"container_id", made->id}});
  EXPECT_FALSE(stopped.at("running").as_bool());
  EXPECT_TRUE(stopped.at("exists").as_bool());
  auto after = run(ioc_, driver_->inspect(made->id));
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->exists);  // never deleted
  EXPECT_FALSE(after->running);
  // Idempotent: stopping it again is fine.
  EXPECT_TRUE(execute("instance.stop_unknown", json::object{{"container_id", made->id}}).ok);
  observed = must("instance.status", json::object{});
  EXPECT_EQ(observed.at("unknown_containers").as_array().size(), 1u);

  // A record whose container vanished is reported as missing.
  ASSERT_TRUE(run(ioc_, driver_->remove(str(first, "container_id"))));
  status = status_of("d1");
  EXPECT_FALSE(status.at("exists").as_bool());
  EXPECT_EQ(str(status, "state_reason"), "container missing");
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_RemoveDeletesContainerRulesAndState) {
  const int port = random_port();
  const auto first = must("instance.ensure", desired("r1", "running", port));
  ASSERT_TRUE(first.at("running").as_bool());
  const std::string container = str(first, "container_id");
  const std::string ip = str(first, "ipv4");
  EXPECT_NE(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);
  ASSERT_TRUE(fs::exists(state_dir_ / "instances" / "r1" / "config" / "authorized_keys"));

  const auto removed = must("instance.remove", json::object{{"instance_id", "r1"}});
  EXPECT_TRUE(removed.at("existed").as_bool());
  auto gone = run(ioc_, driver_->inspect(container));
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->exists);
  EXPECT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos) << ruleset();
  EXPECT_FALSE(fs::exists(state_dir_ / "instances" / "r1"));
  EXPECT_TRUE(must("instance.status", json::object{}).at("instances").as_array().empty());

  // Removing what is gone is fine.
  const auto again = must("instance.remove", json::object{{"instance_id", "r1"}});
  EXPECT_FALSE(again.at("existed").as_bool());

  // The address went back to the pool: the next instance gets it.
  const auto next = must("instance.ensure", desired("r2", "stopped", port));
  EXPECT_EQ(str(next, "ipv4"), ip);
  EXPECT_FALSE(next.at("running").as_bool());
  EXPECT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);  // stopped: not published
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_FailedCreateLeavesNothingBehind) {
  const int port = random_port();
  auto bad = desired("f1", "running", port);
  bad["image"] = "gpucloud/no-such-image:" + random_hex(6);
  const auto failed = execute("instance.ensure", bad);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error_code, "not_found") << failed.error_detail;
  EXPECT_FALSE(fs::exists(state_dir_ / "instances" / "f1"));
  auto all = run(ioc_, driver_->list({{"gpucloud.installation", installation_}}));
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
  EXPECT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);

  // A start that fails removes the container it created, the record and the address: here
  // a container outside gpucloud's records (no installation label) holds the address the
  // runtime will pick, so the engine refuses the start with "address already in use".
  const std::string subnet = runtime_->subnet();
  const std::string first_ip = subnet.substr(0, subnet.size() - 4) + "2";
  ContainerSpec blocker;
  blocker.name = "gpucloud-" + installation_ + "-blocker";
  blocker.image = test_image();
  blocker.labels = {{"test.blocker", installation_}};
  blocker.command = {"sleep", "3600"};
  blocker.cpus = 0.5;
  blocker.network = runtime_->network_name();
  blocker.ipv4 = first_ip;
  auto made = run(ioc_, driver_->create(blocker));
  ASSERT_TRUE(made) << made.error().detail;
  ASSERT_TRUE(run(ioc_, driver_->start(made->id)));
  const auto refused = execute("instance.ensure", desired("f2", "running", port));
  EXPECT_FALSE(refused.ok);
  std::cout << "[ info ] start refused: " << refused.error_code << ": " << refused.error_detail << "\n";
  EXPECT_FALSE(fs::exists(state_dir_ / "instances" / "f2"));
  all = run(ioc_, driver_->list({{"gpucloud.installation", installation_}}));
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
  EXPECT_EQ(ruleset().find("tcp . " + std::to_string(port) + " comment"), std::string::npos);
  ASSERT_TRUE(run(ioc_, driver_->remove(made->id)));

  // Nothing was leaked: the same desired state now succeeds, with the first address.
  const auto good = must("instance.ensure", desired("f2", "running", port));
  EXPECT_TRUE(good.at("running").as_bool());
  EXPECT_TRUE(good.at("created").as_bool());
  EXPECT_EQ(str(good, "ipv4"), first_ip);
}

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_ConcurrentEnsuresAreSerialisedPerInstance) {
  const int port = random_port();
  // Two instances at once, and the first one twice (different command ids): one container
  // per instance, distinct addresses.
  std::vector<std::pair<std::string, json::object>> commands = {
      {"a", desired("c1", "running", port)},
      {"b", desired("c2", "running", port + 1)},
      {"c", desired("c1", "running", port)},
  };
  std::vector<std::future<gpucloud::Result<CommandOutcome>>> futures;
  for (auto& [id, d] : commands) {
    Command c{"concurrent-" + id + "-" + random_hex(6), "test-host", "instance.ensure", d};
    futures.push_back(net::co_spawn(ioc_, agent_->execute(std::move(c)), net::use_future));
  }
  ioc_.restart();
  const auto deadline = Clock::now() + 120s;
  auto all_ready = [&] {
    for (auto& f : futures) {
      if (f.wait_for(0s) != std::future_status::ready) return false;
    }
    return true;
  };
  while (!all_ready() && Clock::now() < deadline) ioc_.run_one_for(50ms);
  ASSERT_TRUE(all_ready());
  std::vector<json::object> observed;
  for (auto& f : futures) {
    auto outcome = f.get();
    ASSERT_TRUE(outcome);
    ASSERT_TRUE(outcome->ok) << outcome->error_code << ": " << outcome->error_detail;
    observed.push_back(outcome->observed);
  }
  EXPECT_EQ(str(observed[0], "container_id"), str(observed[2], "container_id"));
  EXPECT_NE(str(observed[0], "container_id"), str(observed[1], "container_id"));
  EXPECT_EQ(observed[0].at("created").as_bool() + observed[2].at("created").as_bool(), 1);
  EXPECT_EQ(str(observed[0], "ipv4"), str(observed[2], "ipv4"));
  EXPECT_NE(str(observed[0], "ipv4"), str(observed[1], "ipv4"));
  auto all = run(ioc_, driver_->list({{"gpucloud.installation", installation_}}));
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 2u);
  for (const auto& c : *all) EXPECT_TRUE(c.running) << c.name;
}

// image.inspect: sizes of present images; a missing one is pulled only when listed under
// "pull" (the base image, built here, must never be fetched from a registry).
TEST_F(InstanceRuntimeTest, DOCKER_ROOT_ImageInspectPullsOnlyWhatItIsAllowedTo) {
  const std::string missing = "gpucloud-no-such-registry.invalid/never:1";
  auto seen = must("image.inspect", json::object{{"images", json::array{test_image(), missing}}});
  const auto& images = seen.at("images").as_object();
  EXPECT_TRUE(images.at(test_image()).at("present").as_bool());
  EXPECT_GT(images.at(test_image()).at("size_bytes").as_int64(), 1'000'000);
  EXPECT_FALSE(images.at(missing).at("present").as_bool());
  EXPECT_FALSE(images.at(missing).as_object().contains("pulling")) << "not listed under pull: no pull";

  auto pulled = must("image.inspect", json::object{{"images", json::array{missing}}, {"pull", json::array{missing}}});
  EXPECT_TRUE(pulled.at("images").at(missing).at("pulling").as_bool());
  json::object last;
  for (int i = 0; i < 300; ++i) {  // the pull fails within seconds: no such registry
    last = must("image.inspect", json::object{{"images", json::array{missing}}, {"pull", json::array{missing}}});
    if (!last.at("images").at(missing).at("pulling").as_bool()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto& result = last.at("images").at(missing).as_object();
  EXPECT_FALSE(result.at("pulling").as_bool());
  ASSERT_TRUE(result.contains("pull_error")) << json::serialize(last);
  EXPECT_NE(std::string(result.at("pull_error").as_string()).find(missing), std::string::npos);
}

}  // namespace

// The instance's isolation and what an SSH session sees: no raw sockets (ARP spoofing on the
// shared bridge) while ICMP echo still works; a non-login `ssh host CMD` gets the image's
// environment (its PATH: a conda image's python) and the instance's NVIDIA_VISIBLE_DEVICES;
// the agent's state files are written off the event loop.
TEST_F(InstanceRuntimeTest, DOCKER_ROOT_NoRawSocketsAndSessionsSeeTheImageEnvironment) {
  if (shell("command -v ssh >/dev/null 2>&1").first != 0) GTEST_SKIP() << "no ssh client installed";
  // Which threads write the state directory (the loop is this one: run() turns ioc_ here).
  auto writers = std::make_shared<std::vector<std::thread::id>>();
  auto writers_mutex = std::make_shared<std::mutex>();
  runtime_options_.state_write_observer = [writers, writers_mutex](const std::string&) {
    std::lock_guard lock(*writers_mutex);
    writers->push_back(std::this_thread::get_id());
  };
  boot();

  // A "conda" image: the base image with /opt/conda/bin first in its PATH and a python there.
  const std::string image = "gpucloud-rt-test/" + installation_ + ":conda";
  const std::string kPath = "/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  {
    const auto made = json::parse(gpucloud_docker("POST", "/containers/create",
                                                  json::serialize(json::object{{"Image", test_image()},
                                                                               {"Cmd", json::array{"true"}}})));
    const std::string builder(made.at("Id").as_string());
    const auto tree = work_dir_ / "conda-tree";
    fs::create_directories(tree / "opt/conda/bin");
    std::ofstream(tree / "opt/conda/bin/python") << "#!/bin/sh\necho conda-python \"$@\"\n";
    fs::permissions(tree / "opt/conda/bin/python", fs::perms(0755));
    auto [tar_rc, tar_out] = shell("tar -C " + tree.string() + " -cf " + (work_dir_ / "conda.tar").string() + " opt 2>&1");
    ASSERT_EQ(tar_rc, 0) << tar_out;
    auto [put_rc, put_out] = shell("curl -sf --unix-socket " + kSocket + " -X PUT -H 'Content-Type: application/x-tar' --data-binary @" +
                                   (work_dir_ / "conda.tar").string() + " 'http://x/v1.41/containers/" + builder +
                                   "/archive?path=/' 2>&1");
    ASSERT_EQ(put_rc, 0) << put_out;
    const json::object config{{"Env", json::array{"PATH=" + kPath, "CONDA_DEFAULT_ENV=base", "HF_TOKEN=hf-secret-1"}},
                              {"Cmd", json::array{"/bin/bash"}}};
    const auto committed = gpucloud_docker("POST", "/commit?container=" + builder + "&repo=gpucloud-rt-test%2F" +
                                                       installation_ + "&tag=conda",
                                           json::serialize(config));
    (void)gpucloud_docker("DELETE", "/containers/" + builder + "?force=1");
    ASSERT_NE(committed.find("\"Id\""), std::string::npos) << committed;
  }
  struct RemoveImage {
    std::string ref;
    ~RemoveImage() { (void)gpucloud_docker("DELETE", "/images/gpucloud-rt-test%2F" + ref + "?force=1"); }
  } remove_image{installation_ + ":conda"};

  const int port = random_port();
  auto want = desired("e1", "running", port);
  want["image"] = image;
  const auto first = must("instance.ensure", want);
  ASSERT_TRUE(first.at("running").as_bool()) << json::serialize(first);
  const std::string container = str(first, "container_id");

  // The host key was made by the agent, before the boot, into the config directory: the
  // init used it and generated none on the system disk.
  const auto config_dir = state_dir_ / "instances" / "e1" / "config";
  std::istringstream pub(read_file(config_dir / "ssh_host_ed25519_key.pub"));
  std::string key_type, key_blob;
  pub >> key_type >> key_blob;
  EXPECT_EQ(key_type + " " + key_blob, str(first, "host_key"));
  struct stat key_stat {};
  ASSERT_EQ(::stat((config_dir / "ssh_host_ed25519_key").c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u);
  EXPECT_NE(exec("e1", {"test", "-e", "/etc/ssh/ssh_host_ed25519_key"}).at("exit_code").as_int64(), 0);

  // The engine has the capabilities dropped and ICMP datagram sockets open to every group.
  const auto inspected = json::parse(gpucloud_docker("GET", "/containers/" + container + "/json"));
  const auto& host_config = inspected.at("HostConfig").as_object();
  std::vector<std::string> dropped;
  for (const auto& c : host_config.at("CapDrop").as_array()) dropped.emplace_back(c.as_string());
  EXPECT_NE(std::find(dropped.begin(), dropped.end(), "NET_RAW"), dropped.end()) << json::serialize(host_config);
  EXPECT_EQ(host_config.at("Sysctls").at("net.ipv4.ping_group_range"), "0 2147483647");

  // Raw and packet sockets are refused inside.
  for (const char* family : {"socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP", "socket.AF_PACKET, socket.SOCK_RAW, 0"}) {
    const auto raw = exec("e1", {"python3", "-c", std::string("import socket; socket.socket(") + family + ")"});
    EXPECT_NE(raw.at("exit_code").as_int64(), 0) << family;
    EXPECT_NE(str(raw, "stderr").find("PermissionError"), std::string::npos) << family << ": " << str(raw, "stderr");
  }
  // Echo to the bridge's gateway still works: ping where the image has it, else an ICMP
  // datagram socket (what ping itself uses without NET_RAW).
  const std::string subnet = runtime_->subnet();
  const std::string gateway = subnet.substr(0, subnet.size() - 4) + "1";
  const std::string echo =
      "if command -v ping >/dev/null; then ping -c1 -W3 " + gateway + " >/dev/null && echo pong; else python3 -c '"
      "import socket\n"
      "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n"
      "s.settimeout(3)\n"
      "s.sendto(bytes([8, 0, 0, 0, 0, 0, 0, 1]) + b\"gpucloud\", (\"" + gateway + "\", 0))\n"
      "data, _ = s.recvfrom(1024)\n"
      "print(\"pong\" if data[0] == 0 else \"type %d\" % data[0])'; fi";
  const auto pong = exec("e1", {"sh", "-c", echo});
  EXPECT_EQ(str(pong, "stdout"), "pong\n") << str(pong, "stderr");

  // A non-login session: the image's PATH (its python) and the instance's GPUs; nothing
  // that looks secret.
  const auto known_hosts = work_dir_ / "known_hosts-e1";
  std::ofstream(known_hosts) << "gpucloud-e1 " << str(first, "host_key") << "\n";  // pinned
  const std::string ssh = "ssh -p " + std::to_string(port) +
                          " -o BatchMode=yes -o ConnectTimeout=3 -o StrictHostKeyChecking=yes"
                          " -o HostKeyAlias=gpucloud-e1"
                          " -o IdentitiesOnly=yes -o LogLevel=ERROR -o UserKnownHostsFile=" + known_hosts.string() +
                          " -i " + client_key() +
                          " root@127.0.0.1 'echo $NVIDIA_VISIBLE_DEVICES; echo $PATH; echo ${HF_TOKEN:-no-token}; python train.py' 2>&1";
  int rc = -1;
  std::string out;
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < 15s) {
    std::tie(rc, out) = shell(ssh);
    if (rc == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "void\n" + kPath + "\nno-token\nconda-python train.py\n");

  // The state directory was written (records, config), never from the loop's thread.
  std::lock_guard lock(*writers_mutex);
  EXPECT_FALSE(writers->empty());
  for (const auto& id : *writers) EXPECT_NE(id, std::this_thread::get_id());
}

namespace {

// Whether anything is mounted at `path` in the agent's (this process's) mount namespace.
bool host_mounted(const fs::path& path) {
  auto table = gpucloud::agent::disks::read_mount_table();
  return table && gpucloud::agent::disks::find_mount(*table, path.string()).has_value();
}

}  // namespace

TEST_F(InstanceRuntimeTest, DOCKER_ROOT_DataDiskIsBindMountedAndOutlivesItsInstance) {
  const std::string disk = "disk-" + random_hex(12);
  const fs::path host_mount = work_dir_ / "agent" / "mounts" / disk;
  auto made = must("disk.ensure", json::object{{"disk_id", disk}, {"size_gib", 1}});
  ASSERT_EQ(made.at("size_gib").as_int64(), 1);
  auto with_disk = [&](const std::string& id, const std::string& state, int port, const std::string& path) {
    auto d = desired(id, state, port);
    d["data_disks"] = json::array{json::object{{"disk_id", disk}, {"mount_path", path}}};
    return d;
  };

  // A: the disk at /root/data, an ext4 of the disk's size, written to.
  const int port_a = random_port();
  auto a = must("instance.ensure", with_disk("da", "running", port_a, "/root/data"));
  ASSERT_TRUE(a.at("running").as_bool());
  EXPECT_TRUE(host_mounted(host_mount));
  auto df = exec("da", {"sh", "-c", "stat -f -c '%T %b %S' /root/data && echo payload-42 > /root/data/f && sync"});
  EXPECT_EQ(df.at("exit_code").as_int64(), 0) << str(df, "stderr");
  std::istringstream fields(str(df, "stdout"));
  std::string type;
  long long blocks = 0, block_size = 0;
  fields >> type >> blocks >> block_size;
  EXPECT_EQ(type, "ext2/ext3") << str(df, "stdout");  // stat's name for ext4
  EXPECT_GT(blocks * block_size, 900LL << 20);
  EXPECT_LE(blocks * block_size, 1LL << 30);
  auto status = must("disk.status", json::object{});
  ASSERT_EQ(status.at("disks").as_array().size(), 1u);
  EXPECT_TRUE(status.at("disks").as_array()[0].at("mounted").as_bool());

  // Attached to A (running): refused to C, and its removal refused.
  auto taken = execute("instance.ensure", with_disk("dc", "running", random_port(), "/data"));
  EXPECT_FALSE(taken.ok);
  EXPECT_EQ(taken.error_code, "conflict") << taken.error_detail;
  auto busy = execute("disk.remove", json::object{{"disk_id", disk}});
  EXPECT_FALSE(busy.ok);
  EXPECT_EQ(busy.error_code, "conflict") << busy.error_detail;

  // Stopped: unmounted on the host, kept. Removed: the disk stays.
  auto stopped = must("instance.ensure", with_disk("da", "stopped", port_a, "/root/data"));
  EXPECT_FALSE(stopped.at("running").as_bool());
  EXPECT_FALSE(host_mounted(host_mount));
  EXPECT_FALSE(fs::exists(host_mount)) << "a start behind our back fails rather than writing to the host";
  must("instance.remove", json::object{{"instance_id", "da"}});
  status = must("disk.status", json::object{});
  ASSERT_EQ(status.at("disks").as_array().size(), 1u);
  EXPECT_FALSE(status.at("disks").as_array()[0].at("mounted").as_bool());

  // B, another instance, at another path: the same bytes.
  const int port_b = random_port();
  auto b = must("instance.ensure", with_disk("db", "running", port_b, "/data"));
  ASSERT_TRUE(b.at("running").as_bool());
  auto cat = exec("db", {"cat", "/data/f"});
  EXPECT_EQ(str(cat, "stdout"), "payload-42\n") << str(cat, "stderr");

  // An agent restart keeps the running instance's disk mounted.
  boot();
  EXPECT_TRUE(host_mounted(host_mount));
  EXPECT_EQ(str(exec("db", {"cat", "/data/f"}), "stdout"), "payload-42\n");
  busy = execute("disk.remove", json::object{{"disk_id", disk}});
  EXPECT_EQ(busy.error_code, "conflict") << "still attached after the restart";

  // Without the disk, B is rebuilt (a changed set of disks is drift, like other GPUs).
  must("instance.ensure", with_disk("db", "stopped", port_b, "/data"));
  auto bare = must("instance.ensure", desired("db", "running", port_b));
  EXPECT_TRUE(bare.at("rebuilt").as_bool());
  auto absent = exec("db", {"sh", "-c", "test -e /data/f; echo $?"});
  EXPECT_EQ(str(absent, "stdout"), "1\n");
  EXPECT_FALSE(host_mounted(host_mount));
  auto removed = must("disk.remove", json::object{{"disk_id", disk}});
  EXPECT_TRUE(removed.at("existed").as_bool());
  EXPECT_FALSE(fs::exists(work_dir_ / "agent" / "disks" / "loop-ext4" / (disk + ".img")));
}
