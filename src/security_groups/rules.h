#pragma once
// A security group's inbound rules: what a request may say, how it is normalised, and which
// sources a rule set lets reach one declared port (spec "Security group").
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include "core/result.h"

namespace gpucloud::security_groups {

inline constexpr std::size_t kMaxRules = 100;
inline constexpr std::size_t kMaxDescription = 255;

enum class Protocol { tcp, udp };
std::string_view to_string(Protocol p);
std::optional<Protocol> parse_protocol(std::string_view text);

struct Rule {
  Protocol protocol = Protocol::tcp;
  int port_min = 0, port_max = 0;  // 1-65535, port_min <= port_max
  std::string source;              // a canonical CIDR, v4 ("10.0.0.0/8") or v6 ("2001:db8::/32")
  std::string description;
  bool operator==(const Rule&) const = default;
};

// "10.1.2.3/8" → "10.0.0.0/8" (host bits cleared), "10.1.2.3" → "10.1.2.3/32",
// "2001:DB8::1/32" → "2001:db8::/32", a bare v6 address → /128. Refuses anything else.
Result<std::string> normalize_cidr(std::string_view text);
bool is_ipv6_cidr(std::string_view canonical);

// A rule that opens every port (1-65535) to every address (0.0.0.0/0 or ::/0).
bool opens_everything(const Rule& rule);

// Whether the union of `sources` (canonical CIDRs of one family) covers at least half of
// that family's address space (0.0.0.0/1 + 128.0.0.0/1 does; so does ::/1).
bool covers_half(const std::vector<std::string>& sources);
// How many (protocol, port) pairs `rules` together open to at least half of the IPv4 or of
// the IPv6 address space (the union of every rule covering the port, per family).
int ports_open_to_most(const std::vector<Rule>& rules);
// More widely open ports than this need acknowledge_risk.
inline constexpr int kMaxWidelyOpenPorts = 10;

// `rules` as a request gives them ([{protocol, port_min, port_max?, source, description?}],
// port_max defaulting to port_min), validated and normalised; duplicates collapse. Rules
// that together open more than kMaxWidelyOpenPorts ports to most of the address space
// (ports_open_to_most; 1-65535 from /0 among them) are refused unless the request
// acknowledges the risk. Errors name the field ("rules[2].source: ...").
Result<std::vector<Rule>> parse_rules(const boost::json::value& rules, bool acknowledge_risk);

boost::json::array rules_json(const std::vector<Rule>& rules);
// The stored form (rules_json serialised) back; a row that does not parse is an error.
Result<std::vector<Rule>> rules_from_text(std::string_view text);

// The sources (canonical CIDRs, sorted, no duplicates) that `rules` let reach `port`.
std::vector<std::string> sources_for(const std::vector<Rule>& rules, Protocol protocol, int port);

}  // namespace gpucloud::security_groups
