#include "security_groups/rules.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <iterator>
#include <set>

#include <boost/json.hpp>

#include "api/json_input.h"

namespace gpucloud::security_groups {
namespace json = boost::json;

namespace {

std::optional<int> parse_prefix(std::string_view text, int max) {
  if (text.empty() || text.size() > 3 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0 || value > max) return std::nullopt;
  return value;
}

// Clears every bit past `prefix` in the address bytes.
template <std::size_t N>
void clear_host_bits(std::array<unsigned char, N>& bytes, int prefix) {
  for (std::size_t i = 0; i < N; ++i) {
    const int bit = static_cast<int>(i) * 8;
    if (bit >= prefix) {
      bytes[i] = 0;
    } else if (prefix - bit < 8) {
      bytes[i] &= static_cast<unsigned char>(0xff << (8 - (prefix - bit)));
    }
  }
}

Result<int> port_field(const json::object& o, std::string_view field, const std::string& where) {
  auto v = api::required_int(o, field);
  if (!v) return fail(ErrorCode::invalid_argument, where + "." + v.error().detail);
  if (*v < 1 || *v > 65535) return fail(ErrorCode::invalid_argument, where + "." + std::string(field) + ": must be 1-65535");
  return static_cast<int>(*v);
}

// A canonical CIDR as (address bits, left-aligned in 128 bits; prefix; family width).
struct Net {
  unsigned __int128 bits = 0;
  int prefix = 0;
  int width = 32;
};

std::optional<Net> parse_net(const std::string& canonical) {
  const std::size_t slash = canonical.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string address = canonical.substr(0, slash);
  const auto prefix = parse_prefix(std::string_view(canonical).substr(slash + 1), 128);
  if (!prefix) return std::nullopt;
  Net net;
  net.prefix = *prefix;
  std::array<unsigned char, 16> bytes{};
  std::size_t n = 4;
  if (address.find(':') != std::string::npos) {
    if (::inet_pton(AF_INET6, address.c_str(), bytes.data()) != 1) return std::nullopt;
    n = 16;
    net.width = 128;
  } else if (::inet_pton(AF_INET, address.c_str(), bytes.data()) != 1) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < 16; ++i) net.bits = (net.bits << 8) | (i < n ? bytes[i] : 0);
  return net;
}

bool net_contains(const Net& outer, const Net& inner) {
  if (outer.prefix > inner.prefix) return false;
  if (outer.prefix == 0) return true;
  const int shift = 128 - outer.prefix;
  return (outer.bits >> shift) == (inner.bits >> shift);
}

}  // namespace

bool covers_half(const std::vector<std::string>& sources) {
  std::vector<Net> nets;
  for (const auto& s : sources) {
    if (auto n = parse_net(s)) nets.push_back(*n);
  }
  // Two CIDRs are nested or disjoint: the union's size is the sum of the outermost ones'.
  std::sort(nets.begin(), nets.end(), [](const Net& a, const Net& b) { return a.prefix < b.prefix; });
  std::vector<Net> outer;
  for (const auto& n : nets) {
    if (std::none_of(outer.begin(), outer.end(), [&](const Net& o) { return net_contains(o, n); })) outer.push_back(n);
  }
  // In units of the family's space / 2^width: half is 2^(width-1); a /p holds 2^(width-p).
  unsigned __int128 sum = 0;
  for (const auto& o : outer) {
    if (o.prefix == 0) return true;
    sum += static_cast<unsigned __int128>(1) << (o.width - o.prefix);
    if (sum >= static_cast<unsigned __int128>(1) << (o.width - 1)) return true;
  }
  return false;
}

std::string_view to_string(Protocol p) { return p == Protocol::udp ? "udp" : "tcp"; }

std::optional<Protocol> parse_protocol(std::string_view text) {
  if (text == "tcp") return Protocol::tcp;
  if (text == "udp") return Protocol::udp;
  return std::nullopt;
}

Result<std::string> normalize_cidr(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    // Appended, not "..." + std::string(...): g++ 12 at -O3 warns falsely about the latter.
    std::string detail = "\"";
    detail.append(text.substr(0, 64)).append("\" is not a CIDR (").append(why).append(")");
    return fail(ErrorCode::invalid_argument, std::move(detail));
  };
  if (text.size() > 64) return bad("too long");
  const std::size_t slash = text.find('/');
  const std::string address(text.substr(0, slash));
  const bool v6 = address.find(':') != std::string::npos;
  std::optional<int> prefix = v6 ? 128 : 32;
  if (slash != std::string_view::npos) {
    prefix = parse_prefix(text.substr(slash + 1), v6 ? 128 : 32);
    if (!prefix) return bad(v6 ? "prefix length 0-128" : "prefix length 0-32");
  }
  char out[INET6_ADDRSTRLEN] = {};
  if (v6) {
    std::array<unsigned char, 16> bytes{};
    if (::inet_pton(AF_INET6, address.c_str(), bytes.data()) != 1) return bad("not an IPv6 address");
    clear_host_bits(bytes, *prefix);
    ::inet_ntop(AF_INET6, bytes.data(), out, sizeof out);
  } else {
    // inet_pton takes only the dotted quad, no leading zeros or short forms.
    std::array<unsigned char, 4> bytes{};
    if (::inet_pton(AF_INET, address.c_str(), bytes.data()) != 1) return bad("a.b.c.d/n or an IPv6 address");
    clear_host_bits(bytes, *prefix);
    ::inet_ntop(AF_INET, bytes.data(), out, sizeof out);
  }
  return std::string(out) + "/" + std::to_string(*prefix);
}

bool is_ipv6_cidr(std::string_view canonical) { return canonical.find(':') != std::string_view::npos; }

bool opens_everything(const Rule& rule) {
  return rule.port_min == 1 && rule.port_max == 65535 && (rule.source == "0.0.0.0/0" || rule.source == "::/0");
}

Result<std::vector<Rule>> parse_rules(const json::value& value, bool acknowledge_risk) {
  if (!value.is_array()) return fail(ErrorCode::invalid_argument, "rules: must be a list of rules");
  const auto& items = value.as_array();
  if (items.size() > kMaxRules) {
    return fail(ErrorCode::invalid_argument, "rules: at most " + std::to_string(kMaxRules) + " rules");
  }
  std::vector<Rule> rules;
  for (std::size_t n = 0; n < items.size(); ++n) {
    const std::string where = "rules[" + std::to_string(n) + "]";
    if (!items[n].is_object()) return fail(ErrorCode::invalid_argument, where + ": must be an object");
    const auto& o = items[n].as_object();
    if (auto s = api::only_fields(o, {"protocol", "port_min", "port_max", "source", "description"}, where + "."); !s)
      return fail(s.error());
    Rule rule;
    auto protocol = api::required_string(o, "protocol");
    if (!protocol) return fail(ErrorCode::invalid_argument, where + "." + protocol.error().detail);
    auto p = parse_protocol(*protocol);
    if (!p) return fail(ErrorCode::invalid_argument, where + ".protocol: must be \"tcp\" or \"udp\"");
    rule.protocol = *p;
    auto port_min = port_field(o, "port_min", where);
    if (!port_min) return fail(port_min.error());
    rule.port_min = rule.port_max = *port_min;
    if (o.contains("port_max") && !o.at("port_max").is_null()) {
      auto port_max = port_field(o, "port_max", where);
      if (!port_max) return fail(port_max.error());
      rule.port_max = *port_max;
    }
    if (rule.port_max < rule.port_min) {
      return fail(ErrorCode::invalid_argument, where + ".port_max: must not be below port_min");
    }
    auto source = api::required_string(o, "source");
    if (!source) return fail(ErrorCode::invalid_argument, where + "." + source.error().detail);
    auto cidr = normalize_cidr(*source);
    if (!cidr) return fail(ErrorCode::invalid_argument, where + ".source: " + cidr.error().detail);
    rule.source = *cidr;
    auto description = api::optional_string(o, "description");
    if (!description) return fail(ErrorCode::invalid_argument, where + "." + description.error().detail);
    rule.description = description->value_or("");
    if (rule.description.size() > kMaxDescription) {
      return fail(ErrorCode::invalid_argument, where + ".description: at most 255 bytes");
    }
    const bool seen = std::any_of(rules.begin(), rules.end(), [&](const Rule& r) {
      return r.protocol == rule.protocol && r.port_min == rule.port_min && r.port_max == rule.port_max &&
             r.source == rule.source;
    });
    if (!seen) rules.push_back(std::move(rule));
  }
  if (!acknowledge_risk) {
    if (const int wide = ports_open_to_most(rules); wide > kMaxWidelyOpenPorts) {
      return fail(ErrorCode::invalid_argument,
                  "rules: together open " + std::to_string(wide) +
                      " ports to at least half of the IPv4 or IPv6 address space (more than " +
                      std::to_string(kMaxWidelyOpenPorts) +
                      "); name the ports you serve, or send \"acknowledge_risk\": true");
    }
  }
  return rules;
}

int ports_open_to_most(const std::vector<Rule>& rules) {
  int total = 0;
  for (const Protocol protocol : {Protocol::tcp, Protocol::udp}) {
    // The ports where the covering rules change: every rule's port_min and port_max + 1.
    std::set<int> bounds{1, 65536};
    for (const auto& r : rules) {
      if (r.protocol != protocol) continue;
      bounds.insert(r.port_min);
      bounds.insert(r.port_max + 1);
    }
    for (auto it = bounds.begin(); std::next(it) != bounds.end(); ++it) {
      const int first = *it, end = *std::next(it);
      std::vector<std::string> v4, v6;
      for (const auto& r : rules) {
        if (r.protocol != protocol || r.port_min > first || r.port_max < first) continue;
        (is_ipv6_cidr(r.source) ? v6 : v4).push_back(r.source);
      }
      if (covers_half(v4) || covers_half(v6)) total += end - first;
    }
  }
  return total;
}

json::array rules_json(const std::vector<Rule>& rules) {
  json::array out;
  for (const auto& r : rules) {
    out.push_back(json::object{{"protocol", to_string(r.protocol)},
                               {"port_min", r.port_min},
                               {"port_max", r.port_max},
                               {"source", r.source},
                               {"description", r.description}});
  }
  return out;
}

Result<std::vector<Rule>> rules_from_text(std::string_view text) {
  boost::system::error_code ec;
  auto value = json::parse(text, ec);
  if (ec) return fail(ErrorCode::internal, "stored security group rules do not parse: " + ec.message());
  // Stored rules were validated when written; the risk was acknowledged then.
  auto rules = parse_rules(value, true);
  if (!rules) return fail(ErrorCode::internal, "stored security group rules: " + rules.error().detail);
  return rules;
}

std::vector<std::string> sources_for(const std::vector<Rule>& rules, Protocol protocol, int port) {
  std::set<std::string> out;
  for (const auto& r : rules) {
    if (r.protocol == protocol && r.port_min <= port && port <= r.port_max) out.insert(r.source);
  }
  return {out.begin(), out.end()};
}

}  // namespace gpucloud::security_groups
