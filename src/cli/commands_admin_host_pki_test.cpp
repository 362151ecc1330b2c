// admin host join-token / revoke end to end on a fake server, like app_test.cpp: the
// requests sent, the output, the exit codes.
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "cli/app.h"
#include "cli/commands.h"

// Named (not only anonymous) so the unity build does not mix these with app_test.cpp's.
namespace gpucloud::cli::host_pki_test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Canned {
  std::string method;
  std::string target;
  HttpResponse response;
};

// Answers the scripted requests in order of the script, by exact method and target.
struct FakeServer {
  std::deque<Canned> script;
  std::vector<HttpRequest> requests;

  void on(std::string method, std::string target, int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = status >= 400 ? "application/problem+json" : "application/json";
    script.push_back({std::move(method), std::move(target), std::move(r)});
  }
  void problem(std::string method, std::string target, int status, const std::string& code,
               const std::string& detail) {
    json::object p{{"type", "about:blank"}, {"title", "x"}, {"status", status}, {"detail", detail}, {"code", code}};
    on(std::move(method), std::move(target), status, json::serialize(p));
  }
};

class FakeTransport : public HttpTransport {
 public:
  explicit FakeTransport(FakeServer& server) : server_(server) {}
  Result<HttpResponse> send(const HttpRequest& request) override {
    server_.requests.push_back(request);
    for (auto it = server_.script.begin(); it != server_.script.end(); ++it) {
      if (it->method == request.method && it->target == request.target) {
        HttpResponse r = it->response;
        server_.script.erase(it);
        return r;
      }
    }
    HttpResponse r;
    r.status = 404;
    r.content_type = "application/problem+json";
    r.body = R"({"status":404,"code":"not_found","detail":"no canned answer for )" + request.method + " " +
             request.target + "\"}";
    return r;
  }

 private:
  FakeServer& server_;
};

class CliHostPkiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-hostpki-XXXXXX").string();
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
    Deps deps;
    deps.in = &in_;
    deps.out = &out_;
    deps.err = &err_;
    deps.env = [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    deps.connect = [this](const Endpoint&) { return std::make_unique<FakeTransport>(server_); };
    deps.stdin_is_tty = [] { return false; };
    deps.stderr_is_tty = [] { return false; };
    deps.prompt = [](const std::string&, bool) -> std::optional<std::string> { return std::nullopt; };
    deps.sleep = [this](std::chrono::milliseconds d) { clock_ += d; };
    deps.now = [this] { return std::chrono::steady_clock::time_point(clock_); };
    deps.random_key = [] { return std::string("key-1"); };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }
  const HttpRequest& last() const { return server_.requests.back(); }
  std::vector<std::string> targets() const {
    std::vector<std::string> t;
    for (const auto& r : server_.requests) t.push_back(r.method + " " + r.target);
    return t;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  FakeServer server_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  std::chrono::steady_clock::duration clock_{};
};

constexpr const char* kJoinAnswer =
    R"({"token":"gcjoin1.aaaa.0123456789abcdef.SECRET","host":"gpu-7","expires_at":"2026-12-05T04:00:00Z",
        "ca_fingerprint":"ab12","join_command":"gpucloud-agent --config agent.toml --join https://cp:8443 --token gcjoin1.aaaa.0123456789abcdef.SECRET"})";

TEST_F(CliHostPkiTest, JoinTokenPrintsTheTokenAndTheCommand) {
  server_.on("POST", "/api/v1/admin/hosts/join-token", 201, kJoinAnswer);
  ASSERT_EQ(run({"admin", "host", "join-token", "gpu-7"}), 0) << err_.str();
  EXPECT_EQ(json::parse(last().body), json::parse(R"({"host":"gpu-7"})"));
  EXPECT_EQ(last().header("Idempotency-Key"), "key-1");
  EXPECT_EQ(out_.str(),
            "Join token for host gpu-7 (single use, expires 2026-12-05T04:00:00Z):\n"
            "  gcjoin1.aaaa.0123456789abcdef.SECRET\n"
            "On the host, run:\n"
            "  gpucloud-agent --config agent.toml --join https://cp:8443 --token gcjoin1.aaaa.0123456789abcdef.SECRET\n"
            "The agent checks the control plane's CA: sha256 ab12\n");

  server_.on("POST", "/api/v1/admin/hosts/join-token", 201, kJoinAnswer);
  ASSERT_EQ(run({"admin", "host", "join-token", "gpu-7", "--ttl", "2h", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(last().body), json::parse(R"({"host":"gpu-7","ttl_seconds":7200})"));
  EXPECT_EQ(json::parse(out_.str()), json::parse(kJoinAnswer));
}

TEST_F(CliHostPkiTest, JoinTokenRefusalsAndUsage) {
  server_.problem("POST", "/api/v1/admin/hosts/join-token", 409, "conflict", "agents listener is not configured");
  EXPECT_EQ(run({"admin", "host", "join-token", "gpu-7"}), 1);
  EXPECT_NE(err_.str().find("agents listener is not configured"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"admin", "host", "join-token", "gpu-7", "--ttl", "soon"}), 2);
  EXPECT_EQ(run({"admin", "host", "join-token"}), 2);
  // A replay (its first answer lost) has no token to show.
  server_.on("POST", "/api/v1/admin/hosts/join-token", 201,
             R"({"host":"gpu-7","expires_at":"2026-12-05T04:00:00Z","ca_fingerprint":"ab12","token_redacted":true})");
  ASSERT_EQ(run({"admin", "host", "join-token", "gpu-7"}), 0);
  EXPECT_NE(out_.str().find("answer was lost"), std::string::npos) << out_.str();
}

TEST_F(CliHostPkiTest, RevokeSaysHowManyAndLivesBesideDrain) {
  server_.on("POST", "/api/v1/admin/hosts/gpu-7/revoke-certificate", 200, R"({"host":"gpu-7","revoked":2})");
  ASSERT_EQ(run({"admin", "host", "revoke", "gpu-7"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Revoked 2 certificates of host gpu-7: its agent is refused until it joins again.\n");
  server_.on("POST", "/api/v1/admin/hosts/gpu-7/revoke-certificate", 200, R"({"host":"gpu-7","revoked":0})");
  ASSERT_EQ(run({"admin", "host", "revoke", "gpu-7"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Host gpu-7's certificates were already revoked.\n");
  server_.problem("POST", "/api/v1/admin/hosts/nope/revoke-certificate", 404, "not_found", "host nope has no certificate");
  EXPECT_EQ(run({"admin", "host", "revoke", "nope"}), 1);
  EXPECT_NE(err_.str().find("has no certificate"), std::string::npos);
  // `admin host` also has the host-state commands (one group, not two).
  EXPECT_EQ(run({"admin", "host", "--help"}), 0);
  EXPECT_NE(out_.str().find("join-token"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("revoke"), std::string::npos) << out_.str();
}

}  // namespace
}  // namespace gpucloud::cli::host_pki_test
