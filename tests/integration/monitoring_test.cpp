// Cost control end to end with --test-clock: a one-off stop_at and the release after N days
// stopped fire at their times with their warnings first; bad input is a 400.
// The tests that need the agent's sampler (autostop of a sleeping vs a busy instance, the
// CPU series, retention) wait on branch monitoring-sampling-tests until the sampler lands.
#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/capabilities.h"
#include "support/test_daemon.h"

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
  std::vector<std::string> out;
  for (const auto& e : doc.at("items").as_array())
    if (e.at("resource") == json::value(id)) out.push_back(std::string(e.at("type").as_string()));
  std::reverse(out.begin(), out.end());
  return out;
}
bool has_event(const std::vector<std::string>& types, const std::string& type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}
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

}  // namespace
}  // namespace gpucloud::testing
