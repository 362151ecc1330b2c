// sg create|ls|show|set|rm (/security-groups): inbound rules over instances' declared ports.
// Rules are given as --allow PROTO:PORT[-PORT][@CIDR]; the server normalises the sources
// (host bits masked, a bare address made /32 or /128), the CLI only checks their shape so a
// typo is a usage error before anything is sent.
#include <arpa/inet.h>

#include <map>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

std::optional<int> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > 65535) return std::nullopt;
  return v;
}

// "10.0.0.0/8", "2001:db8::/32", or a bare address: the address parses and the prefix fits it.
bool is_cidr_shaped(std::string_view text) {
  auto slash = text.find('/');
  std::string address(text.substr(0, slash));
  unsigned char buf[16];
  int max_prefix = 0;
  if (::inet_pton(AF_INET, address.c_str(), buf) == 1) {
    max_prefix = 32;
  } else if (::inet_pton(AF_INET6, address.c_str(), buf) == 1) {
    max_prefix = 128;
  } else {
    return false;
  }
  if (slash == std::string_view::npos) return true;
  std::string_view prefix = text.substr(slash + 1);
  if (prefix.empty() || prefix.size() > 3) return false;
  int p = 0;
  for (char c : prefix) {
    if (c < '0' || c > '9') return false;
    p = p * 10 + (c - '0');
  }
  return p <= max_prefix;
}

struct SgArgs {
  std::string group, description;
  std::vector<std::string> allow;
  bool acknowledge_risk = false;
  bool no_rules = false;
};

Expected<json::array> rules_of(const SgArgs& a, std::string_view command) {
  if (a.allow.empty() && !a.no_rules)
    return usage_error(fmt::format("sg {}: give at least one --allow PROTO:PORT[-PORT][@CIDR] (or --no-rules)", command));
  if (!a.allow.empty() && a.no_rules) return usage_error(fmt::format("sg {}: --allow and --no-rules exclude each other", command));
  json::array rules;
  for (const auto& text : a.allow) {
    GC_TRY(rule, parse_allow_rule(text));
    rules.push_back(std::move(*rule));
  }
  return rules;
}

std::string port_span(const json::value& rule) {
  auto lo = integer(rule, "port_min"), hi = integer(rule, "port_max");
  if (!lo) return "-";
  if (!hi || *hi == *lo) return std::to_string(*lo);
  return fmt::format("{}-{}", *lo, *hi);
}

std::size_t count_of(const json::value& object, std::string_view key) {
  const auto* v = member(object, key);
  return v && v->is_array() ? v->get_array().size() : 0;
}

// Instance ids → names, from the caller's instance list; ids stay as they are when the list
// cannot be had (the group's answer is what was asked for; names only make it readable).
std::map<std::string, std::string> instance_names(ApiClient& api) {
  std::map<std::string, std::string> names;
  auto list = api.get_all("/instances");
  if (!list) return names;
  for (const auto& inst : items_of(*list)) names[text(inst, "id")] = text(inst, "name");
  return names;
}

void print_group_line(Context& ctx, const json::value& g, std::string_view verb) {
  const std::size_t rules = count_of(g, "rules");
  ctx.out() << fmt::format("Security group {} ({}) {}: {} rule{}.\n", text(g, "name"), text(g, "id"), verb, rules,
                           rules == 1 ? "" : "s");
}

Outcome do_sg_create(Context& ctx, const SgArgs& a) {
  GC_TRY(rules, rules_of(a, "create"));
  json::object body{{"name", a.group}, {"rules", std::move(*rules)}};
  if (!a.description.empty()) body["description"] = a.description;
  if (a.acknowledge_risk) body["acknowledge_risk"] = true;
  GC_TRY(api, ctx.api());
  GC_TRY(created, ctx.check(post_idempotent(ctx, **api, "/security-groups", body)));
  ctx.print(*created, [&] { print_group_line(ctx, *created, "created"); });
  return {};
}

Outcome do_sg_ls(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(groups, ctx.check((*api)->get_all("/security-groups")));
  ctx.print(*groups, [&] { ctx.out() << render_security_groups(*groups); });
  return {};
}

Outcome do_sg_show(Context& ctx, const SgArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(group, ctx.check((*api)->get("/security-groups" + seg(a.group))));
  ctx.print(*group, [&] {
    std::map<std::string, std::string> names;
    if (count_of(*group, "instances") > 0) names = instance_names(**api);
    ctx.out() << render_security_group(*group, names);
  });
  return {};
}

Outcome do_sg_set(Context& ctx, const SgArgs& a) {
  GC_TRY(rules, rules_of(a, "set"));
  json::object body{{"rules", std::move(*rules)}};
  if (!a.description.empty()) body["description"] = a.description;
  if (a.acknowledge_risk) body["acknowledge_risk"] = true;
  GC_TRY(api, ctx.api());
  GC_TRY(updated, ctx.check((*api)->put("/security-groups" + seg(a.group), body)));
  ctx.print(*updated, [&] {
    print_group_line(ctx, *updated, "updated");
    if (auto users = count_of(*updated, "instances"); users > 0)
      ctx.out() << fmt::format("The new rules reach its {} instance{} within 2 s.\n", users, users == 1 ? "" : "s");
  });
  return {};
}

Outcome do_sg_rm(Context& ctx, const SgArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/security-groups" + seg(a.group))));
  ctx.print(*answer, [&] { ctx.out() << fmt::format("Removed security group {}.\n", a.group); });
  return {};
}

void add_rule_flags(CLI::App& cmd, SgArgs& a) {
  cmd.add_option("--allow", a.allow,
                 "allow PROTO:PORT[-PORT][@CIDR] inbound, e.g. tcp:22, tcp:8888@10.0.0.0/8, "
                 "udp:60000-60010@2001:db8::/32 (CIDR default 0.0.0.0/0; repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--description", a.description, "what the group is for");
  cmd.add_flag("--acknowledge-risk", a.acknowledge_risk,
               "accept a rule that opens every port (1-65535) to the whole Internet");
}

}  // namespace

Expected<json::object> parse_allow_rule(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return usage_error(fmt::format("--allow {}: {}; expected PROTO:PORT[-PORT][@CIDR], e.g. tcp:22, "
                                   "tcp:8888@10.0.0.0/8 or udp:60000-60010@2001:db8::/32",
                                   text, why));
  };
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return bad("the protocol is missing");
  std::string_view protocol = text.substr(0, colon);
  if (protocol != "tcp" && protocol != "udp") return bad("the protocol must be tcp or udp");
  std::string_view rest = text.substr(colon + 1);
  std::string source = "0.0.0.0/0";
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    source = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (source.empty()) return bad("the source after @ is empty");
    if (!is_cidr_shaped(source)) return bad(fmt::format("\"{}\" is not an IPv4 or IPv6 address or CIDR", source));
  }
  std::string_view first = rest, last = rest;
  if (auto dash = rest.find('-'); dash != std::string_view::npos) {
    first = rest.substr(0, dash);
    last = rest.substr(dash + 1);
  }
  auto lo = parse_port(first), hi = parse_port(last);
  if (!lo || !hi) return bad("ports are numbers from 1 to 65535");
  if (*hi < *lo) return bad("the port range ends before it starts");
  return json::object{{"protocol", protocol}, {"port_min", *lo}, {"port_max", *hi}, {"source", source}};
}

std::string render_security_groups(const json::value& groups) {
  Table table({"NAME", "ID", "RULES", "INSTANCES", "DESCRIPTION"});
  for (const auto& g : items_of(groups)) {
    table.add_row({text(g, "name"), text(g, "id"), std::to_string(count_of(g, "rules")), std::to_string(count_of(g, "instances")),
                   text(g, "description", "")});
  }
  return table.render();
}

std::string render_security_group(const json::value& group, const std::map<std::string, std::string>& instance_names) {
  KeyValues kv;
  kv.add("name", text(group, "name") + (flag(group, "is_default") ? " (your default group)" : ""));
  kv.add("id", text(group, "id"));
  if (!text(group, "description", "").empty()) kv.add("description", text(group, "description"));
  kv.add("created", text(group, "created_at"));
  kv.add("updated", text(group, "updated_at"));
  std::string out = kv.render() + "\n";
  const auto* rules = member(group, "rules");
  if (rules && rules->is_array() && !rules->get_array().empty()) {
    Table table({"PROTOCOL", "PORTS", "SOURCE", "DESCRIPTION"});
    for (const auto& r : rules->get_array())
      table.add_row({text(r, "protocol"), port_span(r), text(r, "source"), text(r, "description", "")});
    out += table.render();
  } else {
    out += "No rules: every declared port of its instances is closed to other hosts.\n";
  }
  const auto* instances = member(group, "instances");
  if (instances && instances->is_array() && !instances->get_array().empty()) {
    out += "\nUsed by:\n";
    for (const auto& i : instances->get_array()) {
      std::string id = i.is_string() ? std::string(i.get_string()) : json::serialize(i);
      auto it = instance_names.find(id);
      out += it == instance_names.end() ? fmt::format("  {}\n", id) : fmt::format("  {} ({})\n", it->second, id);
    }
  } else {
    out += "\nUsed by no instance.\n";
  }
  return out;
}

void add_security_group_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<SgArgs>();
  auto* sg = app.add_subcommand("sg", "security groups: which sources reach your instances' ports");
  sg->require_subcommand(1);

  auto* create = sg->add_subcommand("create", "create a security group");
  create->add_option("NAME", a->group, "group name")->required();
  add_rule_flags(*create, *a);
  create->add_flag("--no-rules", a->no_rules, "a group with no rule (every port closed)");
  registry.on(create, [a](Context& ctx) { return do_sg_create(ctx, *a); });

  auto* ls = sg->add_subcommand("ls", "list your security groups");
  registry.on(ls, [](Context& ctx) { return do_sg_ls(ctx); });

  auto* show = sg->add_subcommand("show", "a group's rules and the instances using it");
  show->add_option("SG", a->group, "group name or id")->required();
  registry.on(show, [a](Context& ctx) { return do_sg_show(ctx, *a); });

  auto* set = sg->add_subcommand("set", "replace a group's rules (running instances follow within 2 s)");
  set->add_option("SG", a->group, "group name or id")->required();
  add_rule_flags(*set, *a);
  set->add_flag("--no-rules", a->no_rules, "remove every rule (close every port)");
  registry.on(set, [a](Context& ctx) { return do_sg_set(ctx, *a); });

  auto* rm = sg->add_subcommand("rm", "delete a group no instance uses");
  rm->add_option("SG", a->group, "group name or id")->required();
  registry.on(rm, [a](Context& ctx) { return do_sg_rm(ctx, *a); });
}

}  // namespace gpucloud::cli
