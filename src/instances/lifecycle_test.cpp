// The instance state machine without Docker: a scripted fake agent drives actions, converge
// and reconcile through the races (release during create, stop during a refresh, a report
// that arrives after the user moved on, a container started behind the platform's back).
#include <deque>

#include "billing/ledger.h"
#include <filesystem>
#include <memory>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "events/events.h"
#include "instances/actions.h"
#include "instances/images.h"
#include "instances/lifecycle.h"
#include "instances/transition.h"
#include "market/hosts.h"
#include "market/reservations.h"
#include "store/store.h"

namespace gpucloud::instances {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using S = InstanceState;

std::string temp_db() {
  static int n = 0;
  auto dir = fs::temp_directory_path() / ("gpucloud-lifecycle-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::create_directories(dir);
  return (dir / "test.db").string();
}

// Answers like the real agent, keeps one fake container per instance, and can park ensures
// so a test decides when an engine reply arrives.
class FakeAgent : public agent::HostAgent {
 public:
  struct Container {
    bool exists = false, running = false;
    std::string finished_at;
    json::array ports;
  };
  explicit FakeAgent(asio::any_io_executor loop) : loop_(loop) {}

  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override { co_return std::vector<agent::HostInventory>{}; }
  void on_heartbeat(std::function<void(agent::Heartbeat)>) override {}
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int, int) override {
    co_return fail(ErrorCode::unavailable, "no terminals here");
  }

  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override {
    log.push_back(command);
    if (command.kind == "instance.ensure" && hold_ensures) {
      auto gate = std::make_shared<asio::steady_timer>(loop_, asio::steady_timer::time_point::max());
      parked.push_back(gate);
      boost::system::error_code ec;
      co_await gate->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    agent::CommandOutcome out;
    out.command_id = command.id;
    out.ok = true;
    const auto& d = command.desired;
    if (command.kind == "instance.ensure") {
      std::string id(d.at("instance_id").as_string());
      auto& c = containers[id];
      c.exists = true;
      c.running = d.at("state").as_string() == "running";
      c.ports = d.at("ports").as_array();
      out.observed = json::object{{"running", c.running}, {"container_id", "c-" + id}, {"ipv4", "10.88.0.2"}, {"host_key", "ssh-ed25519 AAAA"}};
    } else if (command.kind == "instance.remove") {
      containers.erase(std::string(d.at("instance_id").as_string()));
    } else if (command.kind == "instance.status") {
      if (malformed_status) {
        out.observed = json::object{{"instances", json::array{1, "x", json::object{{"instance_id", 5}}}},
                                    {"unknown_containers", json::array{json::object{{"running", "yes"}}}}};
        co_return out;
      }
      json::array list;
      for (const auto& [id, c] : containers)
        list.push_back(json::object{{"instance_id", id}, {"exists", c.exists}, {"running", c.running},
                                    {"finished_at", c.finished_at}, {"state_reason", c.running ? "" : "exited 137"}});
      out.observed = json::object{{"instances", std::move(list)}, {"unknown_containers", json::array{}}};
    }
    co_return out;
  }

  // Lets the oldest parked ensure through.
  void release_one() {
    if (parked.empty()) return;
    parked.front()->cancel();
    parked.pop_front();
  }
  std::vector<std::string> kinds_for(const std::string& id) const {
    std::vector<std::string> out;
    for (const auto& c : log) {
      auto it = c.desired.find("instance_id");
      if (it == c.desired.end() || it->value().as_string() != id) continue;
      std::string k = c.kind;
      if (auto s = c.desired.find("state"); s != c.desired.end()) k += ":" + std::string(s->value().as_string());
      out.push_back(k);
    }
    return out;
  }

  std::vector<agent::Command> log;
  std::map<std::string, Container> containers;
  std::deque<std::shared_ptr<asio::steady_timer>> parked;
  bool hold_ensures = false;
  bool malformed_status = false;

 private:
  asio::any_io_executor loop_;
};

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = temp_db();
    auto s = store::Store::open(db_path_, 2);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    config_.public_host = "127.0.0.1";
    config_.currency = "CNY";
    config_.zones.push_back(config::Zone{"zone-a", "local", ""});
    config_.hosts.clear();
    config_.offers.push_back(config::Offer{"RTX 4090", {}, 24, 8, 32, 198, 0, 0});
    config_.no_gpu_offer.cpu = 1;
    config_.no_gpu_offer.memory_gib = 2;
    config_.quotas.instances = 10;
    config_.quotas.gpus = 8;
    agent::HostInventory h;
    h.name = "node-1";
    h.zone = "zone-a";
    h.cpu = 64;
    h.memory_gib = 256;
    h.port_min = 30000;
    h.port_max = 30999;
    h.engine = "unix:///var/run/docker.sock";
    h.simulated = true;
    h.inventory_source = "simulated";
    for (int i = 0; i < 2; ++i) h.gpus.push_back(agent::GpuInfo{i, "GPU-sim-" + std::to_string(i), "RTX 4090", 24LL << 30, "", "ok", true});
    config::Host host_config;
    host_config.name = "node-1";
    host_config.zone = "zone-a";
    config_.hosts.push_back(host_config);
    ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
      if (auto r = market::upsert_host(db, h, config_, system_now()); !r) return fail(r.error());
      if (auto s = seed_public_images(db, config_, system_now()); !s) return s;
      auto u = auth::create_user(db, "alice", std::nullopt, "x", "user", system_now());
      if (!u) return fail(u.error());
      user_ = u->id;
      if (auto s = billing::open_account(db, u->id, "alice", 1000000, system_now()); !s) return s;
      return ok();
    }));
    clock_ = std::make_unique<PlatformClock>(io_.get_executor(), true, system_now());
    agent_ = std::make_unique<FakeAgent>(io_.get_executor());
    service_ = std::make_unique<InstanceService>(io_.get_executor(), config_, *store_, *clock_, *agent_);
  }
  void TearDown() override {
    service_->stop_background();
    while (!agent_->parked.empty()) agent_->release_one();
    pump([] { return false; }, std::chrono::milliseconds(50));
    service_.reset();
    store_.reset();
    std::error_code ec;
    fs::remove_all(fs::path(db_path_).parent_path(), ec);
  }

  // Runs the loop until `done` holds (or the deadline passes); returns `done()`.
  template <class Pred>
  bool pump(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      io_.restart();
      io_.run_for(std::chrono::milliseconds(2));
    }
    return done();
  }
  Instance load(const std::string& id) {
    auto i = store_->read_now([&](store::Database& db) { return load_instance(db, id); });
    EXPECT_TRUE(i && *i);
    return **i;
  }
  bool settled(const std::string& id) { return service_->idle(id) && agent_->parked.empty(); }
  Actor alice() const { return Actor{user_, false}; }

  // Creates a 1-GPU instance and, unless `hold`, waits for it to run.
  std::string create(const std::string& name = "box") {
    CreateRequest r;
    r.name = name;
    r.zone = "zone-a";
    r.image = kBaseImageName;
    r.gpu_model = "RTX 4090";
    r.gpu_count = 1;
    r.cpu = 8;
    r.memory_gib = 32;
    std::string id = "i-" + name;
    auto created = store_->write_now([&](store::Database& db) { return create_instance(db, config_, alice(), id, r, clock_->now()); });
    EXPECT_TRUE(created) << created.error().detail;
    service_->kick(id);
    return id;
  }
  template <class F>
  Instance act(F action) {
    auto moved = store_->write_now([&](store::Database& db) { return action(db); });
    EXPECT_TRUE(moved) << moved.error().detail;
    return *moved;
  }
  void advance(std::chrono::seconds s) {
    bool done = false;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      (void)co_await clock_->advance(s);
      done = true;
    }, asio::detached);
    ASSERT_TRUE(pump([&] { return done; }));
  }
  void reconcile_once() {
    bool done = false;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      co_await service_->reconcile();
      done = true;
    }, asio::detached);
    ASSERT_TRUE(pump([&] { return done; }));
  }
  std::vector<std::string> event_types(const std::string& id) {
    events::Query q;
    q.resource = id;
    q.limit = 1000;
    auto all = store_->read_now([&](store::Database& db) { return events::list(db, q); });
    std::vector<std::string> out;
    if (all)
      for (const auto& e : *all) out.push_back(e.type);
    return out;
  }

  asio::io_context io_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
  std::unique_ptr<PlatformClock> clock_;
  std::unique_ptr<FakeAgent> agent_;
  std::unique_ptr<InstanceService> service_;
  std::string user_;
  std::string db_path_;
};

TEST_F(LifecycleTest, CreateRunsStopFreesTheGpuAndCountsTheRun) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running; }));
  EXPECT_EQ(load(id).host_key, std::optional<std::string>("ssh-ed25519 AAAA"));
  advance(std::chrono::seconds(30));
  act([&](store::Database& db) { return stop_instance(db, alice(), "box", clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  Instance i = load(id);
  EXPECT_EQ(i.run_seconds, 30);
  EXPECT_TRUE(i.gpu_uuids.empty()) << "a stopped pay-as-you-go instance holds no GPU";
  EXPECT_EQ(agent_->kinds_for(id), (std::vector<std::string>{"instance.ensure:running", "instance.ensure:stopped"}));
  EXPECT_EQ(event_types(id), (std::vector<std::string>{"instance.created", "instance.running", "instance.stopping", "instance.stopped"}));
}

TEST_F(LifecycleTest, ReleaseDuringCreateEndsReleasedWithNoContainer) {
  agent_->hold_ensures = true;
  auto id = create();
  ASSERT_TRUE(pump([&] { return agent_->parked.size() == 1; }));
  act([&](store::Database& db) { return release_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  agent_->hold_ensures = false;
  agent_->release_one();  // the create's engine reply arrives after the release
  ASSERT_TRUE(pump([&] { return load(id).state == S::released && settled(id); }));
  EXPECT_FALSE(agent_->containers.contains(id));
  auto held = store_->read_now([&](store::Database& db) { return market::active_reservation(db, id); });
  ASSERT_TRUE(held);
  EXPECT_FALSE(*held);
  auto kinds = agent_->kinds_for(id);
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.back(), "instance.remove");
}

TEST_F(LifecycleTest, StopDuringARefreshIsNotUndoneByIt) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  agent_->hold_ensures = true;
  act([&](store::Database& db) -> Result<Instance> {
    auto p = patch_instance(db, alice(), id, PatchRequest{.ports = std::vector<PortSpec>{{22, "tcp"}, {8888, "tcp"}}}, clock_->now());
    if (!p) return fail(p.error());
    return p->instance;
  });
  service_->refresh(id);
  ASSERT_TRUE(pump([&] { return agent_->parked.size() == 1; }));  // ensure(running) in flight
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  agent_->hold_ensures = false;
  agent_->release_one();
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  EXPECT_FALSE(agent_->containers[id].running) << "the stale ensure(running) must not win";
  auto kinds = agent_->kinds_for(id);
  EXPECT_EQ(kinds.back(), "instance.ensure:stopped");
  // Commands go out in generation order.
  std::int64_t last = 0;
  for (const auto& c : agent_->log) {
    auto g = c.desired.find("generation");
    if (g == c.desired.end()) continue;
    EXPECT_GE(g->value().as_int64(), last);
    last = g->value().as_int64();
  }
}

TEST_F(LifecycleTest, AContainerThatDiedCountsItsRunUntilItsExit) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  advance(std::chrono::seconds(11));
  // It died 7.5 s ago (3.5 s into its run); reconcile notices only now.
  agent_->containers[id].running = false;
  agent_->containers[id].finished_at = format_rfc3339(system_now() - std::chrono::milliseconds(7500));
  reconcile_once();
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  Instance i = load(id);
  EXPECT_EQ(i.run_seconds, 3);
  EXPECT_EQ(i.state_reason, "exited 137");
  EXPECT_TRUE(i.gpu_uuids.empty());
}

TEST_F(LifecycleTest, AReportAboutAnEarlierGenerationRepairsNothing) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  // The container dies; while a refresh holds the queue, reconcile files its report ...
  agent_->hold_ensures = true;
  service_->refresh(id);
  ASSERT_TRUE(pump([&] { return agent_->parked.size() == 1; }));
  agent_->containers[id].running = false;
  reconcile_once();
  // ... then the user stops it before the report is applied.
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  agent_->hold_ensures = false;
  agent_->release_one();
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  EXPECT_EQ(load(id).state_reason, "") << "the user's stop, not the stale report, decided the state";
}

TEST_F(LifecycleTest, AContainerStartedBehindThePlatformsBackIsStoppedAgain) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  agent_->containers[id].running = true;  // `docker start` by hand
  reconcile_once();
  ASSERT_TRUE(pump([&] { return !agent_->containers[id].running && settled(id); }));
  EXPECT_EQ(load(id).state, S::stopped);
  auto types = event_types(id);
  EXPECT_NE(std::find(types.begin(), types.end(), "instance.repaired"), types.end());
}

TEST_F(LifecycleTest, PortsChangedWhileStoppedReachTheAgent) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  auto patched = store_->write_now([&](store::Database& db) {
    return patch_instance(db, alice(), id, PatchRequest{.ports = std::vector<PortSpec>{{8888, "tcp"}}}, clock_->now());
  });
  ASSERT_TRUE(patched) << patched.error().detail;
  ASSERT_TRUE(patched->engine_follows);
  service_->refresh(id);
  ASSERT_TRUE(pump([&] { return settled(id) && agent_->kinds_for(id).size() == 3; }));
  ASSERT_EQ(agent_->containers[id].ports.size(), 1u);
  EXPECT_EQ(agent_->containers[id].ports[0].at("container_port").as_int64(), 8888);
  EXPECT_FALSE(agent_->containers[id].running);
  EXPECT_EQ(agent_->kinds_for(id).back(), "instance.ensure:stopped");
}

TEST_F(LifecycleTest, MalformedStatusRepliesNeverStopReconciliation) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  agent_->malformed_status = true;
  reconcile_once();  // must return, not throw, and repair nothing from what it could not read
  EXPECT_EQ(load(id).state, S::running);
  agent_->malformed_status = false;
  agent_->containers[id].running = false;
  reconcile_once();
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
}

TEST_F(LifecycleTest, ATransitionFromAStaleReadIsAConflict) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  Instance stale = load(id);
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  auto second = store_->write_now([&](store::Database& db) {
    Instance next = stale;
    return transition(db, stale, next, Transition{S::releasing, "", {}}, clock_->now());
  });
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::conflict);
  EXPECT_EQ(load(id).state, S::stopping);
}

TEST_F(LifecycleTest, RestartKeepsTheReservationAndEndsRunning) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  auto gpus = load(id).gpu_uuids;
  act([&](store::Database& db) { return restart_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id) && agent_->kinds_for(id).size() == 3; }));
  EXPECT_EQ(load(id).gpu_uuids, gpus);
  EXPECT_EQ(agent_->kinds_for(id),
            (std::vector<std::string>{"instance.ensure:running", "instance.ensure:stopped", "instance.ensure:running"}));
}

}  // namespace
}  // namespace gpucloud::instances
