// Monitoring and cost control, hermetic: the deadlines an instance plans (autostop's warning
// and stop, stop_at, the release and its warnings), the idle rule for GPU and CPU readings,
// and the series store (raw rows, minute averages, purge, steps).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "instances/instance_record.h"
#include "instances/schedules.h"
#include "monitoring/idle_judge.h"
#include "monitoring/series.h"
#include "store/store.h"

namespace gpucloud::monitoring {
namespace {

namespace fs = std::filesystem;
using instances::Instance;
using instances::InstanceState;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

const SysTime kT0 = from_unix_micros(1'800'000'000'000'000);

Instance running_with_autostop(int idle_minutes, int below = 5) {
  Instance i;
  i.id = "i-test";
  i.name = "box";
  i.state = InstanceState::running;
  i.autostop = Instance::Autostop{idle_minutes, below};
  return i;
}

TEST(CostControlDeadlines, AutostopWarnsASixthOfTheWindowAheadAndAtLeastAMinute) {
  Instance i = running_with_autostop(60);
  EXPECT_FALSE(instances::next_deadline(i, 15)) << "not idle: nothing planned";
  i.idle_since = kT0;
  auto d = instances::autostop_deadlines(i);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->stop_at, kT0 + minutes(60));
  EXPECT_EQ(d->warn_at, kT0 + minutes(50));
  EXPECT_EQ(instances::next_deadline(i, 15), kT0 + minutes(50));
  i.schedule_warned = instances::kAutostopWarned;
  EXPECT_EQ(instances::next_deadline(i, 15), kT0 + minutes(60));

  Instance shortw = running_with_autostop(3);
  shortw.idle_since = kT0;
  EXPECT_EQ(instances::autostop_deadlines(shortw)->warn_at, kT0 + minutes(2)) << "3/6 min is under a minute";
  Instance one = running_with_autostop(1);
  one.idle_since = kT0;
  EXPECT_EQ(instances::autostop_deadlines(one)->warn_at, kT0) << "never before the window began";

  i.state = InstanceState::stopped;
  EXPECT_FALSE(instances::autostop_deadlines(i)) << "only a running instance autostops";
}

TEST(CostControlDeadlines, StopAtIsTheEarliestWhenSooner) {
  Instance i = running_with_autostop(60);
  i.idle_since = kT0;
  i.stop_at = kT0 + minutes(10);
  EXPECT_EQ(instances::next_deadline(i, 15), kT0 + minutes(10));
  i.stop_at = kT0 + hours(5);
  EXPECT_EQ(instances::next_deadline(i, 15), kT0 + minutes(50));
}

TEST(CostControlDeadlines, ReleaseAfterStoppedDaysWithWarningsThreeAndOneDayBefore) {
  Instance i;
  i.state = InstanceState::stopped;
  i.stopped_at = kT0;
  EXPECT_EQ(instances::release_at(i, 15), kT0 + hours(24 * 15)) << "the platform default";
  i.release_after_stopped_days = 10;
  const SysTime release = kT0 + hours(24 * 10);
  EXPECT_EQ(instances::release_at(i, 15), release);
  EXPECT_EQ(instances::next_deadline(i, 15), release - hours(72));
  i.schedule_warned = instances::kReleaseWarned3d;
  EXPECT_EQ(instances::next_deadline(i, 15), release - hours(24));
  i.schedule_warned |= instances::kReleaseWarned1d;
  EXPECT_EQ(instances::next_deadline(i, 15), release);

  // Two days: the 3-day warning would come before the stop, so only the 1-day one is sent.
  Instance two;
  two.state = InstanceState::stopped;
  two.stopped_at = kT0;
  two.release_after_stopped_days = 2;
  EXPECT_EQ(instances::next_deadline(two, 15), kT0 + hours(24));

  // A subscription counts from the end of its paid term.
  Instance sub = two;
  sub.billing_mode = "weekly";
  sub.expires_at = kT0 + hours(24 * 5);
  EXPECT_EQ(instances::release_at(sub, 15), kT0 + hours(24 * 7));

  Instance running = two;
  running.state = InstanceState::running;
  EXPECT_FALSE(instances::release_at(running, 15));
}

agent::InstanceSample sample_with(std::optional<double> cpu, std::vector<int> gpu_utils) {
  agent::InstanceSample s;
  s.instance_id = "i-test";
  s.cpu_percent = cpu;
  s.memory_used_bytes = 1 << 20;
  for (std::size_t n = 0; n < gpu_utils.size(); ++n)
    s.gpus.push_back(agent::GpuReading{static_cast<int>(n + 3), "GPU-" + std::to_string(n), gpu_utils[n], 1, 2});
  return s;
}

TEST(IdleJudge, EveryGpuBelowTheThresholdIsIdleAndOneBusyGpuNamesItself) {
  Instance i = running_with_autostop(30, 5);
  i.gpu_count = 2;
  i.gpu_uuids = {"GPU-0", "GPU-1"};
  EXPECT_EQ(idle_basis(i), IdleBasis::gpu);
  auto idle = judge_idle(i, sample_with(300.0, {0, 4}), kT0);
  ASSERT_TRUE(idle);
  EXPECT_TRUE(idle->idle) << "a busy CPU does not make a GPU instance busy";
  auto busy = judge_idle(i, sample_with(0.0, {0, 87}), kT0);
  ASSERT_TRUE(busy);
  EXPECT_FALSE(busy->idle);
  EXPECT_NE(busy->reason.find("GPU 1 at 87 %"), std::string::npos) << busy->reason;
  EXPECT_NE(busy->reason.find("threshold 5 %"), std::string::npos) << busy->reason;
  EXPECT_NE(busy->reason.find(format_rfc3339(kT0)), std::string::npos) << busy->reason;
  // Exactly at the threshold is not below it.
  EXPECT_FALSE(judge_idle(i, sample_with(0.0, {5, 0}), kT0)->idle);
}

TEST(IdleJudge, AGpuInstanceWithoutGpuReadingsIsNeverIdle) {
  Instance i = running_with_autostop(30, 5);
  i.gpu_count = 1;
  auto s = sample_with(0.0, {});
  s.gpu_note = "nvmlDeviceGetUtilizationRates: GPU is lost";
  auto j = judge_idle(i, s, kT0);
  ASSERT_TRUE(j);
  EXPECT_FALSE(j->idle);
  EXPECT_NE(j->reason.find("GPU is lost"), std::string::npos) << j->reason;
}

TEST(IdleJudge, NoGpuAndSimulatedInstancesAreJudgedByTheirCpu) {
  Instance none = running_with_autostop(30, 10);
  EXPECT_EQ(idle_basis(none), IdleBasis::cpu);
  EXPECT_TRUE(judge_idle(none, sample_with(2.5, {}), kT0)->idle);
  auto busy = judge_idle(none, sample_with(99.0, {}), kT0);
  EXPECT_FALSE(busy->idle);
  EXPECT_NE(busy->reason.find("CPU at 99.0 %"), std::string::npos) << busy->reason;
  EXPECT_FALSE(judge_idle(none, sample_with(std::nullopt, {}), kT0)) << "a first reading has no CPU rate";

  Instance sim = running_with_autostop(30, 10);
  sim.gpu_count = 1;
  sim.gpus_simulated = true;
  EXPECT_EQ(idle_basis(sim), IdleBasis::cpu);
  Instance off = running_with_autostop(30, 10);
  off.gpu_count = 1;
  off.no_gpu = true;
  EXPECT_EQ(idle_basis(off), IdleBasis::cpu);
  off.autostop.reset();
  EXPECT_FALSE(judge_idle(off, sample_with(0.0, {}), kT0)) << "no rule, no judgment";
}

class SeriesStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-series");
    auto s = store::Store::open((dir_ / "db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  template <class F>
  auto write(F f) {
    return store_->write_now(std::move(f));
  }
  void raw(const std::string& id, std::int64_t t, double cpu, std::int64_t mem, std::optional<int> gpu_util = {}) {
    std::vector<SampleRow> rows{{kInstanceRow, cpu, mem}};
    if (gpu_util) rows.push_back({0, static_cast<double>(*gpu_util), 1000});
    ASSERT_TRUE(write([&](store::Database& db) { return insert_raw(db, id, t, rows); }));
  }
  std::vector<QueriedSeries> query(const std::string& id, SeriesQuery q) {
    auto r = write([&](store::Database& db) { return query_series(db, id, q); });
    EXPECT_TRUE(r) << r.error().detail;
    return r ? *r : std::vector<QueriedSeries>{};
  }
  std::int64_t rows(int resolution) {
    auto r = write([&](store::Database& db) -> Result<std::int64_t> {
      auto row = db.one("SELECT COUNT(*) FROM instance_samples WHERE resolution = ?", {resolution});
      if (!row) return fail(row.error());
      return (*row)->int64(0);
    });
    return r ? *r : -1;
  }

  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  const std::int64_t t0_ = 1'800'000'000;  // a minute boundary
};

TEST_F(SeriesStoreTest, TheSameSecondReplacesAndStepsAverage) {
  raw("i-a", t0_, 10, 100, 50);
  raw("i-a", t0_, 20, 200, 60);  // a frozen test clock: the same second again
  raw("i-a", t0_ + 5, 40, 400, 80);
  raw("i-a", t0_ + 10, 90, 900, 100);
  raw("i-b", t0_, 99, 999);
  EXPECT_EQ(rows(kRaw), 7);
  auto series = query("i-a", {t0_, t0_ + 15, 10, kRaw});
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].gpu, kInstanceRow);
  ASSERT_EQ(series[0].util.size(), 2u);
  EXPECT_EQ(series[0].util[0].t, t0_);
  EXPECT_DOUBLE_EQ(series[0].util[0].value, 30);  // (20 + 40) / 2
  EXPECT_DOUBLE_EQ(series[0].util[1].value, 90);
  EXPECT_DOUBLE_EQ(series[0].memory[0].value, 300);
  EXPECT_EQ(series[1].gpu, 0);
  EXPECT_DOUBLE_EQ(series[1].util[0].value, 70);
  // Nothing outside the window; an instance without rows still lists its own series, empty.
  EXPECT_TRUE(query("i-a", {t0_ + 20, t0_ + 60, 10, kRaw})[0].util.empty());
  auto none = query("i-none", {t0_, t0_ + 60, 10, kRaw});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(none[0].util.empty());
}

TEST_F(SeriesStoreTest, MinuteAveragesOutliveThePurgedRawRowsAndGoTooInTime) {
  for (int k = 0; k < 12; ++k) raw("i-a", t0_ + k * 5, k < 6 ? 0 : 100, 1000);
  raw("i-a", t0_ + 60, 50, 1000);  // the next minute
  ASSERT_TRUE(write([&](store::Database& db) { return downsample(db, t0_, t0_ + 60); }));
  EXPECT_EQ(rows(kMinute), 1) << "only whole minutes before `to`";
  auto minute = query("i-a", {t0_, t0_ + 120, 60, kMinute});
  ASSERT_EQ(minute[0].util.size(), 1u);
  EXPECT_DOUBLE_EQ(minute[0].util[0].value, 50);
  // Raw rows go after their retention, minute rows after theirs.
  ASSERT_TRUE(write([&](store::Database& db) { return purge(db, t0_ + 61, t0_); }));
  EXPECT_EQ(rows(kRaw), 0);
  EXPECT_EQ(rows(kMinute), 1);
  ASSERT_TRUE(write([&](store::Database& db) { return purge(db, t0_ + 61, t0_ + 1); }));
  EXPECT_EQ(rows(kMinute), 0);
}

TEST_F(SeriesStoreTest, AReleasedInstancesSeriesGoWithIt) {
  raw("i-a", t0_, 1, 1, 1);
  raw("i-b", t0_, 1, 1);
  ASSERT_TRUE(write([&](store::Database& db) { return downsample(db, t0_, t0_ + 60); }));
  ASSERT_TRUE(write([&](store::Database& db) { return delete_instance_series(db, "i-a"); }));
  EXPECT_EQ(rows(kRaw), 1);
  EXPECT_EQ(rows(kMinute), 1);
  EXPECT_TRUE(query("i-a", {t0_, t0_ + 60, 60, kRaw})[0].util.empty());
}

TEST_F(SeriesStoreTest, SevenDaysOfMinutesAnswerInOneQuery) {
  // 7 days × 1440 minutes of one instance with one GPU, then the 1-minute query of them all.
  const std::int64_t start = t0_;
  ASSERT_TRUE(write([&](store::Database& db) -> Status {
    for (std::int64_t m = 0; m < 7 * 1440; ++m)
      for (int gpu : {kInstanceRow, 0})
        if (auto s = db.run("INSERT INTO instance_samples (instance_id, resolution, t, gpu, util, memory_bytes) "
                            "VALUES ('i-a', 60, ?, ?, ?, ?)",
                            {start + m * 60, gpu, static_cast<double>(m % 100), m});
            !s)
          return s;
    return ok();
  }));
  auto series = query("i-a", {start, start + 7 * 86400, 60, kMinute});
  ASSERT_EQ(series.size(), 2u);
  // Latency of the store query, for docs/benchmarks.md (printed, not asserted).
  std::vector<double> ms;
  for (int k = 0; k < 10; ++k) {
    const auto t = std::chrono::steady_clock::now();
    (void)query("i-a", {start, start + 7 * 86400, 60, kMinute});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("7 days at 1-minute steps (2 x 10080 rows): p50 %.1f ms, max of 10 %.1f ms\n", ms[5], ms[9]);
  EXPECT_EQ(series[0].util.size(), 7u * 1440);
  EXPECT_EQ(series[1].memory.back().value, 7 * 1440 - 1);
}

}  // namespace
}  // namespace gpucloud::monitoring
