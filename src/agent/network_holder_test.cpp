// Network holders in InstanceRuntime, on an in-memory engine: the pool (take, refill, an
// empty pool), adoption after a restart, the repair of a holder that died or went away under a
// running instance, release, and [agent] network_holders = false keeping the bridge path.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <random>
#include <set>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/instance_runtime.h"

namespace gpucloud::agent::holder_test {
namespace {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

// ---- an engine in memory ---------------------------------------------------------------------

struct FakeContainer {
  ContainerSpec spec;
  std::string id;
  bool running = false;
  int pid = 0;
  std::string started_at;
  int starts = 0;
};

struct FakeEngine {
  std::map<std::string, FakeContainer> containers;  // by id
  int next_id = 1;
  int next_pid = 1000;
  int creates = 0;
  std::set<std::string> images{"gpucloud/base:bookworm-2", "img"};
  // Events: on when `events`; while a watch is open, `emit` sends one and `end_watch` ends it.
  bool events = false;
  std::function<void(EngineEvent)> emit;
  std::function<void()> end_watch;
  int watches = 0;
  void event(const std::string& action, const FakeContainer& c) {
    if (action == "die") {
      FakeContainer& alive = containers.at(c.id);
      alive.running = false;
      alive.pid = 0;
    }
    EngineEvent e{action, c.id, c.spec.labels};
    if (emit) emit(std::move(e));
  }

  FakeContainer* find(const std::string& id_or_name) {
    if (auto it = containers.find(id_or_name); it != containers.end()) return &it->second;
    for (auto& [id, c] : containers)
      if (c.spec.name == id_or_name) return &c;
    return nullptr;
  }
  std::vector<FakeContainer*> holders() {
    std::vector<FakeContainer*> out;
    for (auto& [id, c] : containers)
      if (c.spec.labels.contains(std::string(kNetworkHolderLabel))) out.push_back(&c);
    return out;
  }
  FakeContainer* instance(const std::string& instance_id) {
    for (auto& [id, c] : containers) {
      auto it = c.spec.labels.find(std::string(kInstanceLabel));
      if (it != c.spec.labels.end() && it->second == instance_id) return &c;
    }
    return nullptr;
  }
  ContainerStatus status_of(const FakeContainer& c) const {
    ContainerStatus s;
    s.id = c.id;
    s.name = c.spec.name;
    s.image = c.spec.image;
    s.labels = c.spec.labels;
    s.running = c.running;
    s.state = c.running ? "running" : (c.starts ? "exited" : "created");
    s.started_at = c.started_at;
    s.ipv4 = c.spec.ipv4;
    s.nano_cpus = static_cast<std::int64_t>(c.spec.cpus * 1e9);
    s.memory_bytes = c.spec.memory_bytes;
    s.pid = c.running ? c.pid : 0;
    s.network_mode = c.spec.join_network_of.empty() ? c.spec.network : "container:" + c.spec.join_network_of;
    return s;
  }
  // What `docker kill` does: the process ends, the container stays.
  void kill(const std::string& id) {
    FakeContainer* c = find(id);
    c->running = false;
    c->pid = 0;
  }
};

class FakeDriver : public RuntimeDriver {
 public:
  explicit FakeDriver(std::shared_ptr<FakeEngine> engine) : e_(std::move(engine)) {}

  net::awaitable<Status> ping() override { co_return ok(); }
  net::awaitable<Result<DriverInfo>> fingerprint() override {
    DriverInfo info;
    info.engine = "fake";
    info.storage_driver = "overlay2";
    co_return info;
  }
  net::awaitable<Result<NetworkInfo>> ensure_network(NetworkSpec spec) override {
    NetworkInfo info;
    info.id = "net1";
    info.name = spec.name;
    info.subnet = spec.subnet.empty() ? "10.200.0.0/24" : spec.subnet;
    info.gateway = info.subnet.substr(0, info.subnet.rfind('.')) + ".1";
    co_return info;
  }
  net::awaitable<Status> remove_network(std::string) override { co_return ok(); }
  net::awaitable<Result<bool>> image_present(std::string ref) override { co_return e_->images.contains(ref); }
  net::awaitable<Result<std::optional<ImageInfo>>> image_inspect(std::string ref) override {
    if (!e_->images.contains(ref)) co_return std::optional<ImageInfo>();
    co_return std::optional<ImageInfo>(ImageInfo{"sha256:" + ref, 1000, 1});
  }
  net::awaitable<Status> pull_image(std::string, std::chrono::milliseconds) override {
    co_return fail(ErrorCode::unavailable, "no registry");
  }
  net::awaitable<Result<CreatedContainer>> create(ContainerSpec spec) override {
    if (e_->find(spec.name)) co_return fail(ErrorCode::conflict, "name in use: " + spec.name);
    if (!spec.join_network_of.empty()) {
      if (!spec.network.empty() || !spec.ipv4.empty() || !e_->find(spec.join_network_of))
        co_return fail(ErrorCode::invalid_argument, "conflicting options");
    }
    if (!spec.ipv4.empty()) {
      for (auto& [id, c] : e_->containers)
        if (c.spec.ipv4 == spec.ipv4) co_return fail(ErrorCode::conflict, "address in use: " + spec.ipv4);
    }
    FakeContainer c;
    c.id = "c" + std::to_string(e_->next_id++);
    c.spec = std::move(spec);
    ++e_->creates;
    CreatedContainer out;
    out.id = c.id;
    out.cpus = c.spec.cpus;
    e_->containers[c.id] = std::move(c);
    co_return out;
  }
  net::awaitable<Status> start(std::string id) override {
    FakeContainer* c = e_->find(id);
    if (!c) co_return fail(ErrorCode::not_found, "no such container " + id);
    if (c->running) co_return ok();
    if (!c->spec.join_network_of.empty()) {
      FakeContainer* holder = e_->find(c->spec.join_network_of);
      if (!holder) co_return fail(ErrorCode::not_found, "no such container " + c->spec.join_network_of);
      if (!holder->running) co_return fail(ErrorCode::conflict, "cannot join network of a non running container");
    }
    c->running = true;
    c->pid = e_->next_pid++;
    c->started_at = "2026-12-03T00:00:" + std::to_string(c->pid % 60) + "Z";
    ++c->starts;
    co_return ok();
  }
  net::awaitable<Status> stop(std::string id, std::chrono::seconds) override {
    if (FakeContainer* c = e_->find(id)) {
      c->running = false;
      c->pid = 0;
    }
    co_return ok();
  }
  net::awaitable<Status> remove(std::string id) override {
    if (FakeContainer* c = e_->find(id)) e_->containers.erase(c->id);
    co_return ok();
  }
  net::awaitable<Result<ContainerStatus>> inspect(std::string id) override {
    FakeContainer* c = e_->find(id);
    if (!c) {
      ContainerStatus gone;
      gone.exists = false;
      co_return gone;
    }
    co_return e_->status_of(*c);
  }
  net::awaitable<Result<std::vector<ContainerStatus>>> list(std::map<std::string, std::string> filter) override {
    std::vector<ContainerStatus> out;
    for (auto& [id, c] : e_->containers) {
      bool all = true;
      for (const auto& [k, v] : filter) {
        auto it = c.spec.labels.find(k);
        all = all && it != c.spec.labels.end() && it->second == v;
      }
      if (all) out.push_back(e_->status_of(c));
    }
    co_return out;
  }
  net::awaitable<Result<ContainerStatus>> recover(DriverState state) override {
    if (!state.container_id.empty())
      if (FakeContainer* c = e_->find(state.container_id)) co_return e_->status_of(*c);
    if (FakeContainer* c = e_->find(state.container_name)) co_return e_->status_of(*c);
    ContainerStatus gone;
    gone.exists = false;
    co_return gone;
  }
  net::awaitable<Result<ContainerStatus>> wait(std::string id, std::chrono::milliseconds) override {
    co_return co_await inspect(std::move(id));
  }
  net::awaitable<Result<std::string>> logs(std::string, int) override { co_return std::string(); }
  net::awaitable<Result<ExecResult>> exec_run(std::string, std::vector<std::string>,
                                              std::chrono::milliseconds) override {
    co_return fail(ErrorCode::unavailable, "no exec here");
  }
  net::awaitable<Result<std::string>> exec_capture(std::string, std::vector<std::string>) override {
    co_return fail(ErrorCode::unavailable, "no exec here");
  }
  net::awaitable<Result<std::unique_ptr<TerminalSession>>> exec_tty(std::string, std::vector<std::string>, int, int,
                                                                   std::vector<std::string>) override {
    co_return fail(ErrorCode::unavailable, "no exec here");
  }
  net::awaitable<Result<std::string>> commit(std::string, std::string repo, std::string tag,
                                             std::map<std::string, std::string>) override {
    e_->images.insert(repo + ":" + tag);
    co_return "sha256:" + repo + tag;
  }
  net::awaitable<Status> remove_image(std::string ref) override {
    e_->images.erase(ref);
    co_return ok();
  }
  net::awaitable<Result<double>> update(std::string, double cpus, std::int64_t) override { co_return cpus; }
  net::awaitable<Result<std::string>> flatten(std::string id, std::string repo, std::string tag,
                                              std::map<std::string, std::string> labels) override {
    co_return co_await commit(std::move(id), std::move(repo), std::move(tag), std::move(labels));
  }
  bool reports_events() const override { return e_->events; }
  net::awaitable<Status> watch_events(std::map<std::string, std::string>, std::function<void(EngineEvent)> on_event,
                                      std::function<void()> connected) override {
    ++e_->watches;
    e_->emit = std::move(on_event);
    connected();
    net::steady_timer open(co_await net::this_coro::executor, net::steady_timer::time_point::max());
    e_->end_watch = [&open] { open.cancel(); };
    boost::system::error_code ec;
    co_await open.async_wait(net::redirect_error(net::use_awaitable, ec));
    e_->emit = nullptr;
    e_->end_watch = nullptr;
    co_return fail(ErrorCode::unavailable, "the engine went away");
  }

 private:
  std::shared_ptr<FakeEngine> e_;
};

// ---- the runtime on it -----------------------------------------------------------------------

std::string hex_suffix(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back("0123456789abcdef"[rng() % 16]);
  return out;
}

class NetworkHolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpucloud-holders-" + hex_suffix(10));
    fs::create_directories(dir_);
    engine_ = std::make_shared<FakeEngine>();
  }
  void TearDown() override {
    runtime_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A runtime (again) on the same state directory and engine.
  void make_runtime(bool holders = true, int pool = 2) {
    runtime_.reset();
    InstanceRuntime::Options o;
    o.host_key_wait = std::chrono::milliseconds(0);
    o.ssh_listen_wait = std::chrono::milliseconds(0);
    o.stop_grace = std::chrono::seconds(0);
    o.network_holders = holders;
    o.network_pool_size = pool;
    o.apply_ports = [](const std::vector<firewall::PublishedPort>&) { return ok(); };
    o.set_hostname = [this](int pid, const std::string& name) {
      std::lock_guard lock(hostnames_mutex_);
      hostnames_[pid] = name;
      return ok();
    };
    runtime_ = std::make_unique<InstanceRuntime>(io_.get_executor(), "hx", (dir_ / "state").string(),
                                                 std::make_unique<FakeDriver>(engine_), "", "gpucloud-hx-unused", o);
  }

  // Runs `work` and every detached step it left (the pool's refill) to the end.
  template <class T>
  T drive(net::awaitable<T> work) {
    std::optional<T> out;
    net::co_spawn(io_, std::move(work), [&](std::exception_ptr e, T v) {
      if (e) std::rethrow_exception(e);
      out.emplace(std::move(v));
    });
    io_.restart();
    io_.run();
    return std::move(*out);
  }

  Result<CommandOutcome> command(std::string kind, json::object desired) {
    Command c;
    c.id = "cmd-" + hex_suffix(8);
    c.kind = std::move(kind);
    c.desired = std::move(desired);
    return drive(runtime_->handle(std::move(c)));
  }
  Result<CommandOutcome> ensure(const std::string& id, const std::string& name, const std::string& state = "running") {
    InstanceSpec spec;
    spec.instance_id = id;
    spec.name = name;
    spec.host = "test-host";
    spec.state = state;
    spec.image = "img";
    spec.ports = {PortSpec{22, 30022, "tcp", {}}};
    if (id != "i1") spec.ports[0].host_port = 30023 + static_cast<int>(id.back() - '0');
    return command("instance.ensure", to_json(spec));
  }
  std::string hostname_of(int pid) {
    std::lock_guard lock(hostnames_mutex_);
    auto it = hostnames_.find(pid);
    return it == hostnames_.end() ? "" : it->second;
  }

  net::io_context io_;
  fs::path dir_;
  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<InstanceRuntime> runtime_;
  std::mutex hostnames_mutex_;
  std::map<int, std::string> hostnames_;
};

TEST_F(NetworkHolderTest, CreateTakesAPooledHolderAndThePoolIsRefilled) {
  make_runtime();
  ASSERT_TRUE(drive(runtime_->start()));
  ASSERT_EQ(runtime_->pooled_holders().size(), 2u) << "the pool is filled at start";
  const auto pooled = runtime_->pooled_holders();
  const int creates_before = engine_->creates;

  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  FakeContainer* instance = engine_->instance("i1");
  ASSERT_NE(instance, nullptr);
  const std::string holder_id = instance->spec.join_network_of;
  EXPECT_EQ(holder_id, pooled.front()) << "the instance joins the oldest pooled holder";
  EXPECT_TRUE(instance->spec.network.empty());
  EXPECT_TRUE(instance->spec.ipv4.empty());
  EXPECT_TRUE(instance->running);
  FakeContainer* holder = engine_->find(holder_id);
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(std::string(out->observed.at("ipv4").as_string()), holder->spec.ipv4) << "the instance's address is its holder's";
  EXPECT_EQ(hostname_of(instance->pid), "box") << "the hostname is set in the instance's UTS namespace";
  std::ifstream hostname_file(dir_ / "state" / "instances" / "i1" / "config" / "hostname");
  std::string written;
  std::getline(hostname_file, written);
  EXPECT_EQ(written, "box") << "the init writes it into /etc/hostname and /etc/hosts";
  // The holder was not made on the create's path: one instance plus one refill since.
  EXPECT_EQ(engine_->creates, creates_before + 2);
  EXPECT_EQ(runtime_->pooled_holders().size(), 2u) << "refilled after the take";
  EXPECT_EQ(engine_->holders().size(), 3u);
  std::set<std::string> ips;
  for (auto* h : engine_->holders()) ips.insert(h->spec.ipv4);
  EXPECT_EQ(ips.size(), 3u) << "every holder has its own address";
  for (auto* h : engine_->holders()) {
    EXPECT_TRUE(h->spec.network_holder);
    EXPECT_EQ(h->spec.command, (std::vector<std::string>{"sleep", "infinity"}));
    EXPECT_FALSE(h->spec.labels.contains(std::string(kInstanceLabel)));
  }
  // The record names the holder (what a restart adopts it by).
  auto status = command("instance.status", {});
  ASSERT_TRUE(status) << status.error().detail;
  EXPECT_TRUE(status->observed.at("unknown_containers").as_array().empty())
      << "holders are no unknown containers: " << json::serialize(status->observed);
  ASSERT_EQ(status->observed.at("instances").as_array().size(), 1u);
  EXPECT_EQ(status->observed.at("instances").as_array()[0].at("running"), true);
}

TEST_F(NetworkHolderTest, AnEmptyPoolMakesAHolderInline) {
  make_runtime(true, 0);
  ASSERT_TRUE(drive(runtime_->start()));
  EXPECT_TRUE(runtime_->pooled_holders().empty());
  EXPECT_TRUE(engine_->holders().empty());
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  ASSERT_EQ(engine_->holders().size(), 1u);
  FakeContainer* instance = engine_->instance("i1");
  ASSERT_NE(instance, nullptr);
  EXPECT_EQ(instance->spec.join_network_of, engine_->holders()[0]->id);
  EXPECT_TRUE(engine_->holders()[0]->running);
  EXPECT_TRUE(runtime_->pooled_holders().empty());
}

TEST_F(NetworkHolderTest, WithoutTheHolderImageAnInlineHolderUsesTheInstancesImage) {
  engine_->images.erase("gpucloud/base:bookworm-2");
  make_runtime(true, 2);
  ASSERT_TRUE(drive(runtime_->start()));
  EXPECT_TRUE(runtime_->pooled_holders().empty()) << "no refill without the holder image";
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  ASSERT_EQ(engine_->holders().size(), 1u);
  EXPECT_EQ(engine_->holders()[0]->spec.image, "img");
}

TEST_F(NetworkHolderTest, ARestartAdoptsHoldersAndRemovesOrphans) {
  make_runtime();
  ASSERT_TRUE(drive(runtime_->start()));
  ASSERT_TRUE(ensure("i1", "box"));
  const std::string assigned = engine_->instance("i1")->spec.join_network_of;
  auto pooled = runtime_->pooled_holders();
  ASSERT_EQ(pooled.size(), 2u);
  // A holder left stopped (a crash right after its create) and one beyond the pool's size.
  FakeContainer orphan;
  orphan.id = "orphan1";
  orphan.spec.name = "gpucloud-hx-holder-orphan1";
  orphan.spec.labels = {{std::string(kInstallationLabel), "hx"}, {std::string(kNetworkHolderLabel), "1"}};
  orphan.spec.ipv4 = "10.200.0.200";
  engine_->containers[orphan.id] = orphan;

  make_runtime();  // gpucloudd restarted (kill -9: nothing was cleaned up)
  const int creates_before = engine_->creates;
  ASSERT_TRUE(drive(runtime_->start()));
  auto adopted = runtime_->pooled_holders();
  std::sort(adopted.begin(), adopted.end());
  std::sort(pooled.begin(), pooled.end());
  EXPECT_EQ(adopted, pooled) << "the unassigned running holders are the pool again";
  EXPECT_EQ(engine_->creates, creates_before) << "a full pool needs no new holder";
  EXPECT_EQ(engine_->find("orphan1"), nullptr) << "a stopped unassigned holder is removed";
  ASSERT_NE(engine_->find(assigned), nullptr) << "the instance keeps its holder";
  EXPECT_EQ(engine_->holders().size(), 3u);
  // The instance is still on it, and a new create takes a pooled one, not the instance's.
  auto again = ensure("i1", "box");
  ASSERT_TRUE(again) << again.error().detail;
  EXPECT_EQ(engine_->instance("i1")->spec.join_network_of, assigned);
  ASSERT_TRUE(ensure("i2", "box2"));
  EXPECT_NE(engine_->instance("i2")->spec.join_network_of, assigned);
  EXPECT_NE(engine_->instance("i2")->spec.join_network_of, "orphan1");
}

TEST_F(NetworkHolderTest, AKilledHolderIsStartedAndItsInstanceRestartedByStatus) {
  make_runtime(true, 1);
  ASSERT_TRUE(drive(runtime_->start()));
  ASSERT_TRUE(ensure("i1", "box"));
  FakeContainer* instance = engine_->instance("i1");
  const std::string holder_id = instance->spec.join_network_of;
  const int starts_before = instance->starts;
  engine_->kill(holder_id);  // the instance still "runs", in a namespace with no network

  auto status = command("instance.status", {});
  ASSERT_TRUE(status) << status.error().detail;
  FakeContainer* holder = engine_->find(holder_id);
  ASSERT_NE(holder, nullptr);
  EXPECT_TRUE(holder->running) << "the holder is started again";
  instance = engine_->instance("i1");
  EXPECT_EQ(instance->starts, starts_before + 1) << "the instance is restarted into the holder's new namespace";
  EXPECT_TRUE(instance->running);
  EXPECT_EQ(hostname_of(instance->pid), "box");
  EXPECT_EQ(status->observed.at("instances").as_array()[0].at("running"), true);

  // Healthy again: the next pass leaves both alone.
  ASSERT_TRUE(command("instance.status", {}));
  EXPECT_EQ(engine_->instance("i1")->starts, starts_before + 1);

  // A holder restarted behind our back (same container, another process) counts too.
  engine_->kill(holder_id);
  ASSERT_TRUE(drive([](FakeEngine& e, std::string id) -> net::awaitable<bool> {
    FakeDriver d(std::shared_ptr<FakeEngine>(&e, [](FakeEngine*) {}));
    co_return static_cast<bool>(co_await d.start(id));
  }(*engine_, holder_id)));
  ASSERT_TRUE(command("instance.status", {}));
  EXPECT_EQ(engine_->instance("i1")->starts, starts_before + 2);
}

TEST_F(NetworkHolderTest, AHolderRemovedUnderARunningInstanceIsMadeAgainAtItsAddress) {
  make_runtime(true, 0);
  ASSERT_TRUE(drive(runtime_->start()));
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  const std::string old_holder = engine_->instance("i1")->spec.join_network_of;
  const std::string ip = engine_->find(old_holder)->spec.ipv4;
  engine_->containers.erase(old_holder);

  ASSERT_TRUE(command("instance.status", {}));
  ASSERT_EQ(engine_->holders().size(), 1u);
  FakeContainer* holder = engine_->holders()[0];
  EXPECT_NE(holder->id, old_holder);
  EXPECT_EQ(holder->spec.ipv4, ip) << "the instance keeps its address";
  FakeContainer* instance = engine_->instance("i1");
  ASSERT_NE(instance, nullptr);
  EXPECT_EQ(instance->spec.join_network_of, holder->id) << "made again from its filesystem, joining the new holder";
  EXPECT_TRUE(instance->running);
  EXPECT_EQ(instance->spec.image, "gpucloud-system/hx-i1:r1");
}

TEST_F(NetworkHolderTest, StopKeepsTheHolderAndStartStartsAStoppedHolderFirst) {
  make_runtime(true, 0);
  ASSERT_TRUE(drive(runtime_->start()));
  ASSERT_TRUE(ensure("i1", "box"));
  const std::string holder_id = engine_->instance("i1")->spec.join_network_of;
  ASSERT_TRUE(ensure("i1", "box", "stopped"));
  EXPECT_FALSE(engine_->instance("i1")->running);
  ASSERT_NE(engine_->find(holder_id), nullptr);
  EXPECT_TRUE(engine_->find(holder_id)->running) << "a stopped instance keeps its holder (and address)";
  engine_->kill(holder_id);  // a host reboot stops every container
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  EXPECT_TRUE(engine_->find(holder_id)->running);
  EXPECT_TRUE(engine_->instance("i1")->running);
  EXPECT_EQ(engine_->instance("i1")->spec.join_network_of, holder_id);
  // A rename while stopped rebuilds the container, joining the same holder.
  ASSERT_TRUE(ensure("i1", "box", "stopped"));
  auto renamed = ensure("i1", "crate");
  ASSERT_TRUE(renamed) << renamed.error().detail;
  EXPECT_EQ(renamed->observed.at("rebuilt"), true);
  EXPECT_EQ(engine_->instance("i1")->spec.join_network_of, holder_id);
  EXPECT_EQ(hostname_of(engine_->instance("i1")->pid), "crate");
}

TEST_F(NetworkHolderTest, ReleaseRemovesTheHolderAndFreesItsAddress) {
  make_runtime(true, 0);
  ASSERT_TRUE(drive(runtime_->start()));
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  const std::string ip(out->observed.at("ipv4").as_string());
  auto removed = command("instance.remove", json::object{{"instance_id", "i1"}});
  ASSERT_TRUE(removed) << removed.error().detail;
  EXPECT_TRUE(engine_->holders().empty()) << "no holder is left behind";
  EXPECT_EQ(engine_->instance("i1"), nullptr);
  auto next = ensure("i2", "box2");
  ASSERT_TRUE(next) << next.error().detail;
  EXPECT_EQ(std::string(next->observed.at("ipv4").as_string()), ip) << "the address is free again";
}

TEST_F(NetworkHolderTest, TurnedOffInstancesAreOnTheBridgeAsBefore) {
  make_runtime(false, 2);
  ASSERT_TRUE(drive(runtime_->start()));
  EXPECT_TRUE(runtime_->pooled_holders().empty());
  auto out = ensure("i1", "box");
  ASSERT_TRUE(out) << out.error().detail;
  EXPECT_TRUE(engine_->holders().empty()) << "no holder is made";
  FakeContainer* instance = engine_->instance("i1");
  ASSERT_NE(instance, nullptr);
  EXPECT_TRUE(instance->spec.join_network_of.empty());
  EXPECT_EQ(instance->spec.network, "gpucloud-hx");
  EXPECT_EQ(instance->spec.ipv4, std::string(out->observed.at("ipv4").as_string()));
  EXPECT_EQ(instance->spec.hostname, "box");
  EXPECT_FALSE(fs::exists(dir_ / "state" / "instances" / "i1" / "config" / "hostname"));
  EXPECT_TRUE(hostnames_.empty()) << "nothing is set by hand";
  // Holders left from when it was on: unassigned ones go at start.
  FakeContainer stray;
  stray.id = "stray1";
  stray.spec.name = "gpucloud-hx-holder-stray1";
  stray.spec.labels = {{std::string(kInstallationLabel), "hx"}, {std::string(kNetworkHolderLabel), "1"}};
  stray.running = true;
  stray.pid = 5;
  stray.spec.ipv4 = "10.200.0.99";
  engine_->containers[stray.id] = stray;
  make_runtime(false, 2);
  ASSERT_TRUE(drive(runtime_->start()));
  EXPECT_EQ(engine_->find("stray1"), nullptr);
}

TEST_F(NetworkHolderTest, EngineEventsReportTheirInstancesAndADeadPooledHolderIsReplaced) {
  engine_->events = true;
  make_runtime();
  ASSERT_TRUE(drive(runtime_->start()));
  ASSERT_TRUE(ensure("i1", "box"));
  ASSERT_EQ(runtime_->pooled_holders().size(), 2u);
  std::vector<ChangeReport> reports;
  runtime_->report_changes_to([&](ChangeReport r) { reports.push_back(std::move(r)); });
  auto pump = [&](auto done, std::chrono::milliseconds limit) {
    for (auto deadline = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < deadline;) {
      if (done()) return true;
      io_.restart();
      io_.run_for(std::chrono::milliseconds(5));
    }
    return done();
  };
  ASSERT_TRUE(pump([&] { return static_cast<bool>(engine_->emit); }, std::chrono::seconds(2)));
  EXPECT_TRUE(reports.empty()) << "the first connection reports nothing";

  // The instance's own container, then its holder: each reports i1 on its host.
  FakeContainer* instance = engine_->instance("i1");
  ASSERT_NE(instance, nullptr);
  engine_->event("die", *instance);
  ASSERT_TRUE(pump([&] { return reports.size() == 1; }, std::chrono::seconds(2)));
  EXPECT_EQ(reports[0].host_name, "test-host");
  EXPECT_EQ(reports[0].instance_ids, std::vector<std::string>{"i1"});
  engine_->event("die", *engine_->find(instance->spec.join_network_of));
  ASSERT_TRUE(pump([&] { return reports.size() == 2; }, std::chrono::seconds(2)));
  EXPECT_EQ(reports[1].instance_ids, std::vector<std::string>{"i1"});

  // A pooled holder dies: it is dropped, removed and replaced; no instance is concerned.
  const std::string dead = runtime_->pooled_holders().front();
  engine_->event("die", *engine_->find(dead));
  ASSERT_TRUE(pump([&] {
    auto pool = runtime_->pooled_holders();
    return pool.size() == 2u && std::find(pool.begin(), pool.end(), dead) == pool.end() && !runtime_->pool_refilling();
  }, std::chrono::seconds(2)));
  EXPECT_EQ(engine_->find(dead), nullptr) << "the dead holder is removed";
  EXPECT_EQ(reports.size(), 2u);

  // The engine goes away and comes back: everything may have changed.
  engine_->end_watch();
  ASSERT_TRUE(pump([&] { return reports.size() == 3; }, std::chrono::seconds(3)));
  EXPECT_TRUE(reports[2].instance_ids.empty());
  EXPECT_EQ(engine_->watches, 2);

  // Stopped: no more watching once the stream ends.
  runtime_->stop_watching();
  engine_->end_watch();
  pump([] { return false; }, std::chrono::milliseconds(1500));
  EXPECT_EQ(engine_->watches, 2);
}

}  // namespace
}  // namespace gpucloud::agent::holder_test
