#include "agent/instance_runtime.h"

// gpucloud's bridge network (its subnet chosen once and kept) and the instances' fixed
// addresses on it.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "agent/firewall/port_rules.h"
#include "agent/instance_runtime_internal.h"

namespace gpucloud::agent {

namespace net = boost::asio;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

namespace {

constexpr int kSubnetAttempts = 64;

// ---- IPv4 arithmetic ---------------------------------------------------------------------

std::optional<std::uint32_t> parse_ipv4(std::string_view text) {
  if (!firewall::is_ipv4_address(text)) return std::nullopt;
  std::uint32_t value = 0;
  int octet = 0;
  for (char c : text) {
    if (c == '.') {
      value = (value << 8) | static_cast<std::uint32_t>(octet);
      octet = 0;
    } else {
      octet = octet * 10 + (c - '0');
    }
  }
  return (value << 8) | static_cast<std::uint32_t>(octet);
}

std::string format_ipv4(std::uint32_t v) {
  return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 255) + "." +
         std::to_string((v >> 8) & 255) + "." + std::to_string(v & 255);
}

struct Subnet {
  std::uint32_t base = 0;
  int prefix = 0;
  std::uint32_t size() const { return prefix == 0 ? 0 : (std::uint32_t{1} << (32 - prefix)); }
  bool contains(std::uint32_t ip) const { return ip - base < size(); }
};

std::optional<Subnet> parse_subnet(std::string_view cidr) {
  auto canonical = firewall::canonical_cidr(cidr);
  if (!canonical || cidr.find('/') == std::string_view::npos) return std::nullopt;
  const auto slash = canonical->find('/');
  auto base = parse_ipv4(std::string_view(*canonical).substr(0, slash));
  const int prefix = std::atoi(canonical->c_str() + slash + 1);
  if (!base || prefix < 8 || prefix > 29) return std::nullopt;  // room for gateway + hosts
  return Subnet{*base, prefix};
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The i-th subnet to try for an installation: 10.<200..254>.<0..255>.0/24, starting at a
// point derived from the installation id (so two installations on one host rarely meet) and
// stepping by a prime co-prime with the candidate count (every candidate once).
std::string subnet_candidate(std::string_view installation_id, int i) {
  constexpr std::uint64_t kCount = 55 * 256;
  const std::uint64_t index = (fnv1a(installation_id) + static_cast<std::uint64_t>(i) * 7919) % kCount;
  return "10." + std::to_string(200 + index / 256) + "." + std::to_string(index % 256) + ".0/24";
}

}  // namespace

// ---- the network -------------------------------------------------------------------------

// A network made before the MTU was set (or by another version) keeps its MTU: changing it
// means removing it with every instance detached, so the operator is told instead.
void InstanceRuntime::warn_if_mtu_differs(const NetworkInfo& info) const {
  const int have = info.mtu > 0 ? info.mtu : 1500, want = options_.network_mtu > 0 ? options_.network_mtu : 1500;
  if (have > want)
    spdlog::warn(R"({{"event":"instance_network_mtu","network":"{}","mtu":{},"uplink_mtu":{},)"
                 R"("detail":"instances' full-size packets exceed the uplink; recreate the network with no instance on it"}})",
                 network_name_, have, want);
}

awaitable<Status> InstanceRuntime::ensure_network() {
  if (network_checked_) co_return ok();
  co_await network_lock_->lock();
  Unlocker guard(*network_lock_);
  if (network_checked_) co_return ok();
  NetworkSpec spec;
  spec.name = network_name_;
  spec.labels = {{std::string(kInstallationLabel), installation_id_}};
  spec.icc = false;
  spec.mtu = options_.network_mtu;
  if (network_) {
    spec.subnet = network_->subnet;
    auto info = co_await driver_->ensure_network(spec);
    if (!info) co_return fail(std::move(info.error()));
    warn_if_mtu_differs(*info);
    if ((info->gateway != network_->gateway && !info->gateway.empty()) ||
        (info->bridge_name != network_->bridge && !info->bridge_name.empty())) {
      NetworkRecord updated = *network_;
      if (!info->gateway.empty()) updated.gateway = info->gateway;
      if (!info->bridge_name.empty()) updated.bridge = info->bridge_name;
      if (auto s = co_await save_network_record(updated); !s) co_return s;
      network_ = std::move(updated);
    }
    network_checked_ = true;
    co_return ok();
  }
  // First start: pick a subnet nobody on this host uses, and keep it.
  std::string last_error;
  for (int i = 0; i < kSubnetAttempts; ++i) {
    spec.subnet = subnet_candidate(installation_id_, i);
    auto info = co_await driver_->ensure_network(spec);
    if (!info && contains(info.error().detail, "exists with subnet")) {
      // Our network exists already (its record was lost): adopt its subnet.
      spec.subnet.clear();
      info = co_await driver_->ensure_network(spec);
      if (info && !parse_subnet(info->subnet)) {
        co_return fail(ErrorCode::conflict, "network " + network_name_ + " has subnet '" + info->subnet +
                                                "', not an IPv4 subnet with room for instances");
      }
    }
    if (info) {
      warn_if_mtu_differs(*info);
      NetworkRecord record{network_name_, info->subnet, info->gateway, info->bridge_name};
      if (auto s = co_await save_network_record(record); !s) co_return s;
      network_ = std::move(record);
      network_checked_ = true;
      spdlog::info(R"({{"event":"instance_network_ready","network":"{}","subnet":"{}","created":{}}})",
                   network_name_, network_->subnet, info->created);
      co_return ok();
    }
    const Error& e = info.error();
    last_error = e.detail;
    // The engine refuses a subnet overlapping one of its other networks (403 "Pool overlaps").
    const bool taken = e.code == ErrorCode::conflict || contains(e.detail, "overlap");
    if (!taken || contains(e.detail, "exists with")) co_return fail(e);
  }
  co_return fail(ErrorCode::unavailable, "no free subnet for network " + network_name_ + " after " +
                                             std::to_string(kSubnetAttempts) + " tries: " + last_error);
}

awaitable<Result<std::string>> InstanceRuntime::allocate_ip(std::string instance_id,
                                                            std::string preferred) {
  if (!network_) co_return fail(ErrorCode::internal, "no network yet");
  auto subnet = parse_subnet(network_->subnet);
  if (!subnet) co_return fail(ErrorCode::internal, "network subnet '" + network_->subnet + "' is unusable");
  // Addresses held by any container of this installation (unknown ones included: a stopped
  // container's fixed address is claimed again when it starts).
  std::set<std::uint32_t> used;
  std::map<std::string, std::string> filter{{std::string(kInstallationLabel), installation_id_}};
  auto containers = co_await driver_->list(std::move(filter));
  if (!containers) co_return fail(std::move(containers.error()));
  // From here to the end nothing suspends: the choice and its reservation are atomic.
  std::set<std::uint32_t> recorded;
  for (const auto& [id, slot] : instances_) {
    if (slot->record && id != instance_id) {
      if (auto ip = parse_ipv4(slot->record->ipv4)) recorded.insert(*ip);
    }
  }
  for (const auto& ip : reserved_ips_) {
    if (auto v = parse_ipv4(ip)) recorded.insert(*v);
  }
  for (const auto& h : pool_) {
    if (auto v = parse_ipv4(h.ipv4)) recorded.insert(*v);
  }
  used = recorded;
  for (const auto& c : *containers) {
    if (auto it = c.labels.find(std::string(kInstanceLabel)); it != c.labels.end() && it->second == instance_id) {
      continue;
    }
    if (auto ip = parse_ipv4(c.ipv4)) used.insert(*ip);
  }
  const std::uint32_t first = subnet->base + 2, last = subnet->base + subnet->size() - 2;
  std::optional<std::uint32_t> gateway;
  if (auto g = parse_ipv4(network_->gateway)) gateway = *g;
  std::optional<std::uint32_t> chosen;
  if (auto p = parse_ipv4(preferred); p && *p >= first && *p <= last && !recorded.count(*p) && gateway != *p) {
    chosen = *p;
  }
  for (std::uint32_t ip = first; !chosen && ip <= last; ++ip) {
    if (!used.count(ip) && gateway != ip) chosen = ip;
  }
  if (!chosen) {
    co_return fail(ErrorCode::no_capacity, "no free address left in " + network_->subnet);
  }
  const std::string text = format_ipv4(*chosen);
  reserved_ips_.insert(text);
  co_return text;
}

}  // namespace gpucloud::agent
