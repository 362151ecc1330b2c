#include "agent/firewall/port_rules.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

using gpucloud::ErrorCode;
using gpucloud::agent::firewall::canonical_cidr;
using gpucloud::agent::firewall::HostGuard;
using gpucloud::agent::firewall::is_valid_interface_name;
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

// The element lines of a named set or map ("" when it is not defined; "{}" when it is empty).
std::vector<std::string> elements_of(const std::string& text, const std::string& header) {
  const auto at = text.find("  " + header + " {\n");
  if (at == std::string::npos) return {""};
  const auto end = text.find("\n  }\n", at);
  const auto open = text.find("    elements = {\n", at);
  if (open == std::string::npos || open > end) return {"{}"};
  std::vector<std::string> out;
  std::size_t line = open + std::string("    elements = {\n").size();
  while (text.compare(line, 6, "      ") == 0) {
    const auto nl = text.find('\n', line);
    std::string item = text.substr(line + 6, nl - line - 6);
    if (!item.empty() && item.back() == ',') item.pop_back();
    out.push_back(item);
    line = nl + 1;
  }
  return out;
}

// The rules of a chain, in order (without its type line).
std::vector<std::string> rules_of(const std::string& text, const std::string& chain) {
  const auto at = text.find("  chain " + chain + " {\n");
  if (at == std::string::npos) return {};
  std::vector<std::string> out;
  std::size_t line = text.find('\n', text.find('\n', at) + 1) + 1;  // past the type line
  while (text.compare(line, 4, "    ") == 0) {
    const auto nl = text.find('\n', line);
    out.push_back(text.substr(line + 4, nl - line - 4));
    line = nl + 1;
  }
  return out;
}

using Lines = std::vector<std::string>;
const std::string kAllowed = " ct mark set ct mark or 0x10000000 accept";

TEST(FirewallPortRules, RendersTableReplacementSetsAndChains) {
  auto script = render_ruleset("gpucloud", {port("i-abc", 30022, "10.88.0.10", 22)});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string& s = *script;
  // Replaced whole and only our table, in one file (one transaction): never "flush ruleset".
  EXPECT_NE(s.find("table ip gpucloud {}\ndelete table ip gpucloud\ntable ip gpucloud {\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("ruleset"), std::string::npos);
  EXPECT_EQ(std::count(s.begin(), s.end(), '{'), std::count(s.begin(), s.end(), '}'));

  EXPECT_TRUE(has_line(s, "type filter hook prerouting priority -300; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type filter hook prerouting priority -110; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type nat hook prerouting priority -101; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type nat hook output priority -101; policy accept;")) << s;
  EXPECT_TRUE(has_line(s, "type nat hook postrouting priority 99; policy accept;")) << s;
  EXPECT_EQ(rules_of(s, "localnet_guard"), Lines{"iif != \"lo\" ip daddr 127.0.0.0/8 counter drop"});

  // The DNAT targets, once for other hosts (prerouting), once for the host itself (output).
  EXPECT_EQ(elements_of(s, "map published"), Lines{"tcp . 30022 comment \"i-abc\" : 10.88.0.10 . 22"}) << s;
  const Lines dnat{"fib daddr type local dnat ip to meta l4proto . th dport map @published"};
  EXPECT_EQ(rules_of(s, "prerouting"), dnat) << s;
  EXPECT_EQ(rules_of(s, "output"), dnat) << s;
  EXPECT_EQ(elements_of(s, "set container_ips"), Lines{"10.88.0.10"});
  EXPECT_EQ(rules_of(s, "postrouting"),
            Lines{"ip saddr 127.0.0.0/8 ip daddr @container_ips ct status dnat masquerade"});

  // 0.0.0.0/0: the port is in allow_any, and no per-prefix set exists.
  EXPECT_EQ(elements_of(s, "set published_ports"), Lines{"tcp . 30022"});
  EXPECT_EQ(elements_of(s, "set allow_any"), Lines{"tcp . 30022"});
  EXPECT_EQ(s.find("set allow_3"), std::string::npos) << s;
  // Replies first (every packet a client sends is checked), other ports and addresses not
  // ours, the allowed, then drop.
  EXPECT_EQ(rules_of(s, "sources"), (Lines{"ct direction reply accept",
                                           "meta l4proto . th dport != @published_ports accept",
                                           "fib daddr type != local accept",
                                           "meta l4proto . th dport @allow_any" + kAllowed, "drop"}))
      << s;
}

TEST(FirewallPortRules, SourcesAreReducedIntoOneSetPerPrefixLength) {
  auto script = render_ruleset(
      "gpucloud", {port("i-1", 30080, "10.88.0.11", 8080,
                        {"192.168.1.0/24", "10.0.0.0/8", "10.1.2.3/32", "192.168.1.128/25",
                         "10.0.0.0/8", "198.51.100.7/32", "203.0.113.0/24"}),
                   port("i-2", 30022, "10.88.0.12", 22, {"198.51.100.9/32"})});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string& s = *script;
  // 10.1.2.3/32 is inside 10.0.0.0/8 and 192.168.1.128/25 inside 192.168.1.0/24: dropped;
  // the duplicate once.
  EXPECT_EQ(elements_of(s, "set allow_8"), Lines{"tcp . 30080 . 10.0.0.0"}) << s;
  EXPECT_EQ(elements_of(s, "set allow_24"), (Lines{"tcp . 30080 . 192.168.1.0", "tcp . 30080 . 203.0.113.0"}));
  EXPECT_EQ(elements_of(s, "set allow_32"), (Lines{"tcp . 30022 . 198.51.100.9", "tcp . 30080 . 198.51.100.7"}));
  EXPECT_EQ(elements_of(s, "set allow_25"), Lines{""});
  EXPECT_EQ(elements_of(s, "set allow_any"), Lines{""});
  EXPECT_NE(s.find("    type inet_proto . inet_service . ipv4_addr\n"), std::string::npos);
  // One rule per prefix length in use, longest first, each masking the source to its length.
  EXPECT_EQ(rules_of(s, "sources"),
            (Lines{"ct direction reply accept", "meta l4proto . th dport != @published_ports accept",
                   "fib daddr type != local accept",
                   "meta l4proto . th dport . ip saddr @allow_32" + kAllowed,
                   "meta l4proto . th dport . ip saddr & 255.255.255.0 @allow_24" + kAllowed,
                   "meta l4proto . th dport . ip saddr & 255.0.0.0 @allow_8" + kAllowed, "drop"}))
      << s;
}

TEST(FirewallPortRules, TheRuleCountDoesNotGrowWithThePorts) {
  std::vector<PublishedPort> ports;
  for (int i = 0; i < 2000; ++i) {
    const std::string ip = "10.88." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 2);
    ports.push_back(port("i-" + std::to_string(i), 20000 + i, ip, 22,
                         {"10.0.0.0/8", "192.168." + std::to_string(i % 256) + ".0/24"}));
  }
  auto script = render_ruleset("gpucloud", ports);
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_EQ(rules_of(*script, "sources").size(), 6u);
  EXPECT_EQ(rules_of(*script, "prerouting").size(), 1u);
  EXPECT_EQ(elements_of(*script, "map published").size(), 2000u);
  EXPECT_EQ(elements_of(*script, "set allow_24").size(), 2000u);
  EXPECT_EQ(elements_of(*script, "set allow_8").size(), 2000u);
  EXPECT_EQ(elements_of(*script, "set container_ips").size(), 2000u);
}

TEST(FirewallPortRules, EmptyAllowedOnlyDrops) {
  auto script = render_ruleset("gpucloud", {port("i-1", 30022, "10.88.0.10", 22, {})});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string& s = *script;
  EXPECT_EQ(s.find("set allow_"), std::string::npos) << s;
  EXPECT_EQ(s.find("ct mark set"), std::string::npos) << s;
  EXPECT_EQ(elements_of(s, "set published_ports"), Lines{"tcp . 30022"});
  EXPECT_EQ(rules_of(s, "sources").back(), "drop");
  // Still published: the host itself reaches it.
  EXPECT_EQ(elements_of(s, "map published"), Lines{"tcp . 30022 comment \"i-1\" : 10.88.0.10 . 22"});
}

TEST(FirewallPortRules, UdpUsesUdpKeys) {
  auto script = render_ruleset("gpucloud", {port("i-1", 30053, "10.88.0.10", 53, {"10.0.0.0/8"}, "udp")});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_EQ(elements_of(*script, "map published"), Lines{"udp . 30053 comment \"i-1\" : 10.88.0.10 . 53"});
  EXPECT_EQ(elements_of(*script, "set allow_8"), Lines{"udp . 30053 . 10.0.0.0"});
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
  // Sorted by (protocol, host port); each container address once, sorted numerically.
  EXPECT_EQ(elements_of(*first, "set published_ports"),
            (Lines{"tcp . 30022", "tcp . 30100", "tcp . 30888", "udp . 30022"}));
  EXPECT_EQ(elements_of(*first, "set container_ips"), (Lines{"10.88.0.10", "10.88.0.12", "10.88.0.13"}));
}

TEST(FirewallPortRules, NoPortsStillDefinesTheChains) {
  auto script = render_ruleset("gpucloud-test-1", {});
  ASSERT_TRUE(script) << script.error().detail;
  EXPECT_NE(script->find("delete table ip gpucloud-test-1\n"), std::string::npos);
  EXPECT_NE(script->find("chain sources {"), std::string::npos);
  EXPECT_EQ(elements_of(*script, "map published"), Lines{"{}"});
  EXPECT_EQ(elements_of(*script, "set published_ports"), Lines{"{}"});
  EXPECT_EQ(elements_of(*script, "set container_ips"), Lines{"{}"});
  EXPECT_EQ(script->find("elements"), std::string::npos) << *script;  // nft refuses "{ }"
}

TEST(FirewallPortRules, TheHostGuardDropsWhatArrivesOnTheBridgesForTheHost) {
  // No guard asked for: no chain (the firewall tests' own tables, hosts without instances).
  auto plain = render_ruleset("gpucloud", {});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->find("host_guard"), std::string::npos) << *plain;

  auto script = render_ruleset("gpucloud", {port("i-1", 30022, "10.88.0.10", 22, {"0.0.0.0/0"})},
                               HostGuard{{"br-0123456789ab", "gpucloud0", "br-0123456789ab"}});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string& s = *script;
  // The input hook (only what is delivered to the host itself), before iptables' INPUT.
  EXPECT_NE(s.find("type filter hook input priority -10; policy accept;"), std::string::npos) << s;
  EXPECT_EQ(rules_of(s, "host_guard"), (Lines{"iifname \"br-0123456789ab\" ct state established,related accept",
                                              "iifname \"br-0123456789ab\" meta l4proto { tcp, udp } th dport 53 accept",
                                              "iifname \"br-0123456789ab\" icmp type echo-request accept",
                                              "iifname \"br-0123456789ab\" drop",
                                              "iifname \"gpucloud0\" ct state established,related accept",
                                              "iifname \"gpucloud0\" meta l4proto { tcp, udp } th dport 53 accept",
                                              "iifname \"gpucloud0\" icmp type echo-request accept",
                                              "iifname \"gpucloud0\" drop"}))
      << s;

  for (const char* bad : {"", "a-name-far-too-long", "br 0", "br\"0", "eth0;drop", "..", "br/0"}) {
    auto refused = render_ruleset("gpucloud", {}, HostGuard{{bad}});
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  }
  EXPECT_TRUE(is_valid_interface_name("br-0123456789ab"));
  EXPECT_TRUE(is_valid_interface_name("veth.1_x"));
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
