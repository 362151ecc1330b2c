// `gpucloud top` and `gpucloud set` against answers built by the server's own serializers
// (instance_json, instance_metrics_json, problem_body): a field the server renames or drops
// fails here instead of the CLI quietly printing "-".
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "api/problem.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "core/time_format.h"
#include "instances/instance_record.h"
#include "monitoring/metrics_view.h"

namespace gpucloud::cli::top_set_test {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

constexpr std::int64_t kGiB = 1024LL * 1024 * 1024;

// Answers by method and path (the query string is ignored, as the routes ignore the rest);
// keeps every request.
class Server {
 public:
  void on(const std::string& method, const std::string& path, const json::object& body) {
    answers_[method + " " + path] = {200, json::serialize(body)};
  }
  void problem(const std::string& method, const std::string& path, ErrorCode code, const std::string& detail) {
    answers_[method + " " + path] = {http_status(code), api::problem_body(Error{code, detail, {}, 0})};
  }
  Result<HttpResponse> answer(const HttpRequest& request) {
    requests.push_back(request);
    std::string path = request.target.substr(0, request.target.find('?'));
    if (path.rfind("/api/v1", 0) == 0) path = path.substr(7);
    HttpResponse r;
    auto it = answers_.find(request.method + " " + path);
    if (it == answers_.end()) {
      r.status = 404;
      r.content_type = api::kProblemContentType;
      r.body = api::problem_body(Error{ErrorCode::not_found, "no answer for " + request.method + " " + path, {}, 0});
      return r;
    }
    r.status = it->second.first;
    r.content_type = r.status >= 400 ? api::kProblemContentType : "application/json";
    r.body = it->second.second;
    return r;
  }
  std::vector<std::string> targets() const {
    std::vector<std::string> out;
    for (const auto& r : requests) out.push_back(r.method + " " + r.target);
    return out;
  }
  std::vector<HttpRequest> requests;

 private:
  std::map<std::string, std::pair<int, std::string>> answers_;
};

class ServerTransport : public HttpTransport {
 public:
  explicit ServerTransport(Server& server) : server_(server) {}
  Result<HttpResponse> send(const HttpRequest& request) override { return server_.answer(request); }

 private:
  Server& server_;
};

SysTime at(const char* text) { return *parse_rfc3339(text); }

// A running instance with two real GPUs, as the store would hold it.
instances::Instance gpu_instance() {
  instances::Instance i;
  i.id = "i-0123456789abcdef";
  i.owner = "u-alice";
  i.name = "train-1";
  i.state = instances::InstanceState::running;
  i.zone = "zone-a";
  i.host_id = "h-1";
  i.host_name = "node-1";
  i.gpu_model = "RTX 4090";
  i.gpu_count = 2;
  i.gpu_uuids = {"GPU-aaaa", "GPU-bbbb"};
  i.cpu = 16;
  i.memory_gib = 64;
  i.system_disk_gib = 50;
  i.system_disk_used_bytes = 5LL << 30;
  i.image_id = "img-base";
  i.image_name = "base";
  i.billing_mode = "hourly";
  i.price_per_hour = 396;
  i.ipv4 = "10.200.1.2";
  i.created_at = at("2025-01-01T00:00:00Z");
  i.started_at = at("2025-01-01T00:00:05Z");
  i.ports = {instances::PortBinding{22, "tcp", 30022}};
  i.security_group_id = "sg-0123456789ab";
  return i;
}

instances::Instance cpu_only_instance() {
  auto i = gpu_instance();
  i.name = "prep";
  i.id = "i-fedcba9876543210";
  i.gpu_model.reset();
  i.gpu_count = 0;
  i.gpu_uuids.clear();
  i.cpu = 2;
  i.memory_gib = 4;
  return i;
}

json::object instance_answer(const instances::Instance& i) {
  return instances::instance_json(i, instances::ViewContext{"203.0.113.5", "CNY"}, 3600);
}

// The newest reading at 00:10:00; the answer's `until` (the server's now) is 4 s later.
monitoring::LatestInstanceReading reading_of(const instances::Instance& i) {
  monitoring::LatestInstanceReading r;
  r.instance_id = i.id;
  r.host_name = "node-1";
  r.at = at("2025-01-01T00:10:00Z");
  r.sample.instance_id = i.id;
  r.sample.cpu_percent = 150.5;
  r.sample.memory_used_bytes = 3 * kGiB;
  r.sample.memory_limit_bytes = i.memory_gib * kGiB;
  for (std::size_t n = 0; n < i.gpu_uuids.size(); ++n) {
    r.sample.gpus.push_back(agent::GpuReading{static_cast<int>(n) + 4, i.gpu_uuids[n], n == 0 ? 87 : 3,
                                              n == 0 ? 10 * kGiB : 512LL * 1024 * 1024, 24 * kGiB});
  }
  return r;
}

json::object metrics_answer(const instances::Instance& i, const monitoring::LatestInstanceReading* latest) {
  const monitoring::MetricsWindow window{at("2025-01-01T00:09:04Z"), at("2025-01-01T00:10:04Z"), 1, true};
  std::vector<monitoring::QueriedSeries> series(1);
  series[0].util = {{1735690200, 150.5}};
  series[0].memory = {{1735690200, 3.0 * kGiB}};
  return monitoring::instance_metrics_json(i, series, latest, window);
}

class CliTopSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-top-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["XDG_CONFIG_HOME"] = (dir_ / "config").string();
    env_["HOME"] = (dir_ / "home").string();
    env_["GPUCLOUD_TOKEN"] = "t";
  }
  void TearDown() override { fs::remove_all(dir_); }

  int run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    server_.requests.clear();
    Deps deps;
    deps.in = &in_;
    deps.out = &out_;
    deps.err = &err_;
    deps.env = [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    deps.connect = [this](const Endpoint&) { return std::make_unique<ServerTransport>(server_); };
    deps.stdin_is_tty = [] { return false; };
    deps.stderr_is_tty = [] { return false; };
    deps.stdout_is_tty = [this] { return stdout_tty_; };
    deps.trap_interrupt = [this] { ++traps_; };
    // Ctrl-C comes once the view has slept `interrupt_after` in all.
    deps.interrupted = [this] { return interrupt_after_ && slept_ >= *interrupt_after_; };
    deps.prompt = [](const std::string&, bool) -> std::optional<std::string> { return std::nullopt; };
    deps.sleep = [this](std::chrono::milliseconds d) { slept_ += d; };
    deps.now = [] { return std::chrono::steady_clock::time_point(); };
    deps.random_key = [] { return std::string("key-1"); };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }
  std::string line_with(const std::string& label) const {
    std::istringstream lines(out_.str());
    for (std::string line; std::getline(lines, line);)
      if (line.find(label) != std::string::npos) return line;
    return "";
  }
  bool printed(const std::string& s) const { return out_.str().find(s) != std::string::npos; }
  // The body of the one PATCH sent.
  json::value patch_body() const {
    for (const auto& r : server_.requests)
      if (r.method == "PATCH") return json::parse(r.body);
    ADD_FAILURE() << "no PATCH was sent";
    return nullptr;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  Server server_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  bool stdout_tty_ = false;
  int traps_ = 0;
  std::optional<std::chrono::milliseconds> interrupt_after_;
  std::chrono::milliseconds slept_{0};
};

TEST_F(CliTopSetTest, TopOncePrintsCpuMemoryAndARowPerGpu) {
  const auto i = gpu_instance();
  const auto latest = reading_of(i);
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/instances/i-0123456789abcdef/metrics", metrics_answer(i, &latest));
  ASSERT_EQ(run({"top", "train-1", "--once"}), 0) << err_.str();
  EXPECT_EQ(server_.targets(), (std::vector<std::string>{"GET /api/v1/instances/train-1",
                                                          "GET /api/v1/instances/i-0123456789abcdef/metrics?since=1m"}));
  EXPECT_NE(line_with("instance:").find("train-1 (i-0123456789abcdef), running on node-1"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("sample:").find("2025-01-01T00:10:00Z, 4s ago"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("cpu:").find("150.5% of one core (16 CPUs)"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("memory:").find("3 GiB / 64 GiB (4.7%)"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("system disk:").find("5 GiB / 50 GiB (10.0%)"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("GPU").find("MODEL"), std::string::npos) << out_.str();
  EXPECT_TRUE(printed("0    RTX 4090  87%   10 GiB / 24 GiB\n")) << out_.str();
  EXPECT_TRUE(printed("1    RTX 4090  3%    512 MiB / 24 GiB\n")) << out_.str();
  EXPECT_FALSE(printed("no readings")) << out_.str();
  EXPECT_FALSE(printed("\x1b[")) << "no terminal escapes with --once";
  EXPECT_EQ(traps_, 0) << "--once leaves Ctrl-C alone";
}

TEST_F(CliTopSetTest, TopSaysWhySimulatedGpusHaveNoReadings) {
  auto i = gpu_instance();
  i.gpu_count = 1;
  i.gpu_uuids = {"GPU-sim-0"};
  i.gpus_simulated = true;
  auto latest = reading_of(i);
  latest.sample.gpus.clear();
  latest.sample.gpu_note = "simulated GPUs report no utilisation";
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/instances/i-0123456789abcdef/metrics", metrics_answer(i, &latest));
  ASSERT_EQ(run({"top", "train-1", "--once"}), 0) << err_.str();
  EXPECT_NE(line_with("gpu:").find("no readings: simulated GPUs report no utilisation"), std::string::npos) << out_.str();
  EXPECT_TRUE(printed("0    RTX 4090 (simulated)  -     - / -\n")) << out_.str();
  EXPECT_NE(line_with("cpu:").find("150.5% of one core"), std::string::npos) << out_.str();
}

TEST_F(CliTopSetTest, TopOfACpuOnlyInstanceBeforeItsFirstSample) {
  const auto i = cpu_only_instance();
  server_.on("GET", "/instances/prep", instance_answer(i));
  server_.on("GET", "/instances/i-fedcba9876543210/metrics", metrics_answer(i, nullptr));
  ASSERT_EQ(run({"top", "prep", "--once"}), 0) << err_.str();
  EXPECT_NE(line_with("sample:").find("none yet"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("cpu:").find("no reading yet (2 CPUs)"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("memory:").find("no reading yet, limit 4 GiB"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("gpu:").find("no readings: the instance runs without GPUs"), std::string::npos) << out_.str();
  EXPECT_FALSE(printed("MODEL")) << "no GPU table without GPUs:\n" << out_.str();
}

TEST_F(CliTopSetTest, TopJsonPrintsTheMetricsDocument) {
  const auto i = gpu_instance();
  const auto latest = reading_of(i);
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/instances/i-0123456789abcdef/metrics", metrics_answer(i, &latest));
  ASSERT_EQ(run({"--json", "top", "train-1", "--once"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::value(metrics_answer(i, &latest)));
}

TEST_F(CliTopSetTest, TopOfAMissingOrStoppedInstanceExitsOne) {
  server_.problem("GET", "/instances/nope", ErrorCode::not_found, "instance nope not found");
  EXPECT_EQ(run({"top", "nope", "--once"}), 1);
  EXPECT_EQ(err_.str(), "error: instance nope not found\n");
  EXPECT_EQ(out_.str(), "");

  auto i = gpu_instance();
  i.state = instances::InstanceState::stopped;
  i.state_reason = "autostop";
  server_.on("GET", "/instances/train-1", instance_answer(i));
  EXPECT_EQ(run({"top", "train-1"}), 1);
  EXPECT_EQ(err_.str(), "error: instance train-1 is stopped (autostop), so it has no live readings\n");
  EXPECT_EQ(server_.targets(), std::vector<std::string>{"GET /api/v1/instances/train-1"}) << "no metrics asked for";
}

TEST_F(CliTopSetTest, TopRefreshesEveryIntervalUntilCtrlC) {
  const auto i = gpu_instance();
  const auto latest = reading_of(i);
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/instances/i-0123456789abcdef/metrics", metrics_answer(i, &latest));
  interrupt_after_ = 5s;  // frames at 0, 2 and 4 s; Ctrl-C in the third wait
  ASSERT_EQ(run({"top", "train-1"}), 0) << err_.str();
  EXPECT_EQ(traps_, 1);
  EXPECT_EQ(slept_, 5s) << "the view ends within a nap of Ctrl-C";
  EXPECT_EQ(server_.requests.size(), 6u);
  // Not a terminal: frames one after another, a blank line between, no escapes.
  const std::string frame = render_top_frame(instance_answer(i), metrics_answer(i, &latest));
  EXPECT_EQ(out_.str(), frame + "\n" + frame + "\n" + frame);

  // On a terminal each frame redraws the screen; --interval sets the pace.
  stdout_tty_ = true;
  slept_ = 0ms;
  interrupt_after_ = 1s;
  ASSERT_EQ(run({"top", "train-1", "--interval", "0.5"}), 0) << err_.str();
  EXPECT_EQ(server_.requests.size(), 4u);
  EXPECT_EQ(out_.str().rfind("\x1b[H\x1b[2J", 0), 0u) << out_.str();
  EXPECT_NE(out_.str().find("every 0.5 s, Ctrl-C to quit"), std::string::npos) << out_.str();
}

TEST_F(CliTopSetTest, TopRefusesABadInterval) {
  EXPECT_EQ(run({"top", "train-1", "--interval", "0"}), 2);
  EXPECT_NE(err_.str().find("--interval 0"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"top", "train-1", "--interval", "2s"}), 2);
  EXPECT_EQ(run({"top"}), 2);
  EXPECT_TRUE(server_.requests.empty());
}

TEST_F(CliTopSetTest, SetSendsEachFlagAsItsPatchField) {
  auto i = gpu_instance();
  server_.on("PATCH", "/instances/train-1", instance_answer(i));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--name", "eval-2"}, R"({"name":"eval-2"})"},
      {{"--sg", "web"}, R"({"security_group":"web"})"},
      {{"--port", "8888", "--port", "53/udp", "--port", "8888"}, R"({"ports":[22,8888,"53/udp"]})"},
      {{"--autostop-idle", "30"}, R"({"autostop":{"idle_minutes":30}})"},
      {{"--autostop-idle", "30", "--autostop-below", "10"}, R"({"autostop":{"idle_minutes":30,"gpu_util_below_percent":10}})"},
      {{"--no-autostop"}, R"({"autostop":null})"},
      {{"--stop-at", "2026-12-02T20:00:00+02:00"}, R"({"stop_at":"2026-12-02T18:00:00Z"})"},
      {{"--no-stop-at"}, R"({"stop_at":null})"},
      {{"--release-after-stopped-days", "7"}, R"({"release_after_stopped_days":7})"},
      {{"--release-after-stopped-days", "default"}, R"({"release_after_stopped_days":null})"},
      {{"--spend-limit", "12.34"}, R"({"spend_limit":1234})"},
      {{"--no-spend-limit"}, R"({"spend_limit":null})"},
      {{"--auto-renew", "off"}, R"({"billing":{"auto_renew":false}})"},
      {{"--auto-renew", "on"}, R"({"billing":{"auto_renew":true}})"},
      {{"--name", "eval-2", "--no-stop-at", "--spend-limit", "5"}, R"({"name":"eval-2","stop_at":null,"spend_limit":500})"},
  };
  for (const auto& [flags, body] : cases) {
    std::vector<std::string> args{"set", "train-1"};
    args.insert(args.end(), flags.begin(), flags.end());
    ASSERT_EQ(run(args), 0) << flags.front() << ": " << err_.str();
    ASSERT_FALSE(server_.requests.empty());
    EXPECT_EQ(server_.requests.front().method, "PATCH");
    EXPECT_EQ(server_.requests.front().target, "/api/v1/instances/train-1");
    EXPECT_EQ(patch_body(), json::parse(body)) << flags.front();
  }
}

TEST_F(CliTopSetTest, SetPrintsTheUpdatedInstanceAsShowDoes) {
  auto i = gpu_instance();
  i.autostop = instances::Instance::Autostop{30, 5};
  server_.on("PATCH", "/instances/train-1", instance_answer(i));
  ASSERT_EQ(run({"set", "train-1", "--autostop-idle", "30"}), 0) << err_.str();
  EXPECT_NE(line_with("autostop:").find("after 30 min with GPU use below 5%"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("state:").find("running"), std::string::npos) << out_.str();
  EXPECT_FALSE(printed("null")) << out_.str();

  ASSERT_EQ(run({"--json", "set", "train-1", "--autostop-idle", "30"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::value(instance_answer(i)));
}

TEST_F(CliTopSetTest, SetUsageErrorsSendNothing) {
  const std::vector<std::vector<std::string>> bad{
      {"set", "train-1"},                                              // nothing to change
      {"set", "--name", "x"},                                          // no NAME
      {"set", "train-1", "--autostop-below", "10"},                    // below needs idle
      {"set", "train-1", "--autostop-idle", "30", "--no-autostop"},
      {"set", "train-1", "--autostop-idle", "0"},
      {"set", "train-1", "--autostop-idle", "30", "--autostop-below", "101"},
      {"set", "train-1", "--stop-at", "tomorrow"},
      {"set", "train-1", "--stop-at", "2026-12-02T18:00:00Z", "--no-stop-at"},
      {"set", "train-1", "--spend-limit", "1.234"},
      {"set", "train-1", "--spend-limit", "0"},
      {"set", "train-1", "--spend-limit", "5", "--no-spend-limit"},
      {"set", "train-1", "--auto-renew", "maybe"},
      {"set", "train-1", "--release-after-stopped-days", "0"},
      {"set", "train-1", "--port", "http"},
      {"set", "train-1", "--name", ""},
  };
  for (const auto& args : bad) {
    EXPECT_EQ(run(args), 2) << args.back() << ": " << err_.str();
    EXPECT_TRUE(server_.requests.empty()) << args.back();
  }
  run({"set", "train-1"});
  EXPECT_NE(err_.str().find("nothing to change"), std::string::npos) << err_.str();
}

TEST_F(CliTopSetTest, SetRefusedByTheServerExitsOneWithTheDetail) {
  server_.problem("PATCH", "/instances/train-1", ErrorCode::invalid_argument,
                  "stop_at: must be in the future (it is now 2026-12-02T19:00:00Z)");
  EXPECT_EQ(run({"set", "train-1", "--stop-at", "2026-12-02T18:00:00Z"}), 1);
  EXPECT_EQ(err_.str(), "error: stop_at: must be in the future (it is now 2026-12-02T19:00:00Z)\n");
  EXPECT_EQ(run({"set", "nope", "--no-autostop"}), 1);
  EXPECT_NE(err_.str().find("no answer for PATCH /instances/nope"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace gpucloud::cli::top_set_test
