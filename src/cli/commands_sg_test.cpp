// The --allow syntax and the human renderings of security groups (the commands themselves,
// end to end on a fake server, are in app_test.cpp).
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "cli/commands.h"

namespace gpucloud::cli {
namespace {
namespace json = boost::json;

json::object allow_rule_of(std::string_view text) {
  auto r = parse_allow_rule(text);
  EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error().message);
  return r ? *r : json::object{};
}

TEST(AllowRule, PortAloneOpensItToEveryIpv4Source) {
  EXPECT_EQ(allow_rule_of("tcp:22"),
            (json::object{{"protocol", "tcp"}, {"port_min", 22}, {"port_max", 22}, {"source", "0.0.0.0/0"}}));
}

TEST(AllowRule, RangesAndSourcesOfBothFamilies) {
  EXPECT_EQ(allow_rule_of("tcp:8888@10.0.0.0/8"),
            (json::object{{"protocol", "tcp"}, {"port_min", 8888}, {"port_max", 8888}, {"source", "10.0.0.0/8"}}));
  EXPECT_EQ(allow_rule_of("udp:60000-60010@2001:db8::/32"),
            (json::object{{"protocol", "udp"}, {"port_min", 60000}, {"port_max", 60010}, {"source", "2001:db8::/32"}}));
  // A bare address and host bits are the server's to normalise; the shape is fine.
  EXPECT_EQ(allow_rule_of("tcp:1-65535@203.0.113.7").at("source"), "203.0.113.7");
  EXPECT_EQ(allow_rule_of("udp:53@10.1.2.3/8").at("source"), "10.1.2.3/8");
  EXPECT_EQ(allow_rule_of("tcp:443@::/0").at("source"), "::/0");
}

TEST(AllowRule, BadSyntaxIsAUsageErrorSayingWhat) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"22", "protocol is missing"}, Case{"icmp:22", "tcp or udp"}, Case{"TCP:22", "tcp or udp"},
                        Case{"tcp:", "1 to 65535"}, Case{"tcp:0", "1 to 65535"}, Case{"tcp:65536", "1 to 65535"},
                        Case{"tcp:http", "1 to 65535"}, Case{"tcp:22-", "1 to 65535"}, Case{"tcp:-22", "1 to 65535"},
                        Case{"tcp:90-80", "ends before it starts"}, Case{"tcp:22@", "empty"},
                        Case{"tcp:22@10.0.0.0/33", "not an IPv4 or IPv6"}, Case{"tcp:22@::/129", "not an IPv4 or IPv6"},
                        Case{"tcp:22@example.com", "not an IPv4 or IPv6"}, Case{"tcp:22@10.0.0/8", "not an IPv4 or IPv6"},
                        Case{"tcp:22@10.0.0.0/", "not an IPv4 or IPv6"}, Case{"tcp:22@10.0.0.0/8x", "not an IPv4 or IPv6"}}) {
    auto r = parse_allow_rule(c.text);
    ASSERT_FALSE(r) << c.text;
    EXPECT_EQ(r.error().exit_code, kExitUsage) << c.text;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.text << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("PROTO:PORT[-PORT][@CIDR]"), std::string::npos) << r.error().message;
  }
}

const char* kWebGroup = R"({"id":"sg-0123","name":"web","owner":"u-1","description":"notebooks",
  "rules":[{"protocol":"tcp","port_min":22,"port_max":22,"source":"0.0.0.0/0","description":"ssh"},
           {"protocol":"tcp","port_min":8888,"port_max":8888,"source":"10.0.0.0/8","description":""},
           {"protocol":"udp","port_min":60000,"port_max":60010,"source":"2001:db8::/32"}],
  "instances":["i-1","i-2"],"is_default":false,
  "created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-02T00:00:00Z"})";

TEST(SecurityGroupRendering, ShowListsRulesAndTheInstancesByName) {
  const std::string s = render_security_group(json::parse(kWebGroup), {{"i-1", "train-1"}});
  EXPECT_NE(s.find("name:        web\n"), std::string::npos) << s;
  EXPECT_NE(s.find("description: notebooks\n"), std::string::npos) << s;
  EXPECT_NE(s.find("PROTOCOL  PORTS        SOURCE         DESCRIPTION\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tcp       22           0.0.0.0/0      ssh\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tcp       8888         10.0.0.0/8\n"), std::string::npos) << s;
  EXPECT_NE(s.find("udp       60000-60010  2001:db8::/32\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  train-1 (i-1)\n  i-2\n"), std::string::npos) << s;
}

TEST(SecurityGroupRendering, AGroupWithoutRulesOrInstancesSaysSo) {
  json::value g = json::parse(kWebGroup);
  g.as_object()["rules"] = json::array{};
  g.as_object()["instances"] = json::array{};
  g.as_object()["is_default"] = true;
  const std::string s = render_security_group(g, {});
  EXPECT_NE(s.find("web (your default group)"), std::string::npos) << s;
  EXPECT_NE(s.find("No rules"), std::string::npos) << s;
  EXPECT_NE(s.find("Used by no instance."), std::string::npos) << s;
}

TEST(SecurityGroupRendering, LsCountsRulesAndInstances) {
  json::value def = json::parse(kWebGroup);
  def.as_object()["name"] = "default";
  def.as_object()["is_default"] = true;
  def.as_object()["rules"] = json::array{def.at("rules").at(0)};
  def.as_object()["instances"] = json::array{};
  def.as_object()["description"] = nullptr;
  const std::string s =
      render_security_groups(json::object{{"items", json::array{json::parse(kWebGroup), def}}, {"next_cursor", nullptr}});
  EXPECT_EQ(s,
            "NAME     ID       RULES  INSTANCES  DESCRIPTION\n"
            "web      sg-0123  3      2          notebooks\n"
            "default  sg-0123  1      0\n");
}

}  // namespace
}  // namespace gpucloud::cli
