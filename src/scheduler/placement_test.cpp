#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <random>

namespace gpucloud::scheduler {
namespace {

// A host with `gpus` GPUs of `model`, the ones listed in `used` taken.
HostCapacity make_host(std::string id, std::string zone, std::string model, int gpus, int cpu = 64,
                       std::int64_t mem = 512, std::vector<int> used = {}) {
  HostCapacity h;
  h.name = id;
  h.id = "h-" + id;
  h.zone = std::move(zone);
  h.cpu_total = cpu;
  h.memory_gib_total = mem;
  for (int i = 0; i < gpus; ++i) {
    bool taken = std::find(used.begin(), used.end(), i) != used.end();
    h.gpus.push_back({i, h.id + "-gpu" + std::to_string(i), model, !taken});
  }
  return h;
}

PlacementRequest gpu_request(std::string model, int count, int cpu = 0, std::int64_t mem = 0,
                             std::string zone = "") {
  return {std::move(zone), std::move(model), count, cpu, mem, {}};
}

const Placement& placed(const Result<PlacementResult>& r) {
  EXPECT_TRUE(r.has_value()) << r.error().detail;
  const Placement* p = std::get_if<Placement>(&*r);
  EXPECT_NE(p, nullptr) << std::get<Unschedulable>(*r).message;
  static const Placement none;
  return p != nullptr ? *p : none;
}

const Unschedulable& refused(const Result<PlacementResult>& r) {
  EXPECT_TRUE(r.has_value()) << r.error().detail;
  const Unschedulable* u = std::get_if<Unschedulable>(&*r);
  EXPECT_NE(u, nullptr) << "placed on " << std::get<Placement>(*r).host_id;
  static const Unschedulable none;
  return u != nullptr ? *u : none;
}

TEST(PlacementTest, FitsWithLowestFreeIndices) {
  auto host = make_host("node-1", "zone-a", "RTX 4090", 8, 64, 512, {0, 2});
  std::swap(host.gpus[1], host.gpus[6]);  // list order must not matter
  auto r = place({host}, gpu_request("RTX 4090", 3, 24, 96));
  const Placement& p = placed(r);
  EXPECT_EQ(p.host_id, "h-node-1");
  EXPECT_EQ(p.gpu_indices, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(p.cpu, 24);
  EXPECT_EQ(p.memory_gib, 96);
}

TEST(PlacementTest, PreferredGpusAreTakenFirstWhenFreeButNeverRequired) {
  auto host = make_host("node-1", "zone-a", "RTX 4090", 8, 64, 512, {0, 5});
  auto req = gpu_request("RTX 4090", 2, 16, 64);
  req.preferred_gpu_uuids = {host.gpus[6].uuid, host.gpus[3].uuid};
  EXPECT_EQ(placed(place({host}, req)).gpu_indices, (std::vector<int>{3, 6}));
  // One preferred GPU is taken by someone else now: the other, then the lowest free.
  req.preferred_gpu_uuids = {host.gpus[5].uuid, host.gpus[7].uuid};
  EXPECT_EQ(placed(place({host}, req)).gpu_indices, (std::vector<int>{1, 7}));
  // Preferred GPUs that are gone (not listed) change nothing.
  req.preferred_gpu_uuids = {"GPU-gone"};
  EXPECT_EQ(placed(place({host}, req)).gpu_indices, (std::vector<int>{1, 2}));
}

TEST(PlacementTest, NoFitNamesReasonsAndClosestHost) {
  std::vector<HostCapacity> hosts = {
      make_host("node-1", "zone-a", "RTX 4090", 8, 64, 512, {0, 1, 2, 3, 4, 5}),
      make_host("node-2", "zone-a", "RTX 4090", 8, 64, 512, {0, 1, 2, 3, 4}),
      make_host("node-3", "zone-a", "A100", 8),
      make_host("node-4", "zone-b", "RTX 4090", 8),
  };
  hosts.push_back(make_host("node-5", "zone-a", "RTX 4090", 8));
  hosts.back().ready = false;

  auto r = place(hosts, gpu_request("RTX 4090", 4, 32, 128, "zone-a"));
  const Unschedulable& u = refused(r);
  EXPECT_EQ(u.message, "no host in zone-a has 4 free RTX 4090; most free on one host: 3 (node-2)");
  EXPECT_EQ(u.limiting, Reason::not_enough_gpus);
  EXPECT_EQ(u.most_free_on_one_host, 3);
  EXPECT_EQ(u.best_host_name, "node-2");
  EXPECT_EQ(u.reasons, (std::vector<ReasonCount>{{Reason::zone_mismatch, 1},
                                                 {Reason::host_not_ready, 1},
                                                 {Reason::model_absent, 1},
                                                 {Reason::not_enough_gpus, 2}}));
  EXPECT_EQ(u.hosts_rejected(Reason::not_enough_cpu), 0);

  Error e = u.to_error();
  EXPECT_EQ(e.code, ErrorCode::no_capacity);
  EXPECT_EQ(e.detail, u.message);
  ASSERT_EQ(e.numbers.size(), 1u);
  EXPECT_EQ(e.numbers[0].first, "gpus_free");
  EXPECT_EQ(e.numbers[0].second, 3);
}

TEST(PlacementTest, CpuLimitIsReportedForTheGpuCount) {
  std::vector<HostCapacity> hosts = {
      make_host("node-1", "zone-a", "RTX 4090", 8, 64, 512),
      make_host("node-2", "zone-a", "RTX 4090", 8, 64, 512),
  };
  hosts[0].cpu_used = 56;  // 8 free
  hosts[1].cpu_used = 60;  // 4 free
  auto r = place(hosts, gpu_request("RTX 4090", 2, 16, 64, "zone-a"));
  const Unschedulable& u = refused(r);
  EXPECT_EQ(u.message,
            "no host in zone-a has 16 free CPU cores for 2 RTX 4090; most on one host: 8 (node-1)");
  EXPECT_EQ(u.limiting, Reason::not_enough_cpu);
  EXPECT_EQ(u.hosts_rejected(Reason::not_enough_cpu), 2);
  EXPECT_EQ(u.to_error().numbers.at(0), (std::pair<std::string, std::int64_t>{"cpu_free", 8}));
}

TEST(PlacementTest, MemoryLimit) {
  std::vector<HostCapacity> hosts = {make_host("node-1", "zone-a", "A100", 8, 64, 512),
                                     make_host("node-2", "zone-a", "A100", 8, 64, 512)};
  hosts[0].memory_gib_used = 480;
  hosts[1].memory_gib_used = 500;
  auto r = place(hosts, gpu_request("A100", 1, 8, 64));
  const Unschedulable& u = refused(r);
  EXPECT_EQ(u.message,
            "no host has 64 GiB of free memory for 1 A100; most on one host: 32 GiB (node-1)");
  EXPECT_EQ(u.limiting, Reason::not_enough_memory);

  hosts[1].memory_gib_used = 448;  // exactly 64 free
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1, 8, 64))).host_id, "h-node-2");
}

TEST(PlacementTest, SingleHostMessageNamesTheHost) {
  auto host = make_host("node-3", "zone-a", "RTX 4090", 4, 64, 512, {0, 1, 2});
  auto r = place({host}, gpu_request("RTX 4090", 2));
  EXPECT_EQ(refused(r).message, "host node-3 has 1 free RTX 4090; the instance needs 2");

  host.ready = false;
  EXPECT_EQ(refused(place({host}, gpu_request("RTX 4090", 1))).message, "host node-3 is not ready");
}

TEST(PlacementTest, BestFitPacksSmallRequestsAndKeepsWholeHostsFree) {
  // The empty host comes first so that first fit would break it up.
  std::vector<HostCapacity> hosts = {
      make_host("empty", "zone-a", "H100", 8),
      make_host("partial", "zone-a", "H100", 8, 64, 512, {0, 1, 2, 3}),
  };
  ClusterIndex index;
  for (const auto& h : hosts) ASSERT_TRUE(index.add_host(h));

  for (int i = 0; i < 2; ++i) {
    auto r = index.place(gpu_request("H100", 1, 8, 64));
    const Placement& p = placed(r);
    EXPECT_EQ(p.host_id, "h-partial");
    EXPECT_EQ(p.gpu_indices, std::vector<int>{4 + i});
    ASSERT_TRUE(index.commit(p));
  }
  auto big = index.place(gpu_request("H100", 8, 64, 512));
  EXPECT_EQ(placed(big).host_id, "h-empty");

  // First fit on the same state takes the empty host for a 1-GPU request.
  auto ff = index.place(gpu_request("H100", 1, 8, 64), Strategy::first_fit);
  EXPECT_EQ(placed(ff).host_id, "h-empty");
}

TEST(PlacementTest, TiesGoToLowerCpuUseThenId) {
  std::vector<HostCapacity> hosts = {make_host("b", "z", "A100", 8), make_host("a", "z", "A100", 8),
                                     make_host("c", "z", "A100", 8)};
  hosts[2].cpu_used = 0;
  hosts[0].cpu_used = 8;
  hosts[1].cpu_used = 8;
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1))).host_id, "h-c");
  hosts[2].cpu_used = 16;
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1))).host_id, "h-a");
}

TEST(PlacementTest, ReleaseReturnsGpus) {
  ClusterIndex index;
  ASSERT_TRUE(index.add_host(make_host("node-1", "zone-a", "RTX 4090", 2, 16, 64)));
  auto r = index.place(gpu_request("RTX 4090", 2, 16, 64));
  Placement p = placed(r);
  ASSERT_TRUE(index.commit(p));
  EXPECT_EQ(index.free_gpus("", "RTX 4090"), 0);
  EXPECT_EQ(refused(index.place(gpu_request("RTX 4090", 1))).limiting, Reason::not_enough_gpus);

  ASSERT_TRUE(index.release(p));
  EXPECT_EQ(index.free_gpus("zone-a", "RTX 4090"), 2);
  EXPECT_EQ(index.find("h-node-1")->cpu_used, 0);
  EXPECT_EQ(placed(index.place(gpu_request("RTX 4090", 2, 16, 64))), p);

  // A second release of the same GPUs is a bug in the caller: refused, nothing changes.
  auto again = index.release(p);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::conflict);
  EXPECT_EQ(index.free_gpus("", "RTX 4090"), 2);
}

TEST(PlacementTest, StaleCommitIsRefusedWithoutChange) {
  ClusterIndex index;
  ASSERT_TRUE(index.add_host(make_host("node-1", "zone-a", "A100", 4)));
  Placement p = placed(index.place(gpu_request("A100", 3)));
  ASSERT_TRUE(index.commit(p));
  auto twice = index.commit(p);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::conflict);
  EXPECT_EQ(index.free_gpus("", "A100"), 1);
  EXPECT_EQ(placed(index.place(gpu_request("A100", 1))).gpu_indices, std::vector<int>{3});
}

TEST(PlacementTest, ZoneFilter) {
  std::vector<HostCapacity> hosts = {make_host("a1", "zone-a", "A100", 8, 64, 512, {0, 1, 2}),
                                     make_host("b1", "zone-b", "A100", 8)};
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1))).host_id, "h-a1");
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1, 0, 0, "zone-b"))).host_id, "h-b1");
  auto r = place(hosts, gpu_request("A100", 1, 0, 0, "zone-c"));
  EXPECT_EQ(refused(r).message, "no host in zone-c");
  EXPECT_EQ(refused(r).hosts_rejected(Reason::zone_mismatch), 2);
}

TEST(PlacementTest, NotReadyHostIsSkipped) {
  std::vector<HostCapacity> hosts = {make_host("n1", "zone-a", "A100", 8, 64, 512, {0}),
                                     make_host("n2", "zone-a", "A100", 8)};
  hosts[0].ready = false;
  EXPECT_EQ(placed(place(hosts, gpu_request("A100", 1))).host_id, "h-n2");
  hosts[1].ready = false;
  auto r = place(hosts, gpu_request("A100", 1, 0, 0, "zone-a"));
  EXPECT_EQ(refused(r).message, "no host in zone-a is ready (2 not ready)");

  ClusterIndex index;
  for (const auto& h : hosts) ASSERT_TRUE(index.add_host(h));
  EXPECT_EQ(refused(index.place(gpu_request("A100", 1))).limiting, Reason::host_not_ready);
  ASSERT_TRUE(index.set_ready("h-n1", true));
  EXPECT_EQ(placed(index.place(gpu_request("A100", 1))).host_id, "h-n1");
  auto commit = index.commit(placed(index.place(gpu_request("A100", 1))));
  ASSERT_TRUE(commit);
  ASSERT_TRUE(index.set_ready("h-n1", false));
  auto stale = index.commit(Placement{"h-n1", {2}, 0, 0});
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::conflict);
}

TEST(PlacementTest, ModelAbsent) {
  std::vector<HostCapacity> hosts = {make_host("n1", "zone-a", "A100", 8)};
  hosts.push_back(make_host("n2", "zone-a", "A100", 8));
  auto r = place(hosts, gpu_request("H100", 1, 0, 0, "zone-a"));
  EXPECT_EQ(refused(r).message, "no ready host in zone-a has H100 GPUs");
  EXPECT_EQ(refused(r).hosts_rejected(Reason::model_absent), 2);
}

TEST(PlacementTest, NoGpuRequestPrefersHostsWithoutFreeGpus) {
  std::vector<HostCapacity> hosts = {make_host("gpu", "zone-a", "A100", 8),
                                     make_host("cpu-only", "zone-a", "A100", 0)};
  PlacementRequest req{"", "", 0, 2, 4, {}};
  auto r = place(hosts, req);
  const Placement& p = placed(r);
  EXPECT_EQ(p.host_id, "h-cpu-only");
  EXPECT_TRUE(p.gpu_indices.empty());

  hosts[1].cpu_used = 63;
  EXPECT_EQ(placed(place(hosts, req)).host_id, "h-gpu");
  hosts[0].cpu_used = 63;
  EXPECT_EQ(refused(place(hosts, req)).message,
            "no host has 2 free CPU cores; most on one host: 1 (cpu-only)");
}

TEST(PlacementTest, BadRequestsAreInvalidArgument) {
  std::vector<HostCapacity> hosts = {make_host("n1", "zone-a", "A100", 8)};
  for (const auto& req : {PlacementRequest{"", "A100", -1, 0, 0, {}}, PlacementRequest{"", "", 1, 0, 0, {}},
                          PlacementRequest{"", "A100", 0, 0, 0, {}}, PlacementRequest{"", "", 0, -1, 0, {}},
                          PlacementRequest{"", "", 0, 0, -5, {}}}) {
    auto r = place(hosts, req);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    ClusterIndex index;
    auto ri = index.place(req);
    ASSERT_FALSE(ri);
    EXPECT_EQ(ri.error().code, ErrorCode::invalid_argument);
  }
}

TEST(PlacementTest, FreeGpusForOfferCountsCpuAndMemory) {
  auto host = make_host("n1", "zone-a", "RTX 4090", 8, 64, 256, {0});  // 7 free
  EXPECT_EQ(free_gpus_for_offer(host, "RTX 4090", 8, 32), 7);
  host.cpu_used = 40;  // 24 free: 3 GPUs' worth
  EXPECT_EQ(free_gpus_for_offer(host, "RTX 4090", 8, 32), 3);
  host.memory_gib_used = 200;  // 56 free: 1 GPU's worth
  EXPECT_EQ(free_gpus_for_offer(host, "RTX 4090", 8, 32), 1);
  EXPECT_EQ(free_gpus_for_offer(host, "A100", 8, 32), 0);
  EXPECT_EQ(free_gpus_for_offer(host, "RTX 4090", 0, 0), 7);
  host.ready = false;
  EXPECT_EQ(free_gpus_for_offer(host, "RTX 4090", 8, 32), 0);
}

TEST(ClusterIndexTest, HostBookkeeping) {
  ClusterIndex index;
  ASSERT_TRUE(index.add_host(make_host("n1", "zone-a", "A100", 8)));
  auto dup = index.add_host(make_host("n1", "zone-a", "A100", 8));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::invalid_argument);
  auto bad = make_host("n2", "zone-a", "A100", 2);
  bad.gpus[1].index = 0;
  EXPECT_FALSE(index.add_host(bad));

  EXPECT_EQ(index.free_gpus("zone-a", "A100"), 8);
  ASSERT_TRUE(index.update_host(make_host("n1", "zone-b", "H100", 4)));
  EXPECT_EQ(index.free_gpus("zone-a", "A100"), 0);
  EXPECT_EQ(index.free_gpus("", "H100"), 4);
  EXPECT_EQ(placed(index.place(gpu_request("H100", 4, 0, 0, "zone-b"))).host_id, "h-n1");
  ASSERT_TRUE(index.remove_host("h-n1"));
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(refused(index.place(gpu_request("H100", 1))).message, "no hosts are registered");
  EXPECT_EQ(index.remove_host("h-n1").error().code, ErrorCode::not_found);
}

// The index must answer exactly like the linear scan, refusals included, on random churn over
// hosts of mixed zones, models, shapes and readiness.
void run_trace(std::uint32_t seed, int host_count, int steps) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  const std::vector<std::string> models = {"RTX 4090", "A100", "H100"};
  const std::vector<std::string> zones = {"zone-a", "zone-b", "zone-c"};

  std::vector<HostCapacity> mirror;
  ClusterIndex index;
  for (int i = 0; i < host_count; ++i) {
    HostCapacity h;
    h.id = "h-" + std::to_string(1000 + pick(9000)) + "-" + std::to_string(i);
    h.name = "node-" + std::to_string(i);
    h.zone = zones[pick(3)];
    h.ready = pick(10) != 0;
    h.cpu_total = 16 * (1 + pick(6));
    h.memory_gib_total = 64 * (1 + pick(8));
    int gpus = std::vector<int>{0, 2, 4, 8, 8}[pick(5)];
    for (int g = 0; g < gpus; ++g) {
      // Mostly one model a host, sometimes two.
      const std::string& m = models[(pick(5) == 0 ? g / 4 + i : i) % 3];
      h.gpus.push_back({g, "uuid", m, true});
    }
    mirror.push_back(h);
    ASSERT_TRUE(index.add_host(h));
  }
  std::vector<Placement> live;
  int placed_count = 0, refused_count = 0;
  for (int step = 0; step < steps; ++step) {
    int action = pick(20);
    if (action < 7 && !live.empty()) {
      std::size_t k = static_cast<std::size_t>(pick(static_cast<int>(live.size())));
      Placement p = live[k];
      live[k] = live.back();
      live.pop_back();
      ASSERT_TRUE(index.release(p));
      auto& h = *std::find_if(mirror.begin(), mirror.end(),
                              [&](const HostCapacity& x) { return x.id == p.host_id; });
      ASSERT_TRUE(release(h, p.gpu_indices, p.cpu, p.memory_gib));
      continue;
    }
    if (action == 7) {
      auto& h = mirror[static_cast<std::size_t>(pick(host_count))];
      h.ready = !h.ready;
      ASSERT_TRUE(index.set_ready(h.id, h.ready));
      continue;
    }
    PlacementRequest req;
    if (pick(8) != 0) {
      req.gpu_model = models[pick(3)];
      req.gpu_count = std::vector<int>{1, 1, 2, 4, 8}[pick(5)];
    }
    if (pick(3) == 0) req.zone = zones[pick(3)];
    req.cpu = req.gpu_count * 4 + pick(8);
    req.memory_gib = req.gpu_count * 24 + pick(64);

    for (Strategy s : {Strategy::best_fit, Strategy::first_fit}) {
      auto linear = place(mirror, req, s);
      auto indexed = index.place(req, s);
      ASSERT_TRUE(linear && indexed);
      ASSERT_EQ(linear->index(), indexed->index()) << "step " << step;
      if (auto* p = std::get_if<Placement>(&*linear)) {
        ASSERT_EQ(*p, std::get<Placement>(*indexed)) << "step " << step;
      } else {
        const auto& a = std::get<Unschedulable>(*linear);
        const auto& b = std::get<Unschedulable>(*indexed);
        ASSERT_EQ(a, b) << "step " << step << ": " << a.message << " | " << b.message;
      }
    }
    auto decision = index.place(req);
    if (auto* p = std::get_if<Placement>(&*decision)) {
      ASSERT_TRUE(index.commit(*p));
      auto& h = *std::find_if(mirror.begin(), mirror.end(),
                              [&](const HostCapacity& x) { return x.id == p->host_id; });
      ASSERT_TRUE(reserve(h, *p));
      live.push_back(*p);
      ++placed_count;
    } else {
      ++refused_count;
    }
  }
  // The trace must exercise both outcomes to mean anything.
  EXPECT_GT(placed_count, steps / 10);
  EXPECT_GT(refused_count, 0);
  for (const auto& h : mirror) {
    const HostCapacity* x = index.find(h.id);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->cpu_used, h.cpu_used);
    EXPECT_EQ(x->memory_gib_used, h.memory_gib_used);
    EXPECT_EQ(x->free_gpus_any(), h.free_gpus_any());
  }
}

TEST(ClusterIndexTest, RandomTracesMatchLinearPlacement) {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_trace(seed, 1 + static_cast<int>(seed) * 15, 3000);
  }
  // One host: exercises the "host node-0 has ..." phrasing on both paths.
  run_trace(99, 1, 500);
}

}  // namespace
}  // namespace gpucloud::scheduler
