// GET /instances/{id}/metrics: an instance's monitoring series (monitoring/series.h) over a
// window, averaged per step, with its newest reading.
#include <boost/json.hpp>

#include "config/config.h"
#include "instances/actions.h"
#include "monitoring/metrics_view.h"
#include "monitoring/series.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;

namespace {

// A series answer may hold this many points; a finer step for a longer window is refused.
constexpr std::int64_t kMaxPoints = 11000;

std::int64_t unix_seconds(SysTime t) { return std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count(); }

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
  co_return json_response(200, monitoring::instance_metrics_json(instance, series, latest, {since, until, step, raw}));
}

}  // namespace

void register_monitoring_routes(App& app) {
  app.router().add("GET", "/api/v1/instances/{id}/metrics", Access::user, "instances",
                   "An instance's GPU, CPU and memory series", instance_metrics);
}

}  // namespace gpucloud::server
