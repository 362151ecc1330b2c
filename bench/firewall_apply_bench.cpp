// Security-group ruleset apply time for 100, 1,000 and 10,000 instances' rule sets.
//
// Each simulated instance declares three ports (tcp 22, tcp 8888, udp 5353) on its own host
// ports, and its group allows tcp/22 from 0.0.0.0/0, tcp/8888 from three CIDRs and udp/5353
// from one: 3 published ports and 5 sources per instance. port_rules.h renders them as set and
// map elements (a DNAT map entry and a published-port entry per port, an address per
// instance, a source entry per port and CIDR: 12 per instance) under a fixed number of rules.
// For each size the table is rendered with port_rules.h (render_ruleset) and applied with
// nftables.h (NftablesFirewall, `nft -f -`, one atomic transaction), then applied again with
// one instance's 8888 rule changed (what a PUT /security-groups/{id} costs the agent: the
// whole table is replaced), then removed. Median of R repetitions.
//
// Where it runs: the process first moves into a network namespace of its own
// (unshare(CLONE_NEWNET)), so the 30,000 DNAT entries of the largest set, which match real host
// ports, never meet the host's traffic (other tests' daemons, the lead's instances) and
// nothing outlives the process, whatever happens to it. nft, the sysctls and the table are
// then those of the private namespace; it has no DOCKER-USER chain, so no iptables call is
// timed. The table name is unique per process (gpucloud-bench-PID). Needs root.
//
// Prints one row per size and a verdict: the per-instance apply time at 10,000 is at most
// 1.5x the one at 1,000 (linear or better). Exit 0 whatever the verdict, 2 when it cannot run.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "agent/firewall/nftables.h"
#include "agent/firewall/port_rules.h"

namespace {

using gpucloud::agent::firewall::NftablesFirewall;
using gpucloud::agent::firewall::PublishedPort;
using gpucloud::agent::firewall::render_ruleset;
using gpucloud::agent::firewall::SourceRule;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Instance i: address 10.(200 + i / 65536).(i / 256 % 256).(i % 256), host ports 20000 + 2i
// and 20001 + 2i (tcp) and 20000 + i (udp): unique per protocol up to 10,000 instances.
std::vector<PublishedPort> rule_sets(int instances, int changed = -1) {
  std::vector<PublishedPort> ports;
  ports.reserve(static_cast<std::size_t>(instances) * 3);
  for (int i = 0; i < instances; ++i) {
    const std::string id = fmt::format("i-{:016x}", i);
    const std::string ip = fmt::format("10.{}.{}.{}", 200 + i / 65536, i / 256 % 256, i % 256);
    ports.push_back(PublishedPort{id, 20000 + 2 * i, ip, 22, "tcp", {SourceRule{"0.0.0.0/0"}}});
    std::vector<SourceRule> web{SourceRule{"10.0.0.0/8"}, SourceRule{"192.168.0.0/16"},
                                SourceRule{fmt::format("203.0.113.{}/32", i % 256)}};
    if (i == changed) web.push_back(SourceRule{"198.51.100.0/24"});
    ports.push_back(PublishedPort{id, 20001 + 2 * i, ip, 8888, "tcp", std::move(web)});
    ports.push_back(PublishedPort{id, 20000 + i, ip, 5353, "udp", {SourceRule{"172.16.0.0/12"}}});
  }
  return ports;
}

// The script's rules (lines of a chain, its type line excepted) and set/map elements.
std::pair<int, int> rules_and_elements(const std::string& script) {
  int rules = 0, elements = 0;
  bool in_chain = false, in_elements = false;
  std::size_t start = 0;
  while (start < script.size()) {
    std::size_t end = script.find('\n', start);
    if (end == std::string::npos) end = script.size();
    const std::string_view line(script.data() + start, end - start);
    start = end + 1;
    if (line.starts_with("  chain ")) in_chain = true;
    else if (line == "  }") in_chain = false;
    else if (line == "    elements = {") in_elements = true;
    else if (line == "    }") in_elements = false;
    else if (in_elements) ++elements;
    else if (in_chain && !line.starts_with("    type ")) ++rules;
  }
  return {rules, elements};
}

struct Row {
  int instances = 0;
  int rules = 0, elements = 0;
  std::size_t script_bytes = 0;
  double render_ms = 0, apply_ms = 0, update_ms = 0, remove_ms = 0;
};

}  // namespace

int main() {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "firewall_apply_bench: needs root (nftables in a private network namespace)\n");
    return 2;
  }
  if (::unshare(CLONE_NEWNET) != 0) {
    std::perror("firewall_apply_bench: unshare(CLONE_NEWNET)");
    return 2;
  }
  const std::string table = fmt::format("gpucloud-bench-{}", ::getpid());
  std::printf("%-10s %7s %7s %6s %9s %10s %10s %10s %10s %10s %14s\n", "instances", "ports", "sources", "rules",
              "elements", "script_KiB", "render_ms", "apply_ms", "update_ms", "remove_ms", "update_us/inst");
  std::vector<Row> rows;
  for (const int instances : {100, 1000, 10000}) {
    const int repetitions = instances >= 10000 ? 3 : 5;
    std::vector<double> render, apply, update, remove;
    Row row;
    row.instances = instances;
    std::string failed;
    for (int r = 0; r < repetitions && failed.empty(); ++r) {
      NftablesFirewall firewall(table);
      const auto ports = rule_sets(instances);
      const auto changed = rule_sets(instances, instances / 2);
      auto t = Clock::now();
      auto script = render_ruleset(table, ports);
      render.push_back(ms_since(t));
      if (!script) {
        std::fprintf(stderr, "render: %s\n", script.error().detail.c_str());
        return 2;
      }
      row.script_bytes = script->size();
      std::tie(row.rules, row.elements) = rules_and_elements(*script);
      // A step that fails (nft's own time limit in NftablesFirewall, 15 s) ends this size.
      auto step = [&](const char* what, std::vector<double>& times, auto&& call) {
        if (!failed.empty()) return;
        const auto start = Clock::now();
        if (auto s = call(); !s) {
          failed = fmt::format("{} failed after {:.0f} ms: {}", what, ms_since(start), s.error().detail);
        } else {
          times.push_back(ms_since(start));
        }
      };
      step("apply", apply, [&] { return firewall.apply(ports); });
      step("update", update, [&] { return firewall.apply(changed); });
      step("remove", remove, [&] { return firewall.remove_table(); });
      if (!failed.empty()) {
        // How long nft itself takes for this script, with no time limit: what the limit cut off.
        const auto start = Clock::now();
        FILE* nft = ::popen("nft -f - >/dev/null 2>&1", "w");
        int status = -1;
        if (nft != nullptr) {
          std::fwrite(script->data(), 1, script->size(), nft);
          status = ::pclose(nft);
        }
        failed += fmt::format("; `nft -f -` of the same script without a limit: {:.0f} ms (exit {})", ms_since(start),
                              status == 0 ? 0 : status);
        (void)firewall.remove_table();
      }
    }
    if (!failed.empty()) {
      std::printf("%-10d %7d %7d %6d %9d %10.0f %10.1f  %s\n", instances, instances * 3, instances * 5, row.rules,
                  row.elements, static_cast<double>(row.script_bytes) / 1024, median(render), failed.c_str());
      std::fflush(stdout);
      continue;
    }
    row.render_ms = median(render);
    row.apply_ms = median(apply);
    row.update_ms = median(update);
    row.remove_ms = median(remove);
    rows.push_back(row);
    std::printf("%-10d %7d %7d %6d %9d %10.0f %10.1f %10.1f %10.1f %10.1f %14.1f\n", row.instances, row.instances * 3,
                row.instances * 5, row.rules, row.elements, static_cast<double>(row.script_bytes) / 1024, row.render_ms,
                row.apply_ms, row.update_ms, row.remove_ms, 1000 * row.update_ms / row.instances);
    std::fflush(stdout);
  }
  if (rows.size() < 3) {
    std::printf("FAIL: not every size could be applied (see above)\n");
    return 0;
  }
  const double per_1k = rows[1].update_ms / rows[1].instances, per_10k = rows[2].update_ms / rows[2].instances;
  std::printf("%s: the per-instance update time at 10,000 instances is %.2fx the one at 1,000 (target <= 1.5x)\n",
              per_10k <= 1.5 * per_1k ? "PASS" : "FAIL", per_10k / per_1k);
  return 0;
}
