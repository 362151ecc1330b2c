// Placement throughput, tail latency and fragmentation at 10,000 hosts.
//
// One seeded trace of 100,000 requests (RTX 4090 / A100 / H100, 1, 2, 4 or 8 GPUs, a few
// no-GPU ones, a quarter pinned to a zone) is replayed onto 10,000 simulated 8-GPU hosts with
// churn: before each request a random live instance is released with a probability that
// rises from 0 at the band's low GPU utilisation to 1 at its high one (70-85%, and a
// nearly-full 88-98% where fragmentation shows), so the cluster hovers in that band.
// Every strategy sees the same requests and the same random draws. Results: see
// docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "scheduler/placement.h"

namespace {

using gpucloud::scheduler::ClusterIndex;
using gpucloud::scheduler::GpuSlot;
using gpucloud::scheduler::HostCapacity;
using gpucloud::scheduler::Placement;
using gpucloud::scheduler::PlacementRequest;
using gpucloud::scheduler::PlacementResult;
using gpucloud::scheduler::Strategy;
using gpucloud::scheduler::Unschedulable;

constexpr int kHosts = 10'000;
constexpr int kGpusPerHost = 8;
constexpr int kRequests = 100'000;
constexpr int kCpuPerGpu = 8;
constexpr int kMemPerGpu = 64;
const std::vector<std::string> kZones = {"zone-a", "zone-b", "zone-c", "zone-d"};
const std::vector<std::string> kModels = {"RTX 4090", "A100", "H100"};

struct Step {
  PlacementRequest request;
  double release_draw;   // compared with the release probability
  std::uint32_t victim;  // which live instance goes, modulo their number
};

const std::vector<Step>& trace() {
  static const std::vector<Step> steps = [] {
    std::mt19937_64 rng(20240601);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<Step> out;
    out.reserve(kRequests);
    for (int i = 0; i < kRequests; ++i) {
      Step s;
      double m = unit(rng), c = unit(rng);
      if (unit(rng) < 0.05) {
        s.request = {"", "", 0, 4, 16};  // no-GPU data preparation
      } else {
        s.request.gpu_model = kModels[m < 0.5 ? 0 : m < 0.8 ? 1 : 2];
        s.request.gpu_count = c < 0.40 ? 1 : c < 0.65 ? 2 : c < 0.85 ? 4 : 8;
        s.request.cpu = kCpuPerGpu * s.request.gpu_count;
        s.request.memory_gib = kMemPerGpu * s.request.gpu_count;
      }
      if (unit(rng) < 0.25) s.request.zone = kZones[rng() % kZones.size()];
      s.release_draw = unit(rng);
      s.victim = static_cast<std::uint32_t>(rng());
      out.push_back(std::move(s));
    }
    return out;
  }();
  return steps;
}

// Half RTX 4090, 30% A100, 20% H100, spread over four zones; CPU and memory leave room for
// no-GPU instances beside a full host so they do not strand GPUs.
std::vector<HostCapacity> make_hosts() {
  std::vector<HostCapacity> hosts;
  hosts.reserve(kHosts);
  for (int i = 0; i < kHosts; ++i) {
    HostCapacity h;
    h.id = "h-" + std::to_string(100000 + i);
    h.name = "node-" + std::to_string(i);
    h.zone = kZones[i % kZones.size()];
    h.cpu_total = kGpusPerHost * kCpuPerGpu + 32;
    h.memory_gib_total = kGpusPerHost * kMemPerGpu + 256;
    int bucket = (i / 4) % 10;
    const std::string& model = kModels[bucket < 5 ? 0 : bucket < 8 ? 1 : 2];
    for (int g = 0; g < kGpusPerHost; ++g) {
      h.gpus.push_back(
          GpuSlot{g, "GPU-sim-" + std::to_string(i) + "-" + std::to_string(g), model, true});
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

struct Outcome {
  std::int64_t placed = 0;
  std::int64_t refused = 0;
  std::int64_t refused_8 = 0;
  std::int64_t fragmented_8 = 0;  // 8-GPU refusals while >= 8 of the model were free in scope
  double util_sum = 0;
  std::int64_t util_samples = 0;
  std::vector<std::int64_t> decision_ns;
};

// Replays `steps` of the trace, releasing with a probability that rises from 0 at `low` to 1 at
// `high` GPU utilisation; the decision timed is place() plus commit().
Outcome replay(ClusterIndex& index, Strategy strategy, int steps, double low, double high) {
  Outcome out;
  out.decision_ns.reserve(static_cast<std::size_t>(steps));
  std::vector<Placement> live;
  live.reserve(static_cast<std::size_t>(steps));
  const std::int64_t total_gpus = static_cast<std::int64_t>(kHosts) * kGpusPerHost;
  std::int64_t used_gpus = 0;
  const auto& t = trace();
  for (int i = 0; i < steps; ++i) {
    const Step& s = t[static_cast<std::size_t>(i)];
    double util = static_cast<double>(used_gpus) / static_cast<double>(total_gpus);
    double p_release = std::clamp((util - low) / (high - low), 0.0, 1.0);
    if (!live.empty() && s.release_draw < p_release) {
      std::size_t k = s.victim % live.size();
      used_gpus -= static_cast<std::int64_t>(live[k].gpu_indices.size());
      if (!index.release(live[k])) std::abort();
      live[k] = std::move(live.back());
      live.pop_back();
    }
    if (i >= steps / 5) {  // after the fill-up
      out.util_sum += util;
      ++out.util_samples;
    }

    auto start = std::chrono::steady_clock::now();
    auto result = index.place(s.request, strategy);
    const Placement* p = result ? std::get_if<Placement>(&*result) : nullptr;
    if (p != nullptr && !index.commit(*p)) std::abort();
    auto end = std::chrono::steady_clock::now();
    out.decision_ns.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());

    if (p != nullptr) {
      ++out.placed;
      used_gpus += static_cast<std::int64_t>(p->gpu_indices.size());
      live.push_back(*p);
    } else {
      ++out.refused;
      if (s.request.gpu_count == 8) {
        ++out.refused_8;
        if (index.free_gpus(s.request.zone, s.request.gpu_model) >= 8) ++out.fragmented_8;
      }
    }
  }
  return out;
}

std::int64_t percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

void report(benchmark::State& state, const Outcome& o) {
  state.counters["p50_us"] = static_cast<double>(percentile(o.decision_ns, 0.50)) / 1e3;
  state.counters["p99_us"] = static_cast<double>(percentile(o.decision_ns, 0.99)) / 1e3;
  state.counters["max_us"] =
      static_cast<double>(*std::max_element(o.decision_ns.begin(), o.decision_ns.end())) / 1e3;
  state.counters["placed"] = static_cast<double>(o.placed);
  state.counters["refused"] = static_cast<double>(o.refused);
  state.counters["refused_8gpu"] = static_cast<double>(o.refused_8);
  state.counters["frag_8gpu"] = static_cast<double>(o.fragmented_8);
  state.counters["util_pct"] =
      o.util_samples ? 100.0 * o.util_sum / static_cast<double>(o.util_samples) : 0;
}

// range(0), range(1): the utilisation band in percent.
void run(benchmark::State& state, Strategy strategy, int steps) {
  const double low = static_cast<double>(state.range(0)) / 100.0;
  const double high = static_cast<double>(state.range(1)) / 100.0;
  trace();  // generated once, outside timing
  Outcome last;
  std::int64_t decisions = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ClusterIndex index;
    for (auto& h : make_hosts()) {
      if (!index.add_host(std::move(h))) std::abort();
    }
    state.ResumeTiming();
    last = replay(index, strategy, steps, low, high);
    decisions += steps;
    state.PauseTiming();  // the index's destruction is not a decision
    index = ClusterIndex();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(decisions);
  report(state, last);
}

void BM_BestFitIndex(benchmark::State& state) { run(state, Strategy::best_fit, kRequests); }
void BM_FirstFit(benchmark::State& state) { run(state, Strategy::first_fit, kRequests); }

// For contrast: best fit as a linear scan of all 10,000 hosts (what place() over a vector
// does), on the first 5,000 requests of the same trace.
void BM_BestFitLinearScan(benchmark::State& state) {
  constexpr int kSteps = 5'000;
  Outcome last;
  std::int64_t decisions = 0;
  const auto& t = trace();
  for (auto _ : state) {
    state.PauseTiming();
    auto hosts = make_hosts();
    state.ResumeTiming();
    Outcome o;
    for (int i = 0; i < kSteps; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto result = gpucloud::scheduler::place(hosts, t[static_cast<std::size_t>(i)].request);
      const Placement* p = result ? std::get_if<Placement>(&*result) : nullptr;
      if (p != nullptr) {
        auto& h = *std::find_if(hosts.begin(), hosts.end(),
                                [&](const HostCapacity& x) { return x.id == p->host_id; });
        if (!gpucloud::scheduler::reserve(h, *p)) std::abort();
        ++o.placed;
      } else {
        ++o.refused;
      }
      auto end = std::chrono::steady_clock::now();
      o.decision_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
    }
    decisions += kSteps;
    last = std::move(o);
  }
  state.SetItemsProcessed(decisions);
  report(state, last);
}

}  // namespace

// The target band (70-85%), then a nearly full cluster (88-98%) where packing shows.
BENCHMARK(BM_BestFitIndex)
    ->ArgNames({"util_lo", "util_hi"})
    ->Args({70, 85})
    ->Args({88, 98})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_FirstFit)
    ->ArgNames({"util_lo", "util_hi"})
    ->Args({70, 85})
    ->Args({88, 98})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_BestFitLinearScan)->Unit(benchmark::kMillisecond)->Iterations(1);

BENCHMARK_MAIN();
