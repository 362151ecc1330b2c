// InstanceRuntime without an engine: what it decides before the engine is asked anything.
#include "agent/instance_runtime.h"

#include <filesystem>
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
