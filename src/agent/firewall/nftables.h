#pragma once
// The host's published ports as gpucloud's own nftables table (port_rules.h renders it),
// replaced whole and atomically with `nft -f -`. Never `flush ruleset`, never any other
// table: Docker's rules (iptables-nft tables `ip nat`, `ip filter`) stay untouched, apart
// from the one rule below.
//
// Docker hosts: the engine sets the FORWARD policy to DROP and accepts only what it published
// itself. In netfilter an `accept` in one base chain ends only that chain: the packet still
// meets every later base chain (and hook), and a `drop` in any of them is final. So our
// sources chain (prerouting) accepting a connection is not enough; iptables' FORWARD
// (priority 0) would drop it. The cleanest fix that keeps every per-port decision in our own
// atomically replaced table: our sources chain sets a conntrack mark bit
// (kAllowedConnmark) on each connection it allows, and one static rule in Docker's
// DOCKER-USER chain (the engine's documented place for user rules, which it never flushes)
// accepts connections carrying the bit:
//   iptables -I DOCKER-USER -m connmark --mark 0x10000000/0x10000000
//            -m comment --comment gpucloud:TABLE -j ACCEPT
// The mark is on the connection, so replies and later packets pass too (also for addresses
// that are not on a Docker bridge, which Docker's own ESTABLISHED rules would not cover).
// The rule is written with the `iptables` binary, not `nft`: that binary is the one Docker
// itself uses, so the rule lands in whichever backend (nft or legacy) holds Docker's chains,
// in a form iptables can still parse (nft marks iptables-nft's tables "do not touch").
// apply() re-checks it every time (after a reboot or a firewall reset Docker re-creates
// DOCKER-USER without it); remove_table() deletes it. Hosts without a DOCKER-USER chain (no
// Docker, or no iptables) need nothing.
//
// apply() also makes sure net.ipv4.ip_forward=1 and net.ipv4.conf.all.route_localnet=1. The
// latter lets the host's own 127.0.0.1 connections be DNATed to an instance, but on its own
// it would also let other hosts (and a container with CAP_NET_RAW) reach the host's loopback
// services (CVE-2020-8558); the table's localnet_guard chain drops 127.0.0.0/8 arriving on any
// interface but lo. So route_localnet is on only while a guarding table exists:
// remove_table() turns it off again when no other gpucloud* table is left. ip_forward stays
// as it is (the engine needs it too).
//
// Needs root (CAP_NET_ADMIN) and the `nft` binary; errors carry nft's stderr.
#include <mutex>
#include <string>
#include <vector>

#include "agent/firewall/port_rules.h"
#include "core/result.h"

namespace gpucloud::agent::firewall {

// Every NftablesFirewall on the host (the agent's, tests' in other processes) holds an
// exclusive flock on this file while it changes tables, DOCKER-USER or sysctls, so one's
// remove_table() cannot turn route_localnet off under another's apply().
inline constexpr const char* kHostLockPath = "/run/gpucloud-nftables.lock";

class NftablesFirewall {
 public:
  explicit NftablesFirewall(std::string table_name = "gpucloud");
  NftablesFirewall(const NftablesFirewall&) = delete;
  NftablesFirewall& operator=(const NftablesFirewall&) = delete;

  const std::string& table_name() const { return table_name_; }

  // Replaces the table's whole content with `ports` in one nft transaction (new connections
  // see the new rules when this returns; established ones keep going). invalid_argument for
  // bad input (nothing changed); unavailable when nft cannot run or the sysctls cannot be
  // set; internal when nft or iptables refuses (their stderr in the detail).
  // `guard`: the instance bridges whose traffic may not reach the host (port_rules.h).
  Status apply(const std::vector<PublishedPort>& ports, const HostGuard& guard = {});

  // Deletes the table and our DOCKER-USER rule (and route_localnet, see above). Succeeds when
  // they are already gone.
  Status remove_table();

  // `nft list table ip NAME`, as nft prints it; not_found when the table does not exist.
  Result<std::string> current();

 private:
  Status ensure_sysctls();
  Status ensure_docker_user_rule();
  Status remove_docker_user_rule();
  Status release_route_localnet();

  std::string table_name_;
  std::mutex mutex_;
};

}  // namespace gpucloud::agent::firewall
