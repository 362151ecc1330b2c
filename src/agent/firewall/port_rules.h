#pragma once
// An instance's declared ports, published on host ports with gpucloud's own nftables table
// (DNAT to the instance's fixed address, not the engine's port publishing), and the security
// group's sources for each, rendered as one nft script that replaces the table atomically.
//
// Semantics (spec "Ports", "Security group"):
// - A published port is reachable from a remote source only if one of its `allowed` CIDRs
//   contains the source; an empty `allowed` makes it unreachable from every other host (the
//   caller passes {"0.0.0.0/0"} while an instance has no security group).
// - Connections the host itself makes (to 127.0.0.1 or any of its own addresses) are the
//   operator's and are always let through: they are DNATed in the output hook and leave on
//   the container's bridge, never passing the prerouting hook, where the sources are checked.
// - Containers on this host reaching a published port through a host address are remote
//   sources like any other (checked against `allowed` by their own address).
// - A rule change applies at once (nft -f is synchronous), to connections already
//   established too: every packet a client sends is checked against the sources, so a source
//   no longer allowed gets nothing through once apply() returns (replies are not checked).
//
// Pure: no I/O here; nftables.h applies the script.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gpucloud::agent::firewall {

struct SourceRule {
  std::string cidr;  // canonical IPv4 CIDR, e.g. "10.0.0.0/8", "203.0.113.7/32", "0.0.0.0/0"
};

struct PublishedPort {
  std::string instance_id;  // written into the rules' comments; [A-Za-z0-9_.:-]{1,64}
  int host_port = 0;        // 1-65535, unique per protocol
  std::string container_ip;  // the instance's fixed IPv4 address on its bridge network
  int container_port = 0;    // 1-65535
  std::string protocol = "tcp";  // "tcp" | "udp"
  std::vector<SourceRule> allowed;  // empty: nobody but the host itself
};

// The conntrack mark bit our sources chain sets on connections it allows. Docker's FORWARD
// chain (policy DROP on Docker hosts) accepts them through one static rule in its DOCKER-USER
// chain that matches this bit (see nftables.h for why).
inline constexpr std::uint32_t kAllowedConnmark = 0x10000000;

// "10.1.2.3" (as /32) or "10.1.2.0/24" → the canonical "a.b.c.d/n"; refuses host bits set
// ("10.1.2.3/24"), leading zeros, out-of-range octets or prefixes. For callers that take
// CIDRs from users (security groups); render_ruleset itself wants them canonical already.
Result<std::string> canonical_cidr(std::string_view text);

// Whether `text` is a dotted-quad IPv4 address in canonical form (no leading zeros).
bool is_ipv4_address(std::string_view text);

// Table names must start with "gpucloud" (then [a-z0-9_-], 63 characters at most): nft takes
// them unquoted, so a name like "counter" or "ip" would parse as a keyword, and the prefix
// keeps the agent from ever replacing a table that is not gpucloud's.
bool is_valid_table_name(std::string_view name);

// Checks every field; invalid_argument naming the first offending port and field.
Status validate(const std::vector<PublishedPort>& ports);

// The host's own services, closed to instances: nothing arriving on one of `interfaces` (the
// instance bridges, Linux names of 1-15 characters [A-Za-z0-9_.-]) is delivered to the host
// itself (to any of its addresses, the bridge's gateway among them: the input hook), except
// replies to connections the host made (ct state established,related) and DNS (port 53: the
// engine's resolver at 127.0.0.11 in the container forwards from the container's namespace to
// the host's resolvers, which may be the host itself) and ICMP echo (ping the gateway: the
// kernel answers, no service). A published port reached through a
// host address is DNATed to its instance before routing (forwarded, never delivered).
// Traffic forwarded through the host (an instance's egress, other instances' published ports)
// is not touched.
struct HostGuard {
  std::vector<std::string> interfaces;  // empty: no guard chain
};
bool is_valid_interface_name(std::string_view name);

// The complete script for `nft -f -`: declare the table, delete it and define it again, all
// in the one transaction nft makes of a file (packets meet the old table or the new one,
// never neither). The per-port data is in named sets and maps: `published` (protocol . host
// port : container address . port, the DNAT targets), `published_ports`, `container_ips`,
// and the sources, `allow_any` (ports open to 0.0.0.0/0) and one `allow_N` per prefix length
// N in use (protocol . host port . source network). The chains have a fixed number of rules
// (sources at most 37, the others one each): localnet_guard, sources (the filter, in
// prerouting before the DNAT), prerouting, output, postrouting, and host_guard (input; two
// rules per guarded interface). Ports and sources are
// sorted, so the same set gives byte-identical text whatever the input order. Never touches
// any other table.
// With a non-empty `guard`, a `host_guard` input chain too (see HostGuard).
Result<std::string> render_ruleset(const std::string& table_name,
                                   const std::vector<PublishedPort>& ports,
                                   const HostGuard& guard = {});

}  // namespace gpucloud::agent::firewall
