// admin hosts | users | ledger USER | credit USER AMOUNT [--note N] | prices [--set FILE]
//       | clock advance SECONDS
#include <map>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/money.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

Expected<std::int64_t> parse_duration_seconds(std::string_view text) {
  auto bad = [&] {
    return usage_error(fmt::format(
        "invalid duration \"{}\": expected seconds, or a number with s, m, h or d (e.g. 3600, "
        "90m, 2h, 30d)",
        text));
  };
  if (text.empty()) return bad();
  std::int64_t multiplier = 1;
  switch (text.back()) {
    case 's': multiplier = 1; text.remove_suffix(1); break;
    case 'm': multiplier = 60; text.remove_suffix(1); break;
    case 'h': multiplier = 3600; text.remove_suffix(1); break;
    case 'd': multiplier = 86400; text.remove_suffix(1); break;
    default: break;
  }
  if (text.empty() || text.size() > 12) return bad();
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad();
    v = v * 10 + (c - '0');
  }
  if (v > (std::int64_t{1} << 40) / multiplier) return bad();
  return v * multiplier;
}

std::string render_hosts(const json::value& hosts) {
  Table table({"NAME", "ZONE", "STATE", "CPU", "MEM", "GPUS"});
  for (const auto& host : items_of(hosts)) {
    const auto* gpus = member(host, "gpus");
    const json::array empty;
    const json::array& list = gpus && gpus->is_array() ? gpus->get_array() : empty;

    // "8 × RTX 4090 (simulated)", models in order of appearance.
    std::vector<std::pair<std::string, int>> models;
    bool simulated = flag(host, "simulated");
    for (const auto& g : list) {
      std::string model = text(g, "model");
      simulated = simulated || flag(g, "simulated");
      auto it = std::find_if(models.begin(), models.end(),
                             [&](const auto& m) { return m.first == model; });
      if (it == models.end()) {
        models.emplace_back(model, 1);
      } else {
        ++it->second;
      }
    }
    std::string summary;
    for (const auto& [model, count] : models) {
      if (!summary.empty()) summary += ", ";
      summary += fmt::format("{} × {}", count, model);
    }
    if (summary.empty()) summary = "none";
    if (simulated && !list.empty()) summary += " (simulated)";
    auto mem = integer(host, "memory_gib");
    table.add_row({text(host, "name"), text(host, "zone"), text(host, "state"),
                   text(host, "cpu"), mem ? format_gib(*mem) : "-", summary});

    Table detail({"", "", "", "", "", ""});
    for (const auto& g : list) {
      std::string use = "free";
      if (member(g, "instance")) {
        use = "instance " + text(g, "instance");
      } else if (member(g, "reserved_by")) {
        use = "reserved by " + text(g, "reserved_by");
      }
      std::string health = text(g, "health", "");
      detail.add_row({"gpu " + text(g, "index"), text(g, "model"), text(g, "uuid"),
                      flag(g, "simulated") || flag(host, "simulated") ? "simulated" : "real",
                      use, health.empty() || health == "ok" ? "" : "health " + health});
    }
    if (!list.empty()) {
      std::string lines = detail.render(false);
      std::size_t pos = 0;
      while (pos < lines.size()) {
        auto end = lines.find('\n', pos);
        table.add_detail("    " + lines.substr(pos, end - pos));
        pos = end == std::string::npos ? lines.size() : end + 1;
      }
    }
    // How its instances get GPUs, and whether lxcfs serves their /proc (issue 25).
    if (const auto* gi = member(host, "gpu_injection"); gi && gi->is_object()) {
      table.add_detail("    gpu injection: " + text(*gi, "mode") + " (" + text(*gi, "reason", "") + ")");
    }
    if (const auto* lx = member(host, "lxcfs"); lx && lx->is_object()) {
      table.add_detail(std::string("    lxcfs: ") + (flag(*lx, "available") ? "available" : "not available") + " (" +
                       text(*lx, "reason", "") + ")");
    }
    // Who serves it (issue 26): kind, version, address, connection, heartbeat, certificate.
    if (const auto* agent = member(host, "agent"); agent && agent->is_object() && member(*agent, "kind")) {
      std::string line = "    agent: " + text(*agent, "kind") + " " + text(*agent, "version");
      if (member(*agent, "address")) line += " at " + text(*agent, "address");
      line += member(*agent, "connected_since") ? ", connected since " + text(*agent, "connected_since")
                                                : std::string(", not connected");
      line += ", last heartbeat " + text(*agent, "last_heartbeat_at");
      if (member(*agent, "certificate_expires_at")) line += ", certificate expires " + text(*agent, "certificate_expires_at");
      table.add_detail(line);
    }
  }
  return table.render();
}

namespace {

struct AdminArgs {
  std::string user;
  std::string amount;
  std::string note;
  std::string prices_file;
  std::string seconds;
  bool include_removed = false;
};

Outcome do_hosts(Context& ctx, const AdminArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(hosts, ctx.check((*api)->get_all(a.include_removed ? "/admin/hosts?include_removed=true" : "/admin/hosts")));
  ctx.print(*hosts, [&] { ctx.out() << render_hosts(*hosts); });
  return {};
}

Outcome do_users(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(users, ctx.check((*api)->get_all("/admin/users")));
  ctx.print(*users, [&] {
    Table table({"USERNAME", "ID", "ROLE", "STATE", "BALANCE", "BILLING", "EMAIL", "CREATED"});
    for (const auto& u : items_of(*users)) {
      auto balance = integer(u, "balance");
      const json::value* billing = member(u, "billing");
      const std::string currency = billing ? currency_of(*billing) : currency_of(u);
      table.add_row({text(u, "username"), text(u, "id"), text(u, "role"),
                     flag(u, "disabled") ? "disabled" : "active",
                     balance ? format_money(*balance, currency) : "-", member(u, "billing_state") ? text(u, "billing_state") : "-",
                     text(u, "email"), text(u, "created_at")});
    }
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_credit(Context& ctx, const AdminArgs& a) {
  auto amount = parse_money(a.amount);
  if (!amount) return usage_error(amount.error().detail);
  if (*amount == 0) return usage_error("the amount must not be zero");
  GC_TRY(api, ctx.api());
  json::object body{{"amount", *amount}, {"note", a.note}};
  GC_TRY(entry, ctx.check(post_idempotent(ctx, **api, "/admin/users" + seg(a.user) + "/credit",
                                          body)));
  ctx.print(*entry, [&] {
    const std::string currency = currency_of(*entry);
    std::int64_t credited = integer(*entry, "amount").value_or(*amount);
    ctx.out() << fmt::format("{} {} {} {}", credited < 0 ? "Debited" : "Credited",
                             format_money(credited < 0 ? -credited : credited, currency),
                             credited < 0 ? "from" : "to", a.user);
    if (auto after = integer(*entry, "balance_after")) {
      ctx.out() << fmt::format("; balance {}", format_money(*after, currency));
    }
    ctx.out() << ".\n";
  });
  return {};
}

std::string render_prices(const json::value& prices) {
  const std::string currency = currency_of(prices);
  Table table({"GPU MODEL", "PER GPU-HOUR", "PER GPU-WEEK", "PER GPU-MONTH"});
  if (const auto* gpus = prices.as_object().if_contains("gpus"); gpus && gpus->is_array()) {
    for (const auto& g : gpus->as_array()) {
      auto money = [&](const char* field) {
        auto v = integer(g, field);
        return v ? format_money(*v, currency) : std::string("-");
      };
      table.add_row({text(g, "gpu_model"), money("price_per_gpu_hour"), money("price_per_gpu_week"), money("price_per_gpu_month")});
    }
  }
  std::string out = table.render();
  if (auto v = integer(prices, "no_gpu_price_per_hour")) out += fmt::format("No-GPU instances: {}/hour\n", format_money(*v, currency));
  if (auto v = integer(prices, "system_disk_free_gib")) out += fmt::format("System disk: {} GiB free per instance\n", *v);
  for (auto [field, label] : {std::pair{"system_disk_per_gib_hour_micros", "System disk beyond the free part"},
                              std::pair{"data_disk_per_gib_hour_micros", "Data disks"},
                              std::pair{"snapshot_per_gib_hour_micros", "Snapshots"},
                              std::pair{"image_per_gib_hour_micros", "Custom images"}}) {
    if (auto v = integer(prices, field)) out += fmt::format("{}: {}/GiB-hour\n", label, format_money_micros(*v, currency));
  }
  return out;
}

Outcome do_prices(Context& ctx, const AdminArgs& a) {
  std::optional<json::value> table;
  if (!a.prices_file.empty()) {
    GC_TRY(content, read_user_file(ctx, a.prices_file, "price file"));
    boost::system::error_code ec;
    json::value parsed = json::parse(*content, ec);
    if (ec || !parsed.is_object()) {
      return usage_error(fmt::format("{} is not a JSON object{}", a.prices_file,
                                     ec ? ": " + ec.message() : ""));
    }
    table = std::move(parsed);
  }
  GC_TRY(api, ctx.api());
  GC_TRY(prices, ctx.check(table ? (*api)->put("/admin/prices", *table)
                                 : (*api)->get("/admin/prices")));
  ctx.print(*prices, [&] {
    if (table) ctx.out() << "Prices updated; they apply from each instance's next start.\n";
    if (prices->is_object()) ctx.out() << render_prices(*prices);
  });
  return {};
}

Outcome do_clock_advance(Context& ctx, const AdminArgs& a) {
  GC_TRY(seconds, parse_duration_seconds(a.seconds));
  GC_TRY(api, ctx.api());
  // The call returns once every timer due has fired: allow it time.
  GC_TRY(now, ctx.check((*api)->post("/admin/clock", json::object{{"advance_seconds", *seconds}},
                                     {}, std::chrono::minutes(10))));
  ctx.print(*now, [&] { ctx.out() << fmt::format("Platform clock is now {}.\n", text(*now, "now")); });
  return {};
}

}  // namespace

void add_admin_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<AdminArgs>();
  auto* admin = app.add_subcommand("admin", "operator commands");
  admin->require_subcommand(1);

  auto* hosts = admin->add_subcommand("hosts", "GPU hosts and their GPUs");
  hosts->add_flag("--include-removed", a->include_removed, "list removed hosts too");
  registry.on(hosts, [a](Context& ctx) { return do_hosts(ctx, *a); });
  add_admin_host_commands(*admin, registry);

  auto* users = admin->add_subcommand("users", "all users, with their balance and its state");
  registry.on(users, [](Context& ctx) { return do_users(ctx); });
  add_admin_ledger_command(*admin, registry);

  auto* credit = admin->add_subcommand("credit", "credit (or, negative, debit) a balance");
  credit->add_option("USER", a->user, "user name or id")->required();
  credit->add_option("AMOUNT", a->amount, "amount in the main unit, e.g. 100, 12.34 or -5")
      ->required();
  credit->add_option("--note", a->note, "note for the ledger entry");
  registry.on(credit, [a](Context& ctx) { return do_credit(ctx, *a); });

  auto* prices = admin->add_subcommand("prices", "show or replace the price table");
  prices->add_option("--set", a->prices_file, "replace it with this JSON file (- = stdin)");
  registry.on(prices, [a](Context& ctx) { return do_prices(ctx, *a); });

  auto* clock = admin->add_subcommand("clock", "the test clock (gpucloudd --test-clock)");
  clock->require_subcommand(1);
  auto* advance = clock->add_subcommand("advance", "advance the platform clock");
  advance->add_option("SECONDS", a->seconds, "seconds, or with a unit: 90m, 2h, 30d")->required();
  registry.on(advance, [a](Context& ctx) { return do_clock_advance(ctx, *a); });
}

}  // namespace gpucloud::cli
