// LocalAgent noticing GPU health while it runs: each host's inventory is discovered again
// every inventory interval (and at once when a sample finds a healthy-listed GPU lost); a
// changed list goes out in a heartbeat right away, an unchanged one sends nothing extra. A
// GPU no longer enumerated is kept in the list as "missing" (a heartbeat that left it out
// would leave its record as it was); a failed discovery keeps the list until it keeps failing.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "agent/local_agent.h"
#include "core/time_format.h"
#include "core/unique_temp_dir.h"
#include "events/events.h"
#include "market/hosts.h"
#include "server/host_registry.h"
#include "store/store.h"

namespace gpucloud::agent {
namespace {

namespace net = boost::asio;
using namespace std::chrono_literals;

// What the fake source answers; the test changes it while the agent runs.
struct FakeGpus {
  std::mutex mu;
  Result<std::vector<gpu::GpuDevice>> answer = std::vector<gpu::GpuDevice>{};
  std::map<int, std::string> sample_errors;  // index -> the error its sample gives
  std::chrono::milliseconds discover_delay{0};
  std::atomic<int> discoveries{0};
  std::atomic<int> samples{0};

  void set(Result<std::vector<gpu::GpuDevice>> next) {
    std::lock_guard lock(mu);
    answer = std::move(next);
  }
};

class FakeInventory : public gpu::GpuInventorySource {
 public:
  FakeInventory(std::shared_ptr<FakeGpus> state, std::string kind = "nvml") : state_(std::move(state)), kind_(std::move(kind)) {}
  Result<std::vector<gpu::GpuDevice>> discover() override {
    std::chrono::milliseconds delay;
    {
      std::lock_guard lock(state_->mu);
      delay = state_->discover_delay;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard lock(state_->mu);
    ++state_->discoveries;
    return state_->answer;
  }
  Result<gpu::GpuSample> sample(int index) override {
    std::lock_guard lock(state_->mu);
    ++state_->samples;
    if (auto e = state_->sample_errors.find(index); e != state_->sample_errors.end()) {
      return fail(ErrorCode::unavailable, e->second);
    }
    return gpu::GpuSample{index, 10, 5, 1LL << 30, 24LL << 30};
  }
  std::string_view kind() const override { return kind_; }

 private:
  std::shared_ptr<FakeGpus> state_;
  std::string kind_;
};

gpu::GpuDevice device(int index, const std::string& uuid, const std::string& health = "ok") {
  return gpu::GpuDevice{index, uuid, "NVIDIA GeForce RTX 4090", 24LL << 30, "00000000:0" + std::to_string(index) + ":00.0",
                        health, false};
}

config::Config nvml_host_config() {
  config::Config config;
  config::Host host;
  host.name = "gpu-host";
  host.zone = "zone-a";
  host.cpu = 8;
  host.memory_gib = 32;
  config.hosts = {host};  // no simulated_gpus: an NVML host (its source replaced below)
  return config;
}

bool run_until(net::io_context& ioc, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ioc.restart();
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    ioc.run_one_for(10ms);
  }
  return true;
}

void run_for(net::io_context& ioc, std::chrono::milliseconds span) { run_until(ioc, [] { return false; }, span); }

struct Fixture {
  net::io_context ioc;
  std::shared_ptr<FakeGpus> gpus = std::make_shared<FakeGpus>();
  std::vector<Heartbeat> beats;
  std::vector<int> discoveries_at_beat;  // how many discoveries had run when each beat came
  std::unique_ptr<LocalAgent> agent;

  // A heartbeat interval of an hour: every beat a test sees was sent for a change.
  explicit Fixture(std::chrono::milliseconds inventory_interval, std::chrono::milliseconds heartbeat_interval = 1h,
                   std::string kind = "nvml") {
    gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
    agent = std::make_unique<LocalAgent>(ioc.get_executor(), nvml_host_config(), heartbeat_interval);
    agent->set_inventory_interval(inventory_interval);
    EXPECT_TRUE(agent->set_inventory_source("gpu-host", std::make_unique<FakeInventory>(gpus, std::move(kind))));
    EXPECT_FALSE(agent->set_inventory_source("no-such-host", std::make_unique<FakeInventory>(gpus)));
    agent->on_heartbeat([this](Heartbeat beat) {
      beats.push_back(std::move(beat));
      discoveries_at_beat.push_back(gpus->discoveries.load());
    });
  }

  std::vector<HostInventory> register_hosts() {
    std::optional<Result<std::vector<HostInventory>>> out;
    net::co_spawn(ioc, agent->register_hosts(),
                  [&](std::exception_ptr, Result<std::vector<HostInventory>> r) { out = std::move(r); });
    EXPECT_TRUE(run_until(ioc, [&] { return out.has_value(); }, 10s));
    EXPECT_TRUE(out && *out);
    return out && *out ? **out : std::vector<HostInventory>{};
  }
};

const GpuInfo* find_gpu(const Heartbeat& beat, const std::string& uuid) {
  for (const auto& g : beat.gpus)
    if (g.uuid == uuid) return &g;
  return nullptr;
}

TEST(LocalAgentGpuHealth, AGpuGoneIsInTheNextHeartbeatAsMissing) {
  Fixture f(20ms);
  auto hosts = f.register_hosts();
  ASSERT_EQ(hosts.size(), 1u);
  ASSERT_EQ(hosts[0].gpus.size(), 2u);
  run_for(f.ioc, 100ms);
  EXPECT_TRUE(f.beats.empty());  // nothing changed: nothing sent

  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  const Heartbeat& beat = f.beats.front();
  EXPECT_EQ(beat.host_name, "gpu-host");
  ASSERT_EQ(beat.gpus.size(), 2u);  // left out, it would keep its record: listed missing
  ASSERT_TRUE(find_gpu(beat, "GPU-a"));
  EXPECT_EQ(find_gpu(beat, "GPU-a")->health, "ok");
  ASSERT_TRUE(find_gpu(beat, "GPU-b"));
  EXPECT_EQ(find_gpu(beat, "GPU-b")->health, "missing");
  EXPECT_EQ(find_gpu(beat, "GPU-b")->index, 1);  // where it was last seen
  EXPECT_EQ(find_gpu(beat, "GPU-b")->pci_bus_id, "00000000:01:00.0");

  // Still gone: no further beat for it, however many rediscoveries.
  const int before = f.gpus->discoveries.load();
  run_for(f.ioc, 150ms);
  EXPECT_GT(f.gpus->discoveries.load(), before);
  EXPECT_EQ(f.beats.size(), 1u);

  // Back: a beat with it healthy again.
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return f.beats.size() == 2; }, 5s));
  ASSERT_TRUE(find_gpu(f.beats.back(), "GPU-b"));
  EXPECT_EQ(find_gpu(f.beats.back(), "GPU-b")->health, "ok");
}

TEST(LocalAgentGpuHealth, AGpuFallenOffTheBusKeepsItsUuidWithNvmlsError) {
  Fixture f(20ms);
  (void)f.register_hosts();
  // NVML still counts it but cannot name it any more.
  gpu::GpuDevice lost{1, "", "", 0, "", "nvmlDeviceGetUUID: GPU is lost", false};
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), lost});
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  const Heartbeat& beat = f.beats.front();
  ASSERT_EQ(beat.gpus.size(), 2u);
  ASSERT_TRUE(find_gpu(beat, "GPU-b"));
  EXPECT_EQ(find_gpu(beat, "GPU-b")->index, 1);
  EXPECT_EQ(find_gpu(beat, "GPU-b")->health, "nvmlDeviceGetUUID: GPU is lost");
  EXPECT_EQ(find_gpu(beat, "GPU-b")->model, "NVIDIA GeForce RTX 4090");  // as registered
}

TEST(LocalAgentGpuHealth, AHealthChangeIsSentOnceAndItsRecoveryToo) {
  Fixture f(20ms);
  (void)f.register_hosts();
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a", "nvmlDeviceGetMemoryInfo: Unknown Error"), device(1, "GPU-b")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  ASSERT_TRUE(find_gpu(f.beats[0], "GPU-a"));
  EXPECT_EQ(find_gpu(f.beats[0], "GPU-a")->health, "nvmlDeviceGetMemoryInfo: Unknown Error");
  EXPECT_EQ(find_gpu(f.beats[0], "GPU-b")->health, "ok");
  run_for(f.ioc, 100ms);
  EXPECT_EQ(f.beats.size(), 1u);

  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return f.beats.size() == 2; }, 5s));
  EXPECT_EQ(find_gpu(f.beats[1], "GPU-a")->health, "ok");
}

TEST(LocalAgentGpuHealth, NewUuidsAndMovedIndexesAreSentAndAMissingGpuNeverSharesAnIndex) {
  Fixture f(20ms);
  (void)f.register_hosts();
  // GPU-a gone, GPU-b renumbered to 0, a new GPU-c at 1.
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-b"), device(1, "GPU-c")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  const Heartbeat& beat = f.beats.front();
  ASSERT_EQ(beat.gpus.size(), 3u);
  EXPECT_EQ(find_gpu(beat, "GPU-b")->index, 0);
  EXPECT_EQ(find_gpu(beat, "GPU-c")->index, 1);
  ASSERT_TRUE(find_gpu(beat, "GPU-a"));
  EXPECT_EQ(find_gpu(beat, "GPU-a")->health, "missing");
  EXPECT_EQ(find_gpu(beat, "GPU-a")->index, 2);  // 0 is GPU-b's now: two GPUs at one index read as unhealthy
  run_for(f.ioc, 100ms);
  EXPECT_EQ(f.beats.size(), 1u);  // stable: the same list every rediscovery
}

TEST(LocalAgentGpuHealth, AFailedDiscoveryKeepsTheListUntilItKeepsFailing) {
  Fixture f(20ms);
  (void)f.register_hosts();
  const int before = f.gpus->discoveries.load();
  f.gpus->set(fail(ErrorCode::unavailable, "nvmlDeviceGetCount_v2: Driver Not Loaded"));
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  // Not before the third failure in a row, and nothing left out.
  EXPECT_GE(f.discoveries_at_beat.front() - before, LocalAgent::kDiscoveryFailuresBeforeUnhealthy);
  const Heartbeat& beat = f.beats.front();
  ASSERT_EQ(beat.gpus.size(), 2u);
  EXPECT_EQ(find_gpu(beat, "GPU-a")->health, "nvmlDeviceGetCount_v2: Driver Not Loaded");
  EXPECT_EQ(find_gpu(beat, "GPU-b")->health, "nvmlDeviceGetCount_v2: Driver Not Loaded");
  run_for(f.ioc, 100ms);
  EXPECT_EQ(f.beats.size(), 1u);

  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
  ASSERT_TRUE(run_until(f.ioc, [&] { return f.beats.size() == 2; }, 5s));
  EXPECT_EQ(find_gpu(f.beats[1], "GPU-a")->health, "ok");
  EXPECT_EQ(find_gpu(f.beats[1], "GPU-b")->health, "ok");
}

TEST(LocalAgentGpuHealth, AFailureBetweenSuccessesSendsNothing) {
  Fixture f(30ms);
  (void)f.register_hosts();
  f.gpus->set(fail(ErrorCode::unavailable, "nvmlDeviceGetCount_v2: Unknown Error"));
  const int before = f.gpus->discoveries.load();
  ASSERT_TRUE(run_until(f.ioc, [&] { return f.gpus->discoveries.load() >= before + 1; }, 5s));
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
  run_for(f.ioc, 150ms);
  EXPECT_TRUE(f.beats.empty());
}

TEST(LocalAgentGpuHealth, ASampleFindingAGpuLostRediscoversAtOnce) {
  // Rediscovery alone would wait an hour: only the sample can bring it forward.
  Fixture f(1h);
  f.agent->set_sample_interval(20ms);
  int reports = 0;
  f.agent->on_samples([&](SampleReport) { ++reports; });
  (void)f.register_hosts();
  ASSERT_TRUE(run_until(f.ioc, [&] { return reports >= 2; }, 5s));
  EXPECT_EQ(f.gpus->discoveries.load(), 1);  // the registration's
  {
    std::lock_guard lock(f.gpus->mu);
    f.gpus->sample_errors[1] = "nvmlDeviceGetUtilizationRates: GPU is lost";
    f.gpus->answer = std::vector<gpu::GpuDevice>{device(0, "GPU-a"), gpu::GpuDevice{1, "", "", 0, "", "nvmlDeviceGetHandleByIndex_v2: GPU is lost", false}};
  }
  ASSERT_TRUE(run_until(f.ioc, [&] { return !f.beats.empty(); }, 5s));
  EXPECT_EQ(find_gpu(f.beats.front(), "GPU-b")->health, "nvmlDeviceGetHandleByIndex_v2: GPU is lost");
  // Its samples keep failing, but it is listed unhealthy now: no more rediscoveries.
  const int discoveries = f.gpus->discoveries.load();
  const int seen = reports;
  ASSERT_TRUE(run_until(f.ioc, [&] { return reports >= seen + 3; }, 5s));
  EXPECT_EQ(f.gpus->discoveries.load(), discoveries);
  EXPECT_EQ(f.beats.size(), 1u);
}

TEST(LocalAgentGpuHealth, OtherSampleFailuresDoNotRediscover) {
  Fixture f(1h);
  f.agent->set_sample_interval(20ms);
  int reports = 0;
  f.agent->on_samples([&](SampleReport) { ++reports; });
  {
    std::lock_guard lock(f.gpus->mu);
    f.gpus->sample_errors[0] = "nvmlDeviceGetUtilizationRates: Not Supported";
  }
  (void)f.register_hosts();
  ASSERT_TRUE(run_until(f.ioc, [&] { return reports >= 4; }, 5s));
  EXPECT_EQ(f.gpus->discoveries.load(), 1);
}

TEST(LocalAgentGpuHealth, UnchangedInventoriesSendOnlyTheRegularHeartbeats) {
  Fixture f(5ms, 50ms);
  (void)f.register_hosts();
  const auto start = std::chrono::steady_clock::now();
  run_for(f.ioc, 400ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(f.gpus->discoveries.load(), 10);
  EXPECT_LE(static_cast<std::int64_t>(f.beats.size()), elapsed / 50ms + 1);
  for (const auto& beat : f.beats) {
    ASSERT_EQ(beat.gpus.size(), 2u);
    EXPECT_EQ(beat.gpus[0].health, "ok");
    EXPECT_EQ(beat.gpus[1].health, "ok");
  }
}

TEST(LocalAgentGpuHealth, SimulatedInventoriesAreNotDiscoveredAgain) {
  Fixture f(5ms, 1h, "simulated");
  (void)f.register_hosts();
  run_for(f.ioc, 100ms);
  EXPECT_EQ(f.gpus->discoveries.load(), 1);
  EXPECT_TRUE(f.beats.empty());
}

TEST(LocalAgentGpuHealth, AHostRegisteredWithoutGpusIsNotDiscoveredAgain) {
  // No driver at the start (a CPU-only machine): a beat could not add its GPUs anyway.
  Fixture f(5ms);
  f.gpus->set(fail(ErrorCode::unavailable, "NVML not available: libnvidia-ml.so.1: cannot open shared object file"));
  auto hosts = f.register_hosts();
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_TRUE(hosts[0].gpus.empty());
  f.gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a")});
  run_for(f.ioc, 100ms);
  EXPECT_EQ(f.gpus->discoveries.load(), 1);
  EXPECT_TRUE(f.beats.empty());
}

TEST(LocalAgentGpuHealth, DestroyedWhileADiscoveryRunsTheLoopGoesOn) {
  Fixture f(5ms);
  (void)f.register_hosts();
  {
    std::lock_guard lock(f.gpus->mu);
    f.gpus->discover_delay = 50ms;
    f.gpus->answer = std::vector<gpu::GpuDevice>{device(0, "GPU-a")};
  }
  run_for(f.ioc, 20ms);  // a discovery is under way on the sampling thread
  f.agent.reset();       // waits for it
  run_for(f.ioc, 100ms);
  EXPECT_TRUE(f.beats.empty());
}

// The whole path while the daemon runs: the agent's beat reaches a real HostRegistry, which
// records the GPU lost (gpus.lost_at, host.gpu_lost; an instance holding it shows degraded,
// see lifecycle_test) and back.
TEST(LocalAgentGpuHealth, TheRegistryRecordsAGpuLostAndBackWhileTheAgentRuns) {
  namespace fs = std::filesystem;
  const auto dir = gpucloud::testing::unique_temp_dir("gpucloud-gpu-health");
  {
    auto opened = store::Store::open((dir / "test.db").string(), 2);
    ASSERT_TRUE(opened);
    auto store = std::move(*opened);
    auto config = nvml_host_config();
    config.zones.push_back(config::Zone{"zone-a", "local", ""});
    net::io_context ioc;
    PlatformClock clock(ioc.get_executor(), true, system_now());
    auto gpus = std::make_shared<FakeGpus>();
    gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
    auto agent = std::make_unique<LocalAgent>(ioc.get_executor(), config, 1h);
    agent->set_inventory_interval(20ms);
    ASSERT_TRUE(agent->set_inventory_source("gpu-host", std::make_unique<FakeInventory>(gpus)));
    server::HostRegistry registry(ioc.get_executor(), config, *store, clock, std::move(agent), 1h, 1h);
    std::optional<Status> started;
    net::co_spawn(ioc, registry.start(), [&](std::exception_ptr, Status s) { started = std::move(s); });
    ASSERT_TRUE(run_until(ioc, [&] { return started.has_value(); }, 10s));
    ASSERT_TRUE(*started) << started->error().detail;

    auto events_of = [&](const std::string& type) {
      events::Query q;
      q.limit = 1000;
      auto all = store->read_now([&](store::Database& db) { return events::list(db, q); });
      std::vector<events::Event> out;
      if (all)
        for (auto& e : *all)
          if (e.type == type) out.push_back(std::move(e));
      return out;
    };
    auto health_of = [&](const std::string& uuid) {
      auto host = store->read_now([&](store::Database& db) { return market::find_host(db, "gpu-host"); });
      if (!host || !*host) return std::string("no host");
      for (const auto& g : (*host)->gpus)
        if (g.uuid == uuid) return g.health;
      return std::string("no GPU");
    };
    EXPECT_EQ(health_of("GPU-b"), "ok");

    gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), gpu::GpuDevice{1, "", "", 0, "", "nvmlDeviceGetUUID: GPU is lost", false}});
    ASSERT_TRUE(run_until(ioc, [&] { return events_of("host.gpu_lost").size() == 1; }, 5s));
    EXPECT_EQ(events_of("host.gpu_lost")[0].data.at("uuid").as_string(), "GPU-b");
    EXPECT_EQ(health_of("GPU-b"), "nvmlDeviceGetUUID: GPU is lost");
    EXPECT_EQ(health_of("GPU-a"), "ok");

    // Gone from the bus altogether: still the same loss.
    gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a")});
    ASSERT_TRUE(run_until(ioc, [&] { return health_of("GPU-b") == "missing"; }, 5s));
    run_for(ioc, 100ms);
    EXPECT_EQ(events_of("host.gpu_lost").size(), 1u);

    gpus->set(std::vector<gpu::GpuDevice>{device(0, "GPU-a"), device(1, "GPU-b")});
    ASSERT_TRUE(run_until(ioc, [&] { return events_of("host.gpu_recovered").size() == 1; }, 5s));
    EXPECT_EQ(health_of("GPU-b"), "ok");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace gpucloud::agent
