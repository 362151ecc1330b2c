// Autostop against the store: a reading is ingested as the daemon ingests a sampling round
// (monitoring/ingest.h) and the due step runs as the timer runs it (cost_control.h). A busy
// reading ends the idle window (the next idle one starts a new one), and without a fresh
// reading an instance is never stopped: its window starts again.
#include <filesystem>

#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "core/unique_temp_dir.h"
#include "instances/instance_record.h"
#include "monitoring/cost_control.h"
#include "monitoring/ingest.h"
#include "policy/cost_control.h"
#include "store/store.h"

namespace gpucloud::monitoring {
namespace {

namespace fs = std::filesystem;
using std::chrono::minutes;
using std::chrono::seconds;

class CostControlStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-costcontrol");
    auto s = store::Store::open((dir_ / "db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
    ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
      auto u = auth::create_user(db, "idler", std::nullopt, "x", "user", t0_);
      if (!u) return fail(u.error());
      if (auto s = db.run("INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, "
                          "memory_gib, port_min, port_max, created_at) VALUES ('h-cc', 'cc-node', 'zone-a', "
                          "'ready', 1, 'simulated', 'unix:///x', 4, 16, 30000, 30099, 0)");
          !s)
        return s;
      if (auto s = db.run("INSERT INTO images (id, name, engine_image, visibility, state, created_at) "
                          "VALUES ('img-cc', 'cc', 'cc:1', 'public', 'available', 0)");
          !s)
        return s;
      instances::Instance i;
      i.id = "i-cc";
      i.owner = u->id;
      i.name = "idler";
      i.zone = "zone-a";
      i.host_id = "h-cc";
      i.cpu = 1;
      i.memory_gib = 1;
      i.image_id = "img-cc";
      i.state = instances::InstanceState::running;
      i.autostop = instances::Instance::Autostop{10, 10};  // 10 idle minutes below 10 %
      i.created_at = t0_;
      return instances::insert_instance(db, i);
    }));
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void reading(SysTime at, double cpu) {
    agent::SampleReport report;
    report.host_name = "cc-node";
    agent::InstanceSample sample;
    sample.instance_id = "i-cc";
    sample.cpu_percent = cpu;
    sample.memory_used_bytes = 1 << 20;
    report.instances.push_back(sample);
    auto done = store_->write_now([&](store::Database& db) { return ingest_round(db, report, at, Retention{}); });
    ASSERT_TRUE(done) << done.error().detail;
  }
  instances::Instance load() {
    auto i = store_->write_now([&](store::Database& db) { return instances::load_instance(db, "i-cc"); });
    EXPECT_TRUE(i && *i);
    return **i;
  }
  DueStep due(SysTime now, std::optional<double> fresh_cpu) {
    std::optional<agent::InstanceSample> fresh;
    if (fresh_cpu) {
      fresh = agent::InstanceSample{};
      fresh->instance_id = "i-cc";
      fresh->cpu_percent = *fresh_cpu;
    }
    auto step = store_->write_now([&](store::Database& db) { return run_due_step(db, "i-cc", now, fresh, policy::cost_control_actions()); });
    EXPECT_TRUE(step) << step.error().detail;
    return step ? *step : DueStep{};
  }

  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  const SysTime t0_ = from_unix_micros(1'800'000'000'000'000);
};

TEST_F(CostControlStoreTest, ABusyReadingEndsTheIdleWindowAndTheNextIdleOneStartsANewOne) {
  reading(t0_, 1.0);
  ASSERT_EQ(load().idle_since, std::optional<SysTime>(t0_));
  reading(t0_ + minutes(6), 55.0);
  auto busy = load();
  EXPECT_FALSE(busy.idle_since) << "one busy reading ends the window";
  ASSERT_TRUE(busy.busy_reason);
  EXPECT_NE(busy.busy_reason->find("CPU at 55.0 %"), std::string::npos) << *busy.busy_reason;
  reading(t0_ + minutes(7), 2.0);
  EXPECT_EQ(load().idle_since, std::optional<SysTime>(t0_ + minutes(7))) << "a new window, from the idle reading";
  // The first window's end passes: nothing stops, the new window has 4 minutes to go.
  due(t0_ + minutes(10), 2.0);
  EXPECT_EQ(load().state, instances::InstanceState::running);
  due(t0_ + minutes(17), 2.0);
  EXPECT_EQ(load().state, instances::InstanceState::stopping);
  EXPECT_EQ(load().state_reason, "autostop");
}

TEST_F(CostControlStoreTest, WithoutAFreshReadingItIsNeverStoppedAndTheWindowStartsAgain) {
  reading(t0_, 1.0);
  ASSERT_EQ(load().idle_since, std::optional<SysTime>(t0_));
  // The window is over, but the agent has said nothing lately (NVML or the sampler stuck).
  auto step = due(t0_ + minutes(10), std::nullopt);
  auto i = load();
  EXPECT_EQ(i.state, instances::InstanceState::running) << "no fresh reading, never stopped";
  EXPECT_FALSE(step.engine_follows);
  EXPECT_TRUE(!i.idle_since || *i.idle_since > t0_) << "the window starts again";
  // Even a fresh reading at the old window's end does not stop it at once: it is judged afresh.
  due(t0_ + minutes(10) + seconds(1), 1.0);
  EXPECT_EQ(load().state, instances::InstanceState::running);
}

}  // namespace
}  // namespace gpucloud::monitoring
