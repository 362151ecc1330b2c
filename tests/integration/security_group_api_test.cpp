// Security groups' API contract: the default group, validation and normalisation, refusals
// that change nothing, owners, groups in use, and what an instance's ports say about them.
// The traffic itself (nftables from another network namespace) is security_groups_test.cpp.
#include <gtest/gtest.h>

#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string sg_config() {
  static const int base = port_block();
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 8
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
)";
}

// One daemon for the suite (shared_daemon.h; one ctest entry, GPUCLOUD_SHARED_DAEMON_SUITES);
// each test has users of its own names.
class SecurityGroupApiTest : public SharedDaemonTest<SecurityGroupApiTest> {
 public:
  static DaemonOptions daemon_options() { return DaemonOptions{sg_config()}; }

 protected:
  HttpResult put(const std::string& path, const json::value& body, const std::string& token) const {
    return daemon_.request("PUT", path, json::serialize(body), token);
  }
  HttpResult del(const std::string& path, const std::string& token) const { return daemon_.request("DELETE", path, "", token); }
  std::size_t group_count(const std::string& token) const {
    auto r = daemon_.get("/api/v1/security-groups", token);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json().at("items").as_array().size();
  }
  static json::object rule(const std::string& protocol, int port, const std::string& source) {
    return {{"protocol", protocol}, {"port_min", port}, {"source", source}};
  }
};

TEST_F(SecurityGroupApiTest, EveryUserHasADefaultGroupWithSshFromAnywhere) {
  const auto token = daemon_.register_and_login("sg-default");
  auto list = daemon_.get("/api/v1/security-groups", token);
  ASSERT_EQ(list.status, 200) << list.body;
  const json::value listed = list.json();
  const auto& items = listed.at("items").as_array();
  ASSERT_EQ(items.size(), 1u) << list.body;
  const auto& g = items[0].as_object();
  EXPECT_EQ(g.at("name").as_string(), "default");
  EXPECT_TRUE(g.at("is_default").as_bool());
  EXPECT_TRUE(g.at("id").as_string().starts_with("sg-"));
  const auto& rules = g.at("rules").as_array();
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].at("protocol").as_string(), "tcp");
  EXPECT_EQ(rules[0].at("port_min").as_int64(), 22);
  EXPECT_EQ(rules[0].at("port_max").as_int64(), 22);
  EXPECT_EQ(rules[0].at("source").as_string(), "0.0.0.0/0");
  // By name and by id; it cannot be deleted, nor can another group take its name.
  auto by_name = daemon_.get("/api/v1/security-groups/default", token);
  ASSERT_EQ(by_name.status, 200) << by_name.body;
  EXPECT_EQ(by_name.json().at("id"), g.at("id"));
  auto removed = del("/api/v1/security-groups/default", token);
  EXPECT_EQ(removed.status, 409) << removed.body;
  EXPECT_EQ(removed.code(), "conflict");
  auto twin = daemon_.post("/api/v1/security-groups", {{"name", "default"}, {"rules", json::array{}}}, token);
  EXPECT_EQ(twin.status, 409) << twin.body;
  EXPECT_EQ(group_count(token), 1u);
}

TEST_F(SecurityGroupApiTest, SourcesAreNormalisedAndPortMaxDefaultsToPortMin) {
  const auto token = daemon_.register_and_login("sg-normal");
  json::array rules{rule("tcp", 8888, "10.1.2.3/8"), rule("udp", 60000, "2001:DB8::1/32"), rule("tcp", 6006, "192.0.2.7"),
                    rule("tcp", 7860, "2001:db8::5")};
  rules[0].as_object()["description"] = "jupyter from the office";
  auto made = daemon_.post("/api/v1/security-groups", {{"name", "web"}, {"description", "web ports"}, {"rules", rules}}, token);
  ASSERT_EQ(made.status, 201) << made.body;
  const json::value g = made.json();
  const auto& r = g.at("rules").as_array();
  ASSERT_EQ(r.size(), 4u) << made.body;
  EXPECT_EQ(r[0].at("source").as_string(), "10.0.0.0/8");
  EXPECT_EQ(r[0].at("port_max").as_int64(), 8888);
  EXPECT_EQ(r[0].at("description").as_string(), "jupyter from the office");
  EXPECT_EQ(r[1].at("source").as_string(), "2001:db8::/32");
  EXPECT_EQ(r[1].at("protocol").as_string(), "udp");
  EXPECT_EQ(r[2].at("source").as_string(), "192.0.2.7/32");
  EXPECT_EQ(r[3].at("source").as_string(), "2001:db8::5/128");
  EXPECT_EQ(g.at("description").as_string(), "web ports");
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/web", token).json().at("rules"), g.at("rules"));
}

TEST_F(SecurityGroupApiTest, BadRulesAreRefusedAndChangeNothing) {
  const auto token = daemon_.register_and_login("sg-bad");
  auto made = daemon_.post("/api/v1/security-groups", {{"name", "keep"}, {"rules", json::array{rule("tcp", 22, "0.0.0.0/0")}}}, token);
  ASSERT_EQ(made.status, 201) << made.body;
  const json::value before = daemon_.get("/api/v1/security-groups/keep", token).json();
  json::array too_many;
  for (int n = 0; n < 101; ++n) too_many.push_back(rule("tcp", 1000 + n, "10.0.0.0/8"));
  json::object range = rule("tcp", 9000, "10.0.0.0/8");
  range["port_max"] = 8999;
  json::object extra = rule("tcp", 22, "10.0.0.0/8");
  extra["bogus"] = 1;
  const std::vector<json::value> bad_rules = {
      json::array{rule("icmp", 22, "0.0.0.0/0")}, json::array{rule("tcp", 0, "0.0.0.0/0")},
      json::array{rule("tcp", 65536, "0.0.0.0/0")}, json::array{range},
      json::array{rule("tcp", 22, "10.0.0.0/33")}, json::array{rule("tcp", 22, "10.0.0")},
      json::array{rule("tcp", 22, "not-an-address")}, json::array{rule("tcp", 22, "2001:db8::/129")},
      json::array{extra}, too_many, json::value("tcp:22"),
  };
  for (const auto& rules : bad_rules) {
    auto create = daemon_.post("/api/v1/security-groups", {{"name", "nope"}, {"rules", rules}}, token);
    EXPECT_EQ(create.status, 400) << json::serialize(rules) << " -> " << create.body;
    EXPECT_EQ(create.code(), "invalid_argument");
    auto replace = put("/api/v1/security-groups/keep", {{"rules", rules}}, token);
    EXPECT_EQ(replace.status, 400) << json::serialize(rules) << " -> " << replace.body;
  }
  EXPECT_EQ(daemon_.post("/api/v1/security-groups", {{"name", "Bad_Name"}, {"rules", json::array{}}}, token).status, 400);
  EXPECT_EQ(daemon_.post("/api/v1/security-groups", {{"name", "norules"}}, token).status, 400);
  EXPECT_EQ(daemon_.post("/api/v1/security-groups", {{"name", "keep"}, {"rules", json::array{}}}, token).status, 409);
  EXPECT_EQ(group_count(token), 2u);  // default and keep
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/keep", token).json(), before);
}

TEST_F(SecurityGroupApiTest, OpeningEveryPortToEveryoneNeedsTheRiskAcknowledged) {
  const auto token = daemon_.register_and_login("sg-risk");
  for (const std::string source : {"0.0.0.0/0", "::/0", "1.2.3.4/0"}) {
    json::object all{{"protocol", "tcp"}, {"port_min", 1}, {"port_max", 65535}, {"source", source}};
    auto refused = daemon_.post("/api/v1/security-groups", {{"name", "open"}, {"rules", json::array{all}}}, token);
    EXPECT_EQ(refused.status, 400) << source << ": " << refused.body;
    EXPECT_EQ(refused.code(), "invalid_argument");
    EXPECT_NE(refused.body.find("acknowledge_risk"), std::string::npos) << refused.body;
    auto replace = put("/api/v1/security-groups/default", {{"rules", json::array{all}}}, token);
    EXPECT_EQ(replace.status, 400) << replace.body;
  }
  EXPECT_EQ(group_count(token), 1u);
  json::object all{{"protocol", "udp"}, {"port_min", 1}, {"port_max", 65535}, {"source", "0.0.0.0/0"}};
  auto acknowledged = daemon_.post(
      "/api/v1/security-groups", {{"name", "open"}, {"rules", json::array{all}}, {"acknowledge_risk", true}}, token);
  EXPECT_EQ(acknowledged.status, 201) << acknowledged.body;
  // Not only exactly 1-65535 from /0: most of the ports, or every port from two halves that
  // make the whole, need it too (more than 10 ports to at least half of an address space).
  json::object most{{"protocol", "tcp"}, {"port_min", 1024}, {"port_max", 65535}, {"source", "0.0.0.0/0"}};
  json::object low{{"protocol", "tcp"}, {"port_min", 1}, {"port_max", 65535}, {"source", "0.0.0.0/1"}};
  json::object high{{"protocol", "tcp"}, {"port_min", 1}, {"port_max", 65535}, {"source", "128.0.0.0/1"}};
  for (const auto& rules : {json::array{most}, json::array{low, high}}) {
    auto refused = put("/api/v1/security-groups/open", {{"rules", rules}}, token);
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_NE(refused.body.find("acknowledge_risk"), std::string::npos) << refused.body;
    EXPECT_EQ(put("/api/v1/security-groups/open", {{"rules", rules}, {"acknowledge_risk", true}}, token).status, 200);
  }
  // A handful of ports to everyone is the user's call.
  json::object few{{"protocol", "tcp"}, {"port_min", 8000}, {"port_max", 8009}, {"source", "0.0.0.0/0"}};
  EXPECT_EQ(put("/api/v1/security-groups/open", {{"rules", json::array{few}}}, token).status, 200);
}

TEST_F(SecurityGroupApiTest, AnotherUsersGroupIsNotFoundAndCannotBeNamed) {
  const auto owner = daemon_.register_and_login("sg-owner");
  const auto other = daemon_.register_and_login("sg-other");
  auto made = daemon_.post("/api/v1/security-groups", {{"name", "mine"}, {"rules", json::array{rule("tcp", 22, "0.0.0.0/0")}}}, owner);
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string id(made.json().at("id").as_string());
  const std::string default_id(daemon_.get("/api/v1/security-groups/default", owner).json().at("id").as_string());
  for (const auto& target : {id, default_id}) {
    EXPECT_EQ(daemon_.get("/api/v1/security-groups/" + target, other).status, 404);
    EXPECT_EQ(put("/api/v1/security-groups/" + target, {{"rules", json::array{}}}, other).status, 404);
    // Even a body that would be refused: the group's existence is not told.
    EXPECT_EQ(put("/api/v1/security-groups/" + target, {{"rules", "nonsense"}}, other).status, 404);
    EXPECT_EQ(del("/api/v1/security-groups/" + target, other).status, 404);
    auto create = daemon_.post("/api/v1/instances", {{"name", "borrow"}, {"gpu_count", 0}, {"security_group", target}}, other);
    EXPECT_EQ(create.status, 404) << create.body;
  }
  EXPECT_EQ(daemon_.get("/api/v1/instances/borrow", other).status, 404);
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/mine", owner).json().at("rules").as_array().size(), 1u);
}

TEST_F(SecurityGroupApiTest, AnInstanceShowsWhichPortsItsGroupAllowsAndAGroupInUseStays) {
  const auto token = daemon_.register_and_login("sg-inuse");
  json::array rules{rule("tcp", 22, "0.0.0.0/0"), rule("tcp", 8888, "10.0.0.0/8"), rule("tcp", 8888, "192.168.0.0/16")};
  auto made = daemon_.post("/api/v1/security-groups", {{"name", "lab"}, {"rules", rules}}, token);
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string id(made.json().at("id").as_string());
  json::array ports{22, 8888, "53/udp", json::object{{"port", 6006}, {"protocol", "tcp"}}};
  auto created = daemon_.post("/api/v1/instances", {{"name", "uses-lab"}, {"gpu_count", 0}, {"security_group", "lab"},
                                                    {"ports", ports}}, token);
  ASSERT_EQ(created.status, 202) << created.body;
  const json::value inst = created.json();
  EXPECT_EQ(inst.at("security_group").as_string(), id);
  std::map<std::string, json::object> by_port;
  for (const auto& p : inst.at("ports").as_array())
    by_port[std::to_string(p.at("port").as_int64()) + "/" + std::string(p.at("protocol").as_string())] = p.as_object();
  ASSERT_EQ(by_port.size(), 4u) << created.body;
  EXPECT_TRUE(by_port["22/tcp"].at("allowed").as_bool());
  EXPECT_EQ(by_port["22/tcp"].at("sources"), (json::array{"0.0.0.0/0"}));
  EXPECT_TRUE(by_port["8888/tcp"].at("allowed").as_bool());
  EXPECT_EQ(by_port["8888/tcp"].at("sources"), (json::array{"10.0.0.0/8", "192.168.0.0/16"}));
  EXPECT_FALSE(by_port["53/udp"].at("allowed").as_bool());
  EXPECT_FALSE(by_port["6006/tcp"].at("allowed").as_bool());
  // A port only an IPv6 source may reach is not reachable yet (ports are published on IPv4).
  auto v6 = put("/api/v1/security-groups/lab",
                {{"rules", json::array{rule("tcp", 22, "0.0.0.0/0"), rule("tcp", 6006, "2001:db8::/32")}}}, token);
  ASSERT_EQ(v6.status, 200) << v6.body;
  const json::value v6_shown = daemon_.get("/api/v1/instances/uses-lab", token).json();  // named: at() into a temporary dangles
  for (const auto& p : v6_shown.at("ports").as_array()) {
    if (p.at("port").as_int64() != 6006) continue;
    EXPECT_FALSE(p.at("allowed").as_bool());
    EXPECT_EQ(p.at("sources"), (json::array{"2001:db8::/32"}));
  }
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/lab", token).json().at("instances"), (json::array{inst.at("id")}));

  auto in_use = del("/api/v1/security-groups/lab", token);
  EXPECT_EQ(in_use.status, 409) << in_use.body;
  EXPECT_EQ(in_use.code(), "conflict");
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/lab", token).status, 200);

  // New rules show on the instance at once.
  auto replaced = put("/api/v1/security-groups/lab", {{"rules", json::array{rule("udp", 53, "0.0.0.0/0")}}}, token);
  ASSERT_EQ(replaced.status, 200) << replaced.body;
  const json::value after = daemon_.get("/api/v1/instances/uses-lab", token).json();
  for (const auto& p : after.at("ports").as_array())
    EXPECT_EQ(p.at("allowed").as_bool(), p.at("protocol") == "udp") << json::serialize(p);

  // Moved to the default group, the instance no longer holds lab: it can go.
  auto moved = daemon_.request("PATCH", "/api/v1/instances/uses-lab", R"({"security_group": "default"})", token);
  ASSERT_EQ(moved.status, 200) << moved.body;
  EXPECT_NE(moved.json().at("security_group").as_string(), id);
  EXPECT_EQ(daemon_.request("PATCH", "/api/v1/instances/uses-lab", R"({"security_group": "nope"})", token).status, 404);
  EXPECT_EQ(del("/api/v1/security-groups/lab", token).status, 204);
  EXPECT_EQ(daemon_.get("/api/v1/security-groups/lab", token).status, 404);
  // Its name is free again.
  EXPECT_EQ(daemon_.post("/api/v1/security-groups", {{"name", "lab"}, {"rules", json::array{}}}, token).status, 201);
  ASSERT_EQ(del("/api/v1/instances/uses-lab", token).status, 202);
}

TEST_F(SecurityGroupApiTest, BadPortsAreRefused) {
  const auto token = daemon_.register_and_login("sg-ports");
  for (const auto* ports : {R"([0])", R"(["22/icmp"])", R"(["x/tcp"])", R"([22, "22/tcp"])", R"([{"port": 22, "bogus": 1}])",
                            R"([true])", R"([1,2,3,4,5,6,7,8,9,10,11])"}) {
    auto r = daemon_.request("POST", "/api/v1/instances",
                             std::string(R"({"name": "p", "gpu_count": 0, "ports": )") + ports + "}", token);
    EXPECT_EQ(r.status, 400) << ports << " -> " << r.body;
  }
  EXPECT_EQ(daemon_.get("/api/v1/instances/p", token).status, 404);
}

}  // namespace
}  // namespace gpucloud::testing
