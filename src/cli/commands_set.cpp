// set NAME ...: PATCH /instances/{id} — rename, security group, ports, autostop, a scheduled
// stop, release after stopped, spend limit, auto-renew. Each flag is one body field; the
// --no-* flags send null, which clears it.
#include <memory>
#include <optional>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/instance_spec.h"
#include "cli/money.h"
#include "cli/output.h"
#include "core/time_format.h"

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

struct SetArgs {
  std::string name;
  std::string new_name, security_group;
  std::vector<std::string> ports;
  std::string autostop_idle, autostop_below;
  bool no_autostop = false;
  std::string stop_at;
  bool no_stop_at = false;
  std::string release_days;
  std::string spend_limit;
  bool no_spend_limit = false;
  std::string auto_renew;
  // Which value options were given (an empty --name "" is still given, and refused).
  std::vector<std::pair<std::string, CLI::Option*>> options;

  bool given(std::string_view flag) const {
    for (const auto& [name, option] : options) {
      if (name == flag) return option->count() > 0;
    }
    return false;
  }
};

// A whole decimal number in [min, max], or nullopt.
std::optional<std::int64_t> whole_number_in(std::string_view text, std::int64_t min, std::int64_t max) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

// The PATCH body; usage errors (exit 2) for bad values and for no change at all.
Expected<json::object> build_patch_body(const SetArgs& a) {
  json::object body;
  if (a.given("--name")) {
    if (a.new_name.empty()) return usage_error("--name: the new name must not be empty");
    body["name"] = a.new_name;
  }
  if (a.given("--sg")) {
    if (a.security_group.empty()) return usage_error("--sg: the security group must not be empty");
    body["security_group"] = a.security_group;
  }
  if (!a.ports.empty()) {
    GC_TRY(ports, build_port_list(a.ports));
    body["ports"] = std::move(*ports);
  }
  if (a.no_autostop) {
    body["autostop"] = nullptr;
  } else if (a.given("--autostop-idle")) {
    auto minutes = whole_number_in(a.autostop_idle, 1, 10080);
    if (!minutes) {
      return usage_error(fmt::format("--autostop-idle {}: expected minutes from 1 to 10080, e.g. 30", a.autostop_idle));
    }
    json::object autostop{{"idle_minutes", *minutes}};
    if (a.given("--autostop-below")) {
      auto percent = whole_number_in(a.autostop_below, 1, 100);
      if (!percent) {
        return usage_error(fmt::format("--autostop-below {}: expected a percentage from 1 to 100", a.autostop_below));
      }
      autostop["gpu_util_below_percent"] = *percent;
    }
    body["autostop"] = std::move(autostop);
  }
  if (a.no_stop_at) {
    body["stop_at"] = nullptr;
  } else if (a.given("--stop-at")) {
    auto when = parse_rfc3339(a.stop_at);
    if (!when) {
      return usage_error(fmt::format("--stop-at {}: expected an RFC 3339 time like 2026-12-02T18:00:00Z", a.stop_at));
    }
    body["stop_at"] = format_rfc3339(*when);
  }
  if (a.given("--release-after-stopped-days")) {
    if (a.release_days == "default") {
      body["release_after_stopped_days"] = nullptr;
    } else {
      auto days = whole_number_in(a.release_days, 1, 3650);
      if (!days) {
        return usage_error(fmt::format("--release-after-stopped-days {}: expected days from 1 to 3650, or default",
                                       a.release_days));
      }
      body["release_after_stopped_days"] = *days;
    }
  }
  if (a.no_spend_limit) {
    body["spend_limit"] = nullptr;
  } else if (a.given("--spend-limit")) {
    auto amount = parse_money(a.spend_limit);
    if (!amount) return usage_error("--spend-limit: " + amount.error().detail);
    if (*amount <= 0) return usage_error(fmt::format("--spend-limit {}: the limit must be more than zero", a.spend_limit));
    body["spend_limit"] = *amount;
  }
  if (a.given("--auto-renew")) body["billing"] = json::object{{"auto_renew", a.auto_renew == "on"}};
  if (body.empty()) {
    return usage_error("nothing to change: give at least one of --name, --sg, --port, --autostop-idle, --no-autostop, "
                       "--stop-at, --no-stop-at, --release-after-stopped-days, --spend-limit, --no-spend-limit, "
                       "--auto-renew");
  }
  return body;
}

Outcome do_set(Context& ctx, const SetArgs& a) {
  GC_TRY(body, build_patch_body(a));
  GC_TRY(api, ctx.api());
  GC_TRY(updated, ctx.check((*api)->patch("/instances" + seg(a.name), *body)));
  print_instance(ctx, **api, *updated);
  return {};
}

}  // namespace

void add_set_command(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<SetArgs>();
  auto* set = app.add_subcommand("set", "change an instance: name, security group, ports, autostop, schedules, limits");
  set->add_option("NAME", a->name, "instance name or id")->required();
  auto option = [&](const std::string& flag, std::string& into, const std::string& help) {
    auto* o = set->add_option(flag, into, help);
    a->options.emplace_back(flag, o);
    return o;
  };
  option("--name", a->new_name, "new name (the hostname changes at the next start)");
  option("--sg", a->security_group, "security group name or id");
  set->add_option("--port", a->ports,
                  "the instance's ports become 22 and these: 8888 (tcp) or 53/udp (repeatable, at most 10 in all)")
      ->allow_extra_args(false);
  auto* idle = option("--autostop-idle", a->autostop_idle, "stop after this many idle minutes (1-10080)");
  auto* below =
      option("--autostop-below", a->autostop_below, "idle means GPU use (CPU without GPUs) below this percent (default 5)");
  below->needs(idle);
  auto* no_autostop = set->add_flag("--no-autostop", a->no_autostop, "turn autostop off");
  no_autostop->excludes(idle)->excludes(below);
  auto* stop_at = option("--stop-at", a->stop_at, "stop at this time (RFC 3339, e.g. 2026-12-02T18:00:00Z)");
  set->add_flag("--no-stop-at", a->no_stop_at, "cancel the scheduled stop")->excludes(stop_at);
  option("--release-after-stopped-days", a->release_days,
         "release after this many days stopped (1-3650; `default`: the platform's)");
  auto* limit = option("--spend-limit", a->spend_limit, "stop the instance when its compute charges reach this amount (¥, warned at 80%)");
  set->add_flag("--no-spend-limit", a->no_spend_limit, "remove the spend limit")->excludes(limit);
  option("--auto-renew", a->auto_renew, "renew a weekly or monthly term when it ends: on or off")
      ->check(CLI::IsMember({"on", "off"}));
  registry.on(set, [a](Context& ctx) { return do_set(ctx, *a); });
}

}  // namespace gpucloud::cli
