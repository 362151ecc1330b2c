#include "agent/firewall/port_rules.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace gpucloud::agent::firewall {

namespace {

struct Cidr {
  std::uint32_t address = 0;  // host byte order
  int prefix = 0;
  auto operator<=>(const Cidr&) const = default;
};

std::uint32_t mask_of(int prefix) {
  return prefix == 0 ? 0u : ~std::uint32_t{0} << (32 - prefix);
}

bool contains(const Cidr& outer, const Cidr& inner) {
  return outer.prefix <= inner.prefix && (inner.address & mask_of(outer.prefix)) == outer.address;
}

// A decimal number of 1..max_digits digits, no sign, no leading zero (except "0" itself).
std::optional<unsigned> parse_decimal(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<std::uint32_t> parse_ipv4(std::string_view text) {
  std::uint32_t address = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t dot = text.find('.');
    if ((i < 3) != (dot != std::string_view::npos)) return std::nullopt;
    const std::string_view part = i < 3 ? text.substr(0, dot) : text;
    const auto octet = parse_decimal(part, 3);
    if (!octet || *octet > 255) return std::nullopt;
    address = (address << 8) | *octet;
    if (i < 3) text.remove_prefix(dot + 1);
  }
  return address;
}

std::string format_ipv4(std::uint32_t a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", (a >> 24) & 255u, (a >> 16) & 255u,
                (a >> 8) & 255u, a & 255u);
  return buf;
}

std::string format_cidr(const Cidr& c) {
  return format_ipv4(c.address) + "/" + std::to_string(c.prefix);
}

Result<Cidr> parse_cidr(std::string_view text, bool allow_bare_address) {
  const std::size_t slash = text.find('/');
  const auto address = parse_ipv4(text.substr(0, slash));
  if (!address) {
    return fail(ErrorCode::invalid_argument,
                "\"" + std::string(text) + "\" is not an IPv4 CIDR (a.b.c.d/n)");
  }
  Cidr cidr{*address, 32};
  if (slash == std::string_view::npos) {
    if (!allow_bare_address) {
      return fail(ErrorCode::invalid_argument,
                  "\"" + std::string(text) + "\" lacks a prefix length (a.b.c.d/n)");
    }
    return cidr;
  }
  const auto prefix = parse_decimal(text.substr(slash + 1), 2);
  if (!prefix || *prefix > 32) {
    return fail(ErrorCode::invalid_argument,
                "\"" + std::string(text) + "\" has an invalid prefix length (0-32)");
  }
  cidr.prefix = static_cast<int>(*prefix);
  if ((cidr.address & ~mask_of(cidr.prefix)) != 0) {
    return fail(ErrorCode::invalid_argument,
                "\"" + std::string(text) + "\" has host bits set; the network is " +
                    format_cidr({cidr.address & mask_of(cidr.prefix), cidr.prefix}));
  }
  return cidr;
}

bool is_instance_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == ':' || c == '-';
  });
}

// An address a container can have: not 0/8 ("this network"), loopback, multicast, reserved
// or broadcast.
bool is_unicast_host(std::uint32_t a) {
  const std::uint32_t first = a >> 24;
  return first != 0 && first != 127 && first < 224;
}

// The sources of one port, reduced to what nft needs: nullopt for "everyone", otherwise the
// sorted CIDRs none of which contains another (one set element each, no duplicates).
std::optional<std::vector<Cidr>> reduce_sources(const std::vector<SourceRule>& allowed) {
  std::vector<Cidr> cidrs;
  for (const auto& rule : allowed) cidrs.push_back(*parse_cidr(rule.cidr, false));
  std::sort(cidrs.begin(), cidrs.end(),
            [](const Cidr& a, const Cidr& b) { return std::tie(a.prefix, a.address) < std::tie(b.prefix, b.address); });
  std::vector<Cidr> kept;
  for (const auto& c : cidrs) {
    if (c.prefix == 0) return std::nullopt;
    const bool covered =
        std::any_of(kept.begin(), kept.end(), [&](const Cidr& k) { return contains(k, c); });
    if (!covered) kept.push_back(c);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::string port_error(std::size_t index, const PublishedPort& p, const std::string& what) {
  return "published port #" + std::to_string(index) + " (instance \"" + p.instance_id +
         "\", host port " + std::to_string(p.host_port) + "): " + what;
}

}  // namespace

Result<std::string> canonical_cidr(std::string_view text) {
  auto cidr = parse_cidr(text, true);
  if (!cidr) return fail(cidr.error());
  return format_cidr(*cidr);
}

bool is_ipv4_address(std::string_view text) { return parse_ipv4(text).has_value(); }

bool is_valid_table_name(std::string_view name) {
  constexpr std::string_view prefix = "gpucloud";
  if (name.size() > 63 || name.substr(0, prefix.size()) != prefix) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

Status validate(const std::vector<PublishedPort>& ports) {
  std::map<std::pair<std::string, int>, std::size_t> seen;  // (protocol, host port) → index
  for (std::size_t i = 0; i < ports.size(); ++i) {
    const auto& p = ports[i];
    if (!is_instance_id(p.instance_id)) {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, "instance_id must be 1-64 characters of [A-Za-z0-9_.:-]"));
    }
    if (p.protocol != "tcp" && p.protocol != "udp") {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, "protocol must be \"tcp\" or \"udp\", not \"" + p.protocol + "\""));
    }
    if (p.host_port < 1 || p.host_port > 65535) {
      return fail(ErrorCode::invalid_argument, port_error(i, p, "host_port must be 1-65535"));
    }
    if (p.container_port < 1 || p.container_port > 65535) {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, "container_port " + std::to_string(p.container_port) +
                                       " must be 1-65535"));
    }
    const auto ip = parse_ipv4(p.container_ip);
    if (!ip) {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, "container_ip \"" + p.container_ip + "\" is not an IPv4 address"));
    }
    if (!is_unicast_host(*ip)) {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, "container_ip " + p.container_ip +
                                       " is not a unicast host address"));
    }
    for (const auto& rule : p.allowed) {
      auto cidr = parse_cidr(rule.cidr, false);
      if (!cidr) return fail(ErrorCode::invalid_argument, port_error(i, p, cidr.error().detail));
    }
    const auto [it, inserted] = seen.emplace(std::make_pair(p.protocol, p.host_port), i);
    if (!inserted) {
      return fail(ErrorCode::invalid_argument,
                  port_error(i, p, p.protocol + " host port already published by port #" +
                                       std::to_string(it->second) + " (instance \"" +
                                       ports[it->second].instance_id + "\")"));
    }
  }
  return ok();
}

bool is_valid_interface_name(std::string_view name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

Result<std::string> render_ruleset(const std::string& table_name,
                                   const std::vector<PublishedPort>& ports_in,
                                   const HostGuard& guard) {
  if (!is_valid_table_name(table_name)) {
    return fail(ErrorCode::invalid_argument,
                "nftables table name \"" + table_name +
                    "\" must start with \"gpucloud\" and use only [a-z0-9_-] (63 at most)");
  }
  if (auto valid = validate(ports_in); !valid) return fail(valid.error());
  for (const auto& name : guard.interfaces) {
    if (!is_valid_interface_name(name)) {
      return fail(ErrorCode::invalid_argument,
                  "guarded interface \"" + name + "\" is not a Linux interface name ([A-Za-z0-9_.-]{1,15})");
    }
  }

  std::vector<const PublishedPort*> ports;
  for (const auto& p : ports_in) ports.push_back(&p);
  std::sort(ports.begin(), ports.end(), [](const PublishedPort* a, const PublishedPort* b) {
    return std::tie(a->protocol, a->host_port) < std::tie(b->protocol, b->host_port);
  });
  std::set<std::uint32_t> container_ips;
  for (const auto* p : ports) container_ips.insert(*parse_ipv4(p->container_ip));

  // Sources, one set per prefix length: a hash set keyed by the port and the source's network
  // (the source address masked to that length). A concatenated interval set would hold them
  // all in one, but the kernel's pipapo set inserts in time growing with its size (quadratic
  // in all: 40,000 elements took 4 s), while hash inserts stay constant. At most 33 sets, so
  // the chain's rule count is bounded whatever the number of ports.
  std::vector<std::string> open_ports;                      // "tcp . 30022" (0.0.0.0/0)
  // 32..1 → "tcp . 30022 . 10.0.0.0", in the ports' order (sorted above).
  std::map<int, std::vector<std::string>, std::greater<>> by_prefix;
  for (const auto* p : ports) {
    const std::string key = p->protocol + " . " + std::to_string(p->host_port);
    const auto sources = reduce_sources(p->allowed);
    if (!sources) {
      open_ports.push_back(key);
      continue;
    }
    for (const auto& c : *sources) by_prefix[c.prefix].push_back(key + " . " + format_ipv4(c.address));
  }

  char mark[16];
  std::snprintf(mark, sizeof mark, "0x%08x", kAllowedConnmark);
  const std::string allowed_verdict = " ct mark set ct mark or " + std::string(mark) + " accept\n";
  const std::string t = "table ip " + table_name;
  std::string s;
  s.reserve(256 + ports.size() * 120);
  // Declared (so the delete succeeds the first time), deleted and defined again in one
  // transaction: packets see the old table until nft commits, then the new one, never
  // neither. Not "flush table": that keeps the sets' elements.
  s += "# gpucloud published ports: generated, replaced whole on every change.\n";
  s += t + " {}\n";
  s += "delete " + t + "\n";
  s += t + " {\n";

  // The per-port data lives in sets and maps (one element per port or source); the chains
  // below have a fixed number of rules, so nft's work grows linearly with the ports.
  auto elements = [&s](const std::vector<std::string>& items) {
    if (items.empty()) return;
    s += "    elements = {\n";
    for (std::size_t i = 0; i < items.size(); ++i) {
      s += "      " + items[i] + (i + 1 < items.size() ? ",\n" : "\n");
    }
    s += "    }\n";
  };
  std::vector<std::string> items;
  // (protocol, host port) → (container address, container port): the DNAT targets.
  s += "  map published {\n";
  s += "    type inet_proto . inet_service : ipv4_addr . inet_service\n";
  for (const auto* p : ports) {
    items.push_back(p->protocol + " . " + std::to_string(p->host_port) + " comment \"" + p->instance_id +
                    "\" : " + p->container_ip + " . " + std::to_string(p->container_port));
  }
  elements(items);
  s += "  }\n";
  // The same keys as a set: what the sources chain guards.
  items.clear();
  for (const auto* p : ports) items.push_back(p->protocol + " . " + std::to_string(p->host_port));
  s += "  set published_ports {\n";
  s += "    type inet_proto . inet_service\n";
  elements(items);
  s += "  }\n";
  items.clear();
  for (auto ip : container_ips) items.push_back(format_ipv4(ip));
  s += "  set container_ips {\n";
  s += "    type ipv4_addr\n";
  elements(items);
  s += "  }\n";
  if (!open_ports.empty()) {
    s += "  set allow_any {\n";
    s += "    type inet_proto . inet_service\n";
    elements(open_ports);
    s += "  }\n";
  }
  for (const auto& [prefix, sources] : by_prefix) {
    s += "  set allow_" + std::to_string(prefix) + " {\n";
    s += "    type inet_proto . inet_service . ipv4_addr\n";
    elements(sources);
    s += "  }\n";
  }

  // route_localnet=1 (needed to DNAT the host's own 127.0.0.1 connections) would also let
  // other hosts send to 127.0.0.0/8 on our interfaces; drop those before conntrack and NAT,
  // the way kube-proxy guards the same setting (CVE-2020-8558).
  s += "  chain localnet_guard {\n";
  s += "    type filter hook prerouting priority -300; policy accept;\n";
  s += "    iif != \"lo\" ip daddr 127.0.0.0/8 counter drop\n";  // counted: what it met, for the operator and tests
  s += "  }\n";

  // Sources are checked on every packet a client sends to a published host port (the
  // original direction of its connection), after conntrack (-200) and before our DNAT (-101),
  // on the port the client asked for: a rule change cuts connections already established
  // from a source it no longer allows, at once and in the same transaction (no conntrack
  // flush to race with). Replies (the reply direction) are never checked. Connections the
  // host makes itself never pass the prerouting hook (their DNAT is in `output`). An accept
  // here does not end the packet's way (later base chains, Docker's FORWARD among them, still
  // run), so allowed connections are also marked for the DOCKER-USER rule that nftables.cpp
  // keeps; a drop here is final.
  s += "  chain sources {\n";
  s += "    type filter hook prerouting priority -110; policy accept;\n";
  s += "    ct direction reply accept\n";
  s += "    meta l4proto . th dport != @published_ports accept\n";
  // Only connections to the host's own addresses: a container's outbound connection to some
  // remote host's port 30022 is not ours to check.
  s += "    fib daddr type != local accept\n";
  if (!open_ports.empty()) s += "    meta l4proto . th dport @allow_any" + allowed_verdict;
  for (const auto& [prefix, sources] : by_prefix) {
    s += "    meta l4proto . th dport . ip saddr ";
    if (prefix < 32) s += "& " + format_ipv4(mask_of(prefix)) + " ";
    s += "@allow_" + std::to_string(prefix) + allowed_verdict;
  }
  s += "    drop\n";
  s += "  }\n";

  // Before Docker's own nat chains (priority -100): the first DNAT of a connection wins.
  // Only connections to the host's own addresses, as above.
  const std::string dnat = "    fib daddr type local dnat ip to meta l4proto . th dport map @published\n";
  s += "  chain prerouting {\n";
  s += "    type nat hook prerouting priority -101; policy accept;\n";
  s += dnat;
  s += "  }\n";
  // The host's own connections (127.0.0.1 and every local address).
  s += "  chain output {\n";
  s += "    type nat hook output priority -101; policy accept;\n";
  s += dnat;
  s += "  }\n";
  // A packet from 127.0.0.1 cannot leave the host: give it the outgoing interface's address.
  s += "  chain postrouting {\n";
  s += "    type nat hook postrouting priority 99; policy accept;\n";
  s += "    ip saddr 127.0.0.0/8 ip daddr @container_ips ct status dnat masquerade\n";
  s += "  }\n";
  // Instances reach nothing on the host itself (HostGuard) but its DNS and ping: the input hook sees only what is
  // delivered locally, after the prerouting DNAT, so published ports (forwarded) pass. The
  // priority is below iptables' filter INPUT (0), so no accept there can let it through
  // first; a drop here is final whatever later chains say.
  if (!guard.interfaces.empty()) {
    std::set<std::string> names(guard.interfaces.begin(), guard.interfaces.end());
    s += "  chain host_guard {\n";
    s += "    type filter hook input priority -10; policy accept;\n";
    for (const auto& name : names) {
      s += "    iifname \"" + name + "\" ct state established,related accept\n";
      s += "    iifname \"" + name + "\" meta l4proto { tcp, udp } th dport 53 accept\n";
      s += "    iifname \"" + name + "\" icmp type echo-request accept\n";
      s += "    iifname \"" + name + "\" drop\n";
    }
    s += "  }\n";
  }
  s += "}\n";
  return s;
}

}  // namespace gpucloud::agent::firewall
