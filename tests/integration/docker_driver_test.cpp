// The Docker Engine runtime driver against a real engine (tests named DOCKER_*, skipped with
// a message when no engine answers on /var/run/docker.sock or the base image is missing:
// scripts/start-dockerd.sh and scripts/build-base-image.sh provide both), plus the parts
// that need no engine (request building, stream parsing, connection hijacking against a
// fake engine on a private unix socket).
//
// The DOCKER_ tests use their own network and label every container with
// gpucloud.installation=test-<random>; they remove only those containers.
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/runtime/docker_engine_driver.h"
#include "agent/runtime/engine_client.h"
#include "agent/runtime/runtime_driver.h"
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
using gpucloud::ErrorCode;
using gpucloud::Result;
using gpucloud::Status;
using gpucloud::agent::ContainerSpec;
using gpucloud::agent::DockerEngineDriver;
using gpucloud::agent::DriverState;
using gpucloud::agent::NetworkSpec;
using gpucloud::agent::TerminalSession;
namespace docker = gpucloud::agent::docker;

using Clock = std::chrono::steady_clock;

// co_spawn's future needs a default-constructible result; HijackedConnection is not.
template <class T>
net::awaitable<std::optional<T>> optional_result(net::awaitable<T> work) {
  co_return co_await std::move(work);
}

// Runs one coroutine to completion on `ioc`. Past `limit`, `on_deadline` is called once (to
// close whatever the coroutine waits on) and the test fails.
template <class T>
T run(net::io_context& ioc, net::awaitable<T> work, std::chrono::milliseconds limit = 60s,
      const std::function<void()>& on_deadline = {}) {
  auto future = net::co_spawn(ioc, optional_result(std::move(work)), net::use_future);
  const auto deadline = Clock::now() + limit;
  bool expired = false;
  ioc.restart();
  while (future.wait_for(0s) != std::future_status::ready) {
    ioc.run_one_for(50ms);
    if (!expired && Clock::now() > deadline) {
      expired = true;
      ADD_FAILURE() << "operation did not finish within " << limit.count() << " ms";
      if (on_deadline) on_deadline();
    }
  }
  return *future.get();
}

std::string error_text(const gpucloud::Error& e) {
  return std::string(gpucloud::to_string(e.code)) + ": " + e.detail;
}

std::string random_hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(digits[rng() % 16]);
  return out;
}

// Runs a shell command; its exit status and stdout.
std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
  return s;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The engine's socket; GPUCLOUD_TEST_DOCKER_SOCK overrides it.
const std::string kSocket = [] {
  const char* env = std::getenv("GPUCLOUD_TEST_DOCKER_SOCK");
  return std::string(env && *env ? env : "/var/run/docker.sock");
}();
std::string test_image() {
  const char* env = std::getenv("GPUCLOUD_TEST_IMAGE");
  return env && *env ? env : "gpucloud/base:bookworm-2";
}
const std::string kInitPath = GPUCLOUD_SOURCE_DIR "/scripts/instance-init/gpucloud-init.sh";
// SHA-512 crypt(3) of "pw123": what the control plane would write as password_hash.
const std::string kPasswordHash =
    "$6$Uk5x.GhIiNQsY3Is$geNzFzpgLcJ0lsbKKnbwYFjxQsxEh/0lBVf.t4ij15AF.zQxf6IuWUpPdXKlvg5dB7oJ6JaTmGL8Mm3fMLtVt1";

DockerEngineDriver::Options driver_options() {
  DockerEngineDriver::Options o;
  o.engine.socket_path = kSocket;
  o.init_path = kInitPath;
  return o;
}

// ---------------------------------------------------------------------------------------
// No engine needed
// ---------------------------------------------------------------------------------------

TEST(DockerEngineClient, DemuxesMultiplexedStream) {
  std::string data;
  auto frame = [&data](char kind, std::string_view payload) {
    data.push_back(kind);
    data.append(3, '\0');
    const auto n = static_cast<std::uint32_t>(payload.size());
    data.push_back(static_cast<char>(n >> 24));
    data.push_back(static_cast<char>(n >> 16));
    data.push_back(static_cast<char>(n >> 8));
    data.push_back(static_cast<char>(n));
    data.append(payload);
  };
  frame(1, "hello ");
  frame(2, "oops");
  frame(1, "world\n");
  auto d = docker::demux_stream(data);
  EXPECT_TRUE(d.complete);
  EXPECT_EQ(d.out, "hello world\n");
  EXPECT_EQ(d.err, "oops");
  auto partial = docker::demux_stream(std::string_view(data).substr(0, data.size() - 2));
  EXPECT_FALSE(partial.complete);
  EXPECT_FALSE(docker::demux_stream("plain text from a tty").complete);
}

TEST(DockerEngineClient, MapsEngineErrors) {
  auto e = docker::engine_error(404, R"({"message":"No such container: x"})");
  EXPECT_EQ(e.code, ErrorCode::not_found);
  EXPECT_NE(e.detail.find("No such container: x"), std::string::npos);
  EXPECT_EQ(docker::engine_error(409, R"({"message":"name in use"})").code, ErrorCode::conflict);
  EXPECT_EQ(docker::engine_error(400, "{}").code, ErrorCode::invalid_argument);
  EXPECT_EQ(docker::engine_error(500, "boom").code, ErrorCode::internal);
  EXPECT_NE(docker::engine_error(500, "boom").detail.find("boom"), std::string::npos);
  EXPECT_EQ(docker::engine_error(503, "").code, ErrorCode::unavailable);
  EXPECT_EQ(docker::url_encode("a b/c=d&e"), "a%20b%2Fc%3Dd%26e");
}

TEST(DockerEngineClient, MessageStreamErrorDetailIsAnError) {
  auto good = docker::parse_message_stream(
      "{\"status\":\"Downloading\"}\r\n{\"status\":\"Done\"}\n  {\"status\":\"sha256:1\"}");
  ASSERT_TRUE(good) << error_text(good.error());
  EXPECT_EQ(good->size(), 3u);
  auto bad = docker::parse_message_stream(
      "{\"status\":\"Pulling\"}\n{\"errorDetail\":{\"message\":\"manifest unknown\"},"
      "\"error\":\"manifest unknown\"}\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().detail.find("manifest unknown"), std::string::npos);
  EXPECT_FALSE(docker::parse_message_stream("{\"status\":"));
}

// A one-connection fake engine on a private unix socket: answers the first request with
// `answer` (raw bytes), then keeps the connection until the client closes it.
class FakeEngine {
 public:
  FakeEngine(net::io_context& ioc, std::string answer)
      : path_(fs::temp_directory_path() / ("gpucloud-fake-engine-" + random_hex(8) + ".sock")),
        acceptor_(ioc, net::local::stream_protocol::endpoint(path_.string())),
        answer_(std::move(answer)) {
    net::co_spawn(ioc, serve(), net::detached);
  }
  ~FakeEngine() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    fs::remove(path_, ignored_fs_);
  }
  std::string path() const { return path_.string(); }
  const std::string& request() const { return request_; }

 private:
  net::awaitable<void> serve() {
    boost::system::error_code ec;
    auto socket = co_await acceptor_.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    std::string buffer;
    co_await net::async_read_until(socket, net::dynamic_buffer(buffer), "\r\n\r\n",
                                   net::redirect_error(net::use_awaitable, ec));
    request_ = buffer;
    co_await net::async_write(socket, net::buffer(answer_), net::redirect_error(net::use_awaitable, ec));
    std::array<char, 256> sink{};
    while (!ec) {
      co_await socket.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
    }
  }

  fs::path path_;
  net::local::stream_protocol::acceptor acceptor_;
  std::string answer_;
  std::string request_;
  std::error_code ignored_fs_;
};

TEST(DockerEngineClient, ChunkedStreamWithErrorDetailIsAnError) {
  net::io_context ioc;
  const std::string body1 = "{\"status\":\"Loading layer\"}\r\n";
  const std::string body2 = "{\"errorDetail\":{\"message\":\"unexpected EOF\"},\"error\":\"unexpected EOF\"}\r\n";
  std::ostringstream answer;
  answer << "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
         << std::hex << body1.size() << "\r\n" << body1 << "\r\n"
         << std::hex << body2.size() << "\r\n" << body2 << "\r\n0\r\n\r\n";
  FakeEngine fake(ioc, answer.str());
  docker::EngineClient client(ioc.get_executor(), {fake.path(), "v1.41", 5s, 1u << 20});
  auto res = run(ioc, client.call_stream(docker::Method::post, "/images/create?fromSrc=-"));
  ASSERT_FALSE(res);
  EXPECT_NE(res.error().detail.find("unexpected EOF"), std::string::npos);
  EXPECT_EQ(fake.request().rfind("POST /v1.41/images/create?fromSrc=- HTTP/1.1\r\n", 0), 0u)
      << fake.request();
}

TEST(DockerEngineClient, HijackHandsOverBytesAlreadyBuffered) {
  net::io_context ioc;
  FakeEngine fake(ioc,
                  "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                  "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\nfirst output");
  docker::EngineClient client(ioc.get_executor(), {fake.path(), "v1.41", 5s, 1u << 20});
  auto conn = run(ioc, client.exec_start_hijacked("abc", true));
  ASSERT_TRUE(conn) << error_text(conn.error());
  EXPECT_EQ(conn->buffered, "first output");
  EXPECT_TRUE(conn->socket.is_open());
  EXPECT_NE(fake.request().find("Upgrade: tcp"), std::string::npos) << fake.request();
}

TEST(DockerEngineClient, UnreachableEngineIsUnavailable) {
  net::io_context ioc;
  docker::EngineClient client(ioc.get_executor(),
                              {"/nonexistent/gpucloud-test.sock", "v1.41", 2s, 1u << 20});
  auto res = run(ioc, client.call(docker::Method::get, "/_ping"));
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error().code, ErrorCode::unavailable);
}

TEST(DockerEngineDriverPlan, SetsIsolationAndLimits) {
  net::io_context ioc;
  auto options = driver_options();
  options.host_cpus = 4;
  options.nofile_hard_limit = 20000;
  DockerEngineDriver driver(ioc.get_executor(), options);
  ContainerSpec spec;
  spec.name = "gpucloud-x-i1";
  spec.image = "img";
  spec.hostname = "box";
  spec.labels = {{"gpucloud.installation", "x"}};
  spec.env = {"LANG=C.UTF-8", "NVIDIA_VISIBLE_DEVICES=all"};
  spec.cpus = 8;
  spec.memory_bytes = 1 << 30;
  spec.nofile_limit = 1'048'576;
  spec.network = "gpucloud";
  spec.ipv4 = "10.88.0.10";
  spec.init_config_dir = "/var/lib/gpucloud/init/i1";
  auto plan = driver.plan_create(spec);
  ASSERT_TRUE(plan) << error_text(plan.error());
  EXPECT_TRUE(plan->adjusted.cpus_capped);
  EXPECT_EQ(plan->adjusted.cpus, 4);
  EXPECT_TRUE(plan->adjusted.nofile_clamped);
  EXPECT_EQ(plan->adjusted.nofile_limit, 20000);
  const auto& body = plan->body.as_object();
  const auto& host = body.at("HostConfig").as_object();
  EXPECT_EQ(host.at("NanoCpus").as_int64(), 4'000'000'000);
  EXPECT_EQ(host.at("Memory").as_int64(), 1 << 30);
  EXPECT_EQ(host.at("MemorySwap").as_int64(), 1 << 30);
  EXPECT_EQ(host.at("ShmSize").as_int64(), 1 << 29);
  EXPECT_EQ(host.at("PidsLimit").as_int64(), 4096);
  EXPECT_TRUE(host.at("Init").as_bool());
  EXPECT_FALSE(host.at("Privileged").as_bool());
  EXPECT_EQ(host.at("RestartPolicy").at("Name").as_string(), "no");
  EXPECT_FALSE(host.contains("CapAdd"));
  EXPECT_FALSE(host.contains("SecurityOpt"));
  EXPECT_FALSE(host.contains("DeviceRequests"));
  EXPECT_EQ(host.at("NetworkMode").as_string(), "gpucloud");
  EXPECT_EQ(host.at("Ulimits").at(0).at("Hard").as_int64(), 20000);
  const auto& mounts = host.at("Mounts").as_array();
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_EQ(mounts[0].at("Target").as_string(), "/.gpucloud/init");
  EXPECT_TRUE(mounts[0].at("ReadOnly").as_bool());
  EXPECT_EQ(mounts[1].at("Target").as_string(), "/.gpucloud/config");
  EXPECT_TRUE(mounts[1].at("ReadOnly").as_bool());
  EXPECT_EQ(body.at("NetworkingConfig").at("EndpointsConfig").at("gpucloud").at("IPAMConfig")
                .at("IPv4Address").as_string(), "10.88.0.10");
  EXPECT_TRUE(body.at("Entrypoint").as_array().empty());
  EXPECT_EQ(body.at("Cmd"), (json::array{"/bin/sh", "/.gpucloud/init"}));
  EXPECT_EQ(body.at("Env"), (json::array{"LANG=C.UTF-8", "NVIDIA_VISIBLE_DEVICES=void"}));

  spec.gpu_uuids = {"GPU-1111", "GPU-2222"};
  plan = driver.plan_create(spec);
  ASSERT_TRUE(plan);
  const auto& request = plan->body.at("HostConfig").at("DeviceRequests").at(0);
  EXPECT_EQ(request.at("Driver").as_string(), "nvidia");
  EXPECT_EQ(request.at("DeviceIDs"), (json::array{"GPU-1111", "GPU-2222"}));
  EXPECT_EQ(plan->body.at("Env").at(1).as_string(), "NVIDIA_VISIBLE_DEVICES=GPU-1111,GPU-2222");

  spec.env = {"DB_PASSWORD=hunter2"};
  EXPECT_EQ(driver.plan_create(spec).error().code, ErrorCode::invalid_argument);
  spec.env = {};
  spec.name = "bad name";
  EXPECT_FALSE(driver.plan_create(spec));
}

TEST(RuntimeDriverState, RoundTripsAndFindsHostKey) {
  DriverState state;
  state.container_id = "abc123";
  state.container_name = "gpucloud-x-i1";
  state.labels = {{"gpucloud.instance", "i1"}};
  auto decoded = gpucloud::agent::decode_driver_state(gpucloud::agent::encode_driver_state(state));
  ASSERT_TRUE(decoded) << error_text(decoded.error());
  EXPECT_EQ(decoded->container_id, "abc123");
  EXPECT_EQ(decoded->container_name, "gpucloud-x-i1");
  EXPECT_EQ(decoded->labels, state.labels);
  EXPECT_FALSE(gpucloud::agent::decode_driver_state("{\"version\":99,\"container_id\":\"a\"}"));
  EXPECT_FALSE(gpucloud::agent::decode_driver_state("not json"));

  auto key = gpucloud::agent::find_host_key(
      "Server listening\nGPUCLOUD-HOST-KEY ssh-ed25519 AAAAold\nx\nGPUCLOUD-HOST-KEY ssh-ed25519 AAAAnew\n");
  ASSERT_TRUE(key);
  EXPECT_EQ(*key, "ssh-ed25519 AAAAnew");
  EXPECT_FALSE(gpucloud::agent::find_host_key("echo GPUCLOUD-HOST-KEY ssh-ed25519 x\n"));
}

// ---------------------------------------------------------------------------------------
// Against the engine
// ---------------------------------------------------------------------------------------

class DockerDriverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string;
    installation_ = "test-" + random_hex(10);
    // What the suite makes, for the next run's sweep should this process die first.
    lease_ = new gpucloud::testing::ResourceLease;
    lease_->add("containers-label", "gpucloud.installation=" + installation_);
    lease_->add("network", "gpucloud-" + installation_);
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
    if (!fs::exists(kInitPath)) {
      *skip_reason_ = "init script not found at " + kInitPath;
      return;
    }
    // Our own network; pick a subnet nobody uses yet.
    network_ = new std::string("gpucloud-" + installation_);
    std::string last_error;
    for (int attempt = 0; attempt < 8; ++attempt) {
      prefix_ = gpucloud::testing::subnet_prefix() + ".";  // shared allocator; a retry takes another
      NetworkSpec spec;
      spec.name = *network_;
      spec.subnet = prefix_ + "0/24";
      spec.labels = {{"gpucloud.installation", installation_}};
      spec.mtu = 1400;  // as the agent sets it on a host whose uplink has 1400
      auto made = run(ioc, driver.ensure_network(spec));
      if (made) {
        network_ready_ = true;
        break;
      }
      last_error = made.error().detail;
    }
    if (!network_ready_) *skip_reason_ = "could not create a test network: " + last_error;

    work_dir_ = fs::temp_directory_path() / ("gpucloud-docker-test-" + installation_);
    fs::create_directories(work_dir_ / "config");
  }

  static void TearDownTestSuite() {
    net::io_context ioc;
    DockerEngineDriver driver(ioc.get_executor(), driver_options());
    if (skip_reason_ && skip_reason_->empty()) {
      if (auto ours = run(ioc, driver.list({{"gpucloud.installation", installation_}}))) {
        for (const auto& c : *ours) (void)run(ioc, driver.remove(c.id));
      }
      if (network_ready_) (void)run(ioc, driver.remove_network(*network_));
    }
    std::error_code ignored;
    if (!work_dir_.empty()) fs::remove_all(work_dir_, ignored);
  }

  void SetUp() override {
    GPUCLOUD_NEED("docker", skip_reason_->empty(), *skip_reason_);
    driver_ = std::make_unique<DockerEngineDriver>(ioc_.get_executor(), driver_options());
  }

  template <class T>
  T go(net::awaitable<T> work, std::chrono::milliseconds limit = 60s) {
    return run(ioc_, std::move(work), limit);
  }

  // A spec for this suite: labels, network, next free fixed address, the init's config dir.
  ContainerSpec spec(const std::string& suffix) {
    ContainerSpec s;
    s.name = "gpucloud-" + installation_ + "-" + suffix;
    s.image = test_image();
    s.hostname = suffix;
    s.labels = {{"gpucloud.installation", installation_}, {"gpucloud.instance", suffix}};
    s.env = {"LANG=C.UTF-8"};
    s.cpus = 0.5;
    s.memory_bytes = 256ll << 20;
    s.pids_limit = 512;
    s.network = *network_;
    s.ipv4 = prefix_ + std::to_string(next_host_++);
    s.init_config_dir = (work_dir_ / "config").string();
    return s;
  }

  // Creates and starts; fails the test on error.
  std::string launch(const ContainerSpec& s) {
    auto created = go(driver_->create(s));
    EXPECT_TRUE(created) << error_text(created.error());
    if (!created) return {};
    auto started = go(driver_->start(created->id));
    EXPECT_TRUE(started) << error_text(started.error());
    return created->id;
  }

  std::string exec(const std::string& id, std::vector<std::string> argv) {
    auto out = go(driver_->exec_capture(id, std::move(argv)));
    EXPECT_TRUE(out) << error_text(out.error());
    return out ? *out : std::string();
  }

  // An SSH client key the instance accepts (written to the shared config dir).
  static std::string client_key() {
    const auto key = work_dir_ / "id_ed25519";
    if (!fs::exists(key)) {
      auto [rc, out] = shell("ssh-keygen -q -t ed25519 -N '' -C gpucloud-test -f " + key.string());
      EXPECT_EQ(rc, 0) << out;
      fs::copy_file(key.string() + ".pub", work_dir_ / "config" / "authorized_keys",
                    fs::copy_options::overwrite_existing);
      std::ofstream(work_dir_ / "config" / "password_hash") << kPasswordHash << "\n";
    }
    return key.string();
  }

  static std::string ssh_command(const std::string& ip, const std::string& known_hosts,
                                 const std::string& remote) {
    return "ssh -o BatchMode=yes -o ConnectTimeout=2 -o StrictHostKeyChecking=accept-new"
           " -o HashKnownHosts=no -o IdentitiesOnly=yes -o LogLevel=ERROR"
           " -o UserKnownHostsFile=" + known_hosts + " -i " + client_key() + " root@" + ip +
           " '" + remote + "' 2>&1";
  }

  net::io_context ioc_;
  std::unique_ptr<DockerEngineDriver> driver_;

  static inline std::string* skip_reason_ = nullptr;
  static inline gpucloud::testing::ResourceLease* lease_ = nullptr;  // lives as long as the process
  static inline std::string installation_;
  static inline std::string* network_ = nullptr;
  static inline bool network_ready_ = false;
  static inline std::string prefix_;
  static inline int next_host_ = 10;
  static inline fs::path work_dir_;
};

TEST_F(DockerDriverTest, DOCKER_CreateStartWithLimitsAndIsolation) {
  auto s = spec("limits");
  s.nofile_limit = 1 << 30;  // far above any hard limit: must be clamped, or start would fail
  const auto t0 = Clock::now();
  auto created = go(driver_->create(s));
  const double create_ms = ms_since(t0);
  ASSERT_TRUE(created) << error_text(created.error());
  EXPECT_FALSE(created->cpus_capped);
  EXPECT_TRUE(created->nofile_clamped);
  ASSERT_TRUE(go(driver_->start(created->id)));
  auto status = go(driver_->inspect(created->id));
  const double to_running = ms_since(t0);
  ASSERT_TRUE(status) << error_text(status.error());
  EXPECT_TRUE(status->running);
  EXPECT_EQ(status->state, "running");
  std::cout << "[ timing ] create -> running: " << to_running << " ms (create call "
            << create_ms << " ms)\n";
  RecordProperty("create_to_running_ms", std::to_string(to_running));
  EXPECT_EQ(status->name, s.name);
  EXPECT_EQ(status->ipv4, s.ipv4);
  EXPECT_EQ(status->nano_cpus, 500'000'000);
  EXPECT_EQ(status->memory_bytes, 256ll << 20);
  EXPECT_EQ(status->labels.at("gpucloud.installation"), installation_);
  EXPECT_FALSE(status->started_at.empty());

  // The limits as the kernel sees them, cgroup v1 or v2.
  const std::string cgroup = exec(created->id, {"sh", "-c",
      "if [ -f /sys/fs/cgroup/cpu.max ]; then echo v2;"
      " cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max;"
      " else echo v1; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us"
      " /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; fi"});
  std::istringstream in(cgroup);
  std::string version;
  in >> version;
  if (version == "v2") {
    std::string quota, period, memory, pids;
    in >> quota >> period >> memory >> pids;
    EXPECT_EQ(std::stoll(quota) * 2, std::stoll(period)) << cgroup;  // 0.5 CPU
    EXPECT_EQ(memory, std::to_string(256ll << 20));
    EXPECT_EQ(pids, "512");
  } else {
    ASSERT_EQ(version, "v1") << cgroup;
    long long quota = 0, period = 0, memory = 0;
    std::string pids;
    in >> quota >> period >> memory >> pids;
    EXPECT_EQ(quota * 2, period) << cgroup;
    EXPECT_EQ(memory, 256ll << 20);
    EXPECT_EQ(pids, "512");
  }
  // nofile clamped to our own hard limit; /dev/shm half the memory.
  rlimit own{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &own), 0);
  EXPECT_EQ(trim(exec(created->id, {"sh", "-c", "ulimit -Hn"})), std::to_string(own.rlim_max));
  EXPECT_EQ(trim(exec(created->id, {"sh", "-c", "df -k /dev/shm | awk 'NR==2 {print $2}'"})),
            std::to_string((128ll << 20) / 1024));
  // Not privileged, the default seccomp filter, the engine's init as PID 1.
  const std::string proc = exec(created->id, {"sh", "-c",
      "grep -E '^(CapEff|Seccomp):' /proc/self/status; cat /proc/1/comm"});
  EXPECT_NE(proc.find("Seccomp:\t2"), std::string::npos) << proc;
  EXPECT_EQ(proc.find("CapEff:\t000001ffffffffff"), std::string::npos) << proc;
  EXPECT_EQ(proc.find("CapEff:\t0000003fffffffff"), std::string::npos) << proc;
  EXPECT_NE(proc.find("docker-init"), std::string::npos) << proc;

  // The environment: NVIDIA_VISIBLE_DEVICES=void, and no secret of the init's config.
  const std::string env = exec(created->id, {"sh", "-c", "tr '\\0' '\\n' < /proc/1/environ"});
  EXPECT_NE(env.find("NVIDIA_VISIBLE_DEVICES=void\n"), std::string::npos) << env;
  EXPECT_NE(env.find("LANG=C.UTF-8"), std::string::npos) << env;
  EXPECT_EQ(env.find(kPasswordHash), std::string::npos) << env;
  EXPECT_EQ(env.find("ssh-ed25519"), std::string::npos) << env;
  EXPECT_EQ(env.find("/.gpucloud/config"), std::string::npos) << env;
  // The init and its config are read-only inside.
  EXPECT_NE(go(driver_->exec_run(created->id, {"sh", "-c", "echo x > /.gpucloud/config/y"}, 10s))
                ->exit_code, 0);
}

TEST_F(DockerDriverTest, DOCKER_CpusAboveHostAreCapped) {
  auto s = spec("capped");
  s.cpus = 10'000;
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  auto status = go(driver_->inspect(id));
  ASSERT_TRUE(status);
  EXPECT_EQ(status->nano_cpus, std::int64_t{std::thread::hardware_concurrency()} * 1'000'000'000);
  EXPECT_TRUE(status->running);
}

TEST_F(DockerDriverTest, DOCKER_SshLoginWithGeneratedKeyAndHostKeyMatches) {
  GPUCLOUD_NEED("docker", shell("command -v ssh").first == 0, "no ssh client installed");
  const std::string key = client_key();
  auto s = spec("ssh");
  const auto known_hosts = (work_dir_ / "known_hosts_ssh").string();

  const auto t0 = Clock::now();
  auto created = go(driver_->create(s));
  ASSERT_TRUE(created) << error_text(created.error());
  ASSERT_TRUE(go(driver_->start(created->id)));
  const double to_started = ms_since(t0);
  int rc = -1;
  std::string out;
  while (ms_since(t0) < 15'000) {
    std::tie(rc, out) = shell(ssh_command(s.ipv4, known_hosts, "echo ssh-ok; hostname"));
    if (rc == 0) break;
    std::this_thread::sleep_for(20ms);
  }
  const double to_ssh = ms_since(t0);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "ssh-ok\nssh\n");
  std::cout << "[ timing ] create -> started: " << to_started << " ms; create -> SSH login ok: "
            << to_ssh << " ms\n";
  RecordProperty("create_to_ssh_ms", std::to_string(to_ssh));

  // The host key ssh saw = the one in the container = the one the init logged.
  std::ifstream kh(known_hosts);
  std::string host, type, blob;
  kh >> host >> type >> blob;
  EXPECT_EQ(host, s.ipv4);
  EXPECT_EQ(type, "ssh-ed25519");
  const std::string pub = exec(created->id, {"cat", "/etc/ssh/ssh_host_ed25519_key.pub"});
  EXPECT_EQ(pub.rfind(type + " " + blob, 0), 0u) << pub;
  auto log = go(driver_->logs(created->id, 100));
  ASSERT_TRUE(log) << error_text(log.error());
  auto logged = gpucloud::agent::find_host_key(*log);
  ASSERT_TRUE(logged) << *log;
  EXPECT_EQ(*logged, type + " " + blob);
  // Only the ed25519 key was made (no ssh-keygen -A).
  EXPECT_EQ(trim(exec(created->id, {"sh", "-c", "ls /etc/ssh/ | grep -c '^ssh_host_.*_key$'"})), "1");

  // Password login with the configured hash works too.
  const auto askpass = work_dir_ / "askpass.sh";
  std::ofstream(askpass) << "#!/bin/sh\necho pw123\n";
  fs::permissions(askpass, fs::perms::owner_all);
  auto [prc, pout] = shell(
      "SSH_ASKPASS=" + askpass.string() + " SSH_ASKPASS_REQUIRE=force DISPLAY=none setsid -w "
      "ssh -o PreferredAuthentications=password -o PubkeyAuthentication=no -o LogLevel=ERROR"
      " -o ConnectTimeout=2 -o UserKnownHostsFile=" + known_hosts + " root@" + s.ipv4 +
      " 'echo password-ok' </dev/null 2>&1");
  EXPECT_EQ(prc, 0) << pout;
  EXPECT_EQ(pout, "password-ok\n");
}

TEST_F(DockerDriverTest, DOCKER_StopStartKeepsFilesystemAndHostKey) {
  client_key();  // the config dir holds keys, so sshd runs and a host key is made
  auto s = spec("stopstart");
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  exec(id, {"sh", "-c", "echo kept > /root/marker.txt"});
  // The init writes the host key before it execs sshd; wait for it.
  std::string key_before;
  for (int i = 0; i < 100 && key_before.empty(); ++i) {
    auto r = go(driver_->exec_run(id, {"cat", "/etc/ssh/ssh_host_ed25519_key.pub"}, 10s));
    if (r && r->exit_code == 0) key_before = r->out;
    else std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(key_before.empty());

  const auto t0 = Clock::now();
  ASSERT_TRUE(go(driver_->stop(id, 10s)));
  std::cout << "[ timing ] stop: " << ms_since(t0) << " ms\n";
  auto stopped = go(driver_->inspect(id));
  ASSERT_TRUE(stopped);
  EXPECT_FALSE(stopped->running);
  EXPECT_EQ(stopped->state, "exited");
  EXPECT_FALSE(stopped->finished_at.empty());
  EXPECT_EQ(stopped->ipv4, s.ipv4);  // the fixed address is kept while stopped
  EXPECT_TRUE(go(driver_->stop(id, 1s)));  // stopping a stopped container is fine

  // exec needs a running container.
  auto refused = go(driver_->exec_capture(id, {"true"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);

  // A key the user added by hand, outside the init's managed block, must survive a boot.
  ASSERT_TRUE(go(driver_->start(id)));
  exec(id, {"sh", "-c", "echo 'ssh-ed25519 AAAAC3userkey user@laptop' >> /root/.ssh/authorized_keys"});
  ASSERT_TRUE(go(driver_->stop(id, 10s)));
  ASSERT_TRUE(go(driver_->start(id)));
  EXPECT_TRUE(go(driver_->start(id)));  // starting a running one is fine
  const std::string keys = exec(id, {"cat", "/root/.ssh/authorized_keys"});
  EXPECT_NE(keys.find("AAAAC3userkey user@laptop"), std::string::npos) << keys;
  EXPECT_EQ(keys.find("edits between these lines"), keys.rfind("edits between these lines")) << keys;
  EXPECT_NE(keys.find("gpucloud-test"), std::string::npos) << keys;
  EXPECT_EQ(trim(exec(id, {"stat", "-c", "%a", "/root/.ssh/authorized_keys", "/root/.ssh"})), "600\n700");
  EXPECT_EQ(exec(id, {"cat", "/root/marker.txt"}), "kept\n");
  EXPECT_EQ(exec(id, {"cat", "/etc/ssh/ssh_host_ed25519_key.pub"}), key_before);
  auto running = go(driver_->inspect(id));
  ASSERT_TRUE(running);
  EXPECT_TRUE(running->running);
  EXPECT_EQ(running->ipv4, s.ipv4);
}

TEST_F(DockerDriverTest, DOCKER_ImageWithoutSshdStaysUpForExec) {
  auto s = spec("nosshd");
  // The base image with its sshd made unusable, then the init as usual.
  s.command = {"sh", "-c", "chmod -x /usr/sbin/sshd && exec /bin/sh /.gpucloud/init"};
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  std::string log;
  for (int i = 0; i < 100 && log.find("no sshd") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
    log = go(driver_->logs(id, 0)).value_or("");
  }
  EXPECT_NE(log.find("no sshd in this image"), std::string::npos) << log;
  EXPECT_EQ(exec(id, {"echo", "reachable"}), "reachable\n");
  const auto t0 = Clock::now();
  ASSERT_TRUE(go(driver_->stop(id, 10s)));
  EXPECT_LT(ms_since(t0), 5000);  // the init's wait loop ends on SIGTERM, no 10 s kill
  auto status = go(driver_->inspect(id));
  ASSERT_TRUE(status);
  EXPECT_EQ(status->exit_code, 0);
}

TEST_F(DockerDriverTest, DOCKER_ContainerExitingByItselfShowsExitCode) {
  auto s = spec("exits");
  s.command = {"sh", "-c", "echo bye; exit 3"};
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  auto status = go(driver_->wait(id, 10s));
  ASSERT_TRUE(status) << error_text(status.error());
  EXPECT_FALSE(status->running);
  EXPECT_EQ(status->exit_code, 3);
  EXPECT_EQ(status->state, "exited");
  EXPECT_FALSE(status->oom_killed);
  EXPECT_FALSE(status->finished_at.empty());
  auto log = go(driver_->logs(id, 0));
  ASSERT_TRUE(log);
  EXPECT_EQ(*log, "bye\n");

  // wait on a running container ends at its timeout, still running.
  auto s2 = spec("waits");
  s2.command = {"sleep", "60"};
  const std::string id2 = launch(s2);
  const auto t0 = Clock::now();
  auto still = go(driver_->wait(id2, 300ms));
  ASSERT_TRUE(still) << error_text(still.error());
  EXPECT_TRUE(still->running);
  EXPECT_LT(ms_since(t0), 5000);
}

TEST_F(DockerDriverTest, DOCKER_ListByLabelRemoveAndRecover) {
  const std::string group = random_hex(6);
  auto a = spec("list-a");
  a.labels["gpucloud.test-group"] = group;
  a.command = {"sleep", "60"};
  auto b = spec("list-b");
  b.labels["gpucloud.test-group"] = group;
  const std::string id_a = launch(a);
  auto created_b = go(driver_->create(b));  // created, never started
  ASSERT_TRUE(created_b);
  const std::string id_b = created_b->id;

  auto listed = go(driver_->list({{"gpucloud.installation", installation_},
                                   {"gpucloud.test-group", group}}));
  ASSERT_TRUE(listed) << error_text(listed.error());
  ASSERT_EQ(listed->size(), 2u);
  std::map<std::string, gpucloud::agent::ContainerStatus> by_name;
  for (auto& c : *listed) by_name[c.name] = c;
  EXPECT_TRUE(by_name.at(a.name).running);
  EXPECT_EQ(by_name.at(a.name).ipv4, a.ipv4);
  EXPECT_FALSE(by_name.at(b.name).running);
  EXPECT_EQ(by_name.at(b.name).state, "created");

  // Creating the same name again: conflict.
  auto again = go(driver_->create(b));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::conflict);

  // Re-attach from persisted state: by id, by name, by labels.
  DriverState state;
  state.container_id = id_a;
  state.container_name = a.name;
  state.labels = {{"gpucloud.installation", installation_}, {"gpucloud.instance", "list-a"}};
  auto decoded = gpucloud::agent::decode_driver_state(gpucloud::agent::encode_driver_state(state));
  ASSERT_TRUE(decoded);
  auto found = go(driver_->recover(*decoded));
  ASSERT_TRUE(found) << error_text(found.error());
  EXPECT_TRUE(found->exists);
  EXPECT_EQ(found->id, id_a);
  decoded->container_id = "0000000000000000deadbeef";
  found = go(driver_->recover(*decoded));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, id_a);
  decoded->container_name = "gpucloud-no-such-container";
  found = go(driver_->recover(*decoded));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, id_a);

  ASSERT_TRUE(go(driver_->remove(id_a)));
  ASSERT_TRUE(go(driver_->remove(id_b)));
  EXPECT_TRUE(go(driver_->remove(id_b)));  // already gone: fine
  auto gone = go(driver_->inspect(id_a));
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->exists);
  found = go(driver_->recover(*decoded));
  ASSERT_TRUE(found);
  EXPECT_FALSE(found->exists);
  listed = go(driver_->list({{"gpucloud.test-group", group}}));
  ASSERT_TRUE(listed);
  EXPECT_TRUE(listed->empty());
}

TEST_F(DockerDriverTest, DOCKER_ExecCapture) {
  auto s = spec("exec");
  s.command = {"sleep", "60"};
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(exec(id, {"echo", "hello", "world"}), "hello world\n");
  auto r = go(driver_->exec_run(id, {"sh", "-c", "echo out; echo err >&2; exit 5"}, 10s));
  ASSERT_TRUE(r) << error_text(r.error());
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  auto failed = go(driver_->exec_capture(id, {"sh", "-c", "echo nope >&2; exit 1"}));
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().detail.find("nope"), std::string::npos);
  // Output bigger than one read.
  EXPECT_EQ(exec(id, {"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a"}).size(), 300000u);
  // A command that does not finish in time.
  auto slow = go(driver_->exec_run(id, {"sleep", "30"}, 300ms));
  ASSERT_FALSE(slow);
  EXPECT_EQ(slow.error().code, ErrorCode::unavailable);
  auto missing = go(driver_->exec_capture("gpucloud-no-such-container", {"true"}));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}

// Reads from the terminal until `marker` has appeared; everything read.
std::string read_until(net::io_context& ioc, TerminalSession& term, const std::string& marker,
                       std::chrono::milliseconds limit = 10s) {
  std::string seen;
  const auto deadline = Clock::now() + limit;
  while (seen.find(marker) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) {
      ADD_FAILURE() << "no '" << marker << "' in terminal output: " << seen;
      break;
    }
    auto chunk = run(ioc, term.read(), left, [&term] { term.close(); });
    if (!chunk) {
      ADD_FAILURE() << error_text(chunk.error());
      break;
    }
    if (chunk->empty()) break;  // closed
    seen += *chunk;
  }
  return seen;
}

TEST_F(DockerDriverTest, DOCKER_HijackedTtyExecEchoesAndResizes) {
  auto s = spec("tty");
  s.command = {"sleep", "60"};
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  auto session = go(driver_->exec_tty(id, {"/bin/sh"}, 24, 80, {}));
  ASSERT_TRUE(session) << error_text(session.error());
  auto& term = **session;

  ASSERT_TRUE(go(term.write("stty size; echo mark-$((6*7)); echo term=$TERM\n")));
  std::string out = read_until(ioc_, term, "term=xterm-256color");
  EXPECT_NE(out.find("24 80"), std::string::npos) << out;
  EXPECT_NE(out.find("mark-42"), std::string::npos) << out;

  ASSERT_TRUE(go(term.resize(40, 100)));
  ASSERT_TRUE(go(term.write("stty size; echo resized-$((1+1))\n")));
  out = read_until(ioc_, term, "resized-2");
  EXPECT_NE(out.find("40 100"), std::string::npos) << out;

  ASSERT_TRUE(go(term.write("exit 7\n")));
  for (int i = 0; i < 100; ++i) {  // read on until the shell has closed the terminal
    auto chunk = run(ioc_, term.read(), 5s, [&term] { term.close(); });
    ASSERT_TRUE(chunk) << error_text(chunk.error());
    if (chunk->empty()) break;
  }
  auto code = go(term.exit_code());
  ASSERT_TRUE(code) << error_text(code.error());
  EXPECT_EQ(*code, 7);
}

TEST_F(DockerDriverTest, DOCKER_EngineClientExecPrimitives) {
  auto s = spec("prims");
  s.command = {"sleep", "60"};
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  auto& engine = driver_->engine();
  docker::ExecConfig config;
  config.cmd = {"sh", "-c", "read line; stty size; echo got-$line"};
  config.tty = true;
  config.attach_stdin = true;
  auto exec_id = go(engine.exec_create(id, config));
  ASSERT_TRUE(exec_id) << error_text(exec_id.error());
  auto conn = go(engine.exec_start_hijacked(*exec_id, true));
  ASSERT_TRUE(conn) << error_text(conn.error());
  Status resized = gpucloud::fail(ErrorCode::internal, "not tried");
  for (int i = 0; i < 50 && !resized; ++i) {
    resized = go(engine.exec_resize(*exec_id, 33, 111));
    if (!resized) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(resized) << error_text(resized.error());
  boost::system::error_code ec;
  net::write(conn->socket, net::buffer(std::string("abc\n")), ec);
  ASSERT_FALSE(ec) << ec.message();
  std::string all = conn->buffered;
  std::array<char, 4096> buf{};
  conn->socket.non_blocking(false);
  for (;;) {  // blocking reads are fine in a test: the process exits by itself
    const std::size_t n = conn->socket.read_some(net::buffer(buf), ec);
    all.append(buf.data(), n);
    if (ec) break;
  }
  EXPECT_NE(all.find("33 111"), std::string::npos) << all;
  EXPECT_NE(all.find("got-abc"), std::string::npos) << all;
  auto inspected = go(engine.exec_inspect(*exec_id));
  ASSERT_TRUE(inspected);
  EXPECT_EQ(inspected->exit_code, 0);
  auto bad = go(engine.exec_resize("no-such-exec", 10, 10));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::not_found);
}

TEST_F(DockerDriverTest, DOCKER_NetworkIsIdempotentAndKeepsInstancesApart) {
  NetworkSpec n;
  n.name = *network_;
  n.subnet = prefix_ + "0/24";
  auto again = go(driver_->ensure_network(n));
  ASSERT_TRUE(again) << error_text(again.error());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->subnet, n.subnet);
  EXPECT_EQ(again->bridge_name.rfind("br-", 0), 0u);
  EXPECT_EQ(again->mtu, 1400) << "the MTU the network was made with";
  n.subnet = "10.99.99.0/24";
  auto clash = go(driver_->ensure_network(n));
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().code, ErrorCode::conflict);

  // Two instances on the network: the host reaches both, they do not reach each other.
  client_key();
  auto a = spec("icc-a");
  auto b = spec("icc-b");
  const std::string id_a = launch(a);
  const std::string id_b = launch(b);
  ASSERT_FALSE(id_a.empty());
  ASSERT_FALSE(id_b.empty());
  const std::string probe =
      "import socket,sys\n"
      "s=socket.socket(); s.settimeout(1.5)\n"
      "try:\n s.connect((sys.argv[1],22)); print('open')\n"
      "except Exception as e: print('closed', e)\n";
  // Wait until b's sshd listens (seen from the host), then probe from a.
  bool listening = false;
  for (int i = 0; i < 200 && !listening; ++i) {
    listening = shell("python3 -c \"import socket; socket.create_connection(('" + b.ipv4 +
                      "', 22), 0.5)\" 2>/dev/null").first == 0;
    if (!listening) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(listening);
  auto probe_out = go(driver_->exec_run(id_a, {"python3", "-c", probe, b.ipv4}, 10s));
  ASSERT_TRUE(probe_out) << error_text(probe_out.error());
  EXPECT_EQ(probe_out->out.rfind("closed", 0), 0u) << probe_out->out;
  // The instance's interface has the bridge's MTU, not the engine's 1500.
  auto mtu = go(driver_->exec_run(id_a, {"cat", "/sys/class/net/eth0/mtu"}, 10s));
  ASSERT_TRUE(mtu) << error_text(mtu.error());
  EXPECT_EQ(mtu->out, "1400\n");
}

TEST_F(DockerDriverTest, DOCKER_ImagePresentAndCommit) {
  auto present = go(driver_->image_present(test_image()));
  ASSERT_TRUE(present);
  EXPECT_TRUE(*present);
  auto absent = go(driver_->image_present("gpucloud/no-such-image:0"));
  ASSERT_TRUE(absent);
  EXPECT_FALSE(*absent);

  // Inspect: the engine's id and size for a present image, nothing for an absent one.
  auto info = go(driver_->image_inspect(test_image()));
  ASSERT_TRUE(info) << error_text(info.error());
  ASSERT_TRUE(info->has_value());
  EXPECT_TRUE((*info)->id.starts_with("sha256:")) << (*info)->id;
  EXPECT_GT((*info)->size_bytes, 1'000'000);
  auto no_info = go(driver_->image_inspect("gpucloud/no-such-image:0"));
  ASSERT_TRUE(no_info);
  EXPECT_FALSE(no_info->has_value());

  // A pull from a registry that cannot be reached fails with the engine's reason.
  auto pull = go(driver_->pull_image("gpucloud-no-such-registry.invalid/nothing:0", 60s), 90s);
  ASSERT_FALSE(pull);
  EXPECT_EQ(pull.error().code, ErrorCode::unavailable);
  EXPECT_NE(pull.error().detail.find("gpucloud-no-such-registry.invalid/nothing:0"), std::string::npos) << pull.error().detail;

  client_key();
  auto s = spec("commit");
  const std::string id = launch(s);
  ASSERT_FALSE(id.empty());
  exec(id, {"sh", "-c", "echo saved > /root/saved.txt"});
  // Save-image removes the instance's host keys first (they must not be shared).
  exec(id, {"sh", "-c", "rm -f /etc/ssh/ssh_host_*"});
  const std::string tag = "test-" + random_hex(8);
  auto image = go(driver_->commit(id, "gpucloud/test-saved", tag,
                                  {{"gpucloud.installation", installation_}}), 120s);
  ASSERT_TRUE(image) << error_text(image.error());
  const std::string ref = "gpucloud/test-saved:" + tag;
  EXPECT_TRUE(*go(driver_->image_present(ref)));
  auto s2 = spec("from-saved");
  s2.image = ref;
  s2.command = {"sh", "-c", "cat /root/saved.txt; ls /etc/ssh | grep -c ssh_host_ || true"};
  const std::string id2 = launch(s2);
  auto done = go(driver_->wait(id2, 10s));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(*go(driver_->logs(id2, 0)), "saved\n0\n");
  ASSERT_TRUE(go(driver_->remove(id2)));
  EXPECT_TRUE(go(driver_->remove_image(ref)));
  EXPECT_FALSE(*go(driver_->image_present(ref)));

  // Flatten (save-image's fallback, a rebuild of a deep image) exports and imports the whole
  // base image: FlattenTest (rebuild_test.cpp) drives it through gpucloudd and checks the one layer.
}

}  // namespace
