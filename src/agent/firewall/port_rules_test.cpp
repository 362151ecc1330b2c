#include "agent/firewall/port_rules.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

using gpucloud::ErrorCode;
using gpucloud::agent::firewall::canonical_cidr;
using gpucloud::agent::firewall::is_ipv4_address;
using gpucloud::agent::firewall::is_valid_table_name;
using gpucloud::agent::firewall::PublishedPort;
using gpucloud::agent::firewall::render_ruleset;
using gpucloud::agent::firewall::SourceRule;
using gpucloud::agent::firewall::validate;

PublishedPort port(std::string id, int host_port, std::string ip, int container_port,
                   std::vector<std::string> cidrs = {"0.0.0.0/0"}, std::string proto = "tcp") {
  PublishedPort p;
  p.instance_id = std::move(id);
  p.host_port = host_port;
  p.container_ip = std::move(ip);
  p.container_port = container_port;
  p.protocol = std::move(proto);
  for (auto& c : cidrs) p.allowed.push_back(SourceRule{std::move(c)});
  return p;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("    " + line + "\n") != std::string::npos;
}

TEST(FirewallPortRules, RendersTableFlushAndChains) {
  auto script = render_ruleset("gpucloud", {port("i-abc", 30022, "10.88.0.10", 22)});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string& s = *script;
  // Replaced whole and only our table: never "flush ruleset".
  EXPECT_NE(s.find("table ip gpucloud {}\nflush table ip gpucloud\ntable ip gpucloud {\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("ruleset"), std::string::npos);
  EXPECT_EQ(std::count(s.begin(), s.end(), '{'), std::count(s.begin(), s.end(), '}'));

  EXPECT_TRUE(has_line(s, "type nat hook prerouting priority -101; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type nat hook output priority -101; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type nat hook postrouting priority 99; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type filter hook forward priority -1; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "iif != \"lo\" ip daddr 127.0.0.0/8 drop")) << s;

  const std::string dnat =
      "fib daddr type local tcp dport 30022 dnat to 10.88.0.10:22 comment \"i-abc\"";
  // Once in prerouting (other hosts), once in output (the host itself).
  const auto first = s.find(dnat);
  ASSERT_NE(first, std::string::npos) << s;
  EXPECT_NE(s.find(dnat, first + 1), std::string::npos) << s;
  EXPECT_TRUE(has_line(s, "ip saddr 127.0.0.0/8 ip daddr { 10.88.0.10 } ct status dnat masquerade"))
      << s;
  EXPECT_TRUE(has_line(s, "ct state established,related accept")) << s;
  // 0.0.0.0/0: no source match at all.
  const std::string match =
      "ip daddr 10.88.0.10 meta l4proto tcp th dport 22 ct status dnat ct original proto-dst 30022";
  EXPECT_TRUE(has_line(s, match + " ct mark set ct mark or 0x10000000 accept comment \"i-abc\""))
      << s;
  EXPECT_TRUE(has_line(s, match + " drop comment \"i-abc\"")) << s;
  // The established rule comes before the per-port rules, accept before drop.
  EXPECT_LT(s.find("ct state established"), s.find(match + " ct mark"));
  EXPECT_LT(s.find(match + " ct mark"), s.find(match + " drop"));
}

TEST(FirewallPortRules, SourcesAreSortedAndReduced) {
  auto script = render_ruleset(
      "gpucloud", {port("i-1", 30080, "10.88.0.11", 8080,
                        {"192.168.1.0/24", "10.0.0.0/8", "10.1.2.3/32", "192.168.1.128/25",
                         "10.0.0.0/8", "198.51.100.7/32"})});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_TRUE(has_line(*script,
                       "ip daddr 10.88.0.11 meta l4proto tcp th dport 8080 ct status dnat ct "
                       "original proto-dst 30080 ip saddr { 10.0.0.0/8, 192.168.1.0/24, "
                       "198.51.100.7/32 } ct mark set ct mark or 0x10000000 accept comment \"i-1\""))
      << *script;
}

TEST(FirewallPortRules, EmptyAllowedOnlyDrops) {
  auto script = render_ruleset("gpucloud", {port("i-1", 30022, "10.88.0.10", 22, {})});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_EQ(script->find("accept comment"), std::string::npos) << *script;
  EXPECT_TRUE(has_line(*script,
                       "ip daddr 10.88.0.10 meta l4proto tcp th dport 22 ct status dnat ct "
                       "original proto-dst 30022 drop comment \"i-1\""))
      << *script;
  // Still published: the host itself reaches it.
  EXPECT_NE(script->find("tcp dport 30022 dnat to 10.88.0.10:22"), std::string::npos);
}

TEST(FirewallPortRules, UdpUsesUdpMatches) {
  auto script = render_ruleset("gpucloud", {port("i-1", 30053, "10.88.0.10", 53, {}, "udp")});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_NE(script->find("fib daddr type local udp dport 30053 dnat to 10.88.0.10:53"),
            std::string::npos);
  EXPECT_NE(script->find("meta l4proto udp th dport 53 ct status dnat"), std::string::npos);
  EXPECT_EQ(script->find("tcp"), std::string::npos) << *script;
}

TEST(FirewallPortRules, RenderingIsDeterministic) {
  std::vector<PublishedPort> ports = {
      port("i-b", 30100, "10.88.0.12", 22, {"10.0.0.0/8", "172.16.0.0/12"}),
      port("i-a", 30022, "10.88.0.10", 22),
      port("i-a", 30888, "10.88.0.10", 8888, {"203.0.113.0/24"}),
      port("i-c", 30022, "10.88.0.13", 53, {}, "udp"),
  };
  auto first = render_ruleset("gpucloud", ports);
  ASSERT_TRUE(first) << first.error().detail;
  EXPECT_EQ(*first, *render_ruleset("gpucloud", ports));

  std::reverse(ports.begin(), ports.end());
  std::reverse(ports[3].allowed.begin(), ports[3].allowed.end());
  auto reordered = render_ruleset("gpucloud", ports);
  ASSERT_TRUE(reordered);
  EXPECT_EQ(*first, *reordered);
  // Sorted by (protocol, host port).
  EXPECT_LT(first->find("tcp dport 30022"), first->find("tcp dport 30100"));
  EXPECT_LT(first->find("tcp dport 30100"), first->find("tcp dport 30888"));
  EXPECT_LT(first->find("tcp dport 30888"), first->find("udp dport 30022"));
  // Each container address once in the masquerade set, sorted numerically.
  EXPECT_NE(first->find("ip daddr { 10.88.0.10, 10.88.0.12, 10.88.0.13 }"), std::string::npos)
      << *first;
}

TEST(FirewallPortRules, NoPortsStillDefinesTheChains) {
  auto script = render_ruleset("gpucloud-test-1", {});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_NE(script->find("flush table ip gpucloud-test-1\n"), std::string::npos);
  EXPECT_NE(script->find("chain forward {"), std::string::npos);
  EXPECT_EQ(script->find("dnat to"), std::string::npos);
  EXPECT_EQ(script->find("masquerade"), std::string::npos);
}

TEST(FirewallPortRules, RefusesBadInput) {
  auto refused = [](std::vector<PublishedPort> ports, std::string table = "gpucloud") {
    auto script = render_ruleset(table, ports);
    if (script) return std::string("accepted");
    EXPECT_EQ(script.error().code, ErrorCode::invalid_argument);
    return script.error().detail;
  };
  const auto good = port("i-1", 30022, "10.88.0.10", 22);
  ASSERT_EQ(validate({good}).has_value(), true);

  auto with = [&](auto change) {
    auto p = good;
    change(p);
    return std::vector<PublishedPort>{p};
  };
  EXPECT_NE(refused(with([](auto& p) { p.host_port = 0; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.host_port = 65536; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.container_port = -1; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.container_port = 70000; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.protocol = "sctp"; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.protocol = "TCP"; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.instance_id = ""; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.instance_id = "i\" accept"; })), "accepted");
  EXPECT_NE(refused(with([](auto& p) { p.instance_id = "i\n"; })), "accepted");
  for (const char* ip : {"10.88.0", "10.88.0.256", "10.88.00.1", "010.88.0.1", "10.88.0.1/32",
                         "::1", "", " 10.88.0.1", "10.88.0.1 ", "0.0.0.0", "127.0.0.1",
                         "224.0.0.1", "255.255.255.255", "10.88.0.1; flush ruleset"}) {
    EXPECT_NE(refused(with([&](auto& p) { p.container_ip = ip; })), "accepted") << ip;
  }
  for (const char* cidr : {"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/", "10.0.0.0",
                           "10.0.0.0/08", "300.0.0.0/8", "", "0.0.0.0/0 accept", "fd00::/8"}) {
    EXPECT_NE(refused(with([&](auto& p) { p.allowed = {{cidr}}; })), "accepted") << cidr;
  }
  // The message names the problem.
  EXPECT_NE(refused(with([](auto& p) { p.allowed = {{"10.0.0.1/8"}}; })).find("10.0.0.0/8"),
            std::string::npos);
  // One host port per protocol; tcp and udp may share a number.
  auto twice = refused({good, port("i-2", 30022, "10.88.0.11", 22)});
  EXPECT_NE(twice.find("already published"), std::string::npos) << twice;
  EXPECT_EQ(refused({good, port("i-2", 30022, "10.88.0.11", 53, {}, "udp")}), "accepted");
  // Table names: ours only, nothing nft would read as a keyword or anything else.
  for (const char* table : {"", "filter", "nat", "counter", "gpucloud test", "gpucloud;", "GPUCLOUD",
                            "gpucloud\nflush ruleset"}) {
    EXPECT_NE(refused({good}, table), "accepted") << table;
  }
}

TEST(FirewallPortRules, CanonicalCidr) {
  EXPECT_EQ(*canonical_cidr("10.1.2.3"), "10.1.2.3/32");
  EXPECT_EQ(*canonical_cidr("10.0.0.0/8"), "10.0.0.0/8");
  EXPECT_EQ(*canonical_cidr("0.0.0.0/0"), "0.0.0.0/0");
  EXPECT_EQ(canonical_cidr("10.1.2.3/8").error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(canonical_cidr("10.1.2/8"));
  EXPECT_FALSE(canonical_cidr("1.2.3.4/32/1"));
  EXPECT_TRUE(is_ipv4_address("192.0.2.1"));
  EXPECT_FALSE(is_ipv4_address("192.0.2.01"));
  EXPECT_TRUE(is_valid_table_name("gpucloud"));
  EXPECT_TRUE(is_valid_table_name("gpucloud-test-4f2a"));
  EXPECT_FALSE(is_valid_table_name("gpu"));
}

}  // namespace
