// System disk sizes against a btrfs engine: a dockerd of this test's own (its own socket,
// pidfile, exec root and a btrfs data root in a sparse loop file, started by
// scripts/start-dockerd.sh exactly as a set-up would) enforces system_disk_gib, so a write
// past it fails inside the instance, and instance.status says the host enforces it.
// DOCKER_ROOT_: needs root (mount, nftables), the base image on the machine's engine (loaded
// into the private one) and btrfs-progs.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <random>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/instance_runtime.h"
#include "agent/local_agent.h"
#include "agent/runtime/docker_engine_driver.h"
#include "agent/runtime/layer_filesystems.h"
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
using gpucloud::agent::DockerEngineDriver;
using gpucloud::agent::InstanceRuntime;
using gpucloud::agent::LocalAgent;

const std::string kSource = GPUCLOUD_SOURCE_DIR;
const std::string kInitPath = kSource + "/scripts/instance-init/gpucloud-init.sh";

std::pair<int, std::string> sh(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string random_hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back("0123456789abcdef"[rng() % 16]);
  return out;
}

template <class T>
net::awaitable<std::optional<T>> optional_result(net::awaitable<T> work) {
  co_return co_await std::move(work);
}
template <class T>
T run(net::io_context& ioc, net::awaitable<T> work) {
  auto future = net::co_spawn(ioc, optional_result(std::move(work)), net::use_future);
  ioc.restart();
  while (future.wait_for(0s) != std::future_status::ready) ioc.run_one_for(50ms);
  return *future.get();
}

// The private engine: paths under /run and /var/lib, named for this process.
struct BtrfsEngine {
  std::string tag = "gc-btrfs-" + random_hex(6);
  std::string sock = "/run/" + tag + ".sock";
  std::string run_dir = "/run/" + tag;
  std::string lib_dir = "/var/lib/" + tag;
  // Its own bridge: a dockerd with --bridge none deletes the machine's docker0 at start,
  // which breaks every container of the shared engine on the default network.
  std::string bridge = "gcb" + tag.substr(tag.size() - 6);
  std::string subnet = gpucloud::testing::subnet_prefix();
  std::string env() const {
    return "DOCKER_SOCK=" + sock + " GPUCLOUD_RUN_DIR=" + run_dir + " GPUCLOUD_LOG_DIR=" + run_dir +
           " GPUCLOUD_ENGINE_STORAGE=btrfs GPUCLOUD_ENGINE_DATA_ROOT=" + lib_dir + "/engine GPUCLOUD_ENGINE_IMAGE=" + lib_dir +
           "/engine.img GPUCLOUD_ENGINE_SIZE_GIB=8 DOCKERD_EXTRA_ARGS='--exec-root " + run_dir + "/exec --pidfile " +
           run_dir + "/engine.pid --bridge " + bridge + " --iptables=false --ip6tables=false'";
  }
  bool simple_quotas = false;  // start-dockerd.sh's default where the kernel has them
  std::string start() {
    auto [br_rc, br_out] = sh("ip link add " + bridge + " type bridge && ip addr add " + subnet + ".1/24 dev " + bridge +
                              " && ip link set " + bridge + " up 2>&1");
    if (br_rc != 0) return "making the private engine's bridge: " + br_out;
    auto [rc, out] = sh(env() + " sh " + kSource + "/scripts/start-dockerd.sh 2>&1");
    if (rc != 0 || out.find("on btrfs") == std::string::npos) return "start-dockerd.sh: " + out;
    simple_quotas = out.find("quotas: squota") != std::string::npos;
    auto [load_rc, loaded] = sh("docker save gpucloud/base:bookworm-2 | curl -s --max-time 300 --unix-socket " + sock +
                                " -X POST -H 'Content-Type: application/x-tar' --data-binary @- http://x/images/load");
    if (load_rc != 0 || loaded.find("Loaded image") == std::string::npos) return "loading the base image: " + loaded;
    return "";
  }
  void stop() const {
    sh(env() + " sh " + kSource + "/scripts/stop-dockerd.sh >/dev/null 2>&1");
    sh("umount " + lib_dir + "/engine 2>/dev/null || umount -l " + lib_dir + "/engine 2>/dev/null; rm -rf " + lib_dir + " " + run_dir + " " + sock);
    sh("ip link del " + bridge + " 2>/dev/null");
  }
};

// What both fixtures send their agent: a command, and a shell command inside instance i1.
class AgentCommandTest : public ::testing::Test {
 protected:
  gpucloud::agent::CommandOutcome execute(const std::string& kind, json::object desired) {
    Command c{"c-" + random_hex(8), "test-host", kind, std::move(desired)};
    auto outcome = run(ioc_, agent_->execute(c));
    EXPECT_TRUE(outcome) << outcome.error().detail;
    return outcome ? *outcome : gpucloud::agent::CommandOutcome{};
  }
  json::object exec(const std::string& command) {
    auto o = execute("instance.exec", json::object{{"instance_id", "i1"},
                                                   {"argv", json::array{"/bin/sh", "-c", command}},
                                                   {"timeout_ms", 180000}});
    EXPECT_TRUE(o.ok) << o.error_detail;
    return o.observed;
  }

  net::io_context ioc_;
  std::unique_ptr<LocalAgent> agent_;
};

class SystemDiskTest : public AgentCommandTest {
 protected:
  static void SetUpTestSuite() {
    reason_ = new std::string;
    if (::geteuid() != 0) {
      *reason_ = "needs root (mount, nftables)";
      capability_ = "root";
    } else if (sh("command -v mkfs.btrfs >/dev/null 2>&1").first != 0) {
      *reason_ = "btrfs-progs is not installed (apt-get install btrfs-progs)";
      capability_ = "btrfs";
    } else if (!gpucloud::testing::have_docker()) {
      *reason_ = "no engine with gpucloud/base:bookworm-2 on /var/run/docker.sock (scripts/start-dockerd.sh, build-base-image.sh)";
      capability_ = "docker";
    } else {
      engine_ = new BtrfsEngine;
      *reason_ = engine_->start();
      capability_ = "btrfs";
    }
  }
  static void TearDownTestSuite() {
    if (engine_) engine_->stop();
    delete engine_;
    engine_ = nullptr;
  }
  void SetUp() override {
    GPUCLOUD_NEED(capability_, reason_->empty(), *reason_);
    installation_ = "sd" + random_hex(8);
    table_ = "gpucloud-sd-" + random_hex(8);
    dir_ = fs::temp_directory_path() / ("gpucloud-sd-" + installation_);
    DockerEngineDriver::Options o;
    o.engine.socket_path = engine_->sock;
    o.init_path = kInitPath;
    auto driver = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), o);
    runtime_ = std::make_unique<InstanceRuntime>(ioc_.get_executor(), installation_, (dir_ / "state").string(),
                                                 std::move(driver), kInitPath, table_);
    gpucloud::config::Config config;
    gpucloud::config::Host host;
    host.name = "test-host";
    host.zone = "zone-a";
    host.cpu = 2;
    host.memory_gib = 4;
    host.simulated_gpus = {{"RTX 4090", 24, 1}};
    config.hosts = {host};
    agent_ = std::make_unique<LocalAgent>(ioc_.get_executor(), config);
    runtime_->register_handlers(*agent_);
    ASSERT_TRUE(run(ioc_, runtime_->start()));
  }
  void TearDown() override {
    if (!runtime_) return;
    (void)execute("instance.remove", json::object{{"instance_id", "i1"}});
    agent_.reset();
    runtime_.reset();
    sh("nft delete table ip " + table_ + " 2>/dev/null; curl -s --unix-socket " + engine_->sock +
       " -X DELETE http://x/networks/gpucloud-" + installation_ + " >/dev/null");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static inline std::string* reason_ = nullptr;
  static inline std::string capability_ = "btrfs";
  static inline BtrfsEngine* engine_ = nullptr;
  std::string installation_, table_;
  fs::path dir_;
  std::unique_ptr<InstanceRuntime> runtime_;
};

TEST_F(SystemDiskTest, DOCKER_ROOT_AWritePastTheSystemDiskFailsInsideTheInstance) {
  auto ensured = execute("instance.ensure", json::object{{"instance_id", "i1"},
                                                         {"name", "small"},
                                                         {"state", "running"},
                                                         {"image", "gpucloud/base:bookworm-2"},
                                                         {"cpu", 1},
                                                         {"memory_gib", 1},
                                                         {"system_disk_gib", 1}});
  ASSERT_TRUE(ensured.ok) << ensured.error_detail;
  const std::string container(ensured.observed.at("container_id").as_string());
  auto opt = sh("curl -s --unix-socket " + engine_->sock + " http://x/containers/" + container + "/json");
  EXPECT_NE(opt.second.find(R"("StorageOpt":{"size":"1G"})"), std::string::npos) << opt.second.substr(0, 300);

  auto small = exec("dd if=/dev/zero of=/root/small bs=1M count=100 2>&1");
  EXPECT_EQ(small.at("exit_code").as_int64(), 0) << small;
  auto big = exec("dd if=/dev/zero of=/root/big bs=1M count=1500 2>&1");
  EXPECT_NE(big.at("exit_code").as_int64(), 0) << "a 1.5 GB write on a 1 GiB system disk must fail: " << big;
  const std::string out(big.at("stdout").as_string());
  EXPECT_TRUE(out.find("No space left") != std::string::npos || out.find("quota") != std::string::npos) << out;

  auto status = execute("instance.status", json::object{});
  ASSERT_TRUE(status.ok) << status.error_detail;
  EXPECT_TRUE(status.observed.at("system_disk").at("enforced").as_bool()) << status.observed;
  EXPECT_EQ(status.observed.at("system_disk").at("storage_driver").as_string(), "btrfs");
  const auto& instances = status.observed.at("instances").as_array();
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_GT(instances[0].at("system_disk_used_bytes").as_int64(), 100LL << 20) << instances[0];
  // With simple quotas the engine cannot measure a container at its limit (SizeRw -1): the
  // figure above came from the subvolume's qgroup.
  auto measured = sh("curl -s --unix-socket " + engine_->sock + " 'http://x/containers/" + container + "/json?size=1'");
  std::cout << "quotas: " << (engine_->simple_quotas ? "simple" : "full") << "\n";
  if (engine_->simple_quotas) EXPECT_NE(measured.second.find(R"("SizeRw":-1)"), std::string::npos) << measured.second.substr(0, 200);
}

}  // namespace

namespace {

// System disk sizes on overlay2 (the machine's engine in `./dev test`): the agent's own
// filesystem per container (agent/runtime/layer_filesystems.h).
class SystemDiskOverlayTest : public AgentCommandTest {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED("root", ::geteuid() == 0, "needs root (mount, nftables)");
    GPUCLOUD_NEED("docker", gpucloud::testing::have_docker(), "needs the machine's engine with gpucloud/base:bookworm-2");
    auto driver_name = sh("docker info -f '{{.Driver}}' 2>/dev/null");
    if (driver_name.second.find("overlay2") == std::string::npos)
      GTEST_SKIP() << "the machine's engine is not on overlay2 (" << driver_name.second << ")";
    installation_ = "so" + random_hex(8);
    table_ = "gpucloud-so-" + random_hex(8);
    dir_ = fs::temp_directory_path() / ("gpucloud-so-" + installation_);
    lease_ = std::make_unique<gpucloud::testing::ResourceLease>();
    lease_->add("disk-dir", dir_.string());
    DockerEngineDriver::Options o;
    o.init_path = kInitPath;
    auto driver = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), o);
    InstanceRuntime::Options options;
    options.layer_filesystems = std::make_shared<gpucloud::agent::LayerFilesystems>((dir_ / "system-disks").string());
    runtime_ = std::make_unique<InstanceRuntime>(ioc_.get_executor(), installation_, (dir_ / "state").string(),
                                                 std::move(driver), kInitPath, table_, options);
    gpucloud::config::Config config;
    gpucloud::config::Host host;
    host.name = "test-host";
    host.zone = "zone-a";
    host.cpu = 2;
    host.memory_gib = 4;
    config.hosts = {host};
    agent_ = std::make_unique<LocalAgent>(ioc_.get_executor(), config);
    runtime_->register_handlers(*agent_);
    ASSERT_TRUE(run(ioc_, runtime_->start()));
  }
  void TearDown() override {
    if (runtime_) (void)execute("instance.remove", json::object{{"instance_id", "i1"}});
    agent_.reset();
    runtime_.reset();
    if (!table_.empty()) sh("nft delete table ip " + table_ + " 2>/dev/null; docker network rm gpucloud-" + installation_ + " >/dev/null 2>&1");
    if (lease_) lease_->clean();
  }
  json::object ensure(const std::string& state) {
    auto ensured = execute("instance.ensure", json::object{{"instance_id", "i1"},
                                                           {"name", "small"},
                                                           {"state", state},
                                                           {"image", "gpucloud/base:bookworm-2"},
                                                           {"cpu", 1},
                                                           {"memory_gib", 1},
                                                           {"system_disk_gib", 1}});
    EXPECT_TRUE(ensured.ok) << ensured.error_detail;
    return ensured.observed;
  }
  std::string layer_dir(const std::string& container) {
    auto upper = sh("docker inspect -f '{{.GraphDriver.Data.UpperDir}}' " + container);
    std::string dir = upper.second.substr(0, upper.second.find_last_not_of("\n") + 1);
    return dir.size() > 5 ? dir.substr(0, dir.size() - 5) : dir;  // without "/diff"
  }

  std::string installation_, table_;
  fs::path dir_;
  std::unique_ptr<gpucloud::testing::ResourceLease> lease_;
  std::unique_ptr<InstanceRuntime> runtime_;
};

TEST_F(SystemDiskOverlayTest, DOCKER_ROOT_OnOverlay2AWritePastTheSystemDiskFailsAndItsFilesystemLivesAndDiesWithTheContainer) {
  auto observed = ensure("running");
  ASSERT_TRUE(observed.contains("container_id")) << observed;
  const std::string container(observed.at("container_id").as_string());
  auto config = sh("docker inspect -f '{{json .HostConfig.StorageOpt}}' " + container);
  EXPECT_EQ(config.second.find("size"), std::string::npos) << "overlay2 refuses StorageOpt size: " << config.second;
  const std::string layer = layer_dir(container);
  auto mount = sh("findmnt -n -o FSTYPE,SOURCE --mountpoint " + layer);
  EXPECT_NE(mount.second.find("ext4"), std::string::npos) << layer << ": " << mount.second;

  // df inside shows the system disk's size (overlay answers statfs from its upper filesystem).
  auto df = exec("df -P -k / | tail -1 | awk '{print $2}'");
  const long long kib = std::atoll(std::string(df.at("stdout").as_string()).c_str());
  EXPECT_GT(kib, 900LL * 1024) << df;
  EXPECT_LE(kib, 1024LL * 1024) << df;
  auto small = exec("dd if=/dev/zero of=/root/small bs=1M count=100 2>&1");
  EXPECT_EQ(small.at("exit_code").as_int64(), 0) << small;
  auto big = exec("dd if=/dev/zero of=/root/big bs=1M count=1500 2>&1; rc=$?; rm -f /root/big; exit $rc");
  EXPECT_NE(big.at("exit_code").as_int64(), 0) << "a 1.5 GB write on a 1 GiB system disk must fail: " << big;
  EXPECT_NE(std::string(big.at("stdout").as_string()).find("No space left"), std::string::npos) << big;

  auto status = execute("instance.status", json::object{});
  ASSERT_TRUE(status.ok) << status.error_detail;
  EXPECT_TRUE(status.observed.at("system_disk").at("enforced").as_bool()) << status.observed;
  EXPECT_EQ(status.observed.at("system_disk").at("how").as_string(), "layer_filesystem");
  EXPECT_EQ(status.observed.at("system_disk").at("storage_driver").as_string(), "overlay2");

  // Stopped, then a reboot's unmount: the next start mounts it again, with the user's file.
  ensure("stopped");
  ASSERT_EQ(sh("umount " + layer).first, 0);
  ensure("running");
  EXPECT_NE(sh("findmnt -n -o FSTYPE --mountpoint " + layer).second.find("ext4"), std::string::npos);
  auto kept = exec("ls -l /root/small");
  EXPECT_EQ(kept.at("exit_code").as_int64(), 0) << "the system disk kept its file across the remount: " << kept;

  // Removed: the engine's removal unmounts it, the agent deletes the image, no loop device stays.
  auto removed = execute("instance.remove", json::object{{"instance_id", "i1"}});
  ASSERT_TRUE(removed.ok) << removed.error_detail;
  EXPECT_FALSE(fs::exists(dir_ / "system-disks" / (container + ".img")));
  EXPECT_TRUE(sh("findmnt -n --mountpoint " + layer).second.empty());
  EXPECT_TRUE(sh("losetup -a | grep " + dir_.string()).second.empty());
}

}  // namespace
