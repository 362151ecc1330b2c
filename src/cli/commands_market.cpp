// market, images, zones.
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/money.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

std::string money_field(const json::value& item, std::string_view key,
                        const std::string& currency) {
  auto v = integer(item, key);
  return v ? format_money(*v, currency) : "-";
}

std::string gib_field(const json::value& item, std::string_view key) {
  auto v = integer(item, key);
  return v ? format_gib(*v) : text(item, key);
}

}  // namespace

std::string render_market(const json::value& market) {
  const std::string fallback_currency = currency_of(market);
  Table table({"ZONE", "GPU", "MEMORY", "CPU/GPU", "MEM/GPU", "PRICE/H", "FREE/TOTAL", "MAX"});
  std::vector<const json::value*> no_gpu;
  for (const auto& item : items_of(market)) {
    if (member(item, "gpu_model") == nullptr) {
      no_gpu.push_back(&item);
      continue;
    }
    const std::string currency = currency_of(item, fallback_currency);
    std::string gpu = text(item, "gpu_model");
    if (flag(item, "simulated")) gpu += " (simulated)";
    auto free = integer(item, "gpus_free");
    auto total = integer(item, "gpus_total");
    table.add_row({text(item, "zone"), gpu, gib_field(item, "gpu_memory_gib"),
                   text(item, "cpu_per_gpu"), gib_field(item, "memory_gib_per_gpu"),
                   money_field(item, "price_per_gpu_hour", currency),
                   fmt::format("{}/{}", free ? std::to_string(*free) : "-",
                               total ? std::to_string(*total) : "-"),
                   text(item, "max_gpus_per_instance")});
  }
  for (const auto* item : no_gpu) {
    const std::string currency = currency_of(*item, fallback_currency);
    table.add_row({text(*item, "zone"), "no GPU", "-", text(*item, "cpu"),
                   gib_field(*item, "memory_gib"), money_field(*item, "price_per_hour", currency),
                   "-", "-"});
  }
  return table.render();
}

namespace {

std::string frameworks(const json::value& image) {
  const auto* f = member(image, "frameworks");
  if (f == nullptr || !f->is_object() || f->get_object().empty()) return "-";
  std::string out;
  for (const auto& m : f->get_object()) {
    if (!out.empty()) out += ", ";
    out += std::string(m.key()) + " " + text(*f, m.key(), "");
  }
  return out;
}

Outcome do_market(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(market, ctx.check((*api)->get_all("/market")));
  ctx.print(*market, [&] { ctx.out() << render_market(*market); });
  return {};
}

Outcome do_images(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(images, ctx.check((*api)->get_all("/images")));
  ctx.print(*images, [&] {
    Table table({"NAME", "OS", "PYTHON", "CUDA", "FRAMEWORKS", "SSH", "SIZE", "VISIBILITY",
                 "STATE"});
    for (const auto& image : items_of(*images)) {
      auto size = integer(image, "size_bytes");
      const auto* ssh = member(image, "ssh");
      table.add_row({text(image, "name"), text(image, "os"), text(image, "python"),
                     text(image, "cuda"), frameworks(image),
                     ssh == nullptr ? "-" : (flag(image, "ssh") ? "yes" : "no"),
                     size ? format_bytes(*size) : "-", text(image, "visibility"),
                     text(image, "state")});
    }
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_zones(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(zones, ctx.check((*api)->get_all("/zones")));
  ctx.print(*zones, [&] {
    Table table({"NAME", "REGION", "DESCRIPTION"});
    for (const auto& zone : items_of(*zones)) {
      table.add_row({text(zone, "name"), text(zone, "region"), text(zone, "description")});
    }
    ctx.out() << table.render();
  });
  return {};
}

}  // namespace

void add_market_commands(CLI::App& app, Registry& registry) {
  auto* market = app.add_subcommand("market", "GPU offers with free counts and prices");
  registry.on(market, [](Context& ctx) { return do_market(ctx); });
  auto* images = app.add_subcommand("images", "the image market and your custom images");
  registry.on(images, [](Context& ctx) { return do_images(ctx); });
  auto* zones = app.add_subcommand("zones", "availability zones");
  registry.on(zones, [](Context& ctx) { return do_zones(ctx); });
}

}  // namespace gpucloud::cli
