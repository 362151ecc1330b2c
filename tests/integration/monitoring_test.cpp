// Monitoring and cost control end to end with --test-clock: a one-off stop_at and the
// release after N days stopped fire at their times with their warnings first; idle autostop
// stops only the sleeping one of two CPU-only instances (the other runs a busy loop), after
// exactly its window, warning first; a busy loop shows in the CPU series within two samples;
// retention and downsampling hold under the test clock; a released instance's series go.
#include <fstream>

#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/capabilities.h"
#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
using std::chrono::seconds;

std::string monitoring_config() {
  static const int base = port_block();
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 8
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[monitoring]
sample_interval = "1s"
[metrics]
token = "scrape-token-0123456789"
)";
}

DaemonOptions monitoring_options() {
  DaemonOptions o;
  o.config_toml = monitoring_config();
  o.test_clock = true;
  return o;
}

SysTime advance_clock(const TestDaemon& d, std::int64_t s) {
  auto r = d.post("/api/v1/admin/clock", {{"advance_seconds", s}}, d.admin_token());
  EXPECT_EQ(r.status, 200) << r.body;
  return parse_rfc3339(std::string(r.json().at("now").as_string())).value_or(SysTime{});
}
SysTime clock_now(const TestDaemon& d) { return advance_clock(d, 0); }

json::object instance_of(const TestDaemon& d, const std::string& name, const std::string& token) {
  auto r = d.get("/api/v1/instances/" + name, token);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json().as_object();
}

HttpResult patch(const TestDaemon& d, const std::string& name, const json::object& body, const std::string& token) {
  return d.request("PATCH", "/api/v1/instances/" + name, json::serialize(body), token);
}

// The types of this instance's events, oldest first.
std::vector<std::string> event_types(const TestDaemon& d, const std::string& id, const std::string& token) {
  auto r = d.get("/api/v1/events?limit=1000", token);
  EXPECT_EQ(r.status, 200) << r.body;
  json::value doc = r.json();
  std::vector<std::pair<std::int64_t, std::string>> by_seq;
  for (const auto& e : doc.at("items").as_array())
    if (e.at("resource") == json::value(id))
      by_seq.emplace_back(e.at("seq").to_number<std::int64_t>(), std::string(e.at("type").as_string()));
  std::sort(by_seq.begin(), by_seq.end());
  std::vector<std::string> out;
  for (auto& [seq, type] : by_seq) out.push_back(std::move(type));
  return out;
}
bool has_event(const std::vector<std::string>& types, const std::string& type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}
std::ptrdiff_t index_of(const std::vector<std::string>& types, const std::string& type) {
  auto it = std::find(types.begin(), types.end(), type);
  return it == types.end() ? -1 : it - types.begin();
}

::testing::AssertionResult monitoring_wait(std::chrono::milliseconds timeout, const std::function<bool()>& condition) {
  return wait_until(condition, timeout, "the monitoring condition");
}

std::string container_name_of(const TestDaemon& d, const std::string& instance_id) {
  return "gpucloud-" + d.installation_id() + "-" + instance_id;
}

// A daemon per test: each moves the test clock (stop_at, autostop windows, retention).
TEST(MonitoringTest, DOCKER_StopAtAndReleaseAfterStoppedFireAtTheirTimesWithWarnings) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(monitoring_options());
  d.start();
  const std::string alice = d.register_and_login("mon-alice");
  const SysTime t0 = clock_now(d);
  // A stop_at in the past is refused and changes nothing.
  auto past = d.post("/api/v1/instances",
                     {{"name", "late"}, {"gpu_count", 0}, {"stop_at", format_rfc3339(t0 - seconds(1))}}, alice);
  EXPECT_EQ(past.status, 400) << past.body;
  EXPECT_EQ(d.get("/api/v1/instances/late", alice).status, 404);

  auto r = d.post("/api/v1/instances", {{"name", "timed"}, {"gpu_count", 0}, {"stop_at", format_rfc3339(t0 + seconds(600))}},
                  alice);
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id(r.json().at("id").as_string());
  d.wait_for_state("timed", "running", alice);
  EXPECT_EQ(instance_of(d, "timed", alice).at("stop_at"), json::value(format_rfc3339(t0 + seconds(600))));
  advance_clock(d, 599);
  EXPECT_EQ(instance_of(d, "timed", alice).at("state"), "running");
  advance_clock(d, 1);
  auto stopped = d.wait_for_state("timed", "stopped", alice);
  EXPECT_EQ(stopped.at("state_reason"), "stop_at");
  EXPECT_TRUE(stopped.at("stop_at").is_null()) << "a one-off stop is spent";
  EXPECT_EQ(stopped.at("stopped_at"), json::value(format_rfc3339(t0 + seconds(600))));
  EXPECT_TRUE(has_event(event_types(d, id, alice), "instance.scheduled_stop"));

  // Released 4 days after the stop, warned 3 days and 1 day before.
  auto p = patch(d, "timed", {{"release_after_stopped_days", 4}}, alice);
  ASSERT_EQ(p.status, 200) << p.body;
  const SysTime release = t0 + seconds(600) + std::chrono::hours(96);
  EXPECT_EQ(p.json().at("release_at"), json::value(format_rfc3339(release)));
  EXPECT_EQ(p.json().at("release_after_stopped_days"), 4);
  advance_clock(d, 86400 - 1);
  EXPECT_FALSE(has_event(event_types(d, id, alice), "instance.release_warning"));
  advance_clock(d, 1);
  auto types = event_types(d, id, alice);
  EXPECT_EQ(std::count(types.begin(), types.end(), "instance.release_warning"), 1);
  advance_clock(d, 2 * 86400);
  types = event_types(d, id, alice);
  EXPECT_EQ(std::count(types.begin(), types.end(), "instance.release_warning"), 2);
  EXPECT_EQ(instance_of(d, "timed", alice).at("state"), "stopped");
  advance_clock(d, 86400);
  auto released = d.wait_for_state("timed", "released", alice);
  EXPECT_EQ(released.at("state_reason"), "release_after_stopped");

  // Bad cost-control input is a 400 naming the field.
  auto box = d.post("/api/v1/instances", {{"name", "box"}, {"gpu_count", 0}}, alice);
  ASSERT_EQ(box.status, 202) << box.body;
  auto bad = patch(d, "box", {{"autostop", {{"idle_minutes", 0}}}}, alice);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("autostop.idle_minutes"), std::string::npos) << bad.body;
  EXPECT_EQ(patch(d, "box", {{"release_after_stopped_days", 0}}, alice).status, 400);
  EXPECT_EQ(patch(d, "box", {{"stop_at", "tomorrow"}}, alice).status, 400);
  EXPECT_TRUE(instance_of(d, "box", alice).at("autostop").is_null());
}

TEST(MonitoringTest, DOCKER_AutostopStopsOnlyTheSleepingInstanceAfterExactlyItsWindow) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(monitoring_options());
  d.start();
  const std::string alice = d.register_and_login("mon-idle");
  json::object autostop{{"idle_minutes", 12}, {"gpu_util_below_percent", 20}};
  auto busy = d.post("/api/v1/instances", {{"name", "busy"}, {"gpu_count", 0}, {"autostop", autostop}}, alice);
  auto idle = d.post("/api/v1/instances", {{"name", "sleepy"}, {"gpu_count", 0}, {"autostop", autostop}}, alice);
  ASSERT_EQ(busy.status, 202) << busy.body;
  ASSERT_EQ(idle.status, 202) << idle.body;
  const std::string busy_id(busy.json().at("id").as_string()), idle_id(idle.json().at("id").as_string());
  d.wait_for_state("busy", "running", alice);
  d.wait_for_state("sleepy", "running", alice);
  shell("docker exec -d " + container_name_of(d, busy_id) + " sh -c 'while :; do :; done'");
  // Both judged: the busy one names its CPU, the sleeping one has an idle_since.
  json::object busy_state, idle_state;
  ASSERT_TRUE(monitoring_wait(std::chrono::seconds(30), [&] {
    busy_state = instance_of(d, "busy", alice).at("autostop").as_object();
    idle_state = instance_of(d, "sleepy", alice).at("autostop").as_object();
    return busy_state.at("busy_reason").is_string() && !idle_state.at("idle_since").is_null();
  })) << json::serialize(busy_state) << " / " << json::serialize(idle_state);
  EXPECT_EQ(idle_state.at("applies_to"), "cpu");
  EXPECT_NE(std::string(busy_state.at("busy_reason").as_string()).find("CPU at"), std::string::npos);
  const SysTime idle_since = *parse_rfc3339(std::string(idle_state.at("idle_since").as_string()));
  const SysTime now = clock_now(d);
  const auto window = std::chrono::minutes(12);
  // Up to the warning (2 minutes before, a sixth of 12): nothing yet.
  advance_clock(d, std::chrono::duration_cast<seconds>(idle_since + window - std::chrono::minutes(2) - now).count() - 1);
  EXPECT_FALSE(has_event(event_types(d, idle_id, alice), "instance.autostop_warning"));
  advance_clock(d, 1);
  EXPECT_TRUE(has_event(event_types(d, idle_id, alice), "instance.autostop_warning"));
  EXPECT_EQ(instance_of(d, "sleepy", alice).at("state"), "running");
  advance_clock(d, 120);
  auto stopped = d.wait_for_state("sleepy", "stopped", alice);
  EXPECT_EQ(stopped.at("state_reason"), "autostop");
  EXPECT_EQ(stopped.at("stopped_at"), json::value(format_rfc3339(idle_since + window)));
  auto types = event_types(d, idle_id, alice);
  EXPECT_LT(index_of(types, "instance.autostop_warning"), index_of(types, "instance.autostop"));
  EXPECT_EQ(instance_of(d, "busy", alice).at("state"), "running") << "a busy instance is never idle";
  EXPECT_FALSE(has_event(event_types(d, busy_id, alice), "instance.autostop_warning"));
}

// The newest value of a named series, nullopt when it has no point.
std::optional<double> last_value(const json::value& metrics, const std::string& name) {
  for (const auto& s : metrics.at("series").as_array())
    if (s.at("name") == json::value(name) && !s.at("points").as_array().empty())
      return s.at("points").as_array().back().as_array()[1].to_number<double>();
  return std::nullopt;
}

TEST(MonitoringTest, DOCKER_ABusyLoopShowsInTheCpuSeriesAndRetentionHoldsUnderTheTestClock) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(monitoring_options());
  d.start();
  const std::string alice = d.register_and_login("mon-series");
  auto r = d.post("/api/v1/instances", {{"name", "loop"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}}, alice);
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id(r.json().at("id").as_string());
  d.wait_for_state("loop", "running", alice);
  // Simulated GPUs: no GPU series, and the answer says why.
  json::value m;
  ASSERT_TRUE(monitoring_wait(std::chrono::seconds(20), [&] {
    m = d.get("/api/v1/instances/loop/metrics?since=10m&step=1", alice).json();
    return last_value(m, "memory_used_bytes").has_value();
  })) << json::serialize(m);
  EXPECT_EQ(m.at("gpu_metrics").at("available"), false);
  EXPECT_EQ(m.at("gpu_metrics").at("reason"), "simulated GPUs report no utilisation");
  for (const auto& s : m.at("series").as_array()) EXPECT_NE(s.at("name"), "gpu_util_percent");
  EXPECT_EQ(instance_of(d, "loop", alice).at("monitoring").at("gpu_metrics"), false);

  // A busy loop: within two samples (1 s each, and the frozen clock's second keeps the newest).
  shell("docker exec -d " + container_name_of(d, id) + " sh -c 'while :; do :; done'");
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(monitoring_wait(std::chrono::seconds(10), [&] {
    auto latest = d.get("/api/v1/instances/loop/metrics?since=10m&step=1", alice).json().at("latest");
    return latest.is_object() && latest.at("cpu_percent").is_number() && latest.at("cpu_percent").to_number<double>() > 20;
  }));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(8)) << "more than two samples (and slack for a loaded CI)";
  m = d.get("/api/v1/instances/loop/metrics?since=10m&step=1", alice).json();
  EXPECT_GT(last_value(m, "cpu_percent").value_or(0), 20) << json::serialize(m);
  EXPECT_EQ(m.at("resolution"), "raw");

  // Downsampling and retention on the test clock: after 2 minutes the first minute has its
  // average; after a day its raw rows are gone but the average answers; after 8 days not.
  const SysTime t0 = clock_now(d);
  const std::string since = format_rfc3339(std::chrono::floor<std::chrono::minutes>(t0));
  advance_clock(d, 120);
  auto wait_round = [&] {
    const SysTime now = clock_now(d);
    return monitoring_wait(std::chrono::seconds(10), [&] {
      auto latest = d.get("/api/v1/instances/loop/metrics?since=1m&step=60", alice).json().at("latest");
      return latest.is_object() && *parse_rfc3339(std::string(latest.at("at").as_string())) >= std::chrono::floor<seconds>(now);
    });
  };
  ASSERT_TRUE(wait_round());
  advance_clock(d, 86400);
  ASSERT_TRUE(wait_round());
  auto old = d.get("/api/v1/instances/loop/metrics?since=" + since + "&until=" +
                       format_rfc3339(std::chrono::floor<std::chrono::minutes>(t0) + std::chrono::minutes(1)) + "&step=60",
                   alice);
  ASSERT_EQ(old.status, 200) << old.body;
  EXPECT_EQ(old.json().at("resolution"), "1m");
  EXPECT_GT(last_value(old.json(), "cpu_percent").value_or(0), 20) << old.body;
  auto raw_gone = d.get("/api/v1/instances/loop/metrics?since=25h&until=23h&step=1", alice);
  ASSERT_EQ(raw_gone.status, 200) << raw_gone.body;
  // Gone in the store itself, not just answered differently: no raw row of the first minute.
  auto store_rows = [&](const std::string& where) {
    return shell("sqlite3 " + d.data_dir() + "/gpucloud.db \"SELECT COUNT(*) FROM instance_samples WHERE instance_id = '" +
                 id + "' AND " + where + "\" 2>&1");
  };
  const std::string first_minute = std::to_string(std::chrono::floor<std::chrono::minutes>(t0).time_since_epoch() /
                                                  std::chrono::seconds(1));
  EXPECT_EQ(store_rows("resolution = 0 AND t < " + first_minute + " + 60"), "0\n") << "raw rows past retention are purged";
  EXPECT_NE(store_rows("resolution != 0 AND t >= " + first_minute + " AND t < " + first_minute + " + 60"), "0\n")
      << "the minute's average stays";
  advance_clock(d, 7 * 86400);
  ASSERT_TRUE(wait_round());
  auto expired = d.get("/api/v1/instances/loop/metrics?since=" + since + "&until=" +
                           format_rfc3339(std::chrono::floor<std::chrono::minutes>(t0) + std::chrono::minutes(1)) + "&step=60",
                       alice);
  EXPECT_FALSE(last_value(expired.json(), "cpu_percent").has_value()) << expired.body;

  // Another user's instance is not found; a released instance's series go with it.
  const std::string bob = d.register_and_login("mon-bob");
  EXPECT_EQ(d.get("/api/v1/instances/" + id + "/metrics", bob).status, 404);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/loop", "", alice).status, 202);
  d.wait_for_state("loop", "released", alice);
  auto after = d.get("/api/v1/instances/" + id + "/metrics?since=1h&step=1", alice);
  if (after.status == 200) {
    EXPECT_FALSE(last_value(after.json(), "cpu_percent").has_value()) << after.body;
    EXPECT_FALSE(last_value(after.json(), "memory_used_bytes").has_value()) << after.body;
  } else {
    EXPECT_EQ(after.status, 404);
  }
  EXPECT_EQ(store_rows("1 = 1"), "0\n") << "a released instance's series rows are deleted from the store";
}

// /metrics with a running instance: its CPU and memory gauges from the newest sample, the
// instance and GPU counts by state (the simulated GPU labelled so), billing totals, and the
// whole text passes `promtool check metrics`.
TEST(MonitoringTest, DOCKER_PrometheusShowsTheRunningInstanceAndPassesPromtool) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(monitoring_options());
  d.start();
  const std::string alice = d.register_and_login("mon-prom");
  auto r = d.post("/api/v1/instances", {{"name", "prom"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}}, alice);
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id(r.json().at("id").as_string());
  d.wait_for_state("prom", "running", alice);
  std::string text;
  const std::string labels = "instance_id=\"" + id + "\",name=\"prom\",user=\"mon-prom\",host=\"node-1\"";
  // Tenants' instances (by user and name) are the operator's (or the scrape token's) to see.
  const std::string operator_token = d.admin_token();
  ASSERT_TRUE(monitoring_wait(std::chrono::seconds(20), [&] {
    text = d.get("/metrics", operator_token).body;
    return text.find("gpucloud_instance_cpu_usage_ratio{" + labels + "}") != std::string::npos;
  })) << text;
  const std::string anonymous = d.get("/metrics").body;
  EXPECT_EQ(anonymous.find("instance_id="), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("user=\"mon-prom\""), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("gpucloud_instances{state=\"running\"} 1\n"), std::string::npos) << anonymous;
  EXPECT_EQ(d.get("/metrics", alice).body.find("instance_id="), std::string::npos) << "a user's token is not enough";
  EXPECT_NE(d.get("/metrics", "scrape-token-0123456789").body.find("instance_id=\"" + id + "\""), std::string::npos)
      << "[metrics] token";
  EXPECT_NE(text.find("gpucloud_instance_memory_used_bytes{" + labels + "}"), std::string::npos) << text;
  EXPECT_NE(text.find("gpucloud_instances{state=\"running\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gpucloud_gpus{host=\"node-1\",model=\"RTX 4090\",simulated=\"true\",state=\"used\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpucloud_billing_accounts{state=\"ok\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("gpucloud_instance_gpu_utilization_ratio{"), std::string::npos)
      << "a simulated GPU has no utilisation to show: nothing is invented";

  const std::string promtool = shell("command -v promtool");
  if (promtool.empty()) {
    if (std::getenv("CI")) FAIL() << "promtool (Debian package prometheus) is missing (CI is set, so this fails)";
    GTEST_SKIP() << "promtool (Debian package prometheus) is missing: skipped (it fails when CI is set)";
  }
  const std::string path = d.dir() + "/metrics-with-instance.txt";
  std::ofstream(path) << text;
  const std::string check = shell("promtool check metrics < " + path + " 2>&1; echo \"exit=$?\"");
  EXPECT_NE(check.find("exit=0"), std::string::npos) << check << "\n--- /metrics:\n" << text;

  // The Grafana dashboard under docs/ asks only for metric families /metrics has.
  std::ifstream dashboard_file(GPUCLOUD_SOURCE_DIR "/docs/grafana/gpucloud-dashboard.json");
  ASSERT_TRUE(dashboard_file) << "docs/grafana/gpucloud-dashboard.json";
  const std::string dashboard((std::istreambuf_iterator<char>(dashboard_file)), std::istreambuf_iterator<char>());
  std::size_t names = 0;
  for (std::size_t at = dashboard.find("gpucloud_"); at != std::string::npos; at = dashboard.find("gpucloud_", at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(dashboard[at - 1])) || dashboard[at - 1] == '-')) continue;
    std::size_t end = at;
    while (end < dashboard.size() && (std::isalnum(static_cast<unsigned char>(dashboard[end])) || dashboard[end] == '_')) ++end;
    std::string name = dashboard.substr(at, end - at);
    if (name.ends_with("_bucket")) name.resize(name.size() - 7);
    ++names;
    EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos) << "the dashboard asks for " << name;
  }
  EXPECT_GT(names, 10u);

  // Stopped: its gauges go with the next scrape (the store says it is no longer running).
  ASSERT_EQ(d.post("/api/v1/instances/prom/stop", json::object{}, alice).status, 202);
  d.wait_for_state("prom", "stopped", alice);
  text = d.get("/metrics", operator_token).body;
  EXPECT_EQ(text.find("instance_id=\"" + id + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("gpucloud_gpus{host=\"node-1\",model=\"RTX 4090\",simulated=\"true\",state=\"free\"} 1\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace gpucloud::testing
