// gpucloud-agent's agent.toml (agent_file.h): one [host] read into a Config of exactly that
// host, its errors named by the agent file's keys.
#include "agentlink/agent_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpucloud::agentlink {
namespace {
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::string_view kMinimalAgentFile = R"(data_dir = "/var/lib/gpucloud-agent-test"

[host]
name = "gpu-7"
zone = "zone-b"
cpu = 16
memory_gib = 64
port_range = "32000-32999"
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]

[agent]
)";

std::string agent_file_error(std::string_view text) {
  auto c = parse_agent_file(text, "agent.toml");
  if (c) return "<accepted>";
  EXPECT_EQ(c.error().code, ErrorCode::invalid_argument);
  return c.error().detail;
}

// kMinimalAgentFile with `line` put into [host] (after its name).
std::string with_host_line(std::string_view line) {
  std::string text(kMinimalAgentFile);
  const std::string anchor = "name = \"gpu-7\"\n";
  text.insert(text.find(anchor) + anchor.size(), std::string(line) + "\n");
  return text;
}

TEST(AgentFileTest, AMinimalFileIsAConfigOfExactlyItsHost) {
  auto c = parse_agent_file(kMinimalAgentFile, "agent.toml");
  ASSERT_TRUE(c) << c.error().detail;
  EXPECT_EQ(c->data_dir, "/var/lib/gpucloud-agent-test");
  ASSERT_EQ(c->hosts.size(), 1u);
  const config::Host& h = c->hosts[0];
  EXPECT_EQ(h.name, "gpu-7");
  EXPECT_EQ(h.zone, "zone-b");
  EXPECT_EQ(h.cpu, 16);
  EXPECT_EQ(h.memory_gib, 64);
  EXPECT_EQ(h.port_range(), "32000-32999");
  ASSERT_EQ(h.simulated_gpus.size(), 1u);
  EXPECT_EQ(h.simulated_gpus[0].model, "RTX 4090");
  EXPECT_EQ(h.simulated_gpus[0].count, 2);
  EXPECT_EQ(h.simulated_gpus[0].memory_gib, 24);
  ASSERT_EQ(c->zones.size(), 1u);
  EXPECT_EQ(c->zones[0].name, "zone-b");
}

TEST(AgentFileTest, AnUnknownTopLevelKeyIsRefusedByName) {
  std::string text = "listen = \"0.0.0.0:8080\"\n" + std::string(kMinimalAgentFile);
  EXPECT_THAT(agent_file_error(text), HasSubstr("unknown key \"listen\""));
  // A control plane's section is not an agent's either.
  EXPECT_THAT(agent_file_error(std::string(kMinimalAgentFile) + "\n[[offers]]\ngpu_model = \"A100\"\n"),
              HasSubstr("unknown key \"offers\""));
}

TEST(AgentFileTest, TheHostSectionItsNameAndItsZoneAreRequired) {
  EXPECT_THAT(agent_file_error("data_dir = \"/tmp/x\"\n[agent]\n"), HasSubstr("[host] is required"));
  // [[host]] (an array) is not the [host] table.
  EXPECT_THAT(agent_file_error("[[host]]\nname = \"a\"\nzone = \"z\"\n"), HasSubstr("[host] is required"));

  std::string no_zone(kMinimalAgentFile);
  no_zone.erase(no_zone.find("zone = \"zone-b\"\n"), std::string("zone = \"zone-b\"\n").size());
  EXPECT_THAT(agent_file_error(no_zone), HasSubstr("host.zone is required"));
  std::string empty_zone(kMinimalAgentFile);
  empty_zone.replace(empty_zone.find("zone-b"), 6, "");
  EXPECT_THAT(agent_file_error(empty_zone), HasSubstr("host.zone is required"));

  std::string no_name(kMinimalAgentFile);
  no_name.erase(no_name.find("name = \"gpu-7\"\n"), std::string("name = \"gpu-7\"\n").size());
  EXPECT_THAT(agent_file_error(no_name), HasSubstr("host.name is required"));
}

TEST(AgentFileTest, AnErrorInsideTheHostIsNamedByTheAgentFilesKey) {
  std::string bad_range(kMinimalAgentFile);
  bad_range.replace(bad_range.find("32000-32999"), 11, "oops");
  std::string e = agent_file_error(bad_range);
  EXPECT_THAT(e, HasSubstr("host.port_range"));
  EXPECT_THAT(e, Not(HasSubstr("hosts[0]")));

  e = agent_file_error(with_host_line("cpux = 4"));
  EXPECT_THAT(e, HasSubstr("host.cpux"));
  EXPECT_THAT(e, Not(HasSubstr("hosts[0]")));

  e = agent_file_error(with_host_line("disk_driver = \"zfs\""));
  EXPECT_THAT(e, HasSubstr("host.disk_driver"));
  EXPECT_THAT(e, Not(HasSubstr("hosts[0]")));
}

// The control plane's reader sees a document made from the agent file; the line and column
// an operator is shown must still be the agent file's own.
TEST(AgentFileTest, AnErrorNamesItsLineInTheAgentFile) {
  std::string bad_range(kMinimalAgentFile);
  bad_range.replace(bad_range.find("32000-32999"), 11, "oops");  // line 8, value at column 14
  EXPECT_THAT(agent_file_error(bad_range), HasSubstr("agent.toml:8:14: host.port_range"));

  EXPECT_THAT(agent_file_error(with_host_line("cpux = 4")), HasSubstr("agent.toml:5:1: unknown key \"host.cpux\""));

  std::string bad_agent = std::string(kMinimalAgentFile) + "bogus_setting = 1\n";  // line 12
  EXPECT_THAT(agent_file_error(bad_agent), HasSubstr("agent.toml:12:1: unknown key \"agent.bogus_setting\""));
}

TEST(AgentFileTest, NotTomlIsAnErrorNamingTheFile) {
  EXPECT_THAT(agent_file_error("[host\nname = "), HasSubstr("agent.toml"));
  auto missing = load_agent_file("/nonexistent/gpucloud-agent-test/agent.toml");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().detail, HasSubstr("/nonexistent/gpucloud-agent-test/agent.toml"));
}

}  // namespace
}  // namespace gpucloud::agentlink
