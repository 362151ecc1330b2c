#pragma once
// The MTU of the interface that carries the host's default route. Docker makes its bridges
// 1500 whatever the uplink has, so on a host whose uplink is smaller (1400 or 1450 on many
// cloud VMs and tunnels) an instance's full-size packets are dropped past the host, and TCP
// transfers stall where path-MTU discovery is filtered (pip, git clone). The agent gives
// gpucloud's bridge the uplink's MTU when it is below 1500.
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpucloud::agent {

// From /proc/net/route's text: the default route (destination and mask 0) of the lowest
// metric, its interface's MTU by `mtu_of`. nullopt when there is no default route.
std::optional<int> uplink_mtu_from(std::string_view proc_net_route,
                                   const std::function<std::optional<int>(const std::string& iface)>& mtu_of);
// The same, read from /proc/net/route and /sys/class/net/IFACE/mtu (small files, read once at
// start-up).
std::optional<int> uplink_mtu();
// What gpucloud's bridge should be given: the uplink's MTU when it is in [576, 1500), else 0
// (the engine's default, 1500).
int bridge_mtu_for(std::optional<int> uplink);

}  // namespace gpucloud::agent
