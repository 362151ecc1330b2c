// InstanceRuntime without an engine: what it decides before the engine is asked anything.
#include "agent/instance_runtime.h"

#include <filesystem>
#include <mutex>
#include <random>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/local_agent.h"
#include "agent/runtime/docker_engine_driver.h"
#include "config/config.h"

namespace gpucloud::agent {
namespace {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

std::string random_hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back("0123456789abcdef"[rng() % 16]);
  return out;
}

template <class T>
T run(net::io_context& io, net::awaitable<T> work) {
  std::optional<T> out;
  net::co_spawn(io, std::move(work), [&](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out.emplace(std::move(v));
  });
  io.restart();
  io.run();
  return std::move(*out);
}

config::Config one_host_config() {
  config::Config config;
  config::Host host;
  host.name = "test-host";
  host.zone = "zone-a";
  host.cpu = 2;
  host.memory_gib = 4;
  config.hosts = {host};
  return config;
}

// A runtime on a state directory that already holds instance i1 at generation 5 and a removed
// instance i2 (removed at generation 7), with an engine that is not there: a command the
// fence lets through fails later, at the engine, with `unavailable`.
class InstanceRuntimeFence : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpucloud-fence-" + random_hex(10));
    AgentStateStore store((dir_ / "state").string());
    InstanceRecord record;
    record.desired.instance_id = "i1";
    record.desired.name = "box";
    record.desired.image = "img";
    record.ipv4 = "10.200.0.2";
    record.generation = 5;
    ASSERT_TRUE(store.save_instance(record));
    ASSERT_TRUE(store.save_removed_generation("i2", 7));

    DockerEngineDriver::Options options;
    options.engine.socket_path = (dir_ / "no-engine.sock").string();
    options.engine.timeout = std::chrono::milliseconds(2000);
    auto driver = std::make_unique<DockerEngineDriver>(io_.get_executor(), options);
    runtime_ = std::make_unique<InstanceRuntime>(io_.get_executor(), "fence", (dir_ / "state").string(),
                                                 std::move(driver), "", "gpucloud-fence-unused");
    agent_ = std::make_unique<LocalAgent>(io_.get_executor(), one_host_config());
    runtime_->register_handlers(*agent_);
  }
  void TearDown() override {
    agent_.reset();
    runtime_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  CommandOutcome execute(const std::string& kind, json::object desired) {
    Command c{"c-" + random_hex(8), "test-host", kind, std::move(desired)};
    auto outcome = run(io_, agent_->execute(std::move(c)));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : CommandOutcome{};
  }
  static json::object ensure(const std::string& id, std::int64_t generation) {
    return json::object{{"instance_id", id}, {"name", "box"}, {"state", "stopped"}, {"image", "img"},
                        {"cpu", 1},          {"memory_gib", 1}, {"generation", generation}};
  }

  fs::path dir_;
  net::io_context io_;
  std::unique_ptr<InstanceRuntime> runtime_;
  std::unique_ptr<LocalAgent> agent_;  // destroyed first (holds the runtime's handlers)
};

TEST_F(InstanceRuntimeFence, AnOlderGenerationIsRefusedBeforeAnythingChanges) {
  const auto stale = execute("instance.ensure", ensure("i1", 4));
  EXPECT_FALSE(stale.ok);
  EXPECT_EQ(stale.error_code, "conflict") << stale.error_detail;
  EXPECT_NE(stale.error_detail.find("stale command"), std::string::npos) << stale.error_detail;
  EXPECT_NE(stale.error_detail.find("generation 5"), std::string::npos) << stale.error_detail;

  // The same or a newer generation passes the fence (and then meets the missing engine).
  for (std::int64_t g : {5, 6}) {
    const auto through = execute("instance.ensure", ensure("i1", g));
    EXPECT_FALSE(through.ok);
    EXPECT_EQ(through.error_code, "unavailable") << g << ": " << through.error_detail;
  }
  // No generation: not fenced.
  json::object unfenced = ensure("i1", 0);
  unfenced.erase("generation");
  EXPECT_EQ(execute("instance.ensure", unfenced).error_code, "unavailable");

  const auto stale_remove = execute("instance.remove", json::object{{"instance_id", "i1"}, {"generation", 3}});
  EXPECT_FALSE(stale_remove.ok);
  EXPECT_EQ(stale_remove.error_code, "conflict") << stale_remove.error_detail;
  EXPECT_TRUE(fs::exists(dir_ / "state" / "instances" / "i1" / "instance.json"));
}

TEST_F(InstanceRuntimeFence, AStaleEnsureCannotBringBackARemovedInstance) {
  const auto stale = execute("instance.ensure", ensure("i2", 6));
  EXPECT_FALSE(stale.ok);
  EXPECT_EQ(stale.error_code, "conflict") << stale.error_detail;
  EXPECT_FALSE(fs::exists(dir_ / "state" / "instances" / "i2"));
}

TEST_F(InstanceRuntimeFence, AGenerationMustBeANonNegativeInteger) {
  for (json::value bad : {json::value(-1), json::value("5"), json::value(1.5)}) {
    json::object d = ensure("i1", 0);
    d["generation"] = bad;
    const auto outcome = execute("instance.ensure", d);
    EXPECT_EQ(outcome.error_code, "invalid_argument") << json::serialize(bad) << ": " << outcome.error_detail;
  }
}

// A running instance i1 (tcp 30022 → 22 from 0.0.0.0/0, generation 5) recorded in the state
// directory, an engine that is down, and the table's applies captured instead of nftables.
class InstanceRuntimeFirewallFirst : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpucloud-fwfirst-" + random_hex(10));
    AgentStateStore store((dir_ / "state").string());
    InstanceRecord record;
    record.desired = spec_json_to_spec(desired({"0.0.0.0/0"}, 5));
    record.ipv4 = "10.200.0.2";
    record.generation = 5;
    ASSERT_TRUE(store.save_instance(record));

    DockerEngineDriver::Options options;
    options.engine.socket_path = (dir_ / "no-engine.sock").string();
    options.engine.timeout = std::chrono::milliseconds(2000);
    auto driver = std::make_unique<DockerEngineDriver>(io_.get_executor(), options);
    InstanceRuntime::Options runtime_options;
    runtime_options.apply_ports = [this](const std::vector<firewall::PublishedPort>& ports) -> Status {
      std::lock_guard lock(mutex_);
      applied_.push_back(ports);
      return ok();
    };
    runtime_ = std::make_unique<InstanceRuntime>(io_.get_executor(), "fwfirst", (dir_ / "state").string(),
                                                 std::move(driver), "", "gpucloud-fwfirst-unused", runtime_options);
    agent_ = std::make_unique<LocalAgent>(io_.get_executor(), one_host_config());
    runtime_->register_handlers(*agent_);
  }
  void TearDown() override {
    agent_.reset();
    runtime_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static json::object desired(std::vector<std::string> allowed, std::int64_t generation, double cpu = 1) {
    json::array sources;
    for (auto& a : allowed) sources.emplace_back(a);
    json::array ports{json::object{
        {"container_port", 22}, {"host_port", 30022}, {"protocol", "tcp"}, {"allowed", std::move(sources)}}};
    return json::object{{"instance_id", "i1"}, {"name", "box"},    {"state", "running"},
                        {"image", "img"},      {"cpu", cpu},       {"memory_gib", 1},
                        {"ports", std::move(ports)}, {"generation", generation}};
  }
  static InstanceSpec spec_json_to_spec(const json::object& d) {
    auto spec = instance_spec_from_json(d);
    EXPECT_TRUE(spec) << spec.error().detail;
    return spec ? *spec : InstanceSpec{};
  }
  CommandOutcome execute(json::object d) {
    Command c{"c-" + random_hex(8), "test-host", "instance.ensure", std::move(d)};
    auto outcome = run(io_, agent_->execute(std::move(c)));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : CommandOutcome{};
  }
  // The sources of tcp/30022 in the last table applied ("-" when none was applied or the
  // port was not in it).
  std::string last_sources() {
    std::lock_guard lock(mutex_);
    if (applied_.empty()) return "-";
    for (const auto& p : applied_.back()) {
      if (p.host_port != 30022 || p.protocol != "tcp") continue;
      std::string out;
      for (const auto& a : p.allowed) out += (out.empty() ? "" : ",") + a.cidr;
      return out;
    }
    return "-";
  }
  bool ever_applied(const std::string& sources) {
    std::lock_guard lock(mutex_);
    for (const auto& table : applied_)
      for (const auto& p : table) {
        std::string out;
        for (const auto& a : p.allowed) out += (out.empty() ? "" : ",") + a.cidr;
        if (out == sources) return true;
      }
    return false;
  }
  InstanceRecord saved_record() {
    std::vector<std::string> problems;
    auto records = AgentStateStore((dir_ / "state").string()).load_instances(&problems);
    EXPECT_TRUE(records && records->size() == 1);
    return records && !records->empty() ? records->front() : InstanceRecord{};
  }

  fs::path dir_;
  net::io_context io_;
  std::mutex mutex_;
  std::vector<std::vector<firewall::PublishedPort>> applied_;
  std::unique_ptr<InstanceRuntime> runtime_;
  std::unique_ptr<LocalAgent> agent_;
};

TEST_F(InstanceRuntimeFirewallFirst, ASourcesChangeIsAppliedWhileTheEngineIsDown) {
  const auto outcome = execute(desired({"203.0.113.0/24", "198.51.100.7/32"}, 6));
  // The engine steps fail (nothing answers on the socket) ...
  EXPECT_FALSE(outcome.ok);
  EXPECT_EQ(outcome.error_code, "unavailable") << outcome.error_detail;
  // ... but the table was applied with the new sources, and is not taken back.
  EXPECT_EQ(last_sources(), "203.0.113.0/24,198.51.100.7/32");
  const auto record = saved_record();
  EXPECT_EQ(record.generation, 6);
  ASSERT_EQ(record.desired.ports.size(), 1u);
  EXPECT_EQ(record.desired.ports[0].allowed, (std::vector<std::string>{"203.0.113.0/24", "198.51.100.7/32"}));
  EXPECT_EQ(record.ipv4, "10.200.0.2");

  // The next change too; an older command cannot bring the previous sources back.
  EXPECT_EQ(execute(desired({}, 7)).error_code, "unavailable");
  EXPECT_EQ(last_sources(), "");
  const auto stale = execute(desired({"0.0.0.0/0"}, 6));
  EXPECT_EQ(stale.error_code, "conflict") << stale.error_detail;
  EXPECT_EQ(last_sources(), "");
}

TEST_F(InstanceRuntimeFirewallFirst, PortsChangedWithAnythingElseWaitForTheEngine) {
  // Another CPU count needs the container: the whole ensure, which stops at the engine.
  const auto outcome = execute(desired({"203.0.113.0/24"}, 6, 2));
  EXPECT_EQ(outcome.error_code, "unavailable") << outcome.error_detail;
  EXPECT_FALSE(ever_applied("203.0.113.0/24"));
  EXPECT_EQ(saved_record().generation, 5);
  EXPECT_EQ(saved_record().desired.ports[0].allowed, std::vector<std::string>{"0.0.0.0/0"});
}

TEST_F(InstanceRuntimeFirewallFirst, AFailedApplyKeepsTheOldRecord) {
  agent_.reset();
  runtime_.reset();
  // nft refusing: the record stays as it was and the command says why.
  DockerEngineDriver::Options options;
  options.engine.socket_path = (dir_ / "no-engine.sock").string();
  InstanceRuntime::Options runtime_options;
  runtime_options.apply_ports = [](const std::vector<firewall::PublishedPort>&) -> Status {
    return fail(ErrorCode::internal, "nft -f failed (exit 1): test");
  };
  runtime_ = std::make_unique<InstanceRuntime>(io_.get_executor(), "fwfirst", (dir_ / "state").string(),
                                               std::make_unique<DockerEngineDriver>(io_.get_executor(), options), "",
                                               "gpucloud-fwfirst-unused", runtime_options);
  agent_ = std::make_unique<LocalAgent>(io_.get_executor(), one_host_config());
  runtime_->register_handlers(*agent_);
  const auto outcome = execute(desired({"203.0.113.0/24"}, 6));
  EXPECT_EQ(outcome.error_code, "internal") << outcome.error_detail;
  EXPECT_NE(outcome.error_detail.find("nft -f failed"), std::string::npos) << outcome.error_detail;
  EXPECT_EQ(saved_record().generation, 5);
  EXPECT_EQ(saved_record().desired.ports[0].allowed, std::vector<std::string>{"0.0.0.0/0"});
}

// A SIGTERM while a command waits on the engine under an instance's lock (here a remove,
// whose engine does not answer): the daemon destroys the agent and the runtime, then the
// io_context with the command suspended in it. The command's guard must not unlock a freed
// lock (under ASan this was a heap-use-after-free, as DiskRuntime's was).
TEST(InstanceRuntimeShutdown, ACommandSuspendedOnTheEngineOutlivesTheRuntime) {
  const fs::path dir = fs::temp_directory_path() / ("gpucloud-shutdown-" + random_hex(10));
  fs::create_directories(dir);
  AgentStateStore store((dir / "state").string());
  InstanceRecord record;
  record.desired.instance_id = "i1";
  record.desired.name = "box";
  record.desired.image = "img";
  record.container_id = "c-1";
  record.generation = 1;
  ASSERT_TRUE(store.save_instance(record));
  // An engine that takes the connection (its backlog) and never answers.
  net::io_context engine_io;
  net::local::stream_protocol::acceptor silent(engine_io, net::local::stream_protocol::endpoint((dir / "slow.sock").string()));
  auto io = std::make_unique<net::io_context>();
  DockerEngineDriver::Options options;
  options.engine.socket_path = (dir / "slow.sock").string();
  options.engine.timeout = std::chrono::seconds(30);
  auto runtime = std::make_unique<InstanceRuntime>(io->get_executor(), "shutdown", (dir / "state").string(),
                                                   std::make_unique<DockerEngineDriver>(io->get_executor(), options), "",
                                                   "gpucloud-shutdown-unused");
  auto agent = std::make_unique<LocalAgent>(io->get_executor(), one_host_config());
  runtime->register_handlers(*agent);
  bool finished = false;
  Command remove{"c-remove", "test-host", "instance.remove", json::object{{"instance_id", "i1"}, {"generation", 2}}};
  net::co_spawn(*io, agent->execute(std::move(remove)), [&](std::exception_ptr, Result<CommandOutcome>) { finished = true; });
  io->run_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(finished) << "the remove was to wait on the engine";
  agent.reset();
  runtime.reset();
  io.reset();  // destroys the suspended remove, whose guard unlocks the instance's lock
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

TEST(InstanceRecordJson, KeepsTheGenerationAndReadsOldRecordsAsZero) {
  InstanceRecord r;
  r.desired.instance_id = "i1";
  r.desired.name = "box";
  r.desired.image = "img";
  r.ipv4 = "10.200.0.2";
  r.generation = 42;
  auto back = instance_record_from_json(to_json(r));
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(back->generation, 42);
  auto old = to_json(r);
  old.erase("generation");
  auto old_back = instance_record_from_json(old);
  ASSERT_TRUE(old_back) << old_back.error().detail;
  EXPECT_EQ(old_back->generation, 0);
}

}  // namespace
}  // namespace gpucloud::agent
