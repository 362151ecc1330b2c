// LocalAgent's sampler: with a sink set and a sample source (a fake of the instance
// runtime's), each round calls the sink on the loop with one report per served host; a
// simulated host reports no GPU readings and its instances say why. The loopback JSON
// transport carries the reports as a wire would.
#include <unistd.h>

#include <chrono>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "agent/local_agent.h"
#include "agent/loopback_transport.h"
#include "agent/sampling/fake_cgroup_tree.h"

namespace gpucloud::agent {
namespace {

namespace net = boost::asio;
using namespace std::chrono_literals;
using sampling::testing::FakeCgroupTree;

config::Config simulated_host_config() {
  config::Config config;
  config::Host host;
  host.name = "sim-host";
  host.zone = "zone-a";
  host.cpu = 4;
  host.memory_gib = 8;
  host.simulated_gpus = {{"RTX 4090", 24, 2}};
  config.hosts = {host};
  return config;
}

// Runs `ioc` until `done` holds or `limit` passes (the loop is where the sink is called).
bool run_sampling_until(net::io_context& ioc, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ioc.restart();
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    ioc.run_one_for(20ms);
  }
  return true;
}

template <class T>
T run_registration(net::io_context& ioc, net::awaitable<T> work) {
  std::optional<T> out;
  net::co_spawn(ioc, std::move(work), [&](std::exception_ptr, T value) { out = std::move(value); });
  EXPECT_TRUE(run_sampling_until(ioc, [&] { return out.has_value(); }, 10s));
  return std::move(*out);
}

struct SamplingFixture {
  FakeCgroupTree tree{1};
  net::io_context ioc;
  std::vector<std::vector<std::string>> stale_seen;  // what each source call was told
  std::thread::id loop_thread = std::this_thread::get_id();

  sampling::SampleSource source(std::string gpu_uuid) {
    tree.add_process(501, "/docker/c-501");
    tree.set_cpu_ns("/docker/c-501", 1'000'000);
    tree.set_memory("/docker/c-501", 10 << 20, 0, "1073741824");
    return [this, gpu_uuid](std::vector<std::string> stale) -> net::awaitable<Result<std::vector<sampling::SampleTarget>>> {
      stale_seen.push_back(stale);
      sampling::SampleTarget t;
      t.instance_id = "i-1";
      t.host_name = "sim-host";
      t.container_id = "c-501";
      t.pid = 501;
      t.gpu_uuids = {gpu_uuid};
      t.gpus_simulated = true;
      sampling::SampleTarget missing = t;  // no cgroup: left out, and stale next round
      missing.instance_id = "i-2";
      missing.container_id = "c-502";
      missing.pid = 502;
      co_return std::vector<sampling::SampleTarget>{t, missing};
    };
  }
};

TEST(LocalAgentSampling, CallsTheSinkOnTheLoopWithSimulatedGpusNoted) {
  SamplingFixture f;
  LocalAgent agent(f.ioc.get_executor(), simulated_host_config());
  agent.set_sample_interval(30ms);
  agent.set_sampling_proc_root(f.tree.proc_root());
  std::vector<SampleReport> reports;
  bool on_loop = true;
  agent.on_samples([&](SampleReport r) {
    on_loop = on_loop && std::this_thread::get_id() == f.loop_thread;
    reports.push_back(std::move(r));
  });
  auto hosts = run_registration(f.ioc, agent.register_hosts());
  ASSERT_TRUE(hosts);
  ASSERT_EQ(hosts->size(), 1u);
  ASSERT_EQ((*hosts)[0].gpus.size(), 2u);
  agent.set_sample_source(f.source((*hosts)[0].gpus[1].uuid));

  ASSERT_TRUE(run_sampling_until(f.ioc, [&] { return reports.size() >= 3; }, 10s));
  EXPECT_TRUE(on_loop);
  for (const auto& r : reports) {
    EXPECT_EQ(r.host_name, "sim-host");
    EXPECT_TRUE(r.gpus.empty());  // simulated GPUs: nothing invented
  }
  const SampleReport& last = reports.back();
  ASSERT_EQ(last.instances.size(), 1u);  // i-2 has no cgroup
  const InstanceSample& s = last.instances[0];
  EXPECT_EQ(s.instance_id, "i-1");
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_EQ(s.gpu_note, "simulated GPUs report no utilisation");
  EXPECT_EQ(s.memory_used_bytes, std::optional<std::int64_t>(10 << 20));
  EXPECT_EQ(s.memory_limit_bytes, 1073741824);
  EXPECT_TRUE(s.cpu_percent);  // not the container's first reading any more
  // The container that could not be read is named to the source the next round.
  ASSERT_GE(f.stale_seen.size(), 2u);
  EXPECT_EQ(f.stale_seen.back(), std::vector<std::string>{"c-502"});
}

TEST(LocalAgentSampling, NoSinkNoRoundsAndDestructionMidRoundIsSafe) {
  SamplingFixture f;
  int source_calls = 0;
  {
    LocalAgent agent(f.ioc.get_executor(), simulated_host_config());
    agent.set_sample_interval(10ms);
    agent.set_sampling_proc_root(f.tree.proc_root());
    auto inner = f.source("GPU-x");
    agent.set_sample_source([&, inner](std::vector<std::string> stale) {
      ++source_calls;
      return inner(std::move(stale));
    });
    (void)run_registration(f.ioc, agent.register_hosts());
    run_sampling_until(f.ioc, [] { return false; }, 100ms);
    EXPECT_EQ(source_calls, 0);  // nobody listens: the agent samples nothing
  }
  {
    auto agent = std::make_unique<LocalAgent>(f.ioc.get_executor(), simulated_host_config());
    agent->set_sample_interval(10ms);
    agent->set_sampling_proc_root(f.tree.proc_root());
    agent->set_sample_source(f.source("GPU-x"));
    int reports = 0;
    agent->on_samples([&](SampleReport) { ++reports; });
    (void)run_registration(f.ioc, agent->register_hosts());
    ASSERT_TRUE(run_sampling_until(f.ioc, [&] { return reports >= 1; }, 10s));
    // Gone between rounds (or with one in flight): the loop runs on without it.
    agent.reset();
    const int before = reports;
    run_sampling_until(f.ioc, [] { return false; }, 100ms);
    EXPECT_EQ(reports, before);
  }
}

TEST(LocalAgentSampling, LoopbackTransportCarriesReportsThroughJson) {
  SamplingFixture f;
  auto inner = std::make_unique<LocalAgent>(f.ioc.get_executor(), simulated_host_config());
  inner->set_sample_interval(20ms);
  inner->set_sampling_proc_root(f.tree.proc_root());
  inner->set_sample_source(f.source("GPU-sim-x"));
  LoopbackJsonAgent loopback(std::move(inner));
  std::vector<SampleReport> reports;
  loopback.on_samples([&](SampleReport r) { reports.push_back(std::move(r)); });
  (void)run_registration(f.ioc, loopback.register_hosts());
  const auto before = loopback.messages();
  ASSERT_TRUE(run_sampling_until(f.ioc, [&] { return reports.size() >= 2; }, 10s));
  EXPECT_GE(loopback.messages(), before + 2);
  const auto& last = reports.back();
  EXPECT_EQ(last.host_name, "sim-host");
  ASSERT_EQ(last.instances.size(), 1u);
  EXPECT_EQ(last.instances[0].gpu_note, "simulated GPUs report no utilisation");
  ASSERT_TRUE(last.instances[0].cpu_percent);
  EXPECT_GE(*last.instances[0].cpu_percent, 0.0);
}

}  // namespace
}  // namespace gpucloud::agent
