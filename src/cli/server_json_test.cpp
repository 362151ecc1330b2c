// The CLI against answers built by the server's own serializers (instance_json, image_json,
// user_json, token_json, page_of), not hand-written JSON: when the server renames or drops a
// field the CLI reads, these tests fail instead of the CLI quietly printing "-".
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "api/auth_views.h"
#include "cli/app.h"
#include "core/time_format.h"
#include "instances/images.h"
#include "instances/instance_record.h"
#include "security_groups/security_group_record.h"
#include "server/pagination.h"

namespace gpucloud::cli {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

// Answers by method and path (the query string is ignored), like the routes do.
class ServerAnswers {
 public:
  void on(const std::string& method, const std::string& path, json::object body, int status = 200) {
    answers_[method + " " + path] = {status, json::serialize(body)};
  }
  Result<HttpResponse> answer(const HttpRequest& request) {
    targets.push_back(request.method + " " + request.target);
    std::string path = request.target.substr(0, request.target.find('?'));
    if (path.rfind("/api/v1", 0) == 0) path = path.substr(7);
    HttpResponse r;
    auto it = answers_.find(request.method + " " + path);
    if (it == answers_.end()) {
      r.status = 404;
      r.content_type = "application/problem+json";
      r.body = R"({"status":404,"code":"not_found","detail":"no answer for )" + request.method + " " + path + "\"}";
      return r;
    }
    r.status = it->second.first;
    r.content_type = "application/json";
    r.body = it->second.second;
    return r;
  }
  std::vector<std::string> targets;

 private:
  std::map<std::string, std::pair<int, std::string>> answers_;
};

class Transport : public HttpTransport {
 public:
  explicit Transport(ServerAnswers& server) : server_(server) {}
  Result<HttpResponse> send(const HttpRequest& request) override { return server_.answer(request); }

 private:
  ServerAnswers& server_;
};

SysTime at(const char* text) { return *parse_rfc3339(text); }

// A running 1-GPU instance with SSH and a Jupyter port, as the store would hold it.
instances::Instance running_instance() {
  instances::Instance i;
  i.id = "i-0123456789abcdef";
  i.owner = "u-alice";
  i.name = "train-1";
  i.state = instances::InstanceState::running;
  i.zone = "zone-a";
  i.host_id = "h-1";
  i.host_name = "node-1";
  i.gpu_model = "RTX 4090";
  i.gpu_count = 1;
  i.cpu = 8;
  i.memory_gib = 32;
  i.system_disk_gib = 50;
  i.image_id = "img-base";
  i.image_name = "base";
  i.ssh_keys = {"k-1"};
  i.billing_mode = "hourly";
  i.auto_renew = false;
  i.price_per_hour = 198;
  i.ipv4 = "10.200.1.2";
  i.host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfTrain1";
  i.container_id = "c-1";
  i.run_seconds = 3600;
  i.charged = 204;
  i.created_at = at("2025-01-01T00:00:00Z");
  i.started_at = at("2025-01-01T00:00:05Z");
  i.ports = {instances::PortBinding{22, "tcp", 30022}, instances::PortBinding{8888, "tcp", 30023}};
  i.security_group_id = "sg-0123456789ab";
  i.security_rules = {{security_groups::Protocol::tcp, 22, 22, "0.0.0.0/0", ""},
                      {security_groups::Protocol::tcp, 8888, 8888, "0.0.0.0/0", ""}};
  i.gpu_uuids = {"GPU-11111111-2222"};
  i.gpus_simulated = true;
  return i;
}

const instances::ViewContext kView{"203.0.113.5", "CNY"};

json::object instance_answer(const instances::Instance& i) { return instances::instance_json(i, kView, i.run_seconds + 125); }

template <class T, class ToJson>
json::object page(const std::vector<T>& items, ToJson to_json) {
  server::PageRequest request;
  auto key = [](const T& item) { return std::pair<std::int64_t, std::string>(to_unix_micros(item.created_at), item.id); };
  return server::page_of(items, request, key, to_json);
}

class CliServerJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-json-XXXXXX").string();
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
    deps.connect = [this](const Endpoint&) { return std::make_unique<Transport>(server_); };
    deps.stdin_is_tty = [] { return false; };
    deps.stderr_is_tty = [] { return false; };
    deps.prompt = [](const std::string&, bool) -> std::optional<std::string> { return std::nullopt; };
    deps.sleep = [](std::chrono::milliseconds) {};
    deps.now = [] { return std::chrono::steady_clock::time_point(); };
    deps.random_key = [] { return std::string("key-1"); };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }
  // Every line of stdout that contains `label` (trimmed of the table padding).
  std::string line_with(const std::string& label) const {
    std::istringstream lines(out_.str());
    for (std::string line; std::getline(lines, line);)
      if (line.find(label) != std::string::npos) return line;
    return "";
  }
  bool printed(const std::string& s) const { return out_.str().find(s) != std::string::npos; }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  ServerAnswers server_;
  std::istringstream in_;
  std::ostringstream out_, err_;
};

TEST_F(CliServerJsonTest, ShowPrintsWhatInstanceJsonHolds) {
  server_.on("GET", "/instances/train-1", instance_answer(running_instance()));
  ASSERT_EQ(run({"show", "train-1"}), 0) << err_.str();
  EXPECT_NE(line_with("state").find("running"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("gpu").find("RTX 4090"), std::string::npos) << out_.str();
  EXPECT_TRUE(printed("GPU-11111111-2222 (simulated)")) << out_.str();
  EXPECT_TRUE(printed("ssh -p 30022 root@203.0.113.5")) << out_.str();
  EXPECT_TRUE(printed("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfTrain1")) << out_.str();
  EXPECT_TRUE(printed("8888/tcp → 203.0.113.5:30023  allowed")) << out_.str();
  EXPECT_TRUE(printed("22/tcp → 203.0.113.5:30022  allowed")) << out_.str();
  EXPECT_NE(line_with("image").find("base"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("billing").find("hourly"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("memory").find("32"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("run time").find("1h"), std::string::npos) << out_.str();
  // Null members of the view (no Jupyter yet, no expiry) print nothing odd.
  EXPECT_FALSE(printed("null")) << out_.str();

  // --json passes the server's document through unchanged.
  ASSERT_EQ(run({"--json", "show", "train-1"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::value(instance_answer(running_instance())));
}

TEST_F(CliServerJsonTest, ShowOfAnInstanceStillCreatingSaysTheHostKeyIsNotKnown) {
  auto i = running_instance();
  i.state = instances::InstanceState::creating;
  i.host_key.reset();
  i.started_at.reset();
  server_.on("GET", "/instances/train-1", instance_answer(i));
  ASSERT_EQ(run({"show", "train-1"}), 0) << err_.str();
  EXPECT_NE(line_with("state").find("creating"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("host key").find("not known yet"), std::string::npos) << out_.str();
  EXPECT_FALSE(printed("null")) << out_.str();
}

TEST_F(CliServerJsonTest, LsListsThePageOfInstances) {
  auto a = running_instance();
  auto b = running_instance();
  b.id = "i-fedcba9876543210";
  b.name = "eval-2";
  b.state = instances::InstanceState::stopped;
  b.state_reason = "exited 137";
  b.created_at = at("2025-01-02T00:00:00Z");
  std::vector<instances::Instance> newest_first{b, a};
  server_.on("GET", "/instances", page(newest_first, instance_answer));
  ASSERT_EQ(run({"ls"}), 0) << err_.str();
  EXPECT_NE(line_with("train-1").find("running"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("eval-2").find("stopped"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("train-1").find("RTX 4090"), std::string::npos) << out_.str();
}

TEST_F(CliServerJsonTest, SshConfigWritesAHostBlockFromTheInstanceView) {
  auto i = running_instance();
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/instances", page(std::vector<instances::Instance>{i}, instance_answer));
  ASSERT_EQ(run({"ssh-config", "train-1"}), 0) << err_.str();
  EXPECT_TRUE(printed("203.0.113.5")) << out_.str();
  EXPECT_TRUE(printed("30022")) << out_.str();
  EXPECT_TRUE(printed("root")) << out_.str();
}

TEST_F(CliServerJsonTest, WhoamiAndTokensFromTheAuthViews) {
  auth::User u{"u-alice", "alice", std::string("alice@example.com"), "user", false, at("2025-01-01T00:00:00Z")};
  server_.on("GET", "/me", api::user_json(u));
  ASSERT_EQ(run({"whoami"}), 0) << err_.str();
  EXPECT_NE(line_with("username").find("alice"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("role").find("user"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("email").find("alice@example.com"), std::string::npos) << out_.str();

  struct Token {
    auth::TokenInfo info;
    std::string id;
    SysTime created_at;
  };
  auth::TokenInfo ci{"tok-1", "ci", "api", at("2025-01-03T00:00:00Z"), at("2026-01-03T00:00:00Z")};
  auth::TokenInfo laptop{"tok-2", "laptop", "api", at("2025-01-02T00:00:00Z"), std::nullopt};
  std::vector<Token> tokens{{ci, ci.id, ci.created_at}, {laptop, laptop.id, laptop.created_at}};
  server_.on("GET", "/tokens", page(tokens, [](const Token& t) { return api::token_json(t.info); }));
  ASSERT_EQ(run({"token", "ls"}), 0) << err_.str();
  EXPECT_NE(line_with("tok-1").find("ci"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("tok-1").find("2026-01-03"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("tok-2").find("laptop"), std::string::npos) << out_.str();
  EXPECT_FALSE(printed("null")) << out_.str();
}

TEST_F(CliServerJsonTest, ImagesFromImageJson) {
  instances::Image base;
  base.id = "img-base";
  base.name = "base";
  base.engine_image = "gpucloud/base:bookworm-1";
  base.description = "Debian 12 with sshd";
  base.os = "debian-12";
  base.python = "3.11";
  base.frameworks = {{"pytorch", "2.3"}};
  base.size_bytes = 300LL << 20;
  base.visibility = "public";
  base.state = "available";
  base.created_at = at("2025-01-01T00:00:00Z");
  instances::Image mine = base;
  mine.id = "img-mine";
  mine.name = "my-snapshot";
  mine.visibility = "private";
  mine.owner = "u-alice";
  mine.state = "creating";
  mine.cuda.clear();
  mine.created_at = at("2025-01-02T00:00:00Z");
  server_.on("GET", "/images", page(std::vector<instances::Image>{mine, base}, instances::image_json));
  ASSERT_EQ(run({"images"}), 0) << err_.str();
  const std::string row = line_with("available");  // the base image's row
  EXPECT_NE(row.find("base"), std::string::npos) << out_.str();
  EXPECT_NE(row.find("3.11"), std::string::npos) << out_.str();
  EXPECT_NE(row.find("pytorch"), std::string::npos) << out_.str();
  EXPECT_NE(row.find("public"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("my-snapshot").find("private"), std::string::npos) << out_.str();
  EXPECT_NE(line_with("my-snapshot").find("creating"), std::string::npos) << out_.str();
  EXPECT_FALSE(printed("null")) << out_.str();
}

security_groups::SecurityGroup web_group() {
  security_groups::SecurityGroup g;
  g.id = "sg-0123456789ab";
  g.owner = "u-alice";
  g.name = "web";
  g.description = "notebooks";
  g.rules = {{security_groups::Protocol::tcp, 22, 22, "0.0.0.0/0", "ssh"},
             {security_groups::Protocol::tcp, 8888, 8888, "10.0.0.0/8", ""},
             {security_groups::Protocol::udp, 60000, 60010, "2001:db8::/32", ""}};
  g.instances = {"i-0123456789abcdef"};
  g.created_at = at("2025-01-01T00:00:00Z");
  g.updated_at = at("2025-01-02T00:00:00Z");
  return g;
}

TEST_F(CliServerJsonTest, SgLsAndShowFromGroupJson) {
  server_.on("GET", "/security-groups", page(std::vector<security_groups::SecurityGroup>{web_group()}, security_groups::group_json));
  ASSERT_EQ(run({"sg", "ls"}), 0) << err_.str();
  EXPECT_TRUE(printed("web   sg-0123456789ab  3      1          notebooks")) << out_.str();

  server_.on("GET", "/security-groups/web", security_groups::group_json(web_group()));
  server_.on("GET", "/instances", page(std::vector<instances::Instance>{running_instance()}, instance_answer));
  ASSERT_EQ(run({"sg", "show", "web"}), 0) << err_.str();
  EXPECT_TRUE(printed("tcp       8888         10.0.0.0/8")) << out_.str();
  EXPECT_TRUE(printed("udp       60000-60010  2001:db8::/32")) << out_.str();
  EXPECT_TRUE(printed("  train-1 (i-0123456789abcdef)")) << out_.str();
}

TEST_F(CliServerJsonTest, ShowNamesTheGroupAndWhereEachPortIsReachableFrom) {
  auto i = running_instance();
  i.ports.push_back(instances::PortBinding{9999, "tcp", 30024});
  i.security_rules = web_group().rules;
  server_.on("GET", "/instances/train-1", instance_answer(i));
  server_.on("GET", "/security-groups/sg-0123456789ab", security_groups::group_json(web_group()));
  ASSERT_EQ(run({"show", "train-1"}), 0) << err_.str();
  EXPECT_NE(line_with("security group").find("web (sg-0123456789ab)"), std::string::npos) << out_.str();
  EXPECT_TRUE(printed("22/tcp → 203.0.113.5:30022  allowed from 0.0.0.0/0\n")) << out_.str();
  EXPECT_TRUE(printed("8888/tcp → 203.0.113.5:30023  allowed from 10.0.0.0/8\n")) << out_.str();
  EXPECT_TRUE(printed("9999/tcp → 203.0.113.5:30024  not allowed by sg web\n")) << out_.str();
}

}  // namespace
}  // namespace gpucloud::cli
