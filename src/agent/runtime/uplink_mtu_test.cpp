#include "agent/runtime/uplink_mtu.h"

#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {

constexpr const char* kRoutes =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "br-2c06\t004CF60A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    "wg0\t00000000\t00000000\t0001\t0\t0\t200\t00000000\t0\t0\t0\n"
    "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "eth0\t000200C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";

TEST(UplinkMtu, TheDefaultRouteOfTheLowestMetricGivesTheInterface) {
  std::string asked;
  auto mtu = uplink_mtu_from(kRoutes, [&](const std::string& iface) -> std::optional<int> {
    asked = iface;
    return iface == "eth0" ? 1400 : 1420;
  });
  EXPECT_EQ(asked, "eth0");
  EXPECT_EQ(mtu, 1400);
}

TEST(UplinkMtu, NoDefaultRouteIsNone) {
  auto mtu = uplink_mtu_from(
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
      "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
      [](const std::string&) -> std::optional<int> { return 9000; });
  EXPECT_FALSE(mtu);
  EXPECT_FALSE(uplink_mtu_from("", [](const std::string&) -> std::optional<int> { return 1400; }));
}

TEST(UplinkMtu, OnlyASmallerUplinkChangesTheBridge) {
  EXPECT_EQ(bridge_mtu_for(1400), 1400);
  EXPECT_EQ(bridge_mtu_for(1450), 1450);
  EXPECT_EQ(bridge_mtu_for(1500), 0);
  EXPECT_EQ(bridge_mtu_for(9000), 0) << "jumbo uplinks keep the engine's 1500";
  EXPECT_EQ(bridge_mtu_for(68), 0) << "nonsense is ignored";
  EXPECT_EQ(bridge_mtu_for(std::nullopt), 0);
}

TEST(UplinkMtu, ThisHostsUplinkReadsWithoutError) {
  // Whatever this machine has; a host with a default route has an MTU for it.
  const auto mtu = uplink_mtu();
  if (mtu) {
    EXPECT_GE(*mtu, 68);
  }
}

}  // namespace
}  // namespace gpucloud::agent
