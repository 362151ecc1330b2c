// The authorization matrix: every route the daemon serves (read from its own OpenAPI
// document, so a new endpoint cannot dodge it) is called without a token (401), by a user on
// an operator route (403), and by another user with the first user's resource ids (404).
#include <set>

#include <gtest/gtest.h>

#include "core/time_format.h"
#include "support/test_daemon.h"
#include "support/test_resources.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// A host with a simulated GPU, so the market sells a model that a watch can name.
DaemonOptions matrix_options() {
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
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
)";
  return o;
}

// A daemon per test: the suite has one test, so there is nothing to share.
class AuthzMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.start();
    alice_ = daemon_.register_and_login("alice");
    mallory_ = daemon_.register_and_login("mallory");
    auto key = daemon_.post("/api/v1/ssh-keys",
                            {{"name", "laptop"},
                             {"public_key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop"}},
                            alice_);
    ASSERT_EQ(key.status, 201) << key.body;
    ids_["ssh-keys"] = std::string(key.json().at("id").as_string());
    auto token = daemon_.post("/api/v1/tokens", {{"name", "ci"}}, alice_);
    ASSERT_EQ(token.status, 201) << token.body;
    ids_["tokens"] = std::string(token.json().at("id").as_string());
    auto group = daemon_.post("/api/v1/security-groups",
                              {{"name", "office"},
                               {"rules", json::array{json::object{{"protocol", "tcp"}, {"port_min", 22}, {"source", "10.0.0.0/8"}}}}},
                              alice_);
    ASSERT_EQ(group.status, 201) << group.body;
    ids_["security-groups"] = std::string(group.json().at("id").as_string());
    // The record exists whether or not an engine runs it.
    auto inst = daemon_.post("/api/v1/instances", {{"name", "secret"}, {"gpu_count", 0}}, alice_);
    ASSERT_EQ(inst.status, 202) << inst.body;
    ids_["instances"] = std::string(inst.json().at("id").as_string());
    auto disk = daemon_.post("/api/v1/disks", {{"name", "vault"}, {"size_gib", 1}}, alice_);
    ASSERT_EQ(disk.status, 202) << disk.body;
    ids_["disks"] = std::string(disk.json().at("id").as_string());
    // A snapshot needs a made disk (the agent makes it in milliseconds).
    ASSERT_TRUE(wait_until([&] { return daemon_.get("/api/v1/disks/vault", alice_).json().at("state").as_string() == "available"; },
                           std::chrono::seconds(20), "alice's disk to be made"));
    auto snap = daemon_.post("/api/v1/disks/vault/snapshots", {{"name", "before"}}, alice_);
    ASSERT_EQ(snap.status, 202) << snap.body;
    ids_["snapshots"] = std::string(snap.json().at("id").as_string());
    // A market watch ("notify me") on a model the market sells.
    const json::value market = daemon_.get("/api/v1/market", alice_).json();
    std::string zone, model;
    for (const auto& o : market.at("items").as_array())
      if (o.at("gpu_model").is_string()) {
        zone = std::string(o.at("zone").as_string());
        model = std::string(o.at("gpu_model").as_string());
        break;
      }
    ASSERT_FALSE(model.empty()) << json::serialize(market);
    auto watch = daemon_.post("/api/v1/market/watches", {{"zone", zone}, {"gpu_model", model}}, alice_);
    ASSERT_EQ(watch.status, 201) << watch.body;
    ids_["market/watches"] = std::string(watch.json().at("id").as_string());
    // Another user's id: the operator's own user (a user route never reaches it for mallory).
    auto me = daemon_.get("/api/v1/me", alice_);
    ids_["admin/users"] = std::string(me.json().at("id").as_string());
    // Operator routes on a host (drain, revoke-certificate, ...): the in-process host.
    ids_["admin/hosts"] = "node-1";
  }

  // The path with alice's id of the resource it names.
  std::optional<std::string> with_ids(const std::string& pattern) {
    auto brace = pattern.find('{');
    if (brace == std::string::npos) return pattern;
    const std::string prefix = "/api/v1/";
    std::string resource = pattern.substr(prefix.size(), brace - prefix.size() - 1);
    auto it = ids_.find(resource);
    if (it == ids_.end()) return std::nullopt;
    return pattern.substr(0, brace) + it->second + pattern.substr(pattern.find('}', brace) + 1);
  }

  TestDaemon daemon_{matrix_options()};
  std::string alice_, mallory_;
  std::map<std::string, std::string> ids_;
};

TEST_F(AuthzMatrixTest, EveryRouteRefusesStrangersAndOtherUsers) {
  auto doc = daemon_.get("/api/v1/openapi.json");
  ASSERT_EQ(doc.status, 200);
  const json::value document = doc.json();  // a named value: at() into a temporary dangles
  const auto& paths = document.at("paths").as_object();
  ASSERT_FALSE(paths.empty());
  // Resource kinds every user can read alike (the public image market): no owner to check.
  const std::set<std::string> shared{"images"};
  int checked = 0;
  for (const auto& [path_key, item] : paths) {
    const std::string pattern(path_key);
    for (const auto& [method_key, op_value] : item.as_object()) {
      std::string method(method_key);
      for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (method != "GET" && method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE") continue;
      const auto& op = op_value.as_object();
      ASSERT_TRUE(op.contains("x-gpucloud-access")) << method << " " << pattern;
      const std::string access(op.at("x-gpucloud-access").as_string());
      if (access == "public") continue;
      if (pattern == "/api/v1/events/stream") continue;  // endless: events_test covers its auth
      std::string target = pattern;
      if (pattern == "/api/v1/billing/statements/{month}") {
        // Caller-scoped: a month names no one's resource; another user gets their own.
        const std::string month = format_rfc3339(system_now()).substr(0, 7);
        target = "/api/v1/billing/statements/" + month;
        EXPECT_EQ(daemon_.request(method, target, "", "").status, 401);
        auto own = daemon_.request(method, target, "", mallory_);
        ASSERT_EQ(own.status, 200) << own.body;
        const json::value mine = daemon_.get("/api/v1/billing/account", mallory_).json();
        EXPECT_EQ(own.json().at("closing_balance"), mine.at("balance")) << "mallory must see her own statement";
        ++checked;
        continue;
      }
      if (pattern.starts_with("/api/v1/") && pattern.find('{') != std::string::npos) {
        std::string resource = pattern.substr(8, pattern.find('/', 8) - 8);
        if (shared.contains(resource)) continue;
        auto filled = with_ids(pattern);
        ASSERT_TRUE(filled) << method << " " << pattern
                            << ": a route on a resource this matrix does not know; give AuthzMatrixTest an id for it";
        target = *filled;
      }
      const std::string body = method == "GET" || method == "DELETE" ? "" : "{}";
      SCOPED_TRACE(method + " " + target);
      auto anonymous = daemon_.request(method, target, body, "");
      EXPECT_EQ(anonymous.status, 401) << anonymous.body;
      auto other = daemon_.request(method, target, body, mallory_);
      if (access == "operator") {
        EXPECT_EQ(other.status, 403) << other.body;
        EXPECT_EQ(other.code(), "forbidden");
      } else if (target != pattern) {
        EXPECT_EQ(other.status, 404) << other.body;
        EXPECT_EQ(other.code(), "not_found");
      }
      if (pattern == "/api/v1/auth/logout") mallory_ = daemon_.login("mallory", "password-123");  // it did log out
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  // Nothing of alice's changed hands or state.
  auto inst = daemon_.get("/api/v1/instances/secret", alice_);
  ASSERT_EQ(inst.status, 200);
  EXPECT_EQ(inst.json().at("name").as_string(), "secret");
  auto tokens = daemon_.get("/api/v1/tokens", alice_);
  ASSERT_EQ(tokens.status, 200);
  EXPECT_EQ(tokens.json().at("items").as_array().size(), 1u);
  EXPECT_EQ(daemon_.get("/api/v1/ssh-keys/laptop", alice_).status, 200);
  auto disk = daemon_.get("/api/v1/disks/vault", alice_);
  ASSERT_EQ(disk.status, 200);
  EXPECT_TRUE(disk.json().at("instance").is_null());
  EXPECT_NE(disk.json().at("state").as_string(), "deleted");
}

}  // namespace
}  // namespace gpucloud::testing
