// create, estimate, ls, show, stop, start, restart, release — and waiting for a state.
#include <algorithm>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/instance_spec.h"
#include "cli/money.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kPollInterval = 300ms;
constexpr auto kWaitLimit = std::chrono::minutes(30);

bool is_settled(std::string_view state) {
  return state == "running" || state == "stopped" || state == "released" || state == "error";
}

std::string tenths_of_second(std::chrono::steady_clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 0) ms = 0;
  return fmt::format("{}.{} s", ms / 1000, ms / 100 % 10);
}

// The single progress line: "creating… running (2.1 s)", redrawn in place on a terminal.
class Progress {
 public:
  Progress(Context& ctx, std::chrono::steady_clock::time_point start)
      : ctx_(ctx), start_(start), live_(ctx.stderr_is_tty()) {}

  void state(const std::string& s) {
    if (states_.empty() || states_.back() != s) states_.push_back(s);
    if (live_) {
      ctx_.err() << "\r" << line() << "\x1b[K" << std::flush;
      drawn_ = true;
    }
  }

  void finish() {
    if (live_) {
      if (drawn_) ctx_.err() << "\r" << line() << "\x1b[K\n" << std::flush;
    } else if (!ctx_.json() && !states_.empty()) {
      ctx_.err() << line() << "\n";
    }
  }

 private:
  std::string line() const {
    std::string l;
    for (std::size_t i = 0; i < states_.size(); ++i) {
      l += states_[i];
      if (i + 1 < states_.size() || !is_settled(states_[i])) l += "…";
      if (i + 1 < states_.size()) l += " ";
    }
    return l + " (" + tenths_of_second(ctx_.deps().now() - start_) + ")";
  }

  Context& ctx_;
  std::chrono::steady_clock::time_point start_;
  bool live_;
  bool drawn_ = false;
  std::vector<std::string> states_;
};

std::string reason_suffix(const json::value& instance) {
  auto reason = text(instance, "state_reason", "");
  return reason.empty() ? "" : ": " + reason;
}

// Polls GET /instances/{id} until the instance reaches `target`. `first` is the answer of
// the action (the instance in its transitional state).
// A settled state other than the target ends the wait once it has lasted `patience` polls
// after a transitional state was seen (a restart may pass through `stopped`).
Expected<json::value> wait_for(Context& ctx, ApiClient& api, json::value first,
                               const std::string& target,
                               std::chrono::steady_clock::time_point start,
                               const std::string& fallback_id, int patience = 1) {
  const std::string id = text(first, "id", text(first, "name", fallback_id));
  const std::string name = text(first, "name", id);
  Progress progress(ctx, start);
  json::value current = std::move(first);
  bool saw_transition = false;
  int settled_polls = 0;
  int unreachable_polls = 0;
  for (;;) {
    std::string state = text(current, "state", "unknown");
    progress.state(state);
    if (state == target) {
      progress.finish();
      return current;
    }
    if (state == "error") {
      progress.finish();
      return refused(fmt::format("instance {} failed{}", name, reason_suffix(current)));
    }
    if (!is_settled(state)) saw_transition = true;
    settled_polls = is_settled(state) ? settled_polls + 1 : 0;
    // Settled elsewhere after moving (or never moving at all): the action did not take.
    if ((saw_transition && settled_polls >= patience) ||
        settled_polls >= std::max(patience, 10)) {
      progress.finish();
      return refused(fmt::format("instance {} is {}{} (expected {})", name, state,
                                 reason_suffix(current), target));
    }
    if (ctx.deps().now() - start > kWaitLimit) {
      progress.finish();
      return refused(fmt::format("gave up waiting for instance {} to be {} (it is {}); see "
                                 "`gpucloud show {}`",
                                 name, target, state, name));
    }
    ctx.deps().sleep(kPollInterval);
    auto next = api.get("/instances" + seg(id));
    if (!next) {
      if (next.error().code == ErrorCode::not_found && target == "released") {
        current.as_object()["state"] = "released";
        continue;
      }
      // Ride out a short outage (gpucloudd restarting): the action is already recorded.
      if (next.error().code == ErrorCode::unavailable && ++unreachable_polls < 20) continue;
      progress.finish();
      return api_failure(next.error());
    }
    unreachable_polls = 0;
    current = std::move(*next);
  }
}

std::string gpu_summary(const json::value& inst) {
  auto count = integer(inst, "gpu_count").value_or(0);
  if (flag(inst, "no_gpu") || count == 0) return "no GPU";
  std::string s = fmt::format("{} ×{}", text(inst, "gpu_model"), count);
  if (const auto* gpus = member(inst, "gpus"); gpus && gpus->is_array()) {
    for (const auto& g : gpus->get_array()) {
      if (flag(g, "simulated")) return s + " (simulated)";
    }
  }
  if (flag(inst, "simulated")) s += " (simulated)";
  return s;
}

std::string ssh_command(const json::value& inst) {
  const auto* ssh = member(inst, "ssh");
  return ssh ? text(*ssh, "command") : "-";
}

std::string state_with_reason(const json::value& inst) {
  std::string state = text(inst, "state");
  auto reason = text(inst, "state_reason", "");
  // Its host stopped answering: the state is the last known one (issue 26).
  if (flag(inst, "host_unreachable")) reason += std::string(reason.empty() ? "" : "; ") + "host unreachable";
  return reason.empty() ? state : fmt::format("{} ({})", state, reason);
}

// "allowed from 10.0.0.0/8, 192.168.0.0/16" or "not allowed by sg web": whether other hosts
// reach a declared port, and which ones.
std::string port_reach(const json::value& port, std::string_view group) {
  if (!flag(port, "allowed")) {
    return group.empty() || group == "-" ? "not allowed by its security group"
                                         : fmt::format("not allowed by sg {}", group);
  }
  const auto* sources = member(port, "sources");
  if (!sources || !sources->is_array() || sources->get_array().empty()) return "allowed";
  std::string from;
  for (const auto& s : sources->get_array()) {
    if (!from.empty()) from += ", ";
    from += s.is_string() ? std::string(s.get_string()) : json::serialize(s);
  }
  return "allowed from " + from;
}

// `group_name`: the name of the instance's security group when known ("" when not).
std::string render_instance(const json::value& inst, std::string_view group_name) {
  const std::string group_id = text(inst, "security_group");
  const std::string group = group_name.empty() ? group_id : std::string(group_name);
  const std::string currency = currency_of(inst);
  KeyValues kv;
  kv.add("name", text(inst, "name"));
  kv.add("id", text(inst, "id"));
  if (member(inst, "owner")) kv.add("owner", text(inst, "owner"));
  kv.add("state", state_with_reason(inst));
  kv.add("zone", text(inst, "zone"));
  kv.add("host", text(inst, "host"));
  kv.add("gpu", gpu_summary(inst));
  if (const auto* gpus = member(inst, "gpus"); gpus && gpus->is_array()) {
    for (const auto& g : gpus->get_array()) {
      kv.add(fmt::format("  gpu {}", text(g, "index")),
             text(g, "uuid") + (flag(g, "simulated") ? " (simulated)" : ""));
    }
  }
  kv.add("cpu", text(inst, "cpu"));
  if (auto mem = integer(inst, "memory_gib")) kv.add("memory", format_gib(*mem));
  if (auto disk = integer(inst, "system_disk_gib")) kv.add("system disk", format_gib(*disk));
  kv.add("image", text(inst, "image_name").empty() ? text(inst, "image")
                                                  : text(inst, "image_name") + " (" + text(inst, "image") + ")");
  if (const auto* disks = member(inst, "data_disks"); disks && disks->is_array()) {
    for (const auto& d : disks->get_array()) {
      kv.add("data disk", fmt::format("{} at {}", text(d, "id"), text(d, "mount_path")));
    }
  }
  kv.add("security group", group_name.empty() ? group_id : fmt::format("{} ({})", group_name, group_id));
  if (const auto* ssh = member(inst, "ssh")) {
    kv.add("ssh", text(*ssh, "command"));
    kv.add("host key", text(*ssh, "host_key", "(not known yet)"));
  }
  if (const auto* ports = member(inst, "ports"); ports && ports->is_array()) {
    for (const auto& p : ports->get_array()) {
      kv.add("port", fmt::format("{}/{} → {}:{}  {}", text(p, "port"), text(p, "protocol", "tcp"),
                                 text(p, "host"), text(p, "host_port"), port_reach(p, group)));
    }
  }
  if (member(inst, "jupyter_url")) kv.add("jupyter", text(inst, "jupyter_url"));
  if (const auto* billing = member(inst, "billing")) {
    std::string b = text(*billing, "mode");
    if (auto price = integer(*billing, "price_per_hour")) {
      b += fmt::format(", {}/h", format_money(*price, currency));
    }
    if (member(*billing, "expires_at")) {
      b += fmt::format(", paid until {}, auto-renew {}", text(*billing, "expires_at"),
                       flag(*billing, "auto_renew") ? "on" : "off");
    }
    kv.add("billing", b);
  }
  if (const auto* autostop = member(inst, "autostop")) {
    if (member(*autostop, "idle_minutes")) {
      kv.add("autostop", fmt::format("after {} min with GPU use below {}%",
                                     text(*autostop, "idle_minutes"),
                                     text(*autostop, "gpu_util_below_percent", "5")));
    } else {
      kv.add("autostop", json::serialize(*autostop));
    }
  }
  kv.add("created", text(inst, "created_at"));
  if (member(inst, "started_at")) kv.add("started", text(inst, "started_at"));
  if (member(inst, "stopped_at")) kv.add("stopped", text(inst, "stopped_at"));
  if (auto run = integer(inst, "run_seconds")) kv.add("run time", format_duration(*run));
  if (auto charged = integer(inst, "charged")) kv.add("charged", format_money(*charged, currency));
  return kv.render();
}

// "Billing ¥1.98 per hour (¥47.52 per day).\n" from the instance's billing.price_per_hour;
// "" when the answer has none.
std::string billing_line(const json::value& inst) {
  const auto* billing = member(inst, "billing");
  if (billing == nullptr) return "";
  auto price = integer(*billing, "price_per_hour");
  if (!price) return "";
  const std::string currency = currency_of(*billing, currency_of(inst));
  return fmt::format("Billing {} per hour ({} per day).\n", format_money(*price, currency),
                     format_money(*price * 24, currency));
}

struct InstanceCommandArgs {
  InstanceArgs spec;
  std::string name;
  bool all = false;
  bool no_gpu = false;
  bool yes = false;
  bool no_wait = false;
};

Outcome do_create(Context& ctx, const InstanceArgs& a) {
  GC_TRY(body, build_instance_body(a, std::nullopt));
  GC_TRY(api, ctx.api());
  if (a.password_stdin) {
    GC_TRY(line, ctx.read_stdin_line("password"));
    if (line->empty()) return usage_error("the password on standard input is empty");
    (*body)["password"] = *line;
  }
  const auto start = ctx.deps().now();
  GC_TRY(created, ctx.check(post_idempotent(ctx, **api, "/instances", *body)));
  if (a.no_wait) {
    ctx.print(*created, [&] {
      ctx.out() << fmt::format("Instance {} ({}) is {}.\n", text(*created, "name", a.name),
                               text(*created, "id"), text(*created, "state"));
      ctx.out() << billing_line(*created);
    });
    return {};
  }
  GC_TRY(running, wait_for(ctx, **api, *created, "running", start, a.name));
  ctx.print(*running, [&] {
    ctx.out() << fmt::format("Instance {} is running.\n", text(*running, "name", a.name));
    if (auto cmd = ssh_command(*running); cmd != "-") ctx.out() << cmd << "\n";
    if (member(*running, "jupyter_url")) {
      ctx.out() << "jupyter: " << text(*running, "jupyter_url") << "\n";
    }
    // The price the create captured; the running answer has it too when the first did not.
    std::string billing = billing_line(*created);
    ctx.out() << (billing.empty() ? billing_line(*running) : billing);
  });
  return {};
}

Outcome do_estimate(Context& ctx, const InstanceArgs& a) {
  GC_TRY(body, build_instance_body(a, std::nullopt));
  if (a.name.empty()) (*body)["name"] = "estimate";
  GC_TRY(api, ctx.api());
  GC_TRY(estimate, ctx.check((*api)->post("/billing/estimate", *body)));
  ctx.print(*estimate, [&] {
    const std::string currency = currency_of(*estimate);
    KeyValues kv;
    auto money = [&](const char* label, const char* key) {
      if (auto v = integer(*estimate, key)) kv.add(label, format_money(*v, currency));
    };
    money("per hour", "per_hour");
    money("per day", "per_day");
    money("per week", "per_week");
    money("per month", "per_month");
    money("upfront", "upfront");
    money("storage per day", "storage_per_day");
    ctx.out() << kv.render();
  });
  return {};
}

}  // namespace

std::string render_instances(const json::value& instances, bool show_owner) {
  std::vector<std::string> headers{"NAME", "STATE", "GPU", "ZONE", "HOST", "SSH"};
  if (show_owner) headers.insert(headers.begin() + 1, "OWNER");
  Table table(headers);
  for (const auto& inst : items_of(instances)) {
    std::string ssh = text(inst, "state") == "running" ? ssh_command(inst) : "-";
    std::vector<std::string> row{text(inst, "name"), state_with_reason(inst), gpu_summary(inst),
                                 text(inst, "zone"), text(inst, "host"), ssh};
    if (show_owner) row.insert(row.begin() + 1, text(inst, "owner"));
    table.add_row(std::move(row));
  }
  return table.render();
}

void print_instance(Context& ctx, ApiClient& api, const json::value& inst) {
  ctx.print(inst, [&] {
    // The group's name makes "not allowed by sg web" readable; its id does when it cannot be had.
    std::string group_name;
    if (const auto* sg = member(inst, "security_group"); sg && sg->is_string() && !sg->get_string().empty()) {
      if (auto group = api.get("/security-groups" + seg(sg->get_string()))) group_name = text(*group, "name", "");
    }
    ctx.out() << render_instance(inst, group_name);
  });
}

namespace {

Outcome do_ls(Context& ctx, bool all) {
  GC_TRY(api, ctx.api());
  GC_TRY(list, ctx.check((*api)->get_all(all ? "/instances?all=true" : "/instances")));
  ctx.print(*list, [&] { ctx.out() << render_instances(*list, all); });
  return {};
}

Outcome do_show(Context& ctx, const std::string& name) {
  GC_TRY(api, ctx.api());
  GC_TRY(inst, ctx.check((*api)->get("/instances" + seg(name))));
  print_instance(ctx, **api, *inst);
  return {};
}

// POST (or DELETE) an action, then wait for `target` unless --no-wait.
Outcome do_action(Context& ctx, const std::string& name, std::string_view verb,
                  const std::string& target, bool no_wait, const json::value& body) {
  GC_TRY(api, ctx.api());
  const auto start = ctx.deps().now();
  Result<json::value> answer = verb == "release"
                                   ? (*api)->del("/instances" + seg(name))
                                   : (*api)->post("/instances" + seg(name) + "/" +
                                                      std::string(verb),
                                                  body);
  GC_TRY(first, ctx.check(std::move(answer)));
  if (!first->is_object()) *first = json::object{{"name", name}, {"state", target}};
  if (no_wait) {
    ctx.print(*first, [&] {
      ctx.out() << fmt::format("Instance {} is {}.\n", text(*first, "name", name),
                               text(*first, "state"));
    });
    return {};
  }
  GC_TRY(final_state,
         wait_for(ctx, **api, *first, target, start, name, verb == "restart" ? 20 : 1));
  ctx.print(*final_state, [&] {
    ctx.out() << fmt::format("Instance {} is {}.\n", text(*final_state, "name", name), target);
    if (target == "running") {
      if (auto cmd = ssh_command(*final_state); cmd != "-") ctx.out() << cmd << "\n";
    }
  });
  return {};
}

Outcome do_release(Context& ctx, const InstanceCommandArgs& a) {
  if (!a.yes) {
    if (!ctx.stdin_is_tty()) {
      return usage_error(fmt::format(
          "refusing to release {} without --yes: standard input is not a terminal", a.name));
    }
    GC_TRY(api, ctx.api());
    GC_TRY(inst, ctx.check((*api)->get("/instances" + seg(a.name))));
    std::string question = fmt::format(
        "Release instance {}? Its system disk is deleted; data disks are kept unless created "
        "with delete_on_release.",
        a.name);
    if (const auto* billing = member(*inst, "billing")) {
      std::string mode = text(*billing, "mode", "hourly");
      if (mode != "hourly" && member(*billing, "expires_at")) {
        question += fmt::format(" It is paid ({}) until {}: releasing early refunds nothing.",
                                mode, text(*billing, "expires_at"));
      }
    }
    if (!ctx.confirm(question)) return refused("not released");
  }
  return do_action(ctx, a.name, "release", "released", a.no_wait, json::object{});
}

}  // namespace

void add_instance_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<InstanceCommandArgs>();

  auto* create = app.add_subcommand("create", "create an instance and wait until it runs");
  add_instance_flags(*create, a->spec, true);
  registry.on(create, [a](Context& ctx) { return do_create(ctx, a->spec); });

  auto* estimate = app.add_subcommand("estimate", "what an instance would cost (create's flags)");
  add_instance_flags(*estimate, a->spec, false);
  registry.on(estimate, [a](Context& ctx) { return do_estimate(ctx, a->spec); });

  auto* ls = app.add_subcommand("ls", "list your instances");
  ls->add_flag("--all", a->all, "every user's instances (operator); your own, released ones too (user)");
  registry.on(ls, [a](Context& ctx) { return do_ls(ctx, a->all); });

  auto* show = app.add_subcommand("show", "an instance in detail, with its SSH command");
  show->add_option("NAME", a->name, "instance name or id")->required();
  registry.on(show, [a](Context& ctx) { return do_show(ctx, a->name); });

  auto* stop = app.add_subcommand("stop", "stop an instance (compute billing ends)");
  stop->add_option("NAME", a->name, "instance name or id")->required();
  stop->add_flag("--no-wait", a->no_wait, "do not wait for `stopped`");
  registry.on(stop, [a](Context& ctx) {
    return do_action(ctx, a->name, "stop", "stopped", a->no_wait, json::object{});
  });

  auto* start = app.add_subcommand("start", "start a stopped instance");
  start->add_option("NAME", a->name, "instance name or id")->required();
  start->add_flag("--no-gpu", a->no_gpu, "start without GPU (no-GPU size and price)");
  start->add_flag("--no-wait", a->no_wait, "do not wait for `running`");
  registry.on(start, [a](Context& ctx) {
    return do_action(ctx, a->name, "start", "running", a->no_wait,
                     json::object{{"no_gpu", a->no_gpu}});
  });

  auto* restart = app.add_subcommand("restart", "restart an instance");
  restart->add_option("NAME", a->name, "instance name or id")->required();
  restart->add_flag("--no-wait", a->no_wait, "do not wait for `running`");
  registry.on(restart, [a](Context& ctx) {
    return do_action(ctx, a->name, "restart", "running", a->no_wait, json::object{});
  });

  auto* release = app.add_subcommand("release", "delete an instance and its system disk");
  release->add_option("NAME", a->name, "instance name or id")->required();
  release->add_flag("--yes,-y", a->yes, "do not ask for confirmation");
  release->add_flag("--no-wait", a->no_wait, "do not wait for `released`");
  registry.on(release, [a](Context& ctx) { return do_release(ctx, *a); });
}

}  // namespace gpucloud::cli
