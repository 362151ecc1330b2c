// top NAME [--interval SECONDS] [--once]: an instance's newest GPU, CPU and memory readings
// (the `latest` of GET /instances/{id}/metrics), redrawn every interval: what nvidia-smi and
// htop would show inside it.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"
#include "core/time_format.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

struct TopArgs {
  std::string name;
  std::string interval = "2";
  bool once = false;
};

// A JSON number (integer or not) as a double; nullopt when missing, null or not a number.
std::optional<double> number_at(const json::value& object, std::string_view key) {
  const auto* v = member(object, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->to_number<double>();
}

// The entry of the array `key` whose "gpu" member is `gpu` (a GPU's position), or null.
const json::value* gpu_entry(const json::value& object, std::string_view key, std::int64_t gpu) {
  const auto* list = member(object, key);
  if (list == nullptr || !list->is_array()) return nullptr;
  for (const auto& entry : list->get_array()) {
    if (integer(entry, "gpu") == gpu) return &entry;
  }
  return nullptr;
}

// "3s ago" from the reading's time to the answer's `until` (the server's clock, so the age
// is right under a test clock and on a client whose clock is off).
std::string sample_age(const json::value& latest, const json::value& metrics) {
  auto at = parse_rfc3339(text(latest, "at", ""));
  auto until = parse_rfc3339(text(metrics, "until", ""));
  if (!at || !until) return "";
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(*until - *at).count();
  return fmt::format(", {} ago", format_duration(std::max<std::int64_t>(seconds, 0)));
}

std::string cpu_line(const json::value* latest, const json::value& instance, const json::value& metrics) {
  auto cpus = integer(instance, "cpu");
  if (!cpus) cpus = integer(metrics, "cpu");
  const std::string count = cpus ? fmt::format(" ({} CPU{})", *cpus, *cpus == 1 ? "" : "s") : "";
  auto percent = latest ? number_at(*latest, "cpu_percent") : std::nullopt;
  if (!percent) {
    // The first reading of a container has no rate yet: that needs two.
    return (latest ? "no reading yet (a rate needs two samples)" : "no reading yet") + count;
  }
  return fmt::format("{:.1f}% of one core{}", *percent, count);
}

std::string memory_line(const json::value* latest, const json::value& metrics) {
  auto limit = integer(metrics, "memory_limit_bytes");
  auto used = latest ? integer(*latest, "memory_used_bytes") : std::nullopt;
  if (!used) return limit ? "no reading yet, limit " + format_bytes(*limit) : "no reading yet";
  if (!limit || *limit <= 0) return format_bytes(*used);
  return fmt::format("{} / {} ({:.1f}%)", format_bytes(*used), format_bytes(*limit),
                     static_cast<double>(*used) * 100.0 / static_cast<double>(*limit));
}

// Seconds between frames: a decimal number from 0.5 to 3600.
Expected<std::chrono::milliseconds> parse_refresh_interval(const std::string& value) {
  double seconds = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, seconds);
  if (ec != std::errc() || ptr != end || !(seconds >= 0.5 && seconds <= 3600)) {
    return usage_error(fmt::format("--interval {}: expected seconds between refreshes, from 0.5 to 3600", value));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

struct TopFrame {
  json::value instance;
  json::value metrics;
};

// The instance (which must be running: a stopped one has no live readings) and its metrics.
// The window is short: the frame shows `latest`, and --json scripts get the last minute.
Expected<TopFrame> fetch_top_frame(Context& ctx, ApiClient& api, const std::string& name) {
  GC_TRY(instance, ctx.check(api.get("/instances" + seg(name))));
  const std::string state = text(*instance, "state");
  if (state != "running") {
    const std::string reason = text(*instance, "state_reason", "");
    return refused(fmt::format("instance {} is {}{}, so it has no live readings", text(*instance, "name", name), state,
                               reason.empty() ? "" : " (" + reason + ")"));
  }
  GC_TRY(metrics, ctx.check(api.get("/instances" + seg(text(*instance, "id", name)) + "/metrics?since=1m")));
  return TopFrame{std::move(*instance), std::move(*metrics)};
}

Outcome do_top(Context& ctx, const TopArgs& a) {
  GC_TRY(interval, parse_refresh_interval(a.interval));
  GC_TRY(api, ctx.api());
  Deps& deps = ctx.deps();
  if (!a.once && deps.trap_interrupt) deps.trap_interrupt();
  auto interrupted = [&deps] { return deps.interrupted && deps.interrupted(); };
  // In place on a terminal; elsewhere (a pipe, a log) frames follow one another.
  const bool redraw = !a.once && !ctx.json() && ctx.stdout_is_tty();
  for (bool first = true;; first = false) {
    auto frame = fetch_top_frame(ctx, **api, a.name);
    if (!frame) {
      if (interrupted()) return {};
      return tl::unexpected(std::move(frame.error()));
    }
    if (ctx.json()) {
      print_json(ctx.out(), frame->metrics);
    } else if (redraw) {
      ctx.out() << "\x1b[H\x1b[2J"
                << fmt::format("every {} s, Ctrl-C to quit\n\n", a.interval)
                << render_top_frame(frame->instance, frame->metrics);
    } else {
      if (!first) ctx.out() << "\n";
      ctx.out() << render_top_frame(frame->instance, frame->metrics);
    }
    ctx.out() << std::flush;
    if (a.once) return {};
    // Short naps so that Ctrl-C ends the view at once.
    for (auto left = *interval; left > 0ms && !interrupted(); left -= 100ms) {
      deps.sleep(std::min<std::chrono::milliseconds>(left, 100ms));
    }
    if (interrupted()) return {};
  }
}

}  // namespace

std::string render_top_frame(const json::value& instance, const json::value& metrics) {
  const json::value* latest = member(metrics, "latest");
  if (latest != nullptr && !latest->is_object()) latest = nullptr;

  KeyValues kv;
  std::string where = fmt::format("{} ({}), {}", text(instance, "name"), text(instance, "id"), text(instance, "state"));
  if (const std::string host = text(instance, "host", ""); !host.empty()) where += " on " + host;
  kv.add("instance", where);
  kv.add("sample", latest ? text(*latest, "at") + sample_age(*latest, metrics)
                          : "none yet (the first comes within one sampling interval)");
  kv.add("cpu", cpu_line(latest, instance, metrics));
  kv.add("memory", memory_line(latest, metrics));
  {
    // The system disk's use (the engine's count of what the instance wrote over its image)
    // against its size: "1.2 GiB / 30 GiB", "- / 30 GiB" before the first count.
    auto used = integer(instance, "system_disk_used_bytes");
    auto gib = integer(instance, "system_disk_gib");
    if (used || (gib && *gib > 0)) {
      std::string line = used ? format_bytes(*used) : std::string("-");
      line += " / " + (gib && *gib > 0 ? std::to_string(*gib) + " GiB" : std::string("no size"));
      if (used && gib && *gib > 0)
        line += fmt::format(" ({:.1f}%)", 100.0 * static_cast<double>(*used) / static_cast<double>(*gib << 30));
      kv.add("system disk", line);
    }
  }
  const json::value* gpu_metrics = member(metrics, "gpu_metrics");
  if (gpu_metrics != nullptr && !flag(*gpu_metrics, "available")) {
    kv.add("gpu", "no readings: " + text(*gpu_metrics, "reason", "the server gave no reason"));
  }
  std::string out = kv.render();

  const auto* gpus = member(metrics, "gpus");
  if (gpus == nullptr || !gpus->is_array() || gpus->get_array().empty()) return out;
  Table table({"GPU", "MODEL", "UTIL", "MEMORY"});
  for (const auto& gpu : gpus->get_array()) {
    const auto index = integer(gpu, "gpu").value_or(0);
    std::string model = text(gpu, "model", text(instance, "gpu_model"));
    if (flag(gpu, "simulated")) model += " (simulated)";
    const json::value* reading = latest ? gpu_entry(*latest, "gpus", index) : nullptr;
    auto total = reading ? integer(*reading, "memory_total_bytes") : integer(gpu, "memory_total_bytes");
    auto used = reading ? integer(*reading, "memory_used_bytes") : std::nullopt;
    std::string memory = used ? format_bytes(*used) : "-";
    memory += " / " + (total ? format_bytes(*total) : std::string("-"));
    auto util = reading ? number_at(*reading, "util_percent") : std::nullopt;
    table.add_row({std::to_string(index), model, util ? fmt::format("{:.0f}%", *util) : "-", memory});
  }
  return out + "\n" + table.render();
}

void add_top_command(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<TopArgs>();
  auto* top = app.add_subcommand("top", "live GPU/CPU/memory of an instance");
  top->add_option("NAME", a->name, "instance name or id")->required();
  top->add_option("--interval", a->interval, "seconds between refreshes (default 2)");
  top->add_flag("--once", a->once, "print one frame and exit");
  registry.on(top, [a](Context& ctx) { return do_top(ctx, *a); });
}

}  // namespace gpucloud::cli
