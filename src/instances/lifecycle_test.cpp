// The instance state machine without Docker: a scripted fake agent drives actions, converge
// and reconcile through the races (release during create, stop during a refresh, a report
// that arrives after the user moved on, a container started behind the platform's back).
#include <algorithm>
#include <deque>

#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "core/unique_temp_dir.h"
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
#include "policy/instances.h"
#include "market/hosts.h"
#include "market/prices.h"
#include "market/reservations.h"
#include "server/host_registry.h"
#include "store/store.h"

namespace gpucloud::instances {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using S = InstanceState;

std::string temp_db() {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-lifecycle");
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
    if ((command.kind == "instance.ensure" && hold_ensures) || (command.kind == "instance.status" && hold_status)) {
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
  bool hold_status = false;
  bool malformed_status = false;

 private:
  asio::any_io_executor loop_;
};

// The host side of a HostRegistry: the inventory it registers (what a daemon restart
// reports) and the heartbeats a test sends, with whatever GPUs it likes.
class ReportingAgent : public agent::HostAgent {
 public:
  explicit ReportingAgent(agent::HostInventory inventory) : inventory_(std::move(inventory)) {}
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    co_return std::vector<agent::HostInventory>{inventory_};
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command) override {
    co_return fail(ErrorCode::unavailable, "no commands here");
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)> sink) override { sink_ = std::move(sink); }
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int, int) override {
    co_return fail(ErrorCode::unavailable, "no terminals here");
  }
  void beat(std::vector<agent::GpuInfo> gpus, const std::string& host = "node-1") {
    if (sink_) sink_(agent::Heartbeat{host, ++sequence_, std::move(gpus), std::nullopt});
  }

 private:
  agent::HostInventory inventory_;
  std::function<void(agent::Heartbeat)> sink_;
  std::uint64_t sequence_ = 0;
};

// A PATCH of the ports alone (a designated initializer leaves g++ -Wextra naming every other field).
PatchRequest ports_patch(std::vector<PortSpec> ports) {
  PatchRequest p;
  p.ports = std::move(ports);
  return p;
}

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
    inventory_ = h;
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
    registry_.reset();
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
    policy::CreateInstanceRequest r;
    r.name = name;
    r.zone = "zone-a";
    r.image = kBaseImageName;
    r.gpu_model = "RTX 4090";
    r.gpu_count = 1;
    r.cpu = 8;
    r.memory_gib = 32;
    std::string id = "i-" + name;
    auto created = store_->write_now([&](store::Database& db) { return policy::create_instance(db, config_, alice(), id, r, clock_->now()); });
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
  // A weekly subscription on one RTX 4090, run, then stopped inside its paid term.
  void run_and_stop_a_weekly_subscription(const std::string& id) {
    config_.offers[0].price_per_gpu_week = 26600;
    ASSERT_TRUE(store_->write_now([&](store::Database& db) { return market::seed_prices(db, config_); }));
    policy::CreateInstanceRequest r;
    r.name = "sub";
    r.zone = "zone-a";
    r.image = kBaseImageName;
    r.gpu_model = "RTX 4090";
    r.gpu_count = 1;
    r.cpu = 8;
    r.memory_gib = 32;
    r.billing_mode = "weekly";
    auto created = store_->write_now([&](store::Database& db) { return policy::create_instance(db, config_, alice(), id, r, clock_->now()); });
    ASSERT_TRUE(created) << created.error().detail;
    service_->kick(id);
    ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
    act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
    service_->kick(id);
    ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
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

  // node-1 as SetUp registered it (GPU-sim-0 at 0, GPU-sim-1 at 1), with other GPUs.
  agent::HostInventory node1_with(std::vector<agent::GpuInfo> gpus) const {
    auto inv = inventory_;
    inv.gpus = std::move(gpus);
    return inv;
  }
  agent::GpuInfo gpu(int index, const std::string& uuid, const std::string& health = "ok") const {
    return agent::GpuInfo{index, uuid, "RTX 4090", 24LL << 30, "", health, true};
  }
  // What a daemon start does: a registry registers the host as `inventory` reports it.
  void register_node1(agent::HostInventory inventory) {
    auto agent = std::make_unique<ReportingAgent>(std::move(inventory));
    reporter_ = agent.get();
    registry_.reset();
    registry_ = std::make_unique<server::HostRegistry>(io_.get_executor(), config_, *store_, *clock_, std::move(agent),
                                                       std::chrono::hours(1), std::chrono::hours(1));
    bool started = false;
    Status result = ok();
    asio::co_spawn(io_, registry_->start(), [&](std::exception_ptr e, Status st) {
      started = true;
      result = e ? fail(ErrorCode::internal, "start threw") : std::move(st);
    });
    ASSERT_TRUE(pump([&] { return started; }));
    ASSERT_TRUE(result) << result.error().detail;
  }
  std::vector<events::Event> events_of_type(const std::string& type) {
    events::Query q;
    q.limit = 1000;
    auto all = store_->read_now([&](store::Database& db) { return events::list(db, q); });
    EXPECT_TRUE(all);
    std::vector<events::Event> out;
    if (all)
      for (auto& e : *all)
        if (e.type == type) out.push_back(std::move(e));
    return out;
  }
  json::object view_of(const std::string& id) { return instance_json(load(id), service_->view(), 0); }

  asio::io_context io_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
  std::unique_ptr<PlatformClock> clock_;
  std::unique_ptr<FakeAgent> agent_;
  std::unique_ptr<InstanceService> service_;
  std::string user_;
  std::string db_path_;
  agent::HostInventory inventory_;
  std::unique_ptr<server::HostRegistry> registry_;
  ReportingAgent* reporter_ = nullptr;
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
    auto p = patch_instance(db, alice(), id, ports_patch({{22, "tcp"}, {8888, "tcp"}}), clock_->now());
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

TEST_F(LifecycleTest, AReportedChangeIsReconciledAtOnceAndABurstCostsOnePass) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  auto passes = [&] {
    return std::count_if(agent_->log.begin(), agent_->log.end(), [](const auto& c) { return c.kind == "instance.status"; });
  };
  service_->start_background(std::chrono::seconds(3600));  // one pass now, the next in an hour
  ASSERT_TRUE(pump([&] { return passes() == 1 && !service_->busy(); }));
  // The container died behind the platform's back and the host said so (an engine event).
  agent_->containers[id].running = false;
  const auto reported = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) service_->nudge({id});
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }, std::chrono::seconds(3)))
      << "a reported change waited for the hourly pass";
  EXPECT_LT(std::chrono::steady_clock::now() - reported, std::chrono::seconds(2));
  pump([] { return false; }, std::chrono::milliseconds(800));
  EXPECT_EQ(passes(), 2) << "fifty reports, one pass";
  // A report during a pass gets one more pass after it (the first may have looked too early).
  agent_->hold_status = true;
  service_->nudge({id});
  ASSERT_TRUE(pump([&] { return passes() == 3 && !agent_->parked.empty(); }, std::chrono::seconds(2)));
  service_->nudge({id});
  agent_->hold_status = false;
  agent_->release_one();
  ASSERT_TRUE(pump([&] { return passes() == 4; }, std::chrono::seconds(3)));
  pump([] { return false; }, std::chrono::milliseconds(800));
  EXPECT_EQ(passes(), 4);
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
    return patch_instance(db, alice(), id, ports_patch({{8888, "tcp"}}), clock_->now());
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


// A running instance's GPU drops out of the host's report: the owner and the operator hear of
// it once, in the report's transaction; the instance shows it and keeps running on the same
// reservation; when the GPU is back with its UUID, the flag clears with an event.
TEST_F(LifecycleTest, AGpuLostWhileRunningIsRecordedOnceAndClearedWhenItIsBack) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  ASSERT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-0"});
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
  const auto commands_before = agent_->log.size();

  // The daemon restarts and the host no longer reports GPU 0.
  register_node1(node1_with({gpu(1, "GPU-sim-1")}));
  auto lost = events_of_type("instance.gpu_lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].resource, id);
  EXPECT_EQ(lost[0].user, std::optional<std::string>(user_));
  EXPECT_EQ(lost[0].data.at("uuid").as_string(), "GPU-sim-0");
  EXPECT_EQ(lost[0].data.at("model").as_string(), "RTX 4090");
  EXPECT_EQ(lost[0].data.at("health").as_string(), "missing");
  EXPECT_NE(lost[0].message.find("GPU GPU-sim-0 (RTX 4090, last seen as GPU 0) is missing from host node-1"), std::string::npos)
      << lost[0].message;
  EXPECT_NE(lost[0].message.find("is not charged until the GPU is back"), std::string::npos) << lost[0].message;
  // The platform is at fault: the run stops accruing at once (its meter closes, settled).
  auto compute_open = [&] {
    auto m = store_->write_now([&](store::Database& db) { return billing::load_meter(db, id, billing::MeterKind::compute); });
    return m && *m && (*m)->open_since.has_value();
  };
  EXPECT_FALSE(compute_open()) << "no compute accrues while its GPU is lost";
  EXPECT_EQ(events_of_type("instance.billing_paused").size(), 1u);
  auto operator_lost = events_of_type("host.gpu_lost");
  ASSERT_EQ(operator_lost.size(), 1u);
  EXPECT_FALSE(operator_lost[0].user) << "the operator's";
  EXPECT_EQ(operator_lost[0].data.at("instance"), json::value(id));

  Instance i = load(id);
  EXPECT_EQ(i.state, S::running) << "not stopped for it";
  EXPECT_EQ(i.gpu_uuids, std::vector<std::string>{"GPU-sim-0"}) << "the reservation stays on the physical GPU";
  auto view = view_of(id);
  ASSERT_TRUE(view.at("degraded").is_object()) << view;
  EXPECT_EQ(view.at("degraded").at("gpus"), (json::array{"GPU-sim-0"}));
  EXPECT_NE(view.at("degraded").at("reason").as_string().find("is missing from host node-1"), std::string::npos);
  EXPECT_TRUE(view.at("degraded").at("since").is_string());
  EXPECT_EQ(view.at("gpus").as_array()[0].at("health").as_string(), "missing");
  EXPECT_EQ(agent_->log.size(), commands_before) << "nothing sent to the engine";

  // Heartbeats saying the same, a registration saying the same: nothing new.
  for (int n = 0; n < 3; ++n) reporter_->beat({gpu(1, "GPU-sim-1")});
  pump([] { return false; }, std::chrono::milliseconds(50));
  register_node1(node1_with({gpu(1, "GPU-sim-1")}));
  // Back, but unhealthy: still the same loss, now with the host's error.
  reporter_->beat({gpu(0, "GPU-sim-0", "nvmlDeviceGetMemoryInfo: GPU is lost"), gpu(1, "GPU-sim-1")});
  ASSERT_TRUE(pump([&] { return view_of(id).at("gpus").as_array()[0].at("health").as_string() != "missing"; }));
  EXPECT_NE(view_of(id).at("degraded").at("reason").as_string().find("is unhealthy: nvmlDeviceGetMemoryInfo: GPU is lost"),
            std::string::npos);
  EXPECT_EQ(events_of_type("instance.gpu_lost").size(), 1u);
  EXPECT_EQ(events_of_type("host.gpu_lost").size(), 1u);

  // An hour passes while it is lost: nothing of it is charged, and a reconcile does not reopen it.
  const std::int64_t charged_at_loss = load(id).charged;
  advance(std::chrono::seconds(3600));
  reconcile_once();
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return billing::reconcile_meters(db, clock_->now()); }));
  EXPECT_FALSE(compute_open()) << "the start-up reconcile leaves a lost GPU's run unbilled";
  EXPECT_EQ(load(id).charged, charged_at_loss);

  // Healthy again with the same UUID: cleared, with an event each.
  for (int n = 0; n < 3; ++n) reporter_->beat({gpu(0, "GPU-sim-0"), gpu(1, "GPU-sim-1")});
  ASSERT_TRUE(pump([&] { return events_of_type("instance.gpu_recovered").size() == 1; }));
  pump([] { return false; }, std::chrono::milliseconds(50));
  EXPECT_EQ(events_of_type("instance.gpu_recovered").size(), 1u);
  EXPECT_EQ(events_of_type("host.gpu_recovered").size(), 1u);
  EXPECT_EQ(events_of_type("instance.gpu_recovered")[0].user, std::optional<std::string>(user_));
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
  EXPECT_EQ(view_of(id).at("gpus").as_array()[0].at("health").as_string(), "ok");
  EXPECT_EQ(load(id).state, S::running);
  EXPECT_EQ(events_of_type("instance.gpu_lost").size(), 1u);
  EXPECT_TRUE(compute_open()) << "charged again once every GPU it holds is usable";
  auto resumed = events_of_type("instance.billing_resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_GE(resumed[0].data.at("not_charged_seconds").as_int64(), 3599);  // whole seconds of the hour it was lost
  // The ledger says why: a zero charge on the instance naming the time not charged.
  auto notes = store_->write_now([&](store::Database& db) -> Result<std::int64_t> {
    auto r = db.one("SELECT COUNT(*) FROM ledger_entries WHERE resource = ? AND amount = 0 AND description LIKE "
                    "'not charged:%'",
                    {id});
    if (!r) return fail(r.error());
    return (*r)->int64(0);
  });
  ASSERT_TRUE(notes);
  EXPECT_EQ(*notes, 1);

  // A second loss is a new one.
  reporter_->beat({gpu(0, "GPU-sim-0", "Xid 79: fell off the bus"), gpu(1, "GPU-sim-1")});
  ASSERT_TRUE(pump([&] { return events_of_type("instance.gpu_lost").size() == 2; }));
  EXPECT_EQ(events_of_type("instance.gpu_lost")[1].data.at("health").as_string(), "Xid 79: fell off the bus");
}

// Lost while its instance is stopped (an hourly one holds no GPU then): the operator's event
// only; the start takes the other GPU and the instance is not flagged.
TEST_F(LifecycleTest, AGpuLostWhileStoppedIsTheOperatorsOnlyAndTheStartTakesAnother) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  register_node1(node1_with({gpu(1, "GPU-sim-1")}));
  auto operator_lost = events_of_type("host.gpu_lost");
  ASSERT_EQ(operator_lost.size(), 1u);
  EXPECT_TRUE(operator_lost[0].data.at("instance").is_null());
  EXPECT_EQ(operator_lost[0].data.at("uuid").as_string(), "GPU-sim-0");
  EXPECT_TRUE(events_of_type("instance.gpu_lost").empty());
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
  act([&](store::Database& db) { return start_instance(db, config_, alice(), id, false, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  EXPECT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-1"});
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
}

// A GPU replaced by another card (new UUID at its index): the old one stays missing and the
// instance stays flagged while it runs; its next start takes a free GPU, and the flag is gone.
TEST_F(LifecycleTest, AReplacedGpuKeepsTheInstanceFlaggedUntilItsNextStart) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  register_node1(node1_with({gpu(0, "GPU-new-0"), gpu(1, "GPU-sim-1")}));
  ASSERT_EQ(events_of_type("instance.gpu_lost").size(), 1u);
  EXPECT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-0"});
  EXPECT_FALSE(view_of(id).at("degraded").is_null());
  for (int n = 0; n < 3; ++n) reporter_->beat({gpu(0, "GPU-new-0"), gpu(1, "GPU-sim-1")});
  pump([] { return false; }, std::chrono::milliseconds(50));
  EXPECT_FALSE(view_of(id).at("degraded").is_null()) << "another UUID is another GPU";
  EXPECT_TRUE(events_of_type("instance.gpu_recovered").empty());
  act([&](store::Database& db) { return stop_instance(db, alice(), id, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::stopped && settled(id); }));
  act([&](store::Database& db) { return start_instance(db, config_, alice(), id, false, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  ASSERT_EQ(load(id).gpu_uuids.size(), 1u);
  EXPECT_NE(load(id).gpu_uuids[0], "GPU-sim-0");
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
}

// A subscription keeps its GPUs while stopped in its paid term, so a loss then is its
// owner's too; its start gives up the lost GPU for a free one instead of starting on it.
TEST_F(LifecycleTest, ASubscriptionHoldingALostGpuStartsOnAnother) {
  const std::string id = "i-sub";
  run_and_stop_a_weekly_subscription(id);
  if (HasFatalFailure()) return;
  ASSERT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-0"}) << "kept in its paid term";
  register_node1(node1_with({gpu(1, "GPU-sim-1")}));
  auto lost = events_of_type("instance.gpu_lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].message.find("keeps running"), std::string::npos) << "it is stopped: " << lost[0].message;
  act([&](store::Database& db) { return start_instance(db, config_, alice(), id, false, clock_->now()); });
  service_->kick(id);
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  EXPECT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-1"});
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
}

// Reconcile frees reservations no live instance explains; a subscription stopped inside its
// paid term explains its own (it keeps its GPUs), so a pass after the stop leaves them alone.
TEST_F(LifecycleTest, AReconcileAfterASubscriptionsStopKeepsItsGpu) {
  const std::string id = "i-kept";
  run_and_stop_a_weekly_subscription(id);
  if (HasFatalFailure()) return;
  reconcile_once();
  EXPECT_EQ(load(id).gpu_uuids, std::vector<std::string>{"GPU-sim-0"}) << "a reconcile pass freed a paid-for GPU";
}

// Reports no NVML would make: the daemon records them, flags what it cannot tell apart, and
// goes on serving; nothing is placed on an ambiguous GPU.
TEST_F(LifecycleTest, OddGpuReportsNeverStopTheRegistry) {
  auto id = create();
  ASSERT_TRUE(pump([&] { return load(id).state == S::running && settled(id); }));
  // One UUID at two indices: which device is it? Unhealthy, and its holder hears of it.
  register_node1(node1_with({gpu(0, "GPU-sim-0"), gpu(1, "GPU-sim-0")}));
  ASSERT_EQ(events_of_type("instance.gpu_lost").size(), 1u);
  EXPECT_NE(events_of_type("instance.gpu_lost")[0].data.at("health").as_string().find("reported this UUID twice"),
            std::string::npos);
  // Beats: an index reused by a UUID never registered, two UUIDs at one index, no UUID, no
  // health, an unknown host, nothing at all.
  reporter_->beat({gpu(0, "GPU-stranger")});
  reporter_->beat({gpu(0, "GPU-sim-0"), gpu(0, "GPU-sim-1")});
  reporter_->beat({gpu(0, ""), gpu(1, "GPU-sim-1", "")});
  reporter_->beat({gpu(0, "GPU-sim-0")}, "node-9");
  reporter_->beat({});
  reporter_->beat({gpu(1, "GPU-sim-0"), gpu(1, "GPU-sim-0")});
  pump([] { return false; }, std::chrono::milliseconds(100));
  auto host = store_->read_now([](store::Database& db) { return market::find_host(db, "node-1"); });
  ASSERT_TRUE(host && *host);
  EXPECT_EQ((*host)->state, "ready");
  for (const auto& g : (*host)->gpus) {
    EXPECT_NE(g.uuid, "GPU-stranger") << "a beat adds no GPU at an index a GPU it does not name holds";
    EXPECT_NE(g.health, "ok") << g.uuid << " was reported ambiguously";
  }
  EXPECT_EQ(load(id).state, S::running);
  // Nothing free to place on: a second instance is refused, not failed.
  policy::CreateInstanceRequest r;
  r.name = "two";
  r.zone = "zone-a";
  r.image = kBaseImageName;
  r.gpu_model = "RTX 4090";
  r.gpu_count = 1;
  r.cpu = 8;
  r.memory_gib = 32;
  auto second = store_->write_now([&](store::Database& db) { return policy::create_instance(db, config_, alice(), "i-two", r, clock_->now()); });
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::no_capacity) << second.error().detail;
  // A plain report again: both usable, the holder told so once.
  reporter_->beat({gpu(0, "GPU-sim-0"), gpu(1, "GPU-sim-1")});
  ASSERT_TRUE(pump([&] { return events_of_type("instance.gpu_recovered").size() == 1; }));
  EXPECT_TRUE(view_of(id).at("degraded").is_null());
}

}  // namespace
}  // namespace gpucloud::instances
