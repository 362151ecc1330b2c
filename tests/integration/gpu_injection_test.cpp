// Built-in GPU injection and lxcfs against the real engine, without a GPU (issue 25): a host
// whose simulated GPUs have a fake driver tree (agent/gpu/fake_driver_tree.h) and fake device
// nodes (mknod'ed copies of /dev/null's 1:3 named nvidia0..7, nvidiactl, nvidia-uvm...) in a
// temp dir gets builtin injection; an instance with GPU k gets exactly /dev/nvidiak plus the
// control nodes and the driver's files (checked through the engine's inspect and `ls /dev`
// inside), another GPU's node is absent, a no-GPU instance has none. With lxcfs mounted
// ([agent] lxcfs_dir, ./dev starts it on /var/run/gpucloud/lxcfs; GPUCLOUD_LXCFS_DIR overrides),
// `free` and /proc/cpuinfo inside show the instance's limits.
//
// DOCKER_ROOT_: the machine's engine with the base image, root (mknod, nftables).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/gpu/fake_driver_tree.h"
#include "agent/gpu/gpu_injector.h"
#include "agent/gpu/simulated_inventory.h"
#include "agent/instance_runtime.h"
#include "agent/local_agent.h"
#include "agent/lxcfs.h"
#include "agent/runtime/docker_engine_driver.h"
#include "config/config.h"
#include "support/capabilities.h"

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
using ::testing::HasSubstr;

const std::string kSource = GPUCLOUD_SOURCE_DIR;
const std::string kInitPath = kSource + "/scripts/instance-init/gpucloud-init.sh";
constexpr const char* kImage = "gpucloud/base:bookworm-2";
constexpr const char* kHost = "gpu-host";

std::pair<int, std::string> sh_out(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back("0123456789abcdef"[rng() % 16]);
  return out;
}

template <class T>
net::awaitable<std::optional<T>> as_optional(net::awaitable<T> work) {
  co_return co_await std::move(work);
}
template <class T>
T run_on(net::io_context& ioc, net::awaitable<T> work) {
  auto future = net::co_spawn(ioc, as_optional(std::move(work)), net::use_future);
  ioc.restart();
  while (future.wait_for(0s) != std::future_status::ready) ioc.run_one_for(50ms);
  return *future.get();
}

std::string lxcfs_dir() {
  const char* v = std::getenv("GPUCLOUD_LXCFS_DIR");
  return v != nullptr && *v != '\0' ? v : "/var/run/gpucloud/lxcfs";
}

class GpuInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    installation_ = "gi" + hex(8);
    table_ = "gpucloud-gi-" + hex(8);
    dir_ = fs::temp_directory_path() / ("gpucloud-gi-" + installation_);
    fs::create_directories(dir_);
    gpucloud::gpu::testing::make_fake_driver_tree(dir_ / "driver");
    if (auto why = gpucloud::gpu::testing::make_fake_dev(dir_ / "dev", 8); !why.empty()) GTEST_FAIL() << why;
    injector_ = std::make_shared<gpucloud::gpu::GpuInjector>(
        gpucloud::gpu::GpuInjector::Settings{"auto", (dir_ / "driver").string(), (dir_ / "dev").string()});
    injector_->detect_driver("");
    DockerEngineDriver::Options o;
    o.init_path = kInitPath;
    auto driver = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), o);
    InstanceRuntime::Options ro;
    ro.gpu_injector = injector_;
    ro.lxcfs_dir = lxcfs_dir();
    runtime_ = std::make_unique<InstanceRuntime>(ioc_.get_executor(), installation_, (dir_ / "state").string(),
                                                 std::move(driver), kInitPath, table_, ro);
    gpucloud::config::Config config;
    config.data_dir = dir_.string();
    gpucloud::config::Host host;
    host.name = kHost;
    host.zone = "zone-a";
    host.cpu = 2;
    host.memory_gib = 4;
    host.simulated_gpus = {{"RTX 4090", 24, 8}};
    config.hosts = {host};
    agent_ = std::make_unique<LocalAgent>(ioc_.get_executor(), config, 1h);
    agent_->set_gpu_injector(injector_);
    agent_->set_lxcfs_dir(lxcfs_dir());
    runtime_->register_handlers(*agent_);
    ASSERT_TRUE(run_on(ioc_, runtime_->start()));
    auto registered = run_on(ioc_, agent_->register_hosts());
    ASSERT_TRUE(registered) << registered.error().detail;
    ASSERT_EQ(registered->size(), 1u);
    inventory_ = registered->front();
  }
  void TearDown() override {
    if (runtime_) {
      for (const auto& id : made_) (void)execute("instance.remove", json::object{{"instance_id", id}});
      agent_.reset();
      runtime_.reset();
      sh_out("nft delete table ip " + table_ + " 2>/dev/null; curl -s --unix-socket /var/run/docker.sock"
             " -X DELETE http://x/networks/gpucloud-" + installation_ + " >/dev/null");
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  gpucloud::agent::CommandOutcome execute(const std::string& kind, json::object desired) {
    Command c{"c-" + hex(8), kHost, kind, std::move(desired)};
    auto outcome = run_on(ioc_, agent_->execute(c));
    EXPECT_TRUE(outcome) << outcome.error().detail;
    return outcome ? *outcome : gpucloud::agent::CommandOutcome{};
  }
  // An instance with GPUs at these indexes (simulated, injected from the fake tree).
  gpucloud::agent::CommandOutcome ensure(const std::string& id, const std::vector<int>& gpus, double cpu = 1,
                                         int memory_gib = 1) {
    json::array uuids;
    for (int g : gpus) uuids.emplace_back(gpucloud::gpu::simulated_gpu_uuid(kHost, g));
    made_.insert(id);
    return execute("instance.ensure", json::object{{"instance_id", id},
                                                   {"name", id},
                                                   {"host", kHost},
                                                   {"state", "running"},
                                                   {"image", kImage},
                                                   {"cpu", cpu},
                                                   {"memory_gib", memory_gib},
                                                   {"gpu_uuids", uuids},
                                                   {"gpus_simulated", true}});
  }
  std::string in(const std::string& id, const std::string& command) {
    auto o = execute("instance.exec", json::object{{"instance_id", id},
                                                   {"argv", json::array{"/bin/sh", "-c", command}},
                                                   {"timeout_ms", 60000}});
    EXPECT_TRUE(o.ok) << o.error_detail;
    const auto* out = o.observed.if_contains("stdout");
    return out != nullptr && out->is_string() ? std::string(out->as_string()) : std::string();
  }
  json::value inspect(const std::string& container) {
    auto [rc, body] = sh_out("curl -s --unix-socket /var/run/docker.sock http://x/containers/" + container + "/json");
    EXPECT_EQ(rc, 0);
    return json::parse(body);
  }
  static std::set<std::string> words(const std::string& text) {
    std::set<std::string> out;
    std::string w;
    for (char c : text + "\n") {
      if (c == ' ' || c == '\n' || c == '\t') {
        if (!w.empty()) out.insert(w);
        w.clear();
      } else {
        w.push_back(c);
      }
    }
    return out;
  }

  net::io_context ioc_;
  std::string installation_, table_;
  fs::path dir_;
  std::shared_ptr<gpucloud::gpu::GpuInjector> injector_;
  std::unique_ptr<InstanceRuntime> runtime_;
  std::unique_ptr<LocalAgent> agent_;
  gpucloud::agent::HostInventory inventory_;
  std::set<std::string> made_;
};

TEST_F(GpuInjectionTest, DOCKER_ROOT_BuiltinGivesExactlyItsGpusNodesAndTheDriversFiles) {
  EXPECT_EQ(inventory_.gpu_injection, "builtin") << inventory_.gpu_injection_reason;
  EXPECT_THAT(inventory_.gpu_injection_reason, HasSubstr(gpucloud::gpu::testing::kFakeDriverVersion));
  EXPECT_EQ(inventory_.driver_version, gpucloud::gpu::testing::kFakeDriverVersion);

  auto made = ensure("g1", {1});
  ASSERT_TRUE(made.ok) << made.error_detail;
  const std::string container(made.observed.at("container_id").as_string());
  auto c = inspect(container);
  const auto& host = c.at("HostConfig").as_object();
  EXPECT_TRUE(host.at("DeviceRequests").is_null() || host.at("DeviceRequests").as_array().empty())
      << "builtin: no nvidia device request";
  std::set<std::string> devices;
  for (const auto& d : host.at("Devices").as_array()) {
    devices.insert(std::string(d.at("PathInContainer").as_string()));
    EXPECT_EQ(d.at("CgroupPermissions"), "rwm");
    EXPECT_THAT(std::string(d.at("PathOnHost").as_string()), HasSubstr((dir_ / "dev").string()));
  }
  EXPECT_EQ(devices, (std::set<std::string>{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                            "/dev/nvidia-caps/nvidia-cap1"}));
  std::set<std::string> mounted;
  for (const auto& m : c.at("Mounts").as_array()) {
    if (m.at("Destination").as_string().starts_with("/usr/")) {
      mounted.insert(std::string(m.at("Destination").as_string()));
      EXPECT_EQ(m.at("RW"), false) << m.at("Destination");
    }
  }
  for (const char* want : {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so",
                           "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                           "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1", "/usr/bin/nvidia-smi"})
    EXPECT_TRUE(mounted.count(want)) << want;
  bool visible = false, caps = false;
  for (const auto& e : c.at("Config").at("Env").as_array()) {
    visible |= e.as_string() == "NVIDIA_VISIBLE_DEVICES=" + gpucloud::gpu::simulated_gpu_uuid(kHost, 1);
    caps |= e.as_string() == "NVIDIA_DRIVER_CAPABILITIES=compute,utility";
  }
  EXPECT_TRUE(visible);
  EXPECT_TRUE(caps);

  // Inside: its node and the control nodes, no other GPU's; the driver's files readable.
  auto nodes = words(in("g1", "ls /dev | grep nvidia; ls /dev/nvidia-caps"));
  EXPECT_EQ(nodes, (std::set<std::string>{"nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps",
                                          "nvidia-cap1"}));
  EXPECT_EQ(in("g1", "test -e /dev/nvidia0 || echo absent"), "absent\n");
  EXPECT_EQ(in("g1", "cat /usr/lib/x86_64-linux-gnu/libcuda.so.1"), "fake libcuda.so.580.159.04\n");
  EXPECT_EQ(in("g1", "nvidia-smi -L"), "fake nvidia-smi -L\n");

  // Two GPUs of eight: both nodes, still no third.
  auto two = ensure("g2", {3, 6});
  ASSERT_TRUE(two.ok) << two.error_detail;
  auto two_nodes = words(in("g2", "ls /dev | grep '^nvidia[0-9]'"));
  EXPECT_EQ(two_nodes, (std::set<std::string>{"nvidia3", "nvidia6"}));
}

TEST_F(GpuInjectionTest, DOCKER_ROOT_NoGpuInstanceHasNoNvidiaNodeOrFile) {
  auto made = ensure("n1", {});
  ASSERT_TRUE(made.ok) << made.error_detail;
  auto c = inspect(std::string(made.observed.at("container_id").as_string()));
  const auto& devices = c.at("HostConfig").at("Devices");
  EXPECT_TRUE(devices.is_null() || devices.as_array().empty()) << devices;
  for (const auto& m : c.at("Mounts").as_array())
    EXPECT_FALSE(m.at("Destination").as_string().starts_with("/usr/")) << m.at("Destination");
  EXPECT_EQ(in("n1", "ls /dev | grep -c nvidia || true"), "0\n");
}

TEST_F(GpuInjectionTest, DOCKER_ROOT_LXCFS_FreeAndCpuinfoShowTheInstancesLimits) {
  auto lxcfs = gpucloud::agent::probe_lxcfs(lxcfs_dir());
  GPUCLOUD_NEED("lxcfs", lxcfs.available, "lxcfs is not served at " + lxcfs_dir() + ": " + lxcfs.reason +
                                              " (scripts/start-lxcfs.sh)");
  EXPECT_EQ(inventory_.lxcfs_available, std::optional<bool>(true)) << inventory_.lxcfs_reason;
  auto made = ensure("l1", {}, 1, 1);
  ASSERT_TRUE(made.ok) << made.error_detail;
  // free: the 1 GiB limit, not the host's memory.
  auto total_kib = std::stoll(in("l1", "awk '/^MemTotal:/ {print $2}' /proc/meminfo"));
  EXPECT_EQ(total_kib, 1024 * 1024) << "MemTotal is the memory limit";
  auto free_line = in("l1", "free -m | awk '/^Mem:/ {print $2}'");
  EXPECT_EQ(std::stoi(free_line), 1024);
  // cpuinfo (lxcfs --enable-cfs): the CPU limit of 1.
  EXPECT_EQ(in("l1", "grep -c ^processor /proc/cpuinfo"), "1\n");
  // uptime: the instance's own (seconds since its start, not the host's).
  auto uptime = std::stod(in("l1", "cut -d' ' -f1 /proc/uptime"));
  EXPECT_LT(uptime, 120.0);
}

}  // namespace
