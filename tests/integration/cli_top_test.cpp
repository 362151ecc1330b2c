// `gpucloud top` and `gpucloud set`, the real binary against the real daemon and engine: top
// shows the newest sample of a running CPU-only instance (CPU % and memory against its limit,
// why there are no GPU readings), --json is the metrics answer; set changes autostop through
// PATCH; top of a stopped or missing instance exits 1 with the reason.
#include <gtest/gtest.h>

#include "support/capabilities.h"
#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

DaemonOptions sampled_every_second() {
  static const int base = port_block();
  DaemonOptions o;
  o.config_toml = R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 8
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[monitoring]
sample_interval = "1s"
)";
  return o;
}

// The line of `text` that starts with `label`, "" when none.
std::string line_starting(const std::string& text, const std::string& label) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, label.size(), label) == 0) return text.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

TEST(CliTopTest, DOCKER_TopShowsTheNewestSampleAndSetChangesAutostop) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon d(sampled_every_second());
  d.start();
  const std::string token = d.register_and_login("top-tina");
  const std::map<std::string, std::string> env = {{"GPUCLOUD_ENDPOINT", d.endpoint()}, {"GPUCLOUD_TOKEN", token},
                                                  {"HOME", d.dir()}, {"XDG_CONFIG_HOME", d.dir()}};
  auto created = d.post("/api/v1/instances", {{"name", "watched"}, {"gpu_count", 0}}, token);
  ASSERT_EQ(created.status, 202) << created.body;
  const std::string id(created.json().at("id").as_string());
  d.wait_for_state("watched", "running", token);

  // A sample with CPU and memory readings (a container's first has no CPU: a rate needs two).
  ASSERT_TRUE(wait_until(
      [&] {
        auto latest = d.get("/api/v1/instances/watched/metrics?since=1m", token).json().at("latest");
        return latest.is_object() && latest.at("cpu_percent").is_number() && latest.at("memory_used_bytes").is_number();
      },
      std::chrono::seconds(30), "a sample with CPU and memory readings"));

  auto top = run_cli({"top", "watched", "--once"}, env);
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(line_starting(top.out, "instance:").find("watched (" + id + "), running on node-1"), std::string::npos) << top.out;
  EXPECT_NE(line_starting(top.out, "sample:").find(" ago"), std::string::npos) << top.out;
  EXPECT_NE(line_starting(top.out, "cpu:").find("% of one core (1 CPU)"), std::string::npos) << top.out;
  EXPECT_NE(line_starting(top.out, "memory:").find(" / 1 GiB ("), std::string::npos) << top.out;
  EXPECT_NE(line_starting(top.out, "gpu:").find("no readings: the instance runs without GPUs"), std::string::npos) << top.out;
  EXPECT_EQ(top.out.find("\x1b["), std::string::npos) << "no terminal escapes into a pipe";

  auto as_json = run_cli({"top", "watched", "--once", "--json"}, env);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  const json::value metrics = json::parse(as_json.out);
  EXPECT_EQ(metrics.at("instance"), json::value(id));
  EXPECT_TRUE(metrics.at("latest").is_object()) << as_json.out;

  auto set = run_cli({"set", "watched", "--autostop-idle", "30"}, env);
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.out.find("after 30 min"), std::string::npos) << set.out;
  auto show = run_cli({"show", "watched", "--json"}, env);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json::value autostop = json::parse(show.out).at("autostop");
  ASSERT_TRUE(autostop.is_object()) << show.out;
  EXPECT_EQ(autostop.at("idle_minutes"), 30);
  EXPECT_EQ(autostop.at("gpu_util_below_percent"), 5) << "the server's default";
  EXPECT_EQ(run_cli({"set", "watched"}, env).exit_code, 2) << "nothing to change";

  auto missing = run_cli({"top", "nobody-home", "--once"}, env);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.rfind("error: ", 0), 0u) << missing.err;

  ASSERT_EQ(d.post("/api/v1/instances/watched/stop", json::object{}, token).status, 202);
  d.wait_for_state("watched", "stopped", token);
  auto stopped = run_cli({"top", "watched", "--once"}, env);
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_NE(stopped.err.find("instance watched is stopped"), std::string::npos) << stopped.err;

  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/watched", "", token).status, 202);
  d.wait_for_state("watched", "released", token);
}

}  // namespace
}  // namespace gpucloud::testing
