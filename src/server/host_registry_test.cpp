// Hosts go `unreachable` when their heartbeats stop and `ready` when they resume: the
// registry against a real store and a fake agent whose heartbeats the test sends, with the
// timeout and the check period shortened (milliseconds, not the default 30 s / 5 s).
#include "core/unique_temp_dir.h"
#include "server/host_registry.h"

#include <filesystem>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "core/time_format.h"
#include "events/events.h"
#include "market/host_admin.h"
#include "market/hosts.h"
#include "store/store.h"

namespace gpucloud::server {
namespace {
namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

class SilentAgent : public agent::HostAgent {
 public:
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    agent::HostInventory h;
    h.name = "node-1";
    h.zone = "zone-a";
    h.cpu = 8;
    h.memory_gib = 32;
    h.port_min = 30000;
    h.port_max = 30099;
    h.engine = "unix:///var/run/docker.sock";
    h.simulated = true;
    h.inventory_source = "simulated";
    h.gpus.push_back(agent::GpuInfo{0, "GPU-sim-0", "RTX 4090", 24LL << 30, "", "ok", true});
    co_return std::vector<agent::HostInventory>{h};
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command) override {
    co_return fail(ErrorCode::unavailable, "no commands here");
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)> sink) override { sink_ = std::move(sink); }
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int, int) override {
    co_return fail(ErrorCode::unavailable, "no terminals here");
  }
  void beat() {
    if (sink_) sink_(agent::Heartbeat{"node-1", ++sequence_, {}, std::nullopt});
  }

 private:
  std::function<void(agent::Heartbeat)> sink_;
  std::uint64_t sequence_ = 0;
};

class HostRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-hostreg");
    auto s = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    config_.currency = "CNY";
    config_.zones.push_back(config::Zone{"zone-a", "local", ""});
    config_.offers.push_back(config::Offer{"RTX 4090", {}, 24, 8, 32, 198, 0, 0});
    config::Host host;
    host.name = "node-1";
    host.zone = "zone-a";
    config_.hosts.push_back(host);
    clock_ = std::make_unique<PlatformClock>(io_.get_executor(), true, system_now());
    auto agent = std::make_unique<SilentAgent>();
    agent_ = agent.get();
    registry_ = std::make_unique<HostRegistry>(io_.get_executor(), config_, *store_, *clock_, std::move(agent), 500ms, 10ms);
  }
  void TearDown() override {
    registry_.reset();
    io_.restart();
    io_.run_for(20ms);  // the cancelled check timer's handler
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs the loop until `done` holds or `limit` passes; returns `done()`.
  template <class Pred>
  bool pump(Pred done, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      io_.restart();
      io_.run_for(2ms);
    }
    return done();
  }
  std::string host_state() {
    auto h = store_->read_now([](store::Database& db) { return market::find_host(db, "node-1"); });
    EXPECT_TRUE(h && *h);
    return h && *h ? (*h)->state : "";
  }
  std::vector<std::string> host_events() {
    auto list = store_->read_now([](store::Database& db) { return events::list(db, events::Query{}); });
    EXPECT_TRUE(list);
    std::vector<std::string> types;
    if (list)
      for (const auto& e : *list)
        if (e.type.rfind("host.", 0) == 0) types.push_back(e.type);
    return types;
  }
  void start() {
    bool started = false;
    Status result = ok();
    asio::co_spawn(io_, registry_->start(), [&](std::exception_ptr e, Status s) {
      started = true;
      result = e ? fail(ErrorCode::internal, "start threw") : std::move(s);
    });
    ASSERT_TRUE(pump([&] { return started; }, 5s));
    ASSERT_TRUE(result) << result.error().detail;
  }

  asio::io_context io_;
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
  std::unique_ptr<PlatformClock> clock_;
  SilentAgent* agent_ = nullptr;
  std::unique_ptr<HostRegistry> registry_;
};

TEST_F(HostRegistryTest, AHostWhoseHeartbeatsStopIsUnreachableAndReadyWhenTheyResume) {
  start();
  EXPECT_EQ(host_state(), "ready");

  // Heartbeats every 30 ms for over two timeouts: it stays ready.
  auto until = std::chrono::steady_clock::now() + 1200ms;
  while (std::chrono::steady_clock::now() < until) {
    agent_->beat();
    pump([] { return false; }, 30ms);
    ASSERT_EQ(host_state(), "ready") << "marked unreachable while heartbeats arrived";
  }

  // Silence: unreachable after the timeout plus a check (the deadline is well above 510 ms).
  auto silent_since = std::chrono::steady_clock::now();
  ASSERT_TRUE(pump([&] { return host_state() == "unreachable"; }, 5s)) << host_state();
  EXPECT_GE(std::chrono::steady_clock::now() - silent_since, 400ms) << "marked unreachable before its timeout";
  EXPECT_EQ(host_events(), (std::vector<std::string>{"host.registered", "host.unreachable"}));

  // One heartbeat brings it back, with its event.
  agent_->beat();
  ASSERT_TRUE(pump([&] { return host_state() == "ready"; }, 5s)) << host_state();
  EXPECT_EQ(host_events(), (std::vector<std::string>{"host.registered", "host.unreachable", "host.ready"}));
  auto h = store_->read_now([](store::Database& db) { return market::find_host(db, "node-1"); });
  ASSERT_TRUE(h && *h);
  EXPECT_TRUE((*h)->last_seen.has_value()) << "ready again records when it was seen";
}

// Issue 26: the in-process agent is recorded at registration; the liveness check writes the
// last heartbeat's time; a drained host stays draining through silence and return.
TEST_F(HostRegistryTest, TheRegistryRecordsItsAgentAndHeartbeatsAndLeavesADrainAlone) {
  start();
  auto host = [&] {
    auto h = store_->read_now([](store::Database& db) { return market::find_host(db, "node-1"); });
    EXPECT_TRUE(h && *h);
    return h && *h ? **h : market::HostRecord{};
  };
  const auto registered = host();
  EXPECT_EQ(registered.agent.kind, std::optional<std::string>("in_process"));
  EXPECT_EQ(registered.agent.version, std::optional<std::string>(GPUCLOUD_VERSION));
  EXPECT_FALSE(registered.agent.address.has_value());
  ASSERT_TRUE(registered.agent.connected_at.has_value());
  ASSERT_TRUE(registered.agent.last_heartbeat_at.has_value());

  ASSERT_TRUE(store_->write_now([](store::Database& db) { return market::drain_host(db, "node-1", system_now()); }));
  const auto before = *registered.agent.last_heartbeat_at;
  pump([] { return false; }, 5ms);
  agent_->beat();
  ASSERT_TRUE(pump([&] { return host().agent.last_heartbeat_at > before; }, 5s)) << "the beat was not recorded";
  ASSERT_TRUE(pump([&] { return host().liveness == "unreachable"; }, 5s));
  EXPECT_EQ(host().state, "draining");
  agent_->beat();
  ASSERT_TRUE(pump([&] { return host().liveness == "ready"; }, 5s));
  EXPECT_EQ(host().state, "draining");
  EXPECT_EQ(host().admin_state, "draining");
}

}  // namespace
}  // namespace gpucloud::server
