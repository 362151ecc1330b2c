// port_sources / port_sources_v4: the sources an instance's security group lets reach one of
// its ports, and the IPv4 ones the agent's table is given (the table is IPv4: an IPv6 source
// must not reach it as an address, nor leave a port looking open).
#include <gtest/gtest.h>

#include "instances/instance_record.h"

namespace gpucloud::instances {
namespace {

using security_groups::Protocol;
using security_groups::Rule;

Instance with_rules(std::vector<Rule> rules) {
  Instance i;
  i.id = "i-1";
  i.security_group_id = "sg-1";
  i.security_rules = std::move(rules);
  return i;
}

TEST(PortSources, V4KeepsOnlyIpv4SourcesOfTheRulesCoveringThePort) {
  const auto i = with_rules({{Protocol::tcp, 22, 22, "0.0.0.0/0", ""},
                             {Protocol::tcp, 22, 22, "::/0", ""},
                             {Protocol::tcp, 8000, 9000, "10.0.0.0/8", ""},
                             {Protocol::tcp, 8888, 8888, "2001:db8::/32", ""},
                             {Protocol::tcp, 8888, 8888, "192.168.0.0/16", ""},
                             {Protocol::udp, 8888, 8888, "203.0.113.0/24", ""},
                             {Protocol::tcp, 9999, 9999, "2001:db8::/32", ""}});
  const PortBinding ssh{22, "tcp", 30022}, web{8888, "tcp", 30888}, udp{8888, "udp", 30889}, v6_only{9999, "tcp", 30999},
      none{7777, "tcp", 30777};
  EXPECT_EQ(port_sources(i, ssh), (std::vector<std::string>{"0.0.0.0/0", "::/0"}));
  EXPECT_EQ(port_sources_v4(i, ssh), (std::vector<std::string>{"0.0.0.0/0"}));
  EXPECT_EQ(port_sources(i, web), (std::vector<std::string>{"10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32"}));
  EXPECT_EQ(port_sources_v4(i, web), (std::vector<std::string>{"10.0.0.0/8", "192.168.0.0/16"}));
  // By protocol: the udp rule is for udp only.
  EXPECT_EQ(port_sources_v4(i, udp), (std::vector<std::string>{"203.0.113.0/24"}));
  // An IPv6 source alone: listed, but nothing for the IPv4 table (the port is not `allowed`).
  EXPECT_EQ(port_sources(i, v6_only), (std::vector<std::string>{"2001:db8::/32"}));
  EXPECT_TRUE(port_sources_v4(i, v6_only).empty());
  // No rule covers it: nobody (the host itself still reaches it, port_rules.h).
  EXPECT_TRUE(port_sources_v4(i, none).empty());
  // Ranges by the container port, not the host port.
  EXPECT_EQ(port_sources_v4(i, PortBinding{8000, "tcp", 22}), (std::vector<std::string>{"10.0.0.0/8"}));
}

TEST(PortSources, AGroupWithNoRulesOpensNothing) {
  const auto i = with_rules({});
  EXPECT_TRUE(port_sources_v4(i, PortBinding{22, "tcp", 30022}).empty());
  EXPECT_TRUE(port_sources(i, PortBinding{22, "tcp", 30022}).empty());
}

}  // namespace
}  // namespace gpucloud::instances
