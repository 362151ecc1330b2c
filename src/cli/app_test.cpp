// The command dispatcher end to end on a fake transport: requests sent, output, exit codes.
#include "cli/app.h"

#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "disks/disk_record.h"

namespace gpucloud::cli {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Canned {
  std::string method;
  std::string target;
  HttpResponse response;
  bool repeat = false;  // answer every matching request, not just the next one
};

// Shared by every transport the dispatcher creates.
struct FakeServer {
  std::deque<Canned> script;
  std::vector<HttpRequest> requests;
  std::vector<std::string> endpoints;
  bool refuse_connections = false;

  void on(std::string method, std::string target, int status, std::string body,
          bool repeat = false) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = status >= 400 ? "application/problem+json" : "application/json";
    script.push_back({std::move(method), std::move(target), std::move(r), repeat});
  }
  void problem(std::string method, std::string target, int status, const std::string& code,
               const std::string& detail) {
    json::object p{{"type", "about:blank"}, {"title", "x"}, {"status", status},
                   {"detail", detail}, {"code", code}};
    on(std::move(method), std::move(target), status, json::serialize(p));
  }
};

class FakeTransport : public HttpTransport {
 public:
  FakeTransport(FakeServer& server, Endpoint endpoint)
      : server_(server), endpoint_(std::move(endpoint)) {}
  Result<HttpResponse> send(const HttpRequest& request) override {
    server_.requests.push_back(request);
    if (server_.refuse_connections) {
      return fail(ErrorCode::unavailable, "cannot connect to gpucloud at " + endpoint_.url +
                                              ": Connection refused");
    }
    for (auto it = server_.script.begin(); it != server_.script.end(); ++it) {
      if (it->method == request.method && it->target == request.target) {
        HttpResponse r = it->response;
        if (!it->repeat) server_.script.erase(it);
        return r;
      }
    }
    HttpResponse r;
    r.status = 404;
    r.content_type = "application/problem+json";
    r.body = R"({"status":404,"code":"not_found","detail":"no canned answer for )" +
             request.method + " " + request.target + "\"}";
    return r;
  }

 private:
  FakeServer& server_;
  Endpoint endpoint_;
};

class CliAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-app-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["XDG_CONFIG_HOME"] = (dir_ / "config").string();
    env_["HOME"] = (dir_ / "home").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  int run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    in_.clear();
    in_.str(stdin_);
    Deps deps;
    deps.in = &in_;
    deps.out = &out_;
    deps.err = &err_;
    deps.env = [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    deps.connect = [this](const Endpoint& ep) {
      server_.endpoints.push_back(ep.url);
      return std::make_unique<FakeTransport>(server_, ep);
    };
    deps.stdin_is_tty = [this] { return tty_; };
    deps.stderr_is_tty = [] { return false; };
    deps.prompt = [this](const std::string& prompt, bool secret) -> std::optional<std::string> {
      prompts_.push_back(prompt);
      if (answers_.empty()) return std::nullopt;
      std::string a = answers_.front();
      answers_.pop_front();
      return a;
    };
    deps.sleep = [this](std::chrono::milliseconds d) { clock_ += d; };
    deps.now = [this] { return std::chrono::steady_clock::time_point(clock_); };
    deps.random_key = [this] { return "key-" + std::to_string(++keys_); };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }

  fs::path config_file() const { return dir_ / "config" / "gpucloud" / "config.toml"; }
  void write_config(const std::string& text) {
    fs::create_directories(config_file().parent_path());
    std::ofstream(config_file()) << text;
  }
  std::string read_config() const {
    std::ifstream f(config_file());
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  const HttpRequest& last() const { return server_.requests.back(); }
  json::value body_of(const HttpRequest& r) const { return json::parse(r.body); }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  FakeServer server_;
  std::string stdin_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  bool tty_ = false;
  std::deque<std::string> answers_;
  std::vector<std::string> prompts_;
  std::chrono::steady_clock::duration clock_{};
  int keys_ = 0;
};

const char* kRunning = R"({"id":"i-1","name":"train-1","state":"running","zone":"zone-a",
  "host":"node-1","gpu_model":"RTX 4090","gpu_count":1,
  "gpus":[{"index":0,"uuid":"GPU-1","simulated":true}],
  "ssh":{"host":"10.0.0.1","port":30022,"user":"root","command":"ssh -p 30022 root@10.0.0.1",
         "host_key":"ssh-ed25519 AAAAC3Nz"},
  "ports":[{"port":22,"protocol":"tcp","host":"10.0.0.1","host_port":30022,"allowed":true},
           {"port":8888,"protocol":"tcp","host":"10.0.0.1","host_port":30023,"allowed":false}],
  "billing":{"mode":"hourly","auto_renew":false,"expires_at":null,"price_per_hour":198},
  "run_seconds":3725,"charged":204,"created_at":"2025-01-01T00:00:00Z"})";

std::string with_state(const char* base, const std::string& state,
                       const std::string& reason = "") {
  json::value v = json::parse(base);
  v.as_object()["state"] = state;
  if (!reason.empty()) v.as_object()["state_reason"] = reason;
  return json::serialize(v);
}

TEST_F(CliAppTest, WhoamiPrintsTheUserAndSendsTheStoredToken) {
  write_config("endpoint = \"http://cloud:8080\"\ntoken = \"stored\"\n");
  server_.on("GET", "/api/v1/me", 200,
             R"({"id":"u-1","username":"alice","role":"user","created_at":"2025-01-01T00:00:00Z"})");
  EXPECT_EQ(run({"whoami"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("username: alice"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("endpoint: http://cloud:8080"), std::string::npos);
  EXPECT_EQ(last().header("Authorization"), "Bearer stored");
  EXPECT_EQ(server_.endpoints.back(), "http://cloud:8080");
}

TEST_F(CliAppTest, FlagsBeatEnvironmentBeatsFile) {
  write_config("endpoint = \"http://cloud:8080\"\ntoken = \"stored\"\n");
  env_["GPUCLOUD_TOKEN"] = "from-env";
  server_.on("GET", "/api/v1/me", 200, R"({"username":"a"})", true);
  EXPECT_EQ(run({"whoami"}), 0);
  EXPECT_EQ(last().header("Authorization"), "Bearer from-env");
  EXPECT_EQ(run({"whoami", "--token", "from-flag", "--endpoint", "http://other:1"}), 0);
  EXPECT_EQ(last().header("Authorization"), "Bearer from-flag");
  EXPECT_EQ(server_.endpoints.back(), "http://other:1");
  env_["GPUCLOUD_ENDPOINT"] = "http://env-host:2";
  EXPECT_EQ(run({"--json", "whoami"}), 0);
  EXPECT_EQ(server_.endpoints.back(), "http://env-host:2");
}

TEST_F(CliAppTest, ApiRefusalPrintsDetailAndExitsOne) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.problem("POST", "/api/v1/instances/train-1/stop", 409, "conflict",
                  "instance train-1 is stopped");
  EXPECT_EQ(run({"stop", "train-1"}), 1);
  EXPECT_EQ(err_.str(), "error: instance train-1 is stopped\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliAppTest, UnauthorizedWithoutTokenHintsAtLogin) {
  server_.problem("GET", "/api/v1/instances", 401, "unauthorized", "missing bearer token");
  EXPECT_EQ(run({"ls"}), 1);
  EXPECT_EQ(err_.str().rfind("error: missing bearer token\n", 0), 0u) << err_.str();
  EXPECT_NE(err_.str().find("gpucloud login"), std::string::npos);
}

TEST_F(CliAppTest, ConnectionFailureExitsOneNamingTheEndpoint) {
  server_.refuse_connections = true;
  EXPECT_EQ(run({"market"}), 1);
  EXPECT_NE(err_.str().find("http://127.0.0.1:8080"), std::string::npos) << err_.str();
  EXPECT_EQ(err_.str().rfind("error: ", 0), 0u);
}

TEST_F(CliAppTest, UsageErrorsExitTwoWithoutSendingAnything) {
  EXPECT_EQ(run({"create", "x", "--gpu", "RTX 4090", "--image", "base"}), 2);
  EXPECT_NE(err_.str().find("MODEL:COUNT"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"create", "x", "--image", "base"}), 2);
  EXPECT_EQ(run({"create", "--gpu", "RTX 4090:1", "--image", "base"}), 2);  // no NAME
  EXPECT_EQ(run({"create", "x", "--gpu", "A:1", "--image", "b", "--billing", "daily"}), 2);
  EXPECT_EQ(run({"nonsense"}), 2);
  EXPECT_NE(err_.str().find("unknown command \"nonsense\""), std::string::npos) << err_.str();
  EXPECT_EQ(run({"--endpoint", "http://x:1", "nonsense"}), 2);
  EXPECT_NE(err_.str().find("unknown command \"nonsense\""), std::string::npos) << err_.str();
  EXPECT_EQ(run({"ls", "extra"}), 2);
  EXPECT_EQ(run({}), 2);
  EXPECT_EQ(run({"token"}), 2);
  EXPECT_EQ(run({"ls", "--bogus"}), 2);
  EXPECT_EQ(run({"admin", "credit", "alice", "12.345"}), 2);
  EXPECT_EQ(run({"admin", "clock", "advance", "soon"}), 2);
  EXPECT_EQ(run({"--endpoint", "https://secure", "ls"}), 2);
  EXPECT_EQ(run({"key", "add", "k", "--file", (dir_ / "missing.pub").string()}), 2);
  EXPECT_TRUE(server_.requests.empty());
}

TEST_F(CliAppTest, HelpAndVersionExitZero) {
  EXPECT_EQ(run({"--help"}), 0);
  EXPECT_NE(out_.str().find("create"), std::string::npos);
  EXPECT_EQ(run({"create", "--help"}), 0);
  EXPECT_NE(out_.str().find("--gpu"), std::string::npos);
  EXPECT_EQ(run({"--version"}), 0);
}

TEST_F(CliAppTest, CreateWaitsUntilRunningAndPrintsTheSshCommand) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "creating"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "starting"));
  server_.on("GET", "/api/v1/instances/i-1", 200, kRunning);
  EXPECT_EQ(run({"create", "train-1", "--gpu", "RTX 4090:1", "--image", "base", "--port",
                 "8888", "--key", "laptop"}),
            0)
      << err_.str();
  const HttpRequest& post = server_.requests.front();
  EXPECT_EQ(post.method, "POST");
  EXPECT_EQ(post.header("Idempotency-Key"), "key-1");
  EXPECT_EQ(body_of(post), json::parse(R"({"name":"train-1","gpu_model":"RTX 4090",
      "gpu_count":1,"image":"base","ports":[22,8888],"ssh_keys":["laptop"]})"));
  EXPECT_EQ(server_.requests.size(), 4u);
  EXPECT_NE(out_.str().find("ssh -p 30022 root@10.0.0.1"), std::string::npos) << out_.str();
  // One progress line (stderr is not a terminal here: printed once at the end).
  EXPECT_EQ(err_.str(), "creating… starting… running (0.9 s)\n");
}

TEST_F(CliAppTest, CreateReportsTheErrorState) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  server_.on("GET", "/api/v1/instances/i-1", 200,
             with_state(kRunning, "error", "image pull failed: not found"));
  EXPECT_EQ(run({"create", "train-1", "--no-gpu", "--image", "base"}), 1);
  EXPECT_NE(err_.str().find("error: instance train-1 failed: image pull failed: not found"),
            std::string::npos)
      << err_.str();
}

TEST_F(CliAppTest, CreateNoWaitAndJsonPrintTheApiAnswer) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  EXPECT_EQ(run({"create", "train-1", "--no-gpu", "--image", "base", "--no-wait", "--json"}), 0);
  json::value printed = json::parse(out_.str());
  EXPECT_EQ(printed.at("state"), "creating");
  EXPECT_EQ(server_.requests.size(), 1u);
}

TEST_F(CliAppTest, CreateReadsThePasswordFromStdin) {
  env_["GPUCLOUD_TOKEN"] = "t";
  stdin_ = "s3cret pass\n";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  EXPECT_EQ(run({"create", "t", "--no-gpu", "--image", "b", "--password-stdin", "--no-wait"}), 0);
  EXPECT_EQ(body_of(last()).at("password"), "s3cret pass");
}

TEST_F(CliAppTest, EachInvocationGetsItsOwnIdempotencyKey) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"), true);
  EXPECT_EQ(run({"create", "a", "--no-gpu", "--image", "b", "--no-wait"}), 0);
  EXPECT_EQ(run({"create", "b", "--no-gpu", "--image", "b", "--no-wait"}), 0);
  EXPECT_NE(server_.requests[0].header("Idempotency-Key"),
            server_.requests[1].header("Idempotency-Key"));
}

TEST_F(CliAppTest, CreateRetriesWithTheSameKeyWhenTheServerIsUnavailable) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.problem("POST", "/api/v1/instances", 503, "unavailable", "database is restarting");
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  server_.problem("GET", "/api/v1/instances/i-1", 503, "unavailable", "restarting");
  server_.on("GET", "/api/v1/instances/i-1", 200, kRunning);
  EXPECT_EQ(run({"create", "train-1", "--no-gpu", "--image", "b"}), 0) << err_.str();
  ASSERT_EQ(server_.requests.size(), 4u);
  EXPECT_EQ(server_.requests[0].header("Idempotency-Key"), "key-1");
  EXPECT_EQ(server_.requests[1].header("Idempotency-Key"), "key-1");

  server_.refuse_connections = true;
  server_.requests.clear();
  EXPECT_EQ(run({"create", "train-2", "--no-gpu", "--image", "b"}), 1);
  EXPECT_EQ(server_.requests.size(), 3u);
  EXPECT_NE(err_.str().find("http://127.0.0.1:8080"), std::string::npos);
}

TEST_F(CliAppTest, StopWaitsForStopped) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances/train-1/stop", 202, with_state(kRunning, "stopping"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "stopped"));
  EXPECT_EQ(run({"stop", "train-1"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Instance train-1 is stopped.\n");
}

TEST_F(CliAppTest, StartThatFallsBackToStoppedFails) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances/train-1/start", 202, with_state(kRunning, "starting"));
  server_.on("GET", "/api/v1/instances/i-1", 200,
             with_state(kRunning, "stopped", "container exited 1"));
  EXPECT_EQ(run({"start", "train-1", "--no-gpu"}), 1);
  EXPECT_EQ(body_of(server_.requests.front()), (json::object{{"no_gpu", true}}));
  EXPECT_NE(err_.str().find("error: instance train-1 is stopped: container exited 1"),
            std::string::npos)
      << err_.str();
}

TEST_F(CliAppTest, RestartMayPassThroughStopped) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances/train-1/restart", 202, with_state(kRunning, "stopping"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "stopped"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "starting"));
  server_.on("GET", "/api/v1/instances/i-1", 200, kRunning);
  EXPECT_EQ(run({"restart", "train-1"}), 0) << err_.str();
}

TEST_F(CliAppTest, ReleaseWithoutYesOffATerminalIsAUsageError) {
  env_["GPUCLOUD_TOKEN"] = "t";
  EXPECT_EQ(run({"release", "train-1"}), 2);
  EXPECT_NE(err_.str().find("--yes"), std::string::npos);
  EXPECT_TRUE(server_.requests.empty());
}

TEST_F(CliAppTest, ReleaseWithYesDeletesAndWaitsTillGone) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("DELETE", "/api/v1/instances/train-1", 202, with_state(kRunning, "releasing"));
  // The released instance answers 404 by then: that is released too.
  EXPECT_EQ(run({"release", "train-1", "--yes"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Instance train-1 is released.\n");
}

TEST_F(CliAppTest, ReleaseOnATerminalAsksAndWarnsAboutSubscriptions) {
  env_["GPUCLOUD_TOKEN"] = "t";
  tty_ = true;
  json::value sub = json::parse(kRunning);
  sub.as_object()["billing"] = json::parse(
      R"({"mode":"monthly","auto_renew":true,"expires_at":"2025-02-01T00:00:00Z","price_per_hour":100})");
  server_.on("GET", "/api/v1/instances/train-1", 200, json::serialize(sub), true);
  answers_ = {"n"};
  EXPECT_EQ(run({"release", "train-1"}), 1);
  ASSERT_EQ(prompts_.size(), 1u);
  EXPECT_NE(prompts_[0].find("refunds nothing"), std::string::npos) << prompts_[0];
  EXPECT_EQ(server_.requests.size(), 1u);  // only the GET

  server_.on("DELETE", "/api/v1/instances/train-1", 202, with_state(kRunning, "releasing"));
  server_.on("GET", "/api/v1/instances/i-1", 200, with_state(kRunning, "released"));
  answers_ = {"y"};
  EXPECT_EQ(run({"release", "train-1", "--no-wait"}), 0) << err_.str();
  EXPECT_EQ(last().method, "DELETE");
}

TEST_F(CliAppTest, LsAllAndShow) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("GET", "/api/v1/instances?all=true", 200,
             std::string(R"({"items":[)") + kRunning + R"(],"next_cursor":null})");
  EXPECT_EQ(run({"ls", "--all"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("NAME     OWNER  STATE"), std::string::npos) << out_.str();

  server_.on("GET", "/api/v1/instances/train-1", 200, kRunning);
  EXPECT_EQ(run({"show", "train-1"}), 0) << err_.str();
  const std::string s = out_.str();
  EXPECT_NE(s.find("ssh -p 30022 root@10.0.0.1"), std::string::npos) << s;
  EXPECT_NE(s.find("ssh-ed25519 AAAAC3Nz"), std::string::npos) << s;
  EXPECT_NE(s.find("8888/tcp → 10.0.0.1:30023  not allowed by its security group"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("hourly, ¥1.98/h"), std::string::npos) << s;
  EXPECT_NE(s.find("charged:        ¥2.04"), std::string::npos) << s;
  EXPECT_NE(s.find("GPU-1 (simulated)"), std::string::npos) << s;
}

TEST_F(CliAppTest, EstimateSendsTheCreateBody) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/billing/estimate", 200,
             R"({"per_hour":198,"per_day":4752,"per_week":33264,"per_month":142560,"upfront":0,"storage_per_day":0})");
  EXPECT_EQ(run({"estimate", "--gpu", "RTX 4090:1", "--image", "base"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()).at("gpu_count"), 1);
  EXPECT_NE(out_.str().find("per hour:        ¥1.98"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("per day:         ¥47.52"), std::string::npos) << out_.str();
}

TEST_F(CliAppTest, LoginStoresTokenAndEndpointInA0600File) {
  stdin_ = "correct horse\n";
  server_.on("POST", "/api/v1/auth/login", 200,
             R"({"token":"sess-123","expires_at":"2025-01-02T00:00:00Z"})");
  EXPECT_EQ(run({"login", "--endpoint", "http://cloud:8080", "--username", "alice",
                 "--password-stdin"}),
            0)
      << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"username", "alice"}, {"password", "correct horse"}}));
  EXPECT_EQ(last().header("Authorization"), "");
  std::string config = read_config();
  EXPECT_NE(config.find("sess-123"), std::string::npos) << config;
  EXPECT_NE(config.find("http://cloud:8080"), std::string::npos) << config;
  struct stat st {};
  ASSERT_EQ(::stat(config_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  // Next commands use the stored endpoint and token.
  server_.on("GET", "/api/v1/me", 200, R"({"username":"alice"})");
  EXPECT_EQ(run({"whoami"}), 0);
  EXPECT_EQ(server_.endpoints.back(), "http://cloud:8080");
  EXPECT_EQ(last().header("Authorization"), "Bearer sess-123");

  // Logout revokes it on the server and forgets it here.
  server_.on("POST", "/api/v1/auth/logout", 204, "");
  EXPECT_EQ(run({"logout"}), 0) << err_.str();
  EXPECT_EQ(last().header("Authorization"), "Bearer sess-123");
  EXPECT_EQ(read_config().find("sess-123"), std::string::npos);
  EXPECT_NE(read_config().find("http://cloud:8080"), std::string::npos);

  // Logging in again never sends the stored (or any) token along with the password.
  env_["GPUCLOUD_TOKEN"] = "env-token";
  stdin_ = "correct horse\n";
  server_.on("POST", "/api/v1/auth/login", 200, R"({"token":"sess-456"})");
  EXPECT_EQ(run({"login", "--username", "alice", "--password-stdin"}), 0) << err_.str();
  EXPECT_EQ(last().header("Authorization"), "");
  EXPECT_NE(err_.str().find("GPUCLOUD_TOKEN"), std::string::npos);
  EXPECT_NE(read_config().find("sess-456"), std::string::npos);
}

TEST_F(CliAppTest, LoginReadsUsernameAndPasswordFromStdinLinesOffATerminal) {
  stdin_ = "bob\npassword1\n";
  server_.on("POST", "/api/v1/auth/login", 200, R"({"token":"x"})");
  EXPECT_EQ(run({"login"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"username", "bob"}, {"password", "password1"}}));
}

TEST_F(CliAppTest, LoginOnATerminalPromptsWithoutEcho) {
  tty_ = true;
  answers_ = {"carol", "pw-on-tty"};
  server_.problem("POST", "/api/v1/auth/login", 401, "unauthorized", "wrong username or password");
  EXPECT_EQ(run({"login"}), 1);
  EXPECT_EQ(err_.str().rfind("error: wrong username or password", 0), 0u) << err_.str();
  EXPECT_EQ(prompts_, (std::vector<std::string>{"Username: ", "Password: "}));
  EXPECT_FALSE(fs::exists(config_file()));
}

TEST_F(CliAppTest, RegisterAsksTwiceOnATerminal) {
  tty_ = true;
  answers_ = {"pw-one-1", "pw-one-2"};
  EXPECT_EQ(run({"register", "--username", "dave"}), 2);
  EXPECT_NE(err_.str().find("do not match"), std::string::npos);
  EXPECT_TRUE(server_.requests.empty());

  answers_ = {"same-pass", "same-pass"};
  server_.on("POST", "/api/v1/auth/register", 201, R"({"id":"u-9","username":"dave"})");
  EXPECT_EQ(run({"register", "--username", "dave"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"username", "dave"}, {"password", "same-pass"}}));
}

TEST_F(CliAppTest, PasswdReadsOldAndNewFromStdin) {
  env_["GPUCLOUD_TOKEN"] = "t";
  stdin_ = "old-pass\nnew-pass\n";
  server_.on("PUT", "/api/v1/me/password", 204, "");
  EXPECT_EQ(run({"passwd", "--password-stdin"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()),
            (json::object{{"old_password", "old-pass"}, {"new_password", "new-pass"}}));
  stdin_ = "only-one\n";
  EXPECT_EQ(run({"passwd", "--password-stdin"}), 2);
}

TEST_F(CliAppTest, Tokens) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/tokens", 201, R"({"id":"tok-1","name":"ci","token":"gct_secret"})");
  EXPECT_EQ(run({"token", "create", "ci"}), 0);
  EXPECT_EQ(out_.str(), "gct_secret\n");
  EXPECT_FALSE(last().header("Idempotency-Key").empty());
  server_.on("GET", "/api/v1/tokens", 200, R"({"items":[{"id":"tok-1","name":"ci"}],"next_cursor":null})");
  EXPECT_EQ(run({"token", "ls"}), 0);
  EXPECT_NE(out_.str().find("tok-1"), std::string::npos);
  server_.on("DELETE", "/api/v1/tokens/tok-1", 204, "");
  EXPECT_EQ(run({"token", "rm", "tok-1"}), 0);
}

TEST_F(CliAppTest, KeysUploadThePublicKeyFile) {
  env_["GPUCLOUD_TOKEN"] = "t";
  fs::create_directories(dir_ / "home" / ".ssh");
  std::ofstream(dir_ / "home" / ".ssh" / "id_ed25519.pub") << "ssh-ed25519 AAAAC3 me@laptop\n";
  std::ofstream(dir_ / "home" / ".ssh" / "id_ed25519")
      << "-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n";
  server_.on("POST", "/api/v1/ssh-keys", 201, R"({"id":"key-1","name":"laptop"})");
  EXPECT_EQ(run({"key", "add", "laptop", "--file", "~/.ssh/id_ed25519.pub"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"name", "laptop"},
                                           {"public_key", "ssh-ed25519 AAAAC3 me@laptop"}}));
  EXPECT_EQ(run({"key", "add", "laptop", "--file", "~/.ssh/id_ed25519"}), 2);
  EXPECT_NE(err_.str().find("private key"), std::string::npos);

  server_.on("GET", "/api/v1/ssh-keys", 200,
             R"({"items":[{"id":"key-1","name":"laptop","public_key":"ssh-ed25519 AAAAC3 me@laptop"}]})");
  EXPECT_EQ(run({"key", "ls"}), 0);
  EXPECT_NE(out_.str().find("ssh-ed25519 … me@laptop"), std::string::npos) << out_.str();
  server_.on("DELETE", "/api/v1/ssh-keys/laptop", 204, "");
  EXPECT_EQ(run({"key", "rm", "laptop"}), 0);
}

TEST_F(CliAppTest, MarketJsonIsTheApiJson) {
  env_["GPUCLOUD_TOKEN"] = "t";
  const char* market = R"({"items":[{"zone":"zone-a","gpu_model":"RTX 4090","gpus_free":3}],"next_cursor":null})";
  server_.on("GET", "/api/v1/market", 200, market);
  EXPECT_EQ(run({"market", "--json"}), 0);
  EXPECT_EQ(json::parse(out_.str()), json::parse(market));
}

TEST_F(CliAppTest, AdminCreditConvertsToFenWithAnIdempotencyKey) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/admin/users/alice/credit", 201,
             R"({"id":"le-1","amount":1234,"balance_after":5234,"kind":"credit"})");
  EXPECT_EQ(run({"admin", "credit", "alice", "12.34", "--note", "welcome"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"amount", 1234}, {"note", "welcome"}}));
  EXPECT_FALSE(last().header("Idempotency-Key").empty());
  EXPECT_EQ(out_.str(), "Credited ¥12.34 to alice; balance ¥52.34.\n");

  server_.on("POST", "/api/v1/admin/users/alice/credit", 201,
             R"({"id":"le-2","amount":-500,"balance_after":4734,"kind":"adjustment"})");
  EXPECT_EQ(run({"admin", "credit", "alice", "-5"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()).at("amount"), -500);
  EXPECT_EQ(out_.str(), "Debited ¥5.00 from alice; balance ¥47.34.\n");
}

TEST_F(CliAppTest, AdminForbiddenIsARefusal) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.problem("GET", "/api/v1/admin/hosts", 403, "forbidden", "operator only");
  EXPECT_EQ(run({"admin", "hosts"}), 1);
  EXPECT_EQ(err_.str(), "error: operator only\n");
}

TEST_F(CliAppTest, AdminPricesSetSendsTheFile) {
  env_["GPUCLOUD_TOKEN"] = "t";
  std::ofstream(dir_ / "prices.json") << R"({"gpus":{"RTX 4090":{"hour":198}}})";
  std::ofstream(dir_ / "bad.json") << "{not json";
  server_.on("PUT", "/api/v1/admin/prices", 200, R"({"gpus":{"RTX 4090":{"hour":198}}})");
  EXPECT_EQ(run({"admin", "prices", "--set", (dir_ / "prices.json").string()}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), json::parse(R"({"gpus":{"RTX 4090":{"hour":198}}})"));
  EXPECT_EQ(run({"admin", "prices", "--set", (dir_ / "bad.json").string()}), 2);
}

TEST_F(CliAppTest, AdminPricesShowsATableInYuan) {
  env_["GPUCLOUD_TOKEN"] = "t";
  const char* table = R"({"currency":"CNY","gpus":[{"gpu_model":"RTX 4090","price_per_gpu_hour":198,
      "price_per_gpu_week":26600,"price_per_gpu_month":99800}],"no_gpu_price_per_hour":10,"system_disk_free_gib":30,
      "data_disk_per_gib_hour_micros":13889})";
  server_.on("GET", "/api/v1/admin/prices", 200, table);
  EXPECT_EQ(run({"admin", "prices"}), 0) << err_.str();
  const std::string out = out_.str();
  EXPECT_NE(out.find("GPU MODEL"), std::string::npos) << out;
  EXPECT_NE(out.find("RTX 4090"), std::string::npos) << out;
  EXPECT_NE(out.find("¥1.98"), std::string::npos) << out;
  EXPECT_NE(out.find("¥266.00"), std::string::npos) << out;
  EXPECT_NE(out.find("No-GPU instances: ¥0.10/hour"), std::string::npos) << out;
  EXPECT_NE(out.find("Data disks: ¥0.00013889/GiB-hour"), std::string::npos) << out;
  out_.str("");
  server_.on("GET", "/api/v1/admin/prices", 200, table);
  EXPECT_EQ(run({"admin", "prices", "--json"}), 0);
  EXPECT_EQ(json::parse(out_.str()), json::parse(table));
}

TEST_F(CliAppTest, RepeatableFlagsTakeOneValueEach) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, kRunning);
  EXPECT_EQ(run({"create", "--port", "8888", "train-1", "--key", "a", "--key", "b", "--port", "6006", "--gpu", "RTX 4090:1",
                 "--no-wait"}),
            0)
      << err_.str();
  EXPECT_EQ(body_of(server_.requests.front()),
            json::parse(R"({"name":"train-1","gpu_model":"RTX 4090","gpu_count":1,"ports":[22,8888,6006],"ssh_keys":["a","b"]})"));
}

TEST_F(CliAppTest, CreateWithoutAnImageLeavesTheChoiceToTheServer) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, kRunning);
  EXPECT_EQ(run({"create", "train-1", "--gpu", "RTX 4090:1", "--no-wait"}), 0) << err_.str();
  EXPECT_EQ(body_of(server_.requests.front()), json::parse(R"({"name":"train-1","gpu_model":"RTX 4090","gpu_count":1})"));
}

TEST_F(CliAppTest, AdminClockAdvance) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/admin/clock", 200, R"({"now":"2025-01-02T00:00:00Z"})");
  EXPECT_EQ(run({"admin", "clock", "advance", "1d"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), (json::object{{"advance_seconds", 86400}}));
  EXPECT_EQ(out_.str(), "Platform clock is now 2025-01-02T00:00:00Z.\n");
}


// Disk answers come from the server's own serializer, so a renamed field fails here.
std::string disk_answer(disks::DiskState state, std::int64_t size_gib = 100) {
  disks::Disk d;
  d.id = "d-abc";
  d.name = "data";
  d.owner = "u-1";
  d.zone = "zone-a";
  d.host_name = "node-1";
  d.size_gib = size_gib;
  d.used_bytes = 3 << 20;
  d.state = state;
  d.created_at = SysTime{} + std::chrono::hours(24 * 365 * 55);
  return json::serialize(disks::disk_json(d));
}

TEST_F(CliAppTest, DiskCreateWaitsUntilAvailable) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/disks", 202, disk_answer(disks::DiskState::creating));
  server_.on("GET", "/api/v1/disks/d-abc", 200, disk_answer(disks::DiskState::creating));
  server_.on("GET", "/api/v1/disks/d-abc", 200, disk_answer(disks::DiskState::available));
  EXPECT_EQ(run({"disk", "create", "data", "--size", "100", "--zone", "zone-a"}), 0) << err_.str();
  auto sent = body_of(server_.requests.front());
  EXPECT_EQ(sent.at("name").as_string(), "data");
  EXPECT_EQ(sent.at("size_gib").as_int64(), 100);
  EXPECT_EQ(sent.at("zone").as_string(), "zone-a");
  EXPECT_FALSE(server_.requests.front().header("Idempotency-Key").empty());
  EXPECT_NE(out_.str().find("Disk data (d-abc) created: 100 GiB, available."), std::string::npos) << out_.str();
  EXPECT_NE(err_.str().find("creating… available"), std::string::npos) << err_.str();
}

TEST_F(CliAppTest, DiskCreateNeedsASizeOrASnapshot) {
  env_["GPUCLOUD_TOKEN"] = "t";
  EXPECT_EQ(run({"disk", "create", "data"}), 2);
  EXPECT_TRUE(server_.requests.empty());
}

TEST_F(CliAppTest, DiskLsShowsSizeUseStateAndWhereItIsMounted) {
  env_["GPUCLOUD_TOKEN"] = "t";
  json::value d = json::parse(disk_answer(disks::DiskState::attached));
  d.as_object()["instance"] = "i-1";
  d.as_object()["mount_path"] = "/root/data";
  server_.on("GET", "/api/v1/disks", 200, json::serialize(json::object{{"items", json::array{d}}, {"next_cursor", nullptr}}));
  EXPECT_EQ(run({"disk", "ls"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("data"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("100 GiB"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("3 MiB"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("/root/data"), std::string::npos) << out_.str();
}

TEST_F(CliAppTest, DiskAttachDetachAndRmSendTheirRequests) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/disks/data/attach", 200, disk_answer(disks::DiskState::attached));
  EXPECT_EQ(run({"disk", "attach", "data", "train-1", "--path", "/mnt/x"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()).at("instance").as_string(), "train-1");
  EXPECT_EQ(body_of(last()).at("mount_path").as_string(), "/mnt/x");
  server_.problem("POST", "/api/v1/disks/data/detach", 409, "conflict", "the instance is running; stop it first");
  EXPECT_EQ(run({"disk", "detach", "data"}), 1);
  EXPECT_NE(err_.str().find("stop it first"), std::string::npos) << err_.str();
  server_.on("DELETE", "/api/v1/disks/data", 202, disk_answer(disks::DiskState::deleted));
  EXPECT_EQ(run({"disk", "rm", "data"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("recycle bin"), std::string::npos) << out_.str();
}

// ---- custom images ------------------------------------------------------------------------

const char* kImageCreating = R"({"id":"img-1","name":"my-env","state":"creating","own_size_bytes":0,"visibility":"private"})";
const char* kImageAvailable =
    R"({"id":"img-1","name":"my-env","state":"available","own_size_bytes":104857600,"visibility":"private"})";

TEST_F(CliAppTest, SaveImagePostsTheNameAndWaitsUntilAvailable) {
  write_config("endpoint = \"http://cloud:8080\"\ntoken = \"stored\"\n");
  server_.on("POST", "/api/v1/instances/train-1/images", 202, kImageCreating);
  server_.on("GET", "/api/v1/images/img-1", 200, kImageCreating);
  server_.on("GET", "/api/v1/images/img-1", 200, kImageAvailable);
  EXPECT_EQ(run({"save-image", "train-1", "--as", "my-env"}), 0) << err_.str();
  const auto& post = server_.requests.front();
  EXPECT_EQ(json::serialize(body_of(post)), R"({"name":"my-env"})");
  EXPECT_EQ(post.header("Idempotency-Key"), "key-1");
  EXPECT_EQ(out_.str(), "Image my-env (img-1) is available; its own size 100 MiB is billed.\n");
  EXPECT_EQ(err_.str(), "saving.. available\n");
}

TEST_F(CliAppTest, SaveImageNoWaitAnswersAtOnceAndAnErrorExitsOne) {
  write_config("endpoint = \"http://cloud:8080\"\ntoken = \"stored\"\n");
  server_.on("POST", "/api/v1/instances/train-1/images", 202, kImageCreating);
  EXPECT_EQ(run({"save-image", "train-1", "--as", "my-env", "--no-wait"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Image my-env (img-1) is creating.\n");
  EXPECT_EQ(server_.requests.size(), 1u);

  server_.on("POST", "/api/v1/instances/train-1/images", 202, kImageCreating);
  server_.on("GET", "/api/v1/images/img-1", 200,
             R"({"id":"img-1","name":"my-env","state":"error","state_reason":"engine said no"})");
  EXPECT_EQ(run({"save-image", "train-1", "--as", "my-env"}), 1);
  EXPECT_NE(err_.str().find("image my-env could not be saved: engine said no"), std::string::npos) << err_.str();
}

TEST_F(CliAppTest, ImageRmAndRestore) {
  write_config("endpoint = \"http://cloud:8080\"\ntoken = \"stored\"\n");
  server_.on("DELETE", "/api/v1/images/my-env", 200, R"({"id":"img-1","name":"my-env","state":"deleted"})");
  EXPECT_EQ(run({"image", "rm", "my-env"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("Image my-env is deleted; `gpucloud image restore img-1`"), std::string::npos) << out_.str();
  server_.on("POST", "/api/v1/images/img-1/restore", 200, kImageAvailable);
  EXPECT_EQ(run({"image", "restore", "img-1"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Image my-env is restored (available).\n");
}

// ---- security groups ------------------------------------------------------------------------

const char* kSgWebGroup = R"({"id":"sg-1","name":"web","owner":"u-1","description":"",
  "rules":[{"protocol":"tcp","port_min":22,"port_max":22,"source":"0.0.0.0/0","description":""},
           {"protocol":"tcp","port_min":8888,"port_max":8888,"source":"10.0.0.0/8","description":""}],
  "instances":["i-1"],"is_default":false,"created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z"})";

TEST_F(CliAppTest, SgCreateSendsTheRulesOnceWithAnIdempotencyKey) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/security-groups", 201, kSgWebGroup);
  EXPECT_EQ(run({"sg", "create", "web", "--allow", "tcp:22", "--allow", "tcp:8888@10.0.0.0/8", "--allow",
                 "udp:60000-60010@2001:db8::/32", "--description", "notebooks"}),
            0)
      << err_.str();
  ASSERT_EQ(server_.requests.size(), 1u);
  EXPECT_FALSE(last().header("Idempotency-Key").empty());
  EXPECT_EQ(body_of(last()), json::parse(R"({"name":"web","description":"notebooks","rules":[
      {"protocol":"tcp","port_min":22,"port_max":22,"source":"0.0.0.0/0"},
      {"protocol":"tcp","port_min":8888,"port_max":8888,"source":"10.0.0.0/8"},
      {"protocol":"udp","port_min":60000,"port_max":60010,"source":"2001:db8::/32"}]})"));
  EXPECT_EQ(out_.str(), "Security group web (sg-1) created: 2 rules.\n");

  server_.on("POST", "/api/v1/security-groups", 201, kSgWebGroup);
  EXPECT_EQ(run({"sg", "create", "open", "--allow", "tcp:1-65535", "--acknowledge-risk"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()).at("acknowledge_risk"), true);
}

TEST_F(CliAppTest, SgBadAllowSyntaxIsAUsageErrorBeforeAnythingIsSent) {
  env_["GPUCLOUD_TOKEN"] = "t";
  EXPECT_EQ(run({"sg", "create", "web", "--allow", "tcp/22"}), 2);
  EXPECT_NE(err_.str().find("--allow tcp/22: the protocol is missing"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"sg", "create", "web", "--allow", "tcp:22@10.0.0.0/40"}), 2);
  EXPECT_NE(err_.str().find("\"10.0.0.0/40\" is not an IPv4 or IPv6 address or CIDR"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"sg", "create", "web"}), 2);  // no rule and no --no-rules
  EXPECT_NE(err_.str().find("--no-rules"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"sg", "set", "web", "--allow", "tcp:22", "--no-rules"}), 2);
  EXPECT_EQ(run({"sg", "set", "web", "--allow", "sctp:22"}), 2);
  EXPECT_EQ(run({"sg"}), 2);
  EXPECT_TRUE(server_.requests.empty());
}

TEST_F(CliAppTest, SgRefusalsShowTheServersDetail) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.problem("POST", "/api/v1/security-groups", 400, "invalid_argument",
                  "rule 1 opens every port to 0.0.0.0/0; set acknowledge_risk to accept that");
  EXPECT_EQ(run({"sg", "create", "open", "--allow", "tcp:1-65535"}), 1);
  EXPECT_NE(err_.str().find("error: rule 1 opens every port"), std::string::npos) << err_.str();
  server_.problem("DELETE", "/api/v1/security-groups/web", 409, "conflict", "security group web is used by train-1");
  EXPECT_EQ(run({"sg", "rm", "web"}), 1);
  EXPECT_NE(err_.str().find("used by train-1"), std::string::npos) << err_.str();
}

TEST_F(CliAppTest, SgSetReplacesTheRulesAndNoRulesEmptiesThem) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("PUT", "/api/v1/security-groups/web", 200, kSgWebGroup);
  EXPECT_EQ(run({"sg", "set", "web", "--allow", "tcp:22", "--allow", "tcp:8888@10.0.0.0/8"}), 0) << err_.str();
  EXPECT_EQ(last().method, "PUT");
  EXPECT_EQ(body_of(last()), json::parse(R"({"rules":[
      {"protocol":"tcp","port_min":22,"port_max":22,"source":"0.0.0.0/0"},
      {"protocol":"tcp","port_min":8888,"port_max":8888,"source":"10.0.0.0/8"}]})"));
  EXPECT_NE(out_.str().find("Security group web (sg-1) updated: 2 rules."), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("its 1 instance within 2 s"), std::string::npos) << out_.str();

  server_.on("PUT", "/api/v1/security-groups/web", 200, kSgWebGroup);
  EXPECT_EQ(run({"sg", "set", "web", "--no-rules"}), 0) << err_.str();
  EXPECT_EQ(body_of(last()), json::parse(R"({"rules":[]})"));
}

TEST_F(CliAppTest, SgLsShowAndRm) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("GET", "/api/v1/security-groups", 200, std::string(R"({"items":[)") + kSgWebGroup + R"(],"next_cursor":null})");
  EXPECT_EQ(run({"sg", "ls"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "NAME  ID    RULES  INSTANCES  DESCRIPTION\nweb   sg-1  2      1\n");

  server_.on("GET", "/api/v1/security-groups/web", 200, kSgWebGroup);
  server_.on("GET", "/api/v1/instances", 200, std::string(R"({"items":[)") + kRunning + R"(],"next_cursor":null})");
  EXPECT_EQ(run({"sg", "show", "web"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("tcp       8888   10.0.0.0/8"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("  train-1 (i-1)\n"), std::string::npos) << out_.str();

  server_.on("GET", "/api/v1/security-groups/web", 200, kSgWebGroup);
  EXPECT_EQ(run({"--json", "sg", "show", "web"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(kSgWebGroup));

  server_.on("DELETE", "/api/v1/security-groups/web", 204, "");
  EXPECT_EQ(run({"sg", "rm", "web"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Removed security group web.\n");
}

TEST_F(CliAppTest, CreateTakesTheGroupAndUdpPorts) {
  env_["GPUCLOUD_TOKEN"] = "t";
  server_.on("POST", "/api/v1/instances", 202, with_state(kRunning, "creating"));
  EXPECT_EQ(run({"create", "web-1", "--no-gpu", "--sg", "web", "--port", "8888", "--port", "53/udp", "--port", "8888/tcp",
                 "--no-wait"}),
            0)
      << err_.str();
  EXPECT_EQ(body_of(last()).at("security_group"), "web");
  EXPECT_EQ(body_of(last()).at("ports"), json::parse(R"([22, 8888, "53/udp"])"));
  EXPECT_EQ(run({"create", "web-1", "--no-gpu", "--port", "53/sctp"}), 2);
  EXPECT_NE(err_.str().find("--port 53/sctp: expected PORT or PORT/udp"), std::string::npos) << err_.str();
}

TEST_F(CliAppTest, ShowSaysWhereEachPortIsReachableFrom) {
  env_["GPUCLOUD_TOKEN"] = "t";
  json::value inst = json::parse(kRunning);
  inst.as_object()["security_group"] = "sg-1";
  inst.as_object()["ports"] = json::parse(R"([
      {"port":22,"protocol":"tcp","host":"10.0.0.1","host_port":30022,"allowed":true,"sources":["0.0.0.0/0"]},
      {"port":8888,"protocol":"tcp","host":"10.0.0.1","host_port":30023,"allowed":true,
       "sources":["10.0.0.0/8","192.168.0.0/16"]},
      {"port":53,"protocol":"udp","host":"10.0.0.1","host_port":30024,"allowed":false,"sources":[]}])");
  server_.on("GET", "/api/v1/instances/train-1", 200, json::serialize(inst));
  server_.on("GET", "/api/v1/security-groups/sg-1", 200, kSgWebGroup);
  EXPECT_EQ(run({"show", "train-1"}), 0) << err_.str();
  const std::string s = out_.str();
  EXPECT_NE(s.find("security group: web (sg-1)"), std::string::npos) << s;
  EXPECT_NE(s.find("22/tcp → 10.0.0.1:30022  allowed from 0.0.0.0/0\n"), std::string::npos) << s;
  EXPECT_NE(s.find("8888/tcp → 10.0.0.1:30023  allowed from 10.0.0.0/8, 192.168.0.0/16\n"), std::string::npos) << s;
  EXPECT_NE(s.find("53/udp → 10.0.0.1:30024  not allowed by sg web\n"), std::string::npos) << s;

  // The group cannot be read (deleted meanwhile, older server): its id stands in.
  server_.on("GET", "/api/v1/instances/train-1", 200, json::serialize(inst));
  EXPECT_EQ(run({"show", "train-1"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("53/udp → 10.0.0.1:30024  not allowed by sg sg-1\n"), std::string::npos) << out_.str();
}

}  // namespace
}  // namespace gpucloud::cli
