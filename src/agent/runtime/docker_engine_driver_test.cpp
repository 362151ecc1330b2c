// DockerEngineDriver without an engine: the create plan (pure) and the request paths it
// sends, against a fake engine on a unix socket that records each request line.
#include "agent/runtime/docker_engine_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/json.hpp>

namespace gpucloud::agent {
namespace {

namespace net = boost::asio;
namespace json = boost::json;
using local = net::local::stream_protocol;

// Accepts connections on a unix socket and answers each request 404 (no body), keeping the
// request lines. Blocking, on its own thread: the driver under test runs on its own loop.
class FakeEngine {
 public:
  static constexpr const char* kNotFound = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  // `answer`: the bytes every request gets back.
  explicit FakeEngine(std::string answer = kNotFound)
      : answer_(std::move(answer)),
        path_((std::filesystem::temp_directory_path() /
               ("gpucloud-fake-engine-" + std::to_string(::getpid()) + "-" +
                std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".sock"))
                  .string()) {
    std::filesystem::remove(path_);
    acceptor_.open();
    acceptor_.bind(local::endpoint(path_));
    acceptor_.listen();
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeEngine() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    // Wake a blocked accept.
    local::socket poke(io_);
    poke.connect(local::endpoint(path_), ignored);
    thread_.join();
    std::filesystem::remove(path_);
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  void serve() {
    for (;;) {
      boost::system::error_code ec;
      local::socket s(io_);
      acceptor_.accept(s, ec);
      if (ec || !acceptor_.is_open()) return;
      std::string head;
      net::read_until(s, net::dynamic_buffer(head), "\r\n\r\n", ec);
      if (ec) continue;
      {
        std::lock_guard lock(mutex_);
        lines_.push_back(head.substr(0, head.find("\r\n")));
      }
      net::write(s, net::buffer(answer_), ec);
    }
  }

  std::string answer_;
  std::string path_;
  net::io_context io_;
  local::acceptor acceptor_{io_};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

template <class T>
T run(net::io_context& io, net::awaitable<T> work) {
  std::optional<T> out;
  net::co_spawn(io, std::move(work), [&](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out.emplace(std::move(v));
  });
  io.run();
  io.restart();
  return std::move(*out);
}

TEST(DockerEngineDriverPaths, ImageReferencesAreOnePercentEncodedSegment) {
  FakeEngine engine;
  net::io_context io;
  DockerEngineDriver::Options options;
  options.engine.socket_path = engine.path();
  DockerEngineDriver driver(io.get_executor(), options);

  const std::string hostile = "evil/../../containers/abc?force=1#x y";
  auto present = run(io, driver.image_present(hostile));
  ASSERT_TRUE(present) << present.error().detail;
  EXPECT_FALSE(*present);
  auto inspected = run(io, driver.image_inspect(hostile));
  ASSERT_TRUE(inspected) << inspected.error().detail;
  auto removed = run(io, driver.remove_image(hostile));
  EXPECT_TRUE(removed) << "404 reads as already gone";
  auto ordinary = run(io, driver.image_present(std::string("gpucloud/base:bookworm-1")));
  ASSERT_TRUE(ordinary);

  const std::string encoded = "evil%2F..%2F..%2Fcontainers%2Fabc%3Fforce%3D1%23x%20y";
  EXPECT_THAT(engine.lines(),
              ::testing::ElementsAre("GET /v1.41/images/" + encoded + "/json HTTP/1.1",
                                     "GET /v1.41/images/" + encoded + "/json HTTP/1.1",
                                     "DELETE /v1.41/images/" + encoded + " HTTP/1.1",
                                     "GET /v1.41/images/gpucloud%2Fbase%3Abookworm-1/json HTTP/1.1"));
}

// The create request the driver would send for `spec` (the init at /opt/gpucloud/init.sh).
Result<DockerEngineDriver::CreatePlan> plan_for(const ContainerSpec& spec) {
  net::io_context io;
  DockerEngineDriver::Options options;
  options.init_path = "/opt/gpucloud/init.sh";
  const DockerEngineDriver driver(io.get_executor(), options);
  return driver.plan_create(spec);
}

TEST(DockerEngineDriverPlan, DropsRawSocketsButKeepsWhatSshdAndAptNeed) {
  ContainerSpec spec;
  spec.name = "gpucloud-x-i1";
  spec.image = "gpucloud/base:bookworm-1";
  spec.cpus = 1;
  auto plan = plan_for(spec);
  ASSERT_TRUE(plan) << plan.error().detail;
  const auto& host = plan->body.at("HostConfig").as_object();
  std::vector<std::string> dropped;
  for (const auto& c : host.at("CapDrop").as_array()) dropped.emplace_back(c.as_string());
  EXPECT_THAT(dropped, ::testing::UnorderedElementsAre("NET_RAW", "MKNOD", "SETPCAP"));
  EXPECT_FALSE(host.contains("CapAdd"));
  EXPECT_EQ(host.at("Sysctls").at("net.ipv4.ping_group_range"), "0 2147483647");
  EXPECT_EQ(host.at("Privileged"), false);
}

TEST(DockerEngineDriverPlan, JoinedContainerSendsNothingTheEngineRefusesInContainerMode) {
  ContainerSpec spec;
  spec.name = "gpucloud-x-i1";
  spec.image = "gpucloud/base:bookworm-1";
  spec.hostname = "box";
  spec.join_network_of = "0123456789ab";
  auto plan = plan_for(spec);
  ASSERT_TRUE(plan) << plan.error().detail;
  const auto& body = plan->body.as_object();
  EXPECT_EQ(body.at("HostConfig").at("NetworkMode"), "container:0123456789ab");
  for (const char* refused : {"Hostname", "Dns", "ExtraHosts", "ExposedPorts", "MacAddress", "NetworkingConfig"})
    EXPECT_FALSE(body.contains(refused)) << refused;
  EXPECT_FALSE(body.at("HostConfig").as_object().contains("PortBindings"));
  spec.network = "gpucloud-x";
  spec.ipv4 = "10.200.0.5";
  EXPECT_FALSE(plan_for(spec)) << "a joined container has no address of its own";
}

TEST(DockerEngineDriverPlan, NetworkHolderDropsEveryCapabilityAndMountsNothing) {
  ContainerSpec spec;
  spec.name = "gpucloud-x-holder-1";
  spec.image = "gpucloud/base:bookworm-1";
  spec.network_holder = true;
  spec.command = {"sleep", "infinity"};
  spec.cpus = 0.1;
  spec.memory_bytes = 16 * 1024 * 1024;
  spec.network = "gpucloud-x";
  spec.ipv4 = "10.200.0.7";
  auto plan = plan_for(spec);
  ASSERT_TRUE(plan) << plan.error().detail;
  const auto& host = plan->body.at("HostConfig").as_object();
  ASSERT_EQ(host.at("CapDrop").as_array().size(), 1u);
  EXPECT_EQ(host.at("CapDrop").as_array()[0], "ALL");
  EXPECT_TRUE(host.at("Mounts").as_array().empty());
  EXPECT_EQ(host.at("RestartPolicy").at("Name"), "no");
  EXPECT_EQ(host.at("NetworkMode"), "gpucloud-x");
  EXPECT_EQ(plan->body.at("NetworkingConfig").at("EndpointsConfig").at("gpucloud-x").at("IPAMConfig").at("IPv4Address"),
            "10.200.0.7");
}

TEST(DockerEngineDriverPlan, BuiltinGpuInjectionSendsDevicesAndNoDeviceRequest) {
  ContainerSpec spec;
  spec.name = "gpucloud-x-i1";
  spec.image = "gpucloud/base:bookworm-1";
  spec.gpu_uuids = {"GPU-aaaa"};
  auto toolkit = plan_for(spec);
  ASSERT_TRUE(toolkit) << toolkit.error().detail;
  EXPECT_TRUE(toolkit->body.at("HostConfig").as_object().contains("DeviceRequests"));
  EXPECT_FALSE(toolkit->body.at("HostConfig").as_object().contains("Devices"));

  spec.gpu_device_request = false;
  spec.devices = {{"/tmp/fake-dev/nvidia3", "/dev/nvidia3"}, {"/tmp/fake-dev/nvidiactl", "/dev/nvidiactl"}};
  auto builtin = plan_for(spec);
  ASSERT_TRUE(builtin) << builtin.error().detail;
  const auto& host = builtin->body.at("HostConfig").as_object();
  EXPECT_FALSE(host.contains("DeviceRequests"));
  const auto& devices = host.at("Devices").as_array();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].at("PathOnHost"), "/tmp/fake-dev/nvidia3");
  EXPECT_EQ(devices[0].at("PathInContainer"), "/dev/nvidia3");
  EXPECT_EQ(devices[0].at("CgroupPermissions"), "rwm");
  bool visible = false;
  for (const auto& e : builtin->body.at("Env").as_array()) visible |= e.as_string() == "NVIDIA_VISIBLE_DEVICES=GPU-aaaa";
  EXPECT_TRUE(visible);

  spec.devices = {{"/tmp/fake-dev/nvidia3", "/etc/passwd"}};
  EXPECT_FALSE(plan_for(spec)) << "a device goes under /dev only";
  spec.devices.clear();
  spec.gpu_uuids.clear();
  auto none = plan_for(spec);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->body.at("HostConfig").as_object().contains("Devices"));
  EXPECT_FALSE(none->body.at("HostConfig").as_object().contains("DeviceRequests"));
}

// The event stream: JSON lines in chunks that cut lines anywhere; only container events count.
TEST(DockerEngineDriverEvents, WatchReadsEventsAcrossChunksAndSendsTheFilter) {
  const std::string die =
      R"({"status":"die","id":"c1","Type":"container","Action":"die","Actor":{"ID":"c1","Attributes":{"gpucloud.instance":"i-1","exitCode":"137"}},"time":1})";
  const std::string holder =
      R"({"Type":"container","Action":"start","Actor":{"ID":"h2","Attributes":{"gpucloud.network-holder":"1"}}})";
  const std::string network = R"({"Type":"network","Action":"connect","Actor":{"ID":"n1","Attributes":{}}})";
  const std::string body = die + "\n" + network + "\n\n" + holder + "\n";
  std::string chunked;
  for (std::size_t at = 0; at < body.size(); at += 37) {  // 37: cuts inside lines and at newlines
    const std::string piece = body.substr(at, 37);
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    chunked += size + piece + "\r\n";
  }
  chunked += "0\r\n\r\n";
  FakeEngine engine("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked);
  net::io_context io;
  DockerEngineDriver::Options options;
  options.engine.socket_path = engine.path();
  DockerEngineDriver driver(io.get_executor(), options);
  std::vector<EngineEvent> events;
  bool connected = false;
  auto ended = run(io, driver.watch_events({{"gpucloud.installation", "abc"}},
                                           [&](EngineEvent e) { events.push_back(std::move(e)); },
                                           [&] { connected = true; }));
  EXPECT_TRUE(ended) << "the engine ending the stream is not an error";
  EXPECT_TRUE(connected);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].action, "die");
  EXPECT_EQ(events[0].id, "c1");
  EXPECT_EQ(events[0].attributes.at("gpucloud.instance"), "i-1");
  EXPECT_EQ(events[1].action, "start");
  EXPECT_EQ(events[1].attributes.at("gpucloud.network-holder"), "1");
  ASSERT_EQ(engine.lines().size(), 1u);
  const std::string line = engine.lines().front();
  EXPECT_EQ(line.rfind("GET /v1.41/events?filters=", 0), 0u) << line;
  for (const char* part : {"%22type%22%3A%5B%22container%22%5D", "gpucloud.installation%3Dabc", "%22die%22", "%22destroy%22"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in " << line;
}

TEST(DockerEngineDriverEvents, AnErrorAnswerOrNoEngineIsAnError) {
  {
    FakeEngine engine;  // 404
    net::io_context io;
    DockerEngineDriver::Options options;
    options.engine.socket_path = engine.path();
    DockerEngineDriver driver(io.get_executor(), options);
    bool connected = false;
    auto s = run(io, driver.watch_events({}, [](EngineEvent) {}, [&] { connected = true; }));
    EXPECT_FALSE(s);
    EXPECT_FALSE(connected);
  }
  net::io_context io;
  DockerEngineDriver::Options options;
  options.engine.socket_path = "/nonexistent/gpucloud-engine.sock";
  DockerEngineDriver driver(io.get_executor(), options);
  auto s = run(io, driver.watch_events({}, [](EngineEvent) {}, [] {}));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::unavailable);
}

TEST(EngineLineSplitter, JoinsPiecesSkipsEmptyLinesAndDropsOversizedOnes) {
  docker::LineSplitter splitter(8);
  std::vector<std::string> lines;
  auto keep = [&](std::string_view l) { lines.emplace_back(l); };
  splitter.feed("ab", keep);
  splitter.feed("c\n\nde", keep);
  splitter.feed("f\n0123456789", keep);  // past 8: dropped whole, up to its newline
  splitter.feed("abc\nxy", keep);
  splitter.feed("z\n", keep);
  EXPECT_THAT(lines, ::testing::ElementsAre("abc", "def", "xyz"));
}

}  // namespace
}  // namespace gpucloud::agent
