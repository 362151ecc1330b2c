// GET /instances/{id}/metrics: an instance's monitoring series (monitoring/series.h) over a
// window, averaged per step, with its newest reading.
#include <cmath>

#include <boost/json.hpp>

#include "config/config.h"
#include "instances/actions.h"
#include "monitoring/series.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A series answer may hold this many points; a finer step for a longer window is refused.
constexpr std::int64_t kMaxPoints = 11000;

std::int64_t unix_seconds(SysTime t) { return std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count(); }
SysTime from_seconds(std::int64_t s) { return SysTime(std::chrono::seconds(s)); }

// `since`/`until`: an RFC 3339 time, or a duration meaning that long before now ("1h").
Result<SysTime> parse_time_param(const std::string& field, const std::string& text, SysTime now) {
  if (auto t = parse_rfc3339(text)) return *t;
  if (auto d = config::parse_duration(text)) return now - *d;
  return fail(ErrorCode::invalid_argument, field + ": must be an RFC 3339 time or a duration before now like \"1h\"");
}

// `step`: whole seconds ("60") or a duration ("1m").
Result<std::int64_t> parse_step(const std::string& text) {
  std::int64_t seconds = 0;
  bool digits = !text.empty() && text.size() <= 9 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) seconds = std::stoll(text);
  else if (auto d = config::parse_duration(text)) seconds = d->count();
  else return fail(ErrorCode::invalid_argument, "step: must be seconds (\"60\") or a duration (\"1m\")");
  if (seconds < 1) return fail(ErrorCode::invalid_argument, "step: must be at least 1 second");
  return seconds;
}

json::array points_of(const std::vector<monitoring::Point>& points, bool whole) {
  json::array out;
  out.reserve(points.size());
  for (const auto& p : points) {
    json::value v = whole ? json::value(static_cast<std::int64_t>(std::llround(p.value)))
                          : json::value(std::round(p.value * 100) / 100);
    out.push_back(json::array{json::value(format_rfc3339(from_seconds(p.t))), v});
  }
  return out;
}

asio::awaitable<Result<Response>> instance_metrics(RequestContext& ctx) {
  App& app = ctx.app;
  const SysTime now = app.clock().now();
  auto query = ctx.request.query();
  SysTime until = now;
  if (auto it = query.find("until"); it != query.end()) {
    auto t = parse_time_param("until", it->second, now);
    if (!t) co_return tl::unexpected(t.error());
    until = *t;
  }
  SysTime since = until - std::chrono::hours(1);
  if (auto it = query.find("since"); it != query.end()) {
    auto t = parse_time_param("since", it->second, now);
    if (!t) co_return tl::unexpected(t.error());
    since = *t;
  }
  if (since >= until) co_return fail(ErrorCode::invalid_argument, "since: must be before until");
  const std::int64_t range = unix_seconds(until) - unix_seconds(since);
  // Raw samples while the window lies inside their retention, minute averages beyond.
  const auto& mon = app.config().monitoring;
  const bool raw = since >= now - mon.raw_retention;
  std::int64_t step = 0;
  if (auto it = query.find("step"); it != query.end()) {
    auto s = parse_step(it->second);
    if (!s) co_return tl::unexpected(s.error());
    step = *s;
  } else {
    // About 720 points over the window, never finer than the data.
    const std::int64_t floor_step = raw ? mon.sample_interval.count() : 60;
    step = std::max<std::int64_t>(floor_step, (range + 719) / 720);
  }
  if (range / step > kMaxPoints)
    co_return fail(ErrorCode::invalid_argument, "step: " + std::to_string(step) + " s gives more than " +
                                                    std::to_string(kMaxPoints) + " points over the window; use a larger step");

  monitoring::SeriesQuery q{unix_seconds(since), unix_seconds(until) + 1, step, raw ? monitoring::kRaw : monitoring::kMinute};
  auto read = [actor = ctx.actor(), id = ctx.param("id"), q](store::Database& db)
      -> Result<std::pair<instances::Instance, std::vector<monitoring::QueriedSeries>>> {
    auto i = instances::find_for(db, actor, id);
    if (!i) return fail(i.error());
    auto series = monitoring::query_series(db, i->id, q);
    if (!series) return fail(series.error());
    return std::make_pair(std::move(*i), std::move(*series));
  };
  auto found = co_await app.store().read(std::move(read));
  if (!found) co_return tl::unexpected(found.error());
  const auto& [instance, series] = *found;

  const auto* latest = app.monitoring().latest().instance(instance.id);
  std::optional<std::string> gpu_absent;
  if (instance.gpu_count == 0 || instance.no_gpu) gpu_absent = "the instance runs without GPUs";
  else if (instance.gpus_simulated) gpu_absent = "simulated GPUs report no utilisation";
  else if (latest && latest->sample.gpus.empty() && !latest->sample.gpu_note.empty()) gpu_absent = latest->sample.gpu_note;

  json::array gpus;
  if (!instance.no_gpu)
    for (std::size_t n = 0; n < instance.gpu_uuids.size(); ++n) {
      json::value total = nullptr;
      if (latest && n < latest->sample.gpus.size()) total = latest->sample.gpus[n].memory_total_bytes;
      gpus.push_back(json::object{{"gpu", static_cast<std::int64_t>(n)},
                                  {"uuid", instance.gpu_uuids[n]},
                                  {"model", instance.gpu_model ? json::value(*instance.gpu_model) : json::value(nullptr)},
                                  {"simulated", instance.gpus_simulated},
                                  {"memory_total_bytes", total}});
    }

  json::array out;
  for (const auto& s : series) {
    if (s.gpu == monitoring::kInstanceRow) {
      out.push_back(json::object{{"name", "cpu_percent"}, {"points", points_of(s.util, false)}});
      out.push_back(json::object{{"name", "memory_used_bytes"}, {"points", points_of(s.memory, true)}});
    } else {
      out.push_back(json::object{{"name", "gpu_util_percent"}, {"gpu", s.gpu}, {"points", points_of(s.util, false)}});
      out.push_back(json::object{{"name", "gpu_memory_used_bytes"}, {"gpu", s.gpu}, {"points", points_of(s.memory, true)}});
    }
  }

  json::value latest_json = nullptr;
  if (latest) {
    json::array lg;
    for (std::size_t n = 0; n < latest->sample.gpus.size(); ++n) {
      const auto& g = latest->sample.gpus[n];
      lg.push_back(json::object{{"gpu", static_cast<std::int64_t>(n)},
                                {"util_percent", g.util_percent},
                                {"memory_used_bytes", g.memory_used_bytes},
                                {"memory_total_bytes", g.memory_total_bytes}});
    }
    const auto& smp = latest->sample;
    latest_json = json::object{
        {"at", format_rfc3339(std::chrono::floor<std::chrono::seconds>(latest->at))},
        {"cpu_percent", smp.cpu_percent ? json::value(std::round(*smp.cpu_percent * 100) / 100) : json::value(nullptr)},
        {"memory_used_bytes", smp.memory_used_bytes ? json::value(*smp.memory_used_bytes) : json::value(nullptr)},
        {"gpus", std::move(lg)}};
  }

  json::object body{{"instance", instance.id},
                    {"since", format_rfc3339(std::chrono::floor<std::chrono::seconds>(since))},
                    {"until", format_rfc3339(std::chrono::floor<std::chrono::seconds>(until))},
                    {"step", step},
                    {"resolution", raw ? "raw" : "1m"},
                    {"cpu", instance.cpu},
                    {"memory_limit_bytes", instance.memory_gib * 1024 * 1024 * 1024},
                    {"gpus", std::move(gpus)},
                    {"gpu_metrics", json::object{{"available", !gpu_absent.has_value()},
                                                 {"reason", gpu_absent ? json::value(*gpu_absent) : json::value(nullptr)}}},
                    {"series", std::move(out)},
                    {"latest", std::move(latest_json)}};
  co_return json_response(200, body);
}

}  // namespace

void register_monitoring_routes(App& app) {
  app.router().add("GET", "/api/v1/instances/{id}/metrics", Access::user, "instances",
                   "An instance's GPU, CPU and memory series", instance_metrics);
}

}  // namespace gpucloud::server
