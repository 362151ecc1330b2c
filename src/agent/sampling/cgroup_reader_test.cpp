// The cgroup reader and one sampler round against a fake /proc and cgroup tree (v1 and v2):
// a container found by its init pid, its counters, the CPU rate between two rounds, a
// container whose cgroup went away, and the GPUs an instance holds.
#include "agent/sampling/cgroup_reader.h"

#include <map>

#include <gtest/gtest.h>

#include "agent/gpu/simulated_inventory.h"
#include "agent/sampling/fake_cgroup_tree.h"
#include "agent/sampling/instance_sampler.h"

namespace gpucloud::agent::sampling {
namespace {

using testing::FakeCgroupTree;
using namespace std::chrono_literals;

class CgroupReaderBothVersions : public ::testing::TestWithParam<int> {};

TEST_P(CgroupReaderBothVersions, ResolvesByPidAndReadsCounters) {
  FakeCgroupTree tree(GetParam());
  tree.add_process(4242, "/docker/c1");
  tree.set_cpu_ns("/docker/c1", 7'000'000'000);
  tree.set_memory("/docker/c1", 300 << 20, 100 << 20, "1073741824");
  CgroupReader reader(tree.proc_root());
  auto paths = reader.resolve(4242);
  ASSERT_TRUE(paths) << paths.error().detail;
  EXPECT_EQ(paths->version, GetParam());
  auto usage = reader.read(*paths);
  ASSERT_TRUE(usage) << usage.error().detail;
  EXPECT_EQ(usage->cpu_usage_ns, 7'000'000'000);
  EXPECT_EQ(usage->memory_used_bytes, std::optional<std::int64_t>(200 << 20));  // less inactive_file
  EXPECT_EQ(usage->memory_limit_bytes, 1073741824);

  tree.set_memory("/docker/c1", 300 << 20, 0, GetParam() == 1 ? "9223372036854771712" : "max");
  usage = reader.read(*paths);
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->memory_limit_bytes, 0);  // no limit

  EXPECT_FALSE(reader.resolve(99999));  // no such process
  EXPECT_FALSE(reader.resolve(0));
  tree.remove_cgroup("/docker/c1");
  EXPECT_FALSE(reader.read(*paths));  // gone: the caller resolves again
}

INSTANTIATE_TEST_SUITE_P(V1AndV2, CgroupReaderBothVersions, ::testing::Values(1, 2));

TEST(CgroupReader, V2WithoutMemoryControllerStillGivesCpu) {
  FakeCgroupTree tree(2);
  tree.add_process(7, "/sys.slice/x.scope");
  tree.set_cpu_ns("/sys.slice/x.scope", 5'000);
  CgroupReader reader(tree.proc_root());
  auto paths = reader.resolve(7);
  ASSERT_TRUE(paths) << paths.error().detail;
  auto usage = reader.read(*paths);
  ASSERT_TRUE(usage) << usage.error().detail;
  EXPECT_EQ(usage->cpu_usage_ns, 5'000);
  EXPECT_FALSE(usage->memory_used_bytes);
}

// A clock the test moves.
struct ManualClock {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::time_point{} + 1h;
};

SampleTarget target_for(const std::string& instance, const std::string& container, int pid) {
  SampleTarget t;
  t.instance_id = instance;
  t.host_name = "h1";
  t.container_id = container;
  t.pid = pid;
  t.memory_limit_bytes = 2LL << 30;
  return t;
}

TEST(InstanceSamplerRound, CpuPercentFromTheDeltaBetweenRounds) {
  FakeCgroupTree tree(1);
  tree.add_process(100, "/docker/busy");
  tree.add_process(200, "/docker/idle");
  tree.set_cpu_ns("/docker/busy", 10'000'000'000);
  tree.set_cpu_ns("/docker/idle", 3'000'000'000);
  tree.set_memory("/docker/busy", 64 << 20, 0, "9223372036854771712");
  tree.set_memory("/docker/idle", 32 << 20, 0, "536870912");
  auto clock = std::make_shared<ManualClock>();
  InstanceSampler sampler(CgroupReader(tree.proc_root()), [clock] { return clock->now; });
  const std::vector<SampledHost> hosts{{"h1", nullptr, {}, ""}};
  const std::vector<SampleTarget> targets{target_for("i-busy", "busy", 100), target_for("i-idle", "idle", 200)};

  auto first = sampler.round(hosts, targets);
  ASSERT_EQ(first.reports.size(), 1u);
  EXPECT_EQ(first.reports[0].host_name, "h1");
  ASSERT_EQ(first.reports[0].instances.size(), 2u);
  for (const auto& s : first.reports[0].instances) EXPECT_FALSE(s.cpu_percent) << s.instance_id;  // a rate needs two
  EXPECT_EQ(first.reports[0].instances[0].memory_used_bytes, std::optional<std::int64_t>(64 << 20));
  EXPECT_EQ(first.reports[0].instances[0].memory_limit_bytes, 2LL << 30);  // cgroup unlimited: the spec's
  EXPECT_EQ(first.reports[0].instances[1].memory_limit_bytes, 536870912);  // the cgroup's own wins
  EXPECT_TRUE(first.stale.empty());

  // Two seconds: busy used 3 s of CPU (150 %, one and a half cores), idle 20 ms (1 %).
  clock->now += 2s;
  tree.set_cpu_ns("/docker/busy", 13'000'000'000);
  tree.set_cpu_ns("/docker/idle", 3'020'000'000);
  auto second = sampler.round(hosts, targets);
  ASSERT_EQ(second.reports[0].instances.size(), 2u);
  const auto& busy = second.reports[0].instances[0];
  const auto& idle = second.reports[0].instances[1];
  EXPECT_EQ(busy.instance_id, "i-busy");
  ASSERT_TRUE(busy.cpu_percent);
  EXPECT_DOUBLE_EQ(*busy.cpu_percent, 150.0);
  ASSERT_TRUE(idle.cpu_percent);
  EXPECT_DOUBLE_EQ(*idle.cpu_percent, 1.0);

  // The busy container is recreated (a new cgroup under a new pid, counter from zero): no
  // rate on its first reading, one on the next.
  tree.add_process(101, "/docker/busy2");
  tree.set_cpu_ns("/docker/busy2", 1'000'000);
  clock->now += 1s;
  auto recreated = sampler.round(hosts, {target_for("i-busy", "busy", 101)});
  ASSERT_EQ(recreated.reports[0].instances.size(), 1u);
  EXPECT_FALSE(recreated.reports[0].instances[0].cpu_percent);
  clock->now += 1s;
  tree.set_cpu_ns("/docker/busy2", 501'000'000);
  auto after = sampler.round(hosts, {target_for("i-busy", "busy", 101)});
  ASSERT_TRUE(after.reports[0].instances[0].cpu_percent);
  EXPECT_DOUBLE_EQ(*after.reports[0].instances[0].cpu_percent, 50.0);
}

TEST(InstanceSamplerRound, UnreadableContainersAreStaleAndLeftOut) {
  FakeCgroupTree tree(2);
  tree.add_process(300, "/docker/gone");
  tree.set_cpu_ns("/docker/gone", 1);
  InstanceSampler sampler(CgroupReader(tree.proc_root()));
  const std::vector<SampledHost> hosts{{"h1", nullptr, {}, ""}};
  auto first = sampler.round(hosts, {target_for("i-1", "gone", 300)});
  ASSERT_EQ(first.reports[0].instances.size(), 1u);
  tree.remove_cgroup("/docker/gone");
  auto second = sampler.round(hosts, {target_for("i-1", "gone", 300), target_for("i-2", "never", 301)});
  EXPECT_TRUE(second.reports[0].instances.empty());
  EXPECT_EQ(second.stale, (std::vector<std::string>{"gone", "never"}));
  // A target for a host this agent does not serve is not reported (one host: it is its).
  const std::vector<SampledHost> two{{"h1", nullptr, {}, ""}, {"h2", nullptr, {}, ""}};
  tree.add_process(302, "/docker/elsewhere");
  tree.set_cpu_ns("/docker/elsewhere", 1);
  auto t = target_for("i-3", "elsewhere", 302);
  t.host_name = "h9";
  auto elsewhere = sampler.round(two, {t});
  ASSERT_EQ(elsewhere.reports.size(), 2u);
  EXPECT_TRUE(elsewhere.reports[0].instances.empty());
  EXPECT_TRUE(elsewhere.reports[1].instances.empty());
  auto only = sampler.round(hosts, {t});
  EXPECT_EQ(only.reports[0].instances.size(), 1u);
}

// An inventory whose GPUs answer as the test says (a real host's NVML, one GPU failing).
class ScriptedInventory : public gpu::GpuInventorySource {
 public:
  Result<std::vector<gpu::GpuDevice>> discover() override { return std::vector<gpu::GpuDevice>{}; }
  Result<gpu::GpuSample> sample(int index) override {
    ++samples;
    if (index == 2) return fail(ErrorCode::unavailable, "nvmlDeviceGetUtilizationRates: GPU is lost");
    return gpu::GpuSample{index, 10 * (index + 1), 5, (index + 1) * 1000LL, 80'000};
  }
  std::string_view kind() const override { return "nvml"; }
  Result<std::vector<gpu::GpuProcess>> processes(int index) override {
    auto it = procs.find(index);
    if (it == procs.end()) return fail(ErrorCode::unavailable, "no process list");
    return it->second;
  }
  int samples = 0;
  std::map<int, std::vector<gpu::GpuProcess>> procs;
};

TEST(InstanceSamplerRound, GpuMemoryOfTheInstancesOwnProcessesByCgroup) {
  FakeCgroupTree tree(1);
  tree.add_process(1, "/docker/c1");  // instance A's init
  tree.add_process(11, "/docker/c1");  // A's training process
  tree.add_process(2, "/docker/c2");  // instance B's init
  tree.add_process(21, "/docker/c2");
  tree.add_process(99, "/system.slice/other");  // not an instance
  for (const char* c : {"/docker/c1", "/docker/c2"}) tree.set_cpu_ns(c, 1);
  ScriptedInventory nvml;
  nvml.procs[0] = {{11, 3000}, {21, 500}, {99, 7}, {12345, 1}};  // 12345: gone already
  GpuInfo g0{0, "GPU-aaa", "H200", 80'000, "0:1", "ok", false};
  GpuInfo g1{1, "GPU-bbb", "H200", 80'000, "0:2", "ok", false};
  const std::vector<SampledHost> hosts{{"h1", &nvml, {g0, g1}, ""}};
  InstanceSampler sampler(CgroupReader(tree.proc_root()));
  auto a = target_for("i-a", "c1", 1);
  a.gpu_uuids = {"GPU-aaa", "GPU-bbb"};
  auto b = target_for("i-b", "c2", 2);
  b.gpu_uuids = {"GPU-aaa"};
  auto round = sampler.round(hosts, {a, b});
  const auto& report = round.reports[0];
  ASSERT_EQ(report.instances.size(), 2u);
  ASSERT_EQ(report.instances[0].gpus.size(), 2u);
  EXPECT_EQ(report.instances[0].gpus[0].process_memory_bytes, std::optional<std::int64_t>(3000));
  EXPECT_EQ(report.instances[0].gpus[1].process_memory_bytes, std::nullopt) << "GPU 1 lists no processes";
  ASSERT_EQ(report.instances[1].gpus.size(), 1u);
  EXPECT_EQ(report.instances[1].gpus[0].process_memory_bytes, std::optional<std::int64_t>(500));
  // Through the protocol and back.
  auto back = sample_report_from_json(to_json(report));
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(back->instances[0].gpus[0].process_memory_bytes, std::optional<std::int64_t>(3000));
  EXPECT_EQ(back->instances[0].gpus[1].process_memory_bytes, std::nullopt);
}

TEST(InstanceSamplerRound, InstanceGpusByUuidInTheOrderHeld) {
  FakeCgroupTree tree(1);
  for (int pid : {1, 2, 3, 4}) {
    tree.add_process(pid, "/docker/c" + std::to_string(pid));
    tree.set_cpu_ns("/docker/c" + std::to_string(pid), 1);
  }
  ScriptedInventory nvml;
  GpuInfo g0{0, "GPU-aaa", "H200", 80'000, "0:1", "ok", false};
  GpuInfo g1{1, "GPU-bbb", "H200", 80'000, "0:2", "ok", false};
  GpuInfo g2{2, "GPU-ccc", "H200", 80'000, "0:3", "ok", false};
  const std::vector<SampledHost> hosts{{"h1", &nvml, {g0, g1, g2}, ""}};
  InstanceSampler sampler(CgroupReader(tree.proc_root()));

  auto two_gpus = target_for("i-two", "c1", 1);
  two_gpus.gpu_uuids = {"GPU-bbb", "GPU-aaa"};
  auto lost = target_for("i-lost", "c2", 2);
  lost.gpu_uuids = {"GPU-aaa", "GPU-ccc"};
  auto unknown = target_for("i-unknown", "c3", 3);
  unknown.gpu_uuids = {"GPU-zzz"};
  auto cpu_only = target_for("i-cpu", "c4", 4);
  auto round = sampler.round(hosts, {two_gpus, lost, unknown, cpu_only});

  const auto& report = round.reports[0];
  EXPECT_EQ(nvml.samples, 3);  // each GPU once per round, however many instances hold it
  ASSERT_EQ(report.gpus.size(), 2u);  // the lost one has no reading
  EXPECT_EQ(report.gpus[0].uuid, "GPU-aaa");
  EXPECT_EQ(report.gpus[0].util_percent, 10);
  EXPECT_EQ(report.gpus[1].uuid, "GPU-bbb");
  EXPECT_EQ(report.gpus[1].memory_used_bytes, 2000);
  EXPECT_EQ(report.gpus[1].memory_total_bytes, 80'000);
  ASSERT_EQ(report.instances.size(), 4u);
  ASSERT_EQ(report.instances[0].gpus.size(), 2u);
  EXPECT_EQ(report.instances[0].gpus[0].uuid, "GPU-bbb");
  EXPECT_EQ(report.instances[0].gpus[0].index, 1);
  EXPECT_EQ(report.instances[0].gpus[1].uuid, "GPU-aaa");
  EXPECT_EQ(report.instances[0].gpu_note, "");
  EXPECT_TRUE(report.instances[1].gpus.empty());  // all of its GPUs or none
  EXPECT_EQ(report.instances[1].gpu_note, "nvmlDeviceGetUtilizationRates: GPU is lost");
  EXPECT_TRUE(report.instances[2].gpus.empty());
  EXPECT_EQ(report.instances[2].gpu_note, "GPU GPU-zzz is not in this host's inventory");
  EXPECT_TRUE(report.instances[3].gpus.empty());
  EXPECT_EQ(report.instances[3].gpu_note, "");

  // NVML found nothing at discovery: the instance says why.
  const std::vector<SampledHost> no_nvml{{"h1", &nvml, {}, "NVML not available: libnvidia-ml.so.1: cannot open"}};
  auto without = sampler.round(no_nvml, {two_gpus});
  EXPECT_TRUE(without.reports[0].gpus.empty());
  EXPECT_EQ(without.reports[0].instances[0].gpu_note, "NVML not available: libnvidia-ml.so.1: cannot open");
}

TEST(InstanceSamplerRound, SimulatedGpusAreNeverRead) {
  FakeCgroupTree tree(2);
  tree.add_process(9, "/docker/sim");
  tree.set_cpu_ns("/docker/sim", 1);
  gpu::SimulatedInventory simulated("h1", {{"RTX 4090", 24, 2}});
  auto devices = simulated.discover();
  ASSERT_TRUE(devices);
  std::vector<GpuInfo> gpus;
  for (const auto& d : *devices) gpus.push_back({d.index, d.uuid, d.model, d.memory_bytes, d.pci_bus_id, d.health, d.simulated});
  const std::vector<SampledHost> hosts{{"h1", &simulated, gpus, ""}};
  InstanceSampler sampler(CgroupReader(tree.proc_root()));
  auto t = target_for("i-sim", "sim", 9);
  t.gpu_uuids = {gpus[1].uuid};
  t.gpus_simulated = true;
  auto round = sampler.round(hosts, {t});
  EXPECT_TRUE(round.reports[0].gpus.empty());
  ASSERT_EQ(round.reports[0].instances.size(), 1u);
  EXPECT_TRUE(round.reports[0].instances[0].gpus.empty());
  EXPECT_EQ(round.reports[0].instances[0].gpu_note, "simulated GPUs report no utilisation");
}

}  // namespace
}  // namespace gpucloud::agent::sampling
