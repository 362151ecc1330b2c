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

TEST(SecurityGroupRules, WidelyOpenRuleSetsNeedTheRiskAcknowledged) {
  auto refused = [](const char* text) {
    auto r = parse_rules(json::parse(text), false);
    if (r) return false;
    EXPECT_NE(r.error().detail.find("acknowledge_risk"), std::string::npos) << r.error().detail;
    return parse_rules(json::parse(text), true).has_value();  // and accepted with it
  };
  // Almost every port from everywhere: not only exactly 1-65535.
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 1, "port_max": 65534, "source": "0.0.0.0/0"}])"));
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "0.0.0.0/0"}])"));
  // Two halves make the whole.
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "0.0.0.0/1"},
                          {"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "128.0.0.0/1"}])"));
  // One half is "most" already; so is a pile of /2s, and IPv6 counts on its own.
  EXPECT_TRUE(refused(R"([{"protocol": "udp", "port_min": 1000, "port_max": 1010, "source": "128.0.0.0/1"}])"));
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 8000, "port_max": 8100, "source": "0.0.0.0/2"},
                          {"protocol": "tcp", "port_min": 8000, "port_max": 8100, "source": "64.0.0.0/2"}])"));
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 2000, "port_max": 3000, "source": "::/1"}])"));
  // Ports add up across rules and protocols: 6 tcp + 6 udp.
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 1, "port_max": 6, "source": "0.0.0.0/0"},
                          {"protocol": "udp", "port_min": 1, "port_max": 6, "source": "0.0.0.0/0"}])"));
  // Each rule alone is narrow in ports or sources, together they are wide on 20 ports.
  EXPECT_TRUE(refused(R"([{"protocol": "tcp", "port_min": 100, "port_max": 119, "source": "0.0.0.0/1"},
                          {"protocol": "tcp", "port_min": 100, "port_max": 119, "source": "192.0.0.0/2"}])"));

  auto accepted = [](const char* text) {
    auto r = parse_rules(json::parse(text), false);
    EXPECT_TRUE(r) << text << " -> " << (r ? "" : r.error().detail);
    return r.has_value();
  };
  // A handful (10) of ports to everyone, any number to narrower sources.
  EXPECT_TRUE(accepted(R"([{"protocol": "tcp", "port_min": 8000, "port_max": 8009, "source": "0.0.0.0/0"}])"));
  EXPECT_TRUE(accepted(R"([{"protocol": "tcp", "port_min": 22, "source": "0.0.0.0/0"},
                           {"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "10.0.0.0/8"},
                           {"protocol": "udp", "port_min": 1, "port_max": 65535, "source": "0.0.0.0/2"},
                           {"protocol": "udp", "port_min": 1, "port_max": 65535, "source": "2001:db8::/32"}])"));
  // Nested sources count once: 0.0.0.0/2 + its own two /3 halves are a quarter, not half.
  EXPECT_TRUE(accepted(R"([{"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "0.0.0.0/2"},
                           {"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "0.0.0.0/3"},
                           {"protocol": "tcp", "port_min": 1, "port_max": 65535, "source": "32.0.0.0/3"}])"));
  // Two rules on disjoint ports do not combine their sources.
  EXPECT_TRUE(accepted(R"([{"protocol": "tcp", "port_min": 1, "port_max": 30000, "source": "0.0.0.0/2"},
                           {"protocol": "tcp", "port_min": 30001, "port_max": 65535, "source": "64.0.0.0/2"}])"));
}

TEST(SecurityGroupRules, CoversHalfAndCountsWideOpenPorts) {
  EXPECT_TRUE(covers_half({"0.0.0.0/0"}));
  EXPECT_TRUE(covers_half({"0.0.0.0/1", "128.0.0.0/1"}));
  EXPECT_TRUE(covers_half({"128.0.0.0/1"}));
  EXPECT_TRUE(covers_half({"0.0.0.0/2", "192.0.0.0/2"}));
  EXPECT_FALSE(covers_half({"0.0.0.0/2", "0.0.0.0/3", "32.0.0.0/3"}));
  EXPECT_FALSE(covers_half({"0.0.0.0/2", "64.0.0.0/3", "96.0.0.0/4", "112.0.0.0/5"}));
  EXPECT_TRUE(covers_half({"0.0.0.0/2", "64.0.0.0/3", "96.0.0.0/4", "112.0.0.0/5", "120.0.0.0/5"}));
  EXPECT_TRUE(covers_half({"::/0"}));
  EXPECT_TRUE(covers_half({"8000::/1"}));
  EXPECT_FALSE(covers_half({"::/2", "2001:db8::/32"}));
  EXPECT_FALSE(covers_half({}));
  EXPECT_EQ(ports_open_to_most({{Protocol::tcp, 1, 65534, "0.0.0.0/0", ""}}), 65534);
  EXPECT_EQ(ports_open_to_most({{Protocol::tcp, 10, 19, "0.0.0.0/1", ""},
                                {Protocol::tcp, 15, 24, "128.0.0.0/1", ""},
                                {Protocol::udp, 15, 15, "::/0", ""}}),
            15 + 1);  // each /1 is half on its own: tcp 10-24, and udp 15
  EXPECT_EQ(ports_open_to_most({{Protocol::tcp, 10, 19, "0.0.0.0/2", ""},
                                {Protocol::tcp, 15, 24, "128.0.0.0/2", ""}}),
            5);  // only 15-19 have both quarters
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
