// AgentHub, the control plane's side of the remote agents' links: a real migrated store, a
// fake connection per link (records what the hub sends, whether it closed it) and a fake
// in-process agent serving "local-1". The hub's coroutines run on the test's io_context,
// pumped until what the test waits for holds or a deadline passes.
// Also the link's envelope (link_messages.h).
#include "agentlink/agent_hub.h"

#include <filesystem>
#include <optional>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "store/store.h"

namespace gpucloud::agentlink {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One link as the hub sees it: what it was sent, and whether (and why) it was closed.
class HubTestConnection : public AgentConnection {
 public:
  explicit HubTestConnection(std::string address) : address_(std::move(address)) {}
  void send(std::string text) override {
    if (!closed) sent.push_back(std::move(text));
  }
  void close(std::string why) override {
    closed = true;
    close_reason = std::move(why);
  }
  std::string address() const override { return address_; }

  // The types of the messages sent, in order.
  std::vector<std::string> types() const {
    std::vector<std::string> out;
    for (const auto& text : sent) {
      auto m = read_envelope(text);
      out.push_back(m ? m->type : "<unreadable>");
    }
    return out;
  }
  // The ids of the "command" messages sent, in order.
  std::vector<std::string> command_ids() const {
    std::vector<std::string> out;
    for (const auto& text : sent) {
      auto m = read_envelope(text);
      if (!m || m->type != "command") continue;
      auto c = agent::command_from_json(m->body);
      out.push_back(c ? c->id : "<unreadable>");
    }
    return out;
  }

  std::vector<std::string> sent;
  bool closed = false;
  std::string close_reason;

 private:
  std::string address_;
};

agent::HostInventory hub_test_inventory(const std::string& name) {
  agent::HostInventory h;
  h.name = name;
  h.zone = "zone-a";
  h.cpu = 8;
  h.memory_gib = 32;
  h.port_min = 30000;
  h.port_max = 30099;
  h.engine = "unix:///var/run/docker.sock";
  h.simulated = true;
  h.inventory_source = "simulated";
  h.gpus.push_back(agent::GpuInfo{0, "GPU-sim-" + name, "RTX 4090", 24LL << 30, "", "ok", true});
  return h;
}

// The in-process agent: serves "local-1", answers every command ok and records it.
class HubTestLocalAgent : public agent::HostAgent {
 public:
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    co_return std::vector<agent::HostInventory>{hub_test_inventory("local-1")};
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override {
    executed.push_back(command.id);
    agent::CommandOutcome o;
    o.command_id = command.id;
    o.ok = true;
    co_return o;
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)>) override {}
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int,
                                                                                int) override {
    co_return fail(ErrorCode::unavailable, "no terminals here");
  }
  std::vector<std::string> executed;
};

// An execute() in flight: done once the hub answered.
struct HubTestCall {
  bool done = false;
  std::optional<Result<agent::CommandOutcome>> result;
};

struct JournalRow {
  std::string id, host_name, kind, body;
  bool completed = false;
};

class AgentHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-agenthub");
    auto s = store::Store::open((dir_ / "test.db").string(), 2);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
  }
  void TearDown() override {
    // Let posted work (outcome deliveries, sample forwarding) finish while the hub lives, then
    // let waiting execute() calls see it gone.
    pump([] { return false; }, 50ms);
    hub_.reset();
    pump([&] {
      for (const auto& c : calls_)
        if (!c->done) return false;
      return true;
    }, 3s);
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void make_hub(std::chrono::milliseconds disconnected_wait = 30s, std::chrono::milliseconds connected_wait = 30s,
                bool relay = false) {
    auto local = std::make_unique<HubTestLocalAgent>();
    local_ = local.get();
    AgentHub::Options options;
    options.journal_key = std::string(32, 'k');
    options.connected_wait = connected_wait;
    options.disconnected_wait = disconnected_wait;
    options.relay = relay;
    hub_ = std::make_unique<AgentHub>(io_.get_executor(), *store_, std::move(local), options);
    hub_->on_registration([this](agent::LateRegistration r) -> asio::awaitable<Status> {
      registered_.push_back(r.inventory.name);
      co_return ok();
    });
    hub_->on_heartbeat([this](agent::Heartbeat b) { heartbeats_.push_back(std::move(b)); });
    hub_->on_samples([this](agent::SampleReport r) { samples_.push_back(std::move(r)); });
    hub_->on_changes([this](agent::ChangeReport r) { changes_.push_back(std::move(r)); });
    bool done = false;
    asio::co_spawn(io_, hub_->register_hosts(), [&](std::exception_ptr e, Result<std::vector<agent::HostInventory>> r) {
      done = true;
      EXPECT_FALSE(e);
      EXPECT_TRUE(r);
    });
    ASSERT_TRUE(pump([&] { return done; }, 5s));
    ASSERT_TRUE(hub_->serves_in_process("local-1"));
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

  std::shared_ptr<HubTestCall> execute(agent::Command command) {
    auto call = std::make_shared<HubTestCall>();
    calls_.push_back(call);
    asio::co_spawn(io_, hub_->execute(std::move(command)),
                   [call](std::exception_ptr e, Result<agent::CommandOutcome> r) {
                     call->done = true;
                     if (e) call->result = Result<agent::CommandOutcome>(fail(ErrorCode::internal, "execute threw"));
                     else call->result = std::move(r);
                   });
    return call;
  }

  Status hello(const std::string& certificate_host, std::shared_ptr<HubTestConnection> connection,
               const std::string& inventory_host) {
    Hello h;
    h.agent_version = "test-agent";
    h.inventory = hub_test_inventory(inventory_host);
    std::optional<Status> result;
    asio::co_spawn(io_, hub_->hello(certificate_host, std::move(connection), std::move(h)),
                   [&](std::exception_ptr e, Status s) {
                     result = e ? Status(fail(ErrorCode::internal, "hello threw")) : std::move(s);
                   });
    if (!pump([&] { return result.has_value(); }, 5s)) return fail(ErrorCode::internal, "hello did not finish");
    return *result;
  }

  std::shared_ptr<HubTestConnection> connect(const std::string& host, const std::string& address = "10.0.0.2:40112") {
    auto c = std::make_shared<HubTestConnection>(address);
    auto s = hello(host, c, host);
    EXPECT_TRUE(s) << s.error().detail;
    return c;
  }

  static agent::Command command(const std::string& id, const std::string& host, const std::string& kind = "instance.ensure") {
    agent::Command c;
    c.id = id;
    c.host_name = host;
    c.kind = kind;
    c.desired = json::object{{"instance_id", "i-1"}, {"jupyter", json::object{{"token", "SECRET123jupytertoken"}}}};
    return c;
  }

  static LinkMessage outcome_message(const std::string& id, bool ok_value = true) {
    agent::CommandOutcome o;
    o.command_id = id;
    o.ok = ok_value;
    o.observed = json::object{{"state", "running"}};
    return LinkMessage{"outcome", agent::to_json(o)};
  }

  std::vector<JournalRow> journal() {
    auto rows = store_->read_now([](store::Database& db) {
      return db.all("SELECT id, host_name, kind, body, completed_at FROM agent_commands ORDER BY created_at, id");
    });
    EXPECT_TRUE(rows) << rows.error().detail;
    std::vector<JournalRow> out;
    if (rows)
      for (const auto& r : *rows) out.push_back(JournalRow{r.text(0), r.text(1), r.text(2), r.text(3), !r.is_null(4)});
    return out;
  }

  // Placement for the report filter: hosts r1 and r2, instance i-r1 on r1, i-r2 on r2, and
  // i-gone (released) on r1.
  void place_instances() {
    auto r = store_->write_now([](store::Database& db) {
      return db.exec_script(R"sql(
INSERT INTO billing_accounts (id, kind, name, balance, created_at) VALUES ('ba-1', 'user', 'alice', 0, 0);
INSERT INTO users (id, username, password_hash, role, created_at, billing_account) VALUES ('u-1', 'alice', 'x', 'user', 0, 'ba-1');
INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, memory_gib, port_min, port_max, created_at)
  VALUES ('h-r1', 'r1', 'zone-a', 'ready', 1, 'simulated', 'docker', 8, 32, 30000, 30099, 0),
         ('h-r2', 'r2', 'zone-a', 'ready', 1, 'simulated', 'docker', 8, 32, 30000, 30099, 0);
INSERT INTO images (id, name, engine_image, visibility, state, created_at) VALUES ('img-1', 'base', 'b', 'public', 'available', 0);
INSERT INTO instances (id, owner, name, state, zone, host_id, gpu_count, cpu, memory_gib, system_disk_gib, image_id, created_at) VALUES
  ('i-r1', 'u-1', 'a', 'running', 'zone-a', 'h-r1', 1, 4, 16, 30, 'img-1', 0),
  ('i-r2', 'u-1', 'b', 'running', 'zone-a', 'h-r2', 1, 4, 16, 30, 'img-1', 0),
  ('i-gone', 'u-1', 'c', 'released', 'zone-a', 'h-r1', 1, 4, 16, 30, 'img-1', 0);
)sql");
    });
    ASSERT_TRUE(r) << r.error().detail;
  }

  asio::io_context io_;
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<AgentHub> hub_;
  HubTestLocalAgent* local_ = nullptr;
  std::vector<std::shared_ptr<HubTestCall>> calls_;
  std::vector<std::string> registered_;
  std::vector<agent::Heartbeat> heartbeats_;
  std::vector<agent::SampleReport> samples_;
  std::vector<agent::ChangeReport> changes_;
};

TEST_F(AgentHubTest, ACommandForAConnectedHostIsJournaledSealedSentAndCompletedByItsOutcome) {
  make_hub();
  auto r1 = connect("r1");
  ASSERT_EQ(registered_, std::vector<std::string>{"r1"});
  ASSERT_EQ(r1->types(), std::vector<std::string>{"welcome"});

  auto call = execute(command("cmd-1", "r1"));
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s)) << "the command was never sent";
  EXPECT_EQ(r1->command_ids(), std::vector<std::string>{"cmd-1"});
  // The command on the wire is the whole command, secret included (the agent needs it).
  EXPECT_NE(r1->sent.back().find("SECRET123jupytertoken"), std::string::npos);

  auto rows = journal();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, "cmd-1");
  EXPECT_EQ(rows[0].host_name, "r1");
  EXPECT_EQ(rows[0].kind, "instance.ensure");
  EXPECT_FALSE(rows[0].completed);
  EXPECT_EQ(rows[0].body.find("SECRET123"), std::string::npos) << "the journal keeps the secret in clear: " << rows[0].body;
  EXPECT_EQ(rows[0].body.find("jupyter"), std::string::npos) << rows[0].body;
  EXPECT_FALSE(call->done);

  hub_->receive("r1", r1.get(), outcome_message("cmd-1"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s)) << "the outcome did not complete execute()";
  ASSERT_TRUE(*call->result) << call->result->error().detail;
  EXPECT_EQ((*call->result)->command_id, "cmd-1");
  EXPECT_TRUE((*call->result)->ok);
  EXPECT_EQ(json::value_to<std::string>((*call->result)->observed.at("state")), "running");
  rows = journal();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].completed);
  EXPECT_TRUE(local_->executed.empty());
}

TEST_F(AgentHubTest, ACommandForAnInProcessHostGoesToTheLocalAgentUnjournaled) {
  make_hub();
  auto call = execute(command("cmd-local", "local-1"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s));
  ASSERT_TRUE(*call->result) << call->result->error().detail;
  EXPECT_EQ(local_->executed, std::vector<std::string>{"cmd-local"});
  EXPECT_TRUE(journal().empty());
}

TEST_F(AgentHubTest, ACommandSentWhileDisconnectedIsSentAgainAfterTheWelcomeAndItsOutcomeAnswersTheCaller) {
  make_hub();
  auto call = execute(command("cmd-away", "r1"));
  ASSERT_TRUE(pump([&] { return journal().size() == 1; }, 5s)) << "not journaled";
  pump([] { return false; }, 200ms);
  EXPECT_FALSE(call->done) << "execute() gave up at once on a disconnected host";

  auto r1 = connect("r1");
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s)) << "the pending command was not sent again";
  EXPECT_EQ(r1->types(), (std::vector<std::string>{"welcome", "command"}));
  EXPECT_EQ(r1->command_ids(), std::vector<std::string>{"cmd-away"});
  EXPECT_FALSE(call->done);

  hub_->receive("r1", r1.get(), outcome_message("cmd-away"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s)) << "the outcome did not complete the original execute()";
  ASSERT_TRUE(*call->result) << call->result->error().detail;
  EXPECT_EQ((*call->result)->command_id, "cmd-away");
  auto rows = journal();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].completed);
}

TEST_F(AgentHubTest, WhenTheDisconnectedWaitPassesExecuteFailsUnavailableAndTheCommandStaysPending) {
  make_hub(/*disconnected_wait=*/100ms);
  auto call = execute(command("cmd-late", "r1"));
  // The hub looks at the link every second: the wait ends within about 1 s.
  ASSERT_TRUE(pump([&] { return call->done; }, 5s)) << "execute() still waiting after the disconnected wait";
  ASSERT_FALSE(*call->result);
  EXPECT_EQ(call->result->error().code, ErrorCode::unavailable);
  auto rows = journal();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, "cmd-late");
  EXPECT_FALSE(rows[0].completed) << "a command that timed out must still run when the agent returns";

  // It does: the agent's next hello gets it.
  auto r1 = connect("r1");
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s));
  EXPECT_EQ(r1->command_ids(), std::vector<std::string>{"cmd-late"});
}

TEST_F(AgentHubTest, AQueryForADisconnectedHostFailsAtOnceAndIsNeverJournaled) {
  make_hub();
  auto call = execute(command("q-1", "r1", "instance.status"));
  ASSERT_TRUE(pump([&] { return call->done; }, 500ms)) << "a query waited for a disconnected host";
  ASSERT_FALSE(*call->result);
  EXPECT_EQ(call->result->error().code, ErrorCode::unavailable);
  EXPECT_TRUE(journal().empty());

  // Connected: sent, still not journaled, answered by its outcome.
  auto r1 = connect("r1");
  auto asked = execute(command("q-2", "r1", "instance.status"));
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s));
  EXPECT_TRUE(journal().empty()) << "a query was journaled";
  hub_->receive("r1", r1.get(), outcome_message("q-2"));
  ASSERT_TRUE(pump([&] { return asked->done; }, 5s));
  ASSERT_TRUE(*asked->result) << asked->result->error().detail;
}

TEST_F(AgentHubTest, AnOutcomeOnAnotherHostsLinkCompletesNothing) {
  make_hub();
  auto r1 = connect("r1", "10.0.0.2:1");
  auto r2 = connect("r2", "10.0.0.3:1");
  auto call = execute(command("cmd-r1", "r1"));
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s));

  hub_->receive("r2", r2.get(), outcome_message("cmd-r1"));
  pump([] { return false; }, 300ms);
  EXPECT_FALSE(call->done) << "r2's agent answered r1's command";
  auto rows = journal();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].completed) << "r2's agent completed r1's command";

  // A message for r1 on r2's connection object is not r1's link either.
  hub_->receive("r1", r2.get(), outcome_message("cmd-r1"));
  pump([] { return false; }, 300ms);
  EXPECT_FALSE(call->done) << "an outcome on a connection that is not r1's link was taken";

  hub_->receive("r1", r1.get(), outcome_message("cmd-r1"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s));
  ASSERT_TRUE(*call->result);
  EXPECT_TRUE(journal()[0].completed);
}

TEST_F(AgentHubTest, AHelloForAnotherHostThanTheCertificatesIsForbiddenAndNotAttached) {
  make_hub();
  auto c = std::make_shared<HubTestConnection>("10.0.0.9:1");
  auto s = hello("r1", c, "r2");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::forbidden);
  EXPECT_FALSE(hub_->connected("r1"));
  EXPECT_FALSE(hub_->connected("r2"));
  EXPECT_TRUE(registered_.empty()) << "a refused hello registered a host";
  EXPECT_TRUE(c->sent.empty()) << "a refused link was welcomed";

  // Messages on the refused connection are ignored.
  agent::Heartbeat beat{"r1", 1, {}, std::nullopt};
  hub_->receive("r1", c.get(), LinkMessage{"heartbeat", agent::to_json(beat)});
  EXPECT_TRUE(heartbeats_.empty());
}

TEST_F(AgentHubTest, AHelloForAnInProcessHostIsAConflict) {
  make_hub();
  auto c = std::make_shared<HubTestConnection>("10.0.0.9:1");
  auto s = hello("local-1", c, "local-1");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::conflict);
  EXPECT_FALSE(hub_->connected("local-1"));
  EXPECT_TRUE(registered_.empty());
  // Its commands still go to the local agent.
  auto call = execute(command("cmd-l", "local-1"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s));
  EXPECT_EQ(local_->executed, std::vector<std::string>{"cmd-l"});
  EXPECT_TRUE(c->sent.empty());
}

TEST_F(AgentHubTest, HeartbeatsAndReportsNamingAnotherHostAreDropped) {
  make_hub();
  auto r1 = connect("r1");
  hub_->receive("r1", r1.get(), LinkMessage{"heartbeat", agent::to_json(agent::Heartbeat{"r2", 1, {}, std::nullopt})});
  agent::SampleReport other;
  other.host_name = "r2";
  hub_->receive("r1", r1.get(), LinkMessage{"samples", agent::to_json(other)});
  hub_->receive("r1", r1.get(), LinkMessage{"changes", agent::to_json(agent::ChangeReport{"r2", {}})});
  pump([] { return false; }, 300ms);
  EXPECT_TRUE(heartbeats_.empty()) << "a heartbeat for r2 was taken from r1's link";
  EXPECT_TRUE(samples_.empty()) << "samples for r2 were taken from r1's link";
  for (const auto& c : changes_) EXPECT_NE(c.host_name, "r2") << "changes for r2 were taken from r1's link";

  // Its own are taken.
  hub_->receive("r1", r1.get(), LinkMessage{"heartbeat", agent::to_json(agent::Heartbeat{"r1", 2, {}, std::nullopt})});
  ASSERT_EQ(heartbeats_.size(), 1u);
  EXPECT_EQ(heartbeats_[0].host_name, "r1");
  EXPECT_EQ(heartbeats_[0].sequence, 2u);
}

TEST_F(AgentHubTest, SamplesAndChangesKeepOnlyInstancesPlacedOnTheLinksHost) {
  place_instances();
  make_hub();
  auto r1 = connect("r1");
  changes_.clear();  // the hello's "reconcile everything"

  agent::SampleReport report;
  report.host_name = "r1";
  for (const char* id : {"i-r1", "i-r2", "i-gone", "i-nowhere"}) {
    agent::InstanceSample s;
    s.instance_id = id;
    s.cpu_percent = 10.0;
    report.instances.push_back(s);
  }
  hub_->receive("r1", r1.get(), LinkMessage{"samples", agent::to_json(report)});
  ASSERT_TRUE(pump([&] { return !samples_.empty(); }, 5s)) << "r1's own samples never reached the sink";
  ASSERT_EQ(samples_.size(), 1u);
  EXPECT_EQ(samples_[0].host_name, "r1");
  ASSERT_EQ(samples_[0].instances.size(), 1u);
  EXPECT_EQ(samples_[0].instances[0].instance_id, "i-r1");

  hub_->receive("r1", r1.get(), LinkMessage{"changes", agent::to_json(agent::ChangeReport{"r1", {"i-r2", "i-r1"}})});
  ASSERT_TRUE(pump([&] { return !changes_.empty(); }, 5s));
  ASSERT_EQ(changes_.size(), 1u);
  EXPECT_EQ(changes_[0].instance_ids, std::vector<std::string>{"i-r1"});

  // Only other hosts' instances: nothing to reconcile.
  hub_->receive("r1", r1.get(), LinkMessage{"changes", agent::to_json(agent::ChangeReport{"r1", {"i-r2"}})});
  pump([] { return false; }, 300ms);
  EXPECT_EQ(changes_.size(), 1u);
}

TEST_F(AgentHubTest, ASecondHelloReplacesTheOldLinkAndTheOldLinksCloseDetachesNothing) {
  make_hub();
  auto old_link = connect("r1", "10.0.0.2:1");
  auto new_link = connect("r1", "10.0.0.2:2");
  EXPECT_TRUE(old_link->closed) << "the replaced link was left open";
  EXPECT_FALSE(new_link->closed);
  ASSERT_TRUE(hub_->connected("r1"));

  hub_->closed("r1", old_link.get());
  EXPECT_TRUE(hub_->connected("r1")) << "the old link's close detached the new one";

  auto call = execute(command("cmd-new", "r1"));
  ASSERT_TRUE(pump([&] { return new_link->command_ids().size() == 1; }, 5s)) << "the command did not go to the new link";
  EXPECT_TRUE(old_link->command_ids().empty());
  // The old link is not the host's: its outcome is not taken.
  hub_->receive("r1", old_link.get(), outcome_message("cmd-new"));
  pump([] { return false; }, 300ms);
  EXPECT_FALSE(call->done);
  hub_->receive("r1", new_link.get(), outcome_message("cmd-new"));
  ASSERT_TRUE(pump([&] { return call->done; }, 5s));
  EXPECT_TRUE(*call->result);

  hub_->closed("r1", new_link.get());
  EXPECT_FALSE(hub_->connected("r1"));
}

// A query is never journaled nor sent again: once the link it went out on is gone (dropped,
// or replaced by the agent's new link) no answer can come, so the caller is told at once
// rather than after the whole wait (a minute by default).
TEST_F(AgentHubTest, AQueryInFlightFailsSoonWhenItsLinkDropsOrIsReplaced) {
  make_hub(/*disconnected_wait=*/30s, /*connected_wait=*/30s);
  auto first_link = connect("r1", "10.0.0.2:1");
  auto dropped = execute(command("q-drop", "r1", "instance.status"));
  ASSERT_TRUE(pump([&] { return first_link->command_ids().size() == 1; }, 5s));
  hub_->closed("r1", first_link.get());
  ASSERT_TRUE(pump([&] { return dropped->done; }, 3s)) << "a query whose link dropped waited on";
  ASSERT_FALSE(*dropped->result);
  EXPECT_EQ(dropped->result->error().code, ErrorCode::unavailable);

  auto old_link = connect("r1", "10.0.0.2:2");
  auto replaced = execute(command("q-replaced", "r1", "instance.status"));
  // A command (journaled) in flight at the same time waits on and goes out on the new link.
  auto change = execute(command("cmd-stays", "r1"));
  ASSERT_TRUE(pump([&] { return old_link->command_ids().size() == 2; }, 5s));
  auto new_link = connect("r1", "10.0.0.2:3");
  ASSERT_TRUE(pump([&] { return replaced->done; }, 3s)) << "a query whose link was replaced waited on";
  ASSERT_FALSE(*replaced->result);
  EXPECT_EQ(replaced->result->error().code, ErrorCode::unavailable);
  EXPECT_FALSE(change->done);
  ASSERT_TRUE(pump([&] { return new_link->command_ids().size() == 1; }, 5s));
  EXPECT_EQ(new_link->command_ids(), std::vector<std::string>{"cmd-stays"});
  hub_->receive("r1", new_link.get(), outcome_message("cmd-stays"));
  ASSERT_TRUE(pump([&] { return change->done; }, 5s));
  EXPECT_TRUE(*change->result);
}

// The journal outlives the control plane: a command journaled by an earlier process (nobody
// waits for it now) is sent at the agent's hello and its outcome completes the row.
TEST_F(AgentHubTest, ACommandJournaledBeforeARestartIsSentAtTheHelloAndCompletedByItsOutcome) {
  make_hub(/*disconnected_wait=*/100ms);
  auto before = execute(command("cmd-before-restart", "r1"));
  ASSERT_TRUE(pump([&] { return before->done; }, 5s));
  ASSERT_FALSE(*before->result);
  pump([] { return false; }, 50ms);
  make_hub();  // the next control plane, same store and key

  auto r1 = connect("r1");
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s));
  EXPECT_EQ(r1->command_ids(), std::vector<std::string>{"cmd-before-restart"});
  // The whole command, secret included, comes back out of the sealed row.
  EXPECT_NE(r1->sent.back().find("SECRET123jupytertoken"), std::string::npos);
  hub_->receive("r1", r1.get(), outcome_message("cmd-before-restart"));
  ASSERT_TRUE(pump([&] { return journal().size() == 1 && journal()[0].completed; }, 5s))
      << "an outcome nobody waits for did not complete its journaled command";

  // Done: the next hello sends nothing again.
  auto again = connect("r1", "10.0.0.2:9");
  pump([] { return false; }, 200ms);
  EXPECT_EQ(again->types(), std::vector<std::string>{"welcome"});
}

TEST_F(AgentHubTest, AHelloOfAnotherLinkVersionOrThatTheRegistryRefusesIsNotAttached) {
  make_hub();
  auto old_agent = std::make_shared<HubTestConnection>("10.0.0.2:1");
  Hello h;
  h.link_version = kLinkVersion + 1;
  h.agent_version = "future";
  h.inventory = hub_test_inventory("r1");
  std::optional<Status> result;
  asio::co_spawn(io_, hub_->hello("r1", old_agent, h), [&](std::exception_ptr, Status s) { result = std::move(s); });
  ASSERT_TRUE(pump([&] { return result.has_value(); }, 5s));
  ASSERT_FALSE(*result);
  EXPECT_EQ(result->error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(hub_->connected("r1"));
  EXPECT_TRUE(registered_.empty());

  // The registry's word is final (HostRegistry refuses a name of its [[hosts]], say).
  hub_->on_registration([](agent::LateRegistration) -> asio::awaitable<Status> {
    co_return fail(ErrorCode::conflict, "refused by the registry");
  });
  auto refused = std::make_shared<HubTestConnection>("10.0.0.2:2");
  auto s = hello("r1", refused, "r1");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::conflict);
  EXPECT_FALSE(hub_->connected("r1"));
  EXPECT_TRUE(refused->sent.empty());
}

// Command ids are stable per (instance, generation, step), so two callers may wait for the
// same id at once (an action and the reconciler): one outcome answers both.
TEST_F(AgentHubTest, TwoCallersWaitingForTheSameCommandIdAreBothAnswered) {
  make_hub(/*disconnected_wait=*/30s, /*connected_wait=*/3s);
  auto r1 = connect("r1");
  auto first = execute(command("cmd-same", "r1"));
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 1; }, 5s));
  auto second = execute(command("cmd-same", "r1"));
  ASSERT_TRUE(pump([&] { return r1->command_ids().size() == 2; }, 5s));
  EXPECT_EQ(journal().size(), 1u) << "a repeated id is one journal row";

  hub_->receive("r1", r1.get(), outcome_message("cmd-same"));
  ASSERT_TRUE(pump([&] { return first->done && second->done; }, 2s))
      << "first done: " << first->done << ", second done: " << second->done;
  ASSERT_TRUE(*first->result) << first->result->error().detail;
  ASSERT_TRUE(*second->result) << second->result->error().detail;
  EXPECT_EQ((*first->result)->command_id, "cmd-same");
  EXPECT_EQ((*second->result)->command_id, "cmd-same");
}

// --- the link's envelope ----------------------------------------------------------------

TEST(LinkMessagesTest, AnEnvelopeReadsBackAsItsTypeAndBody) {
  std::string text = envelope("heartbeat", json::object{{"host_name", "r1"}, {"sequence", 7}});
  auto m = read_envelope(text);
  ASSERT_TRUE(m) << m.error().detail;
  EXPECT_EQ(m->type, "heartbeat");
  EXPECT_EQ(json::value_to<std::string>(m->body.at("host_name")), "r1");
  EXPECT_EQ(m->body.at("sequence").as_int64(), 7);

  Hello h;
  h.agent_version = "1.2.3";
  h.inventory = hub_test_inventory("r1");
  auto hm = read_envelope(envelope("hello", to_json(h)));
  ASSERT_TRUE(hm);
  auto back = hello_from_json(hm->body);
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(back->link_version, kLinkVersion);
  EXPECT_EQ(back->agent_version, "1.2.3");
  EXPECT_EQ(back->inventory.name, "r1");
  EXPECT_EQ(back->inventory.zone, "zone-a");
  ASSERT_EQ(back->inventory.gpus.size(), 1u);

  auto wm = read_envelope(envelope("welcome", to_json(Welcome{kLinkVersion, "9.9"})));
  ASSERT_TRUE(wm);
  auto w = welcome_from_json(wm->body);
  ASSERT_TRUE(w) << w.error().detail;
  EXPECT_EQ(w->control_plane_version, "9.9");
}

TEST(LinkMessagesTest, MalformedEnvelopesAreErrorsNotExceptions) {
  for (std::string_view bad : {"", "not json", "{", "[]", "42", "\"text\"", R"({"body": {}})", R"({"type": "x"})",
                               R"({"type": 3, "body": {}})", R"({"type": "x", "body": []})",
                               R"({"type": "x", "body": "y"})", "{\"type\": \"x\", \"body\": {}} trailing"}) {
    Result<LinkMessage> m = fail(ErrorCode::internal, "unset");
    EXPECT_NO_THROW(m = read_envelope(bad)) << bad;
    EXPECT_FALSE(m) << "accepted: " << bad;
  }
}

TEST(LinkMessagesTest, AHelloWithoutAnInventoryIsRejected) {
  auto no_inventory = hello_from_json(json::object{{"link_version", 1}, {"agent_version", "1"}});
  ASSERT_FALSE(no_inventory);
  EXPECT_EQ(no_inventory.error().code, ErrorCode::invalid_argument);
  auto bad_inventory =
      hello_from_json(json::object{{"link_version", 1}, {"agent_version", "1"}, {"inventory", "r1"}});
  ASSERT_FALSE(bad_inventory);
  auto no_version = hello_from_json(
      json::object{{"agent_version", "1"}, {"inventory", agent::to_json(hub_test_inventory("r1"))}});
  ASSERT_FALSE(no_version);
  auto good = hello_from_json(
      json::object{{"link_version", 1}, {"agent_version", "1"}, {"inventory", agent::to_json(hub_test_inventory("r1"))}});
  ASSERT_TRUE(good) << good.error().detail;
}

// Replicas on one store (issue 27): hub_ leads (it runs the in-process host local-1 and holds
// remote host r1's link); `standby` is another replica's hub. The standby's commands for
// local-1 and r1 are journaled, run or sent by the leader when it hears of them (the NOTIFY,
// called here by hand), and their whole outcomes reach the standby's callers from the journal.
TEST_F(AgentHubTest, ACommandThroughAStandbyRunsWhereItsHostIsServedAndItsOutcomeComesBack) {
  make_hub(30s, 30s, /*relay=*/true);
  auto standby_local = std::make_unique<HubTestLocalAgent>();
  HubTestLocalAgent* standby_agent = standby_local.get();
  AgentHub::Options options;
  options.journal_key = std::string(32, 'k');
  options.relay = true;
  auto standby = std::make_unique<AgentHub>(io_.get_executor(), *store_, std::move(standby_local), options);
  bool registered = false;
  asio::co_spawn(io_, standby->register_hosts(), [&](std::exception_ptr, Result<std::vector<agent::HostInventory>>) {
    registered = true;
  });
  ASSERT_TRUE(pump([&] { return registered; }, 5s));
  standby->serve_in_process(false);
  auto link = connect("r1");
  auto relayed = [&](agent::Command c) {
    auto call = std::make_shared<HubTestCall>();
    calls_.push_back(call);
    asio::co_spawn(io_, standby->execute(std::move(c)), [call](std::exception_ptr e, Result<agent::CommandOutcome> r) {
      call->done = true;
      if (e) call->result = Result<agent::CommandOutcome>(fail(ErrorCode::internal, "execute threw"));
      else call->result = std::move(r);
    });
    return call;
  };
  auto journaled = [&](const std::string& id) {
    for (const auto& row : journal())
      if (row.id == id) return true;
    return false;
  };

  // An in-process host's command: run by the leader's agent, never the standby's.
  auto local_call = relayed(command("c-local", "local-1"));
  ASSERT_TRUE(pump([&] { return journaled("c-local"); }, 5s));
  hub_->commands_queued("local-1");
  ASSERT_TRUE(pump([&] { return local_call->done; }, 5s)) << "the standby reads the outcome from the journal";
  ASSERT_TRUE(local_call->result && *local_call->result) << local_call->result->error().detail;
  EXPECT_TRUE((*local_call->result)->ok);
  EXPECT_EQ(local_->executed, std::vector<std::string>{"c-local"});
  EXPECT_TRUE(standby_agent->executed.empty());
  hub_->commands_queued("local-1");  // heard again: done, not run again
  pump([] { return false; }, 50ms);
  EXPECT_EQ(local_->executed.size(), 1u);

  // A remote host's command: sent on the link the leader holds; the agent's whole outcome
  // (observed included) comes back to the standby's caller.
  auto remote_call = relayed(command("c-remote", "r1"));
  ASSERT_TRUE(pump([&] { return journaled("c-remote"); }, 5s));
  hub_->commands_queued("r1");
  ASSERT_TRUE(pump([&] { return link->command_ids() == std::vector<std::string>{"c-remote"}; }, 5s));
  hub_->commands_queued("r1");  // heard twice: sent once
  pump([] { return false; }, 50ms);
  EXPECT_EQ(link->command_ids().size(), 1u);
  hub_->receive("r1", link.get(), outcome_message("c-remote"));
  ASSERT_TRUE(pump([&] { return journal().back().completed; }, 5s));
  standby->outcome_recorded("c-remote");
  ASSERT_TRUE(pump([&] { return remote_call->done; }, 5s));
  ASSERT_TRUE(remote_call->result && *remote_call->result) << remote_call->result->error().detail;
  EXPECT_EQ((*remote_call->result)->observed.at("state").as_string(), "running");

  // The sealed outcome holds what the agent said, not in clear.
  auto results = store_->read_now([](store::Database& db) { return db.all("SELECT result FROM agent_commands"); });
  ASSERT_TRUE(results);
  for (const auto& r : *results) EXPECT_EQ(r.text(0).find("running"), std::string::npos);
  standby.reset();
}

}  // namespace
}  // namespace gpucloud::agentlink
