// The platform's Prometheus gauges: totals read from a migrated store, and their text.
#include <filesystem>

#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "monitoring/platform_metrics.h"
#include "store/store.h"

namespace gpucloud::monitoring {
namespace {

namespace fs = std::filesystem;

class PlatformMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-platform-metrics");
    auto s = store::Store::open((dir_ / "db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void sql(const std::string& script) {
    auto r = store_->write_now([&](store::Database& db) { return db.exec_script(script); });
    ASSERT_TRUE(r) << r.error().detail;
  }
  PlatformTotals totals() {
    auto r = store_->write_now([](store::Database& db) { return read_platform_totals(db); });
    EXPECT_TRUE(r) << r.error().detail;
    return r ? *r : PlatformTotals{};
  }
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(PlatformMetricsTest, AnEmptyPlatformStillListsEveryStateAtZero) {
  PlatformTotals t = totals();
  EXPECT_EQ(t.instances_by_state.size(), 8u);
  EXPECT_EQ(t.instances_by_state.at("running"), 0);
  EXPECT_EQ(t.hosts_by_state.at("unreachable"), 0);
  EXPECT_EQ(t.billing_charged_by_kind.at("compute"), 0);
  std::string text = render_platform_metrics(t, LatestReadings{}, std::chrono::steady_clock::now(), "CNY");
  EXPECT_NE(text.find("gpucloud_instances{state=\"released\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE gpucloud_billing_charged_total counter\n"), std::string::npos);
}

TEST_F(PlatformMetricsTest, CountsInstancesHostsGpusByStateAndBillingTotals) {
  sql(R"sql(
INSERT INTO billing_accounts (id, kind, name, balance, created_at) VALUES ('ba-1', 'user', 'alice', 1500, 0),
  ('ba-2', 'user', 'bob', -20, 0);
UPDATE billing_accounts SET arrears_since = 5 WHERE id = 'ba-2';
INSERT INTO users (id, username, password_hash, role, created_at, billing_account) VALUES ('u-1', 'alice', 'x', 'user', 0, 'ba-1');
INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, memory_gib, port_min, port_max, created_at)
  VALUES ('h-1', 'node-1', 'z', 'ready', 1, 'simulated', 'docker', 32, 128, 30000, 31000, 0),
         ('h-2', 'node-2', 'z', 'unreachable', 0, 'nvml', 'docker', 32, 128, 30000, 31000, 0);
INSERT INTO gpus (uuid, host_id, idx, model, reported_name, memory_bytes, pci_bus_id, health, simulated, present) VALUES
  ('GPU-sim-1', 'h-1', 0, 'RTX 4090', 'RTX 4090', 1, '', 'ok', 1, 1),
  ('GPU-sim-2', 'h-1', 1, 'RTX 4090', 'RTX 4090', 1, '', 'ok', 1, 1),
  ('GPU-sim-3', 'h-1', 2, 'RTX 4090', 'RTX 4090', 1, '', 'ok', 1, 1),
  ('GPU-real-1', 'h-2', 0, 'A100', 'NVIDIA A100', 1, '0:3b', 'ok', 0, 0),
  ('GPU-real-2', 'h-2', 1, 'A100', 'NVIDIA A100', 1, '0:3c', 'nvmlDeviceGetUUID: GPU is lost', 0, 1);
INSERT INTO reservations (id, host_id, holder, cpu, memory_gib, gpu_model, active, created_at)
  VALUES ('r-1', 'h-1', 'i-1', 4, 16, 'RTX 4090', 1, 0), ('r-old', 'h-1', 'i-2', 4, 16, 'RTX 4090', 0, 0);
INSERT INTO gpu_reservations (reservation_id, gpu_uuid, active) VALUES ('r-1', 'GPU-sim-1', 1), ('r-old', 'GPU-sim-2', 0);
INSERT INTO images (id, name, engine_image, visibility, state, created_at) VALUES ('img-1', 'base', 'b', 'public', 'available', 0);
INSERT INTO instances (id, owner, name, state, zone, gpu_count, cpu, memory_gib, system_disk_gib, image_id, created_at) VALUES
  ('i-1', 'u-1', 'train "1"', 'running', 'z', 1, 4, 16, 30, 'img-1', 0),
  ('i-2', 'u-1', 'old', 'released', 'z', 1, 4, 16, 30, 'img-1', 0),
  ('i-3', 'u-1', 'off', 'stopped', 'z', 1, 4, 16, 30, 'img-1', 0);
)sql");
  PlatformTotals t = totals();
  EXPECT_EQ(t.instances_by_state.at("running"), 1);
  EXPECT_EQ(t.instances_by_state.at("released"), 1);
  EXPECT_EQ(t.instances_by_state.at("stopped"), 1);
  EXPECT_EQ(t.hosts_by_state.at("ready"), 1);
  EXPECT_EQ(t.hosts_by_state.at("unreachable"), 1);
  ASSERT_EQ(t.instances.size(), 1u) << "only running instances get per-instance gauges";
  EXPECT_EQ(t.instances.at("i-1").user, "alice");

  std::map<std::string, std::int64_t> by;
  for (const auto& g : t.gpus) by[g.host + "/" + g.model + "/" + g.state + (g.simulated ? "/sim" : "")] += g.count;
  EXPECT_EQ(by["node-1/RTX 4090/used/sim"], 1);
  EXPECT_EQ(by["node-1/RTX 4090/free/sim"], 2) << "an inactive reservation holds nothing";
  EXPECT_EQ(by["node-2/A100/missing"], 1);
  EXPECT_EQ(by["node-2/A100/unhealthy"], 1);

  // A reading of the running instance and of a GPU host; one of a released instance is left out.
  LatestReadings latest;
  agent::SampleReport report;
  report.host_name = "node-1";
  agent::InstanceSample running;
  running.instance_id = "i-1";
  running.cpu_percent = 150.0;
  running.memory_used_bytes = 1 << 20;
  running.memory_limit_bytes = 16LL << 30;
  running.gpus.push_back({0, "GPU-real-9", 87, 5'000, 10'000});
  agent::InstanceSample released;
  released.instance_id = "i-2";
  released.cpu_percent = 5.0;
  report.instances = {running, released};
  report.gpus.push_back({0, "GPU-real-1", 40, 2'000, 80'000});
  auto now = std::chrono::steady_clock::now();
  latest.record(report, SysTime{}, now - std::chrono::seconds(3));

  std::string text = render_platform_metrics(t, latest, now, "CNY");
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  has("gpucloud_instances{state=\"running\"} 1");
  has("gpucloud_gpus{host=\"node-1\",model=\"RTX 4090\",simulated=\"true\",state=\"free\"} 2");
  has("gpucloud_billing_accounts{state=\"ok\"} 1");
  has("gpucloud_billing_accounts{state=\"in_arrears\"} 1");
  has("gpucloud_billing_accounts_balance 1480");
  has("gpucloud_host_sample_age_seconds{host=\"node-1\"} 3");
  has("gpucloud_host_gpu_utilization_ratio{host=\"node-1\",gpu=\"0\",uuid=\"GPU-real-1\",model=\"A100\"} 0.4");
  const std::string labels = "instance_id=\"i-1\",name=\"train \\\"1\\\"\",user=\"alice\",host=\"node-1\"";
  has("gpucloud_instance_cpu_usage_ratio{" + labels + "} 1.5");
  has("gpucloud_instance_memory_limit_bytes{" + labels + "} 17179869184");
  has("gpucloud_instance_gpu_utilization_ratio{" + labels + ",gpu=\"0\",uuid=\"GPU-real-9\"} 0.87");
  EXPECT_EQ(text.find("instance_id=\"i-2\""), std::string::npos) << "a released instance's last reading is not shown";

  // Anonymous scrapes get the platform's totals: no tenant's instance, name or user.
  const std::string anonymous = render_platform_metrics(t, latest, now, "CNY", false);
  EXPECT_EQ(anonymous.find("instance_id="), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("user=\"alice\""), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("gpucloud_instances{state=\"running\"} 1\n"), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("gpucloud_host_gpu_utilization_ratio{"), std::string::npos) << anonymous;
}

TEST(PlatformMetricsLabels, EscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace gpucloud::monitoring
