#include "security_groups/rules.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace gpucloud::security_groups {
namespace {
namespace json = boost::json;

TEST(SecurityGroupCidr, NormalisesV4AndV6) {
  EXPECT_EQ(*normalize_cidr("10.1.2.3/8"), "10.0.0.0/8");
  EXPECT_EQ(*normalize_cidr("10.1.2.3"), "10.1.2.3/32");
  EXPECT_EQ(*normalize_cidr("0.0.0.0/0"), "0.0.0.0/0");
  EXPECT_EQ(*normalize_cidr("203.0.113.77/27"), "203.0.113.64/27");
  EXPECT_EQ(*normalize_cidr("2001:DB8::1/32"), "2001:db8::/32");
  EXPECT_EQ(*normalize_cidr("2001:db8:0:0:0:0:0:5"), "2001:db8::5/128");
  EXPECT_EQ(*normalize_cidr("::/0"), "::/0");
  EXPECT_EQ(*normalize_cidr("fe80::1ff:fe23:4567:890a/65"), "fe80::/65");
  for (const auto* bad : {"", "10.0.0", "10.0.0.256", "10.0.0.1/33", "10.0.0.1/", "10.0.0.1/08", "010.0.0.1",
                          "2001:db8::/129", "2001:db8:::1", "1.2.3.4/-1", "a.b.c.d/8", "10.0.0.0/8/8", " 10.0.0.0/8"}) {
    EXPECT_FALSE(normalize_cidr(bad)) << bad;
  }
  EXPECT_TRUE(is_ipv6_cidr("::/0"));
  EXPECT_FALSE(is_ipv6_cidr("0.0.0.0/0"));
}

TEST(SecurityGroupRules, ParseFillsPortMaxAndCollapsesDuplicates) {
  auto rules = parse_rules(json::parse(R"([
      {"protocol": "tcp", "port_min": 22, "source": "0.0.0.0/0"},
      {"protocol": "tcp", "port_min": 22, "port_max": 22, "source": "0.0.0.0/0", "description": "again"},
      {"protocol": "udp", "port_min": 60000, "port_max": 60010, "source": "10.9.9.9/16", "description": "mosh"}])"),
                           false);
  ASSERT_TRUE(rules) << rules.error().detail;
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0], (Rule{Protocol::tcp, 22, 22, "0.0.0.0/0", ""}));
  EXPECT_EQ((*rules)[1], (Rule{Protocol::udp, 60000, 60010, "10.9.0.0/16", "mosh"}));
  // The stored form reads back the same.
  auto back = rules_from_text(json::serialize(rules_json(*rules)));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *rules);
}

TEST(SecurityGroupRules, RefusalsNameTheField) {
  auto check = [](const char* text, const char* expected) {
    auto r = parse_rules(json::parse(text), false);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().detail.find(expected), std::string::npos) << text << " -> " << r.error().detail;
  };
  check(R"({"protocol": "tcp"})", "rules: must be a list");
  check(R"([{"protocol": "icmp", "port_min": 1, "source": "0.0.0.0/0"}])", "rules[0].protocol");
  check(R"([{"protocol": "tcp", "port_min": 0, "source": "0.0.0.0/0"}])", "rules[0].port_min");
  check(R"([{"protocol": "tcp", "port_min": 80, "port_max": 79, "source": "0.0.0.0/0"}])", "rules[0].port_max");
  check(R"([{"protocol": "tcp", "port_min": 80, "source": "0.0.0.0/0"}, {"protocol": "tcp", "port_min": 80, "source": "x"}])",
        "rules[1].source");
  check(R"([{"protocol": "tcp", "port_min": 80, "source": "0.0.0.0/0", "ports": 1}])", "rules[0].ports");
  check(R"([{"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "::/0"}])", "acknowledge_risk");
  json::array many;
  for (int n = 0; n < 101; ++n) many.push_back(json::object{{"protocol", "tcp"}, {"port_min", n + 1}, {"source", "10.0.0.0/8"}});
  auto r = parse_rules(many, false);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().detail.find("at most 100"), std::string::npos);
}

TEST(SecurityGroupRules, EverythingOpenOnlyWithTheRiskAcknowledged) {
  const auto all = json::parse(R"([{"protocol": "udp", "port_min": 1, "port_max": 65535, "source": "8.8.8.8/0"}])");
  EXPECT_FALSE(parse_rules(all, false));
  auto ok = parse_rules(all, true);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(opens_everything(ok->front()));
  EXPECT_FALSE(opens_everything(Rule{Protocol::tcp, 2, 65535, "0.0.0.0/0", ""}));
  EXPECT_FALSE(opens_everything(Rule{Protocol::tcp, 1, 65535, "10.0.0.0/8", ""}));
}

TEST(SecurityGroupRules, SourcesForAPortAreThoseOfTheRulesCoveringIt) {
  const std::vector<Rule> rules{{Protocol::tcp, 22, 22, "0.0.0.0/0", ""},
                                {Protocol::tcp, 8000, 9000, "10.0.0.0/8", ""},
                                {Protocol::tcp, 8888, 8888, "192.168.0.0/16", ""},
                                {Protocol::tcp, 8888, 8888, "10.0.0.0/8", ""},
                                {Protocol::udp, 8888, 8888, "2001:db8::/32", ""}};
  EXPECT_EQ(sources_for(rules, Protocol::tcp, 8888), (std::vector<std::string>{"10.0.0.0/8", "192.168.0.0/16"}));
  EXPECT_EQ(sources_for(rules, Protocol::udp, 8888), (std::vector<std::string>{"2001:db8::/32"}));
  EXPECT_EQ(sources_for(rules, Protocol::tcp, 22), (std::vector<std::string>{"0.0.0.0/0"}));
  EXPECT_TRUE(sources_for(rules, Protocol::tcp, 9001).empty());
  EXPECT_TRUE(sources_for(rules, Protocol::udp, 22).empty());
}

}  // namespace
}  // namespace gpucloud::security_groups
