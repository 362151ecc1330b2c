// GET /healthz, GET /metrics, GET /api/v1/openapi.json.
#include <openssl/crypto.h>

#include <boost/json.hpp>

#include "monitoring/platform_metrics.h"
#include "server/app.h"
#include "server/openapi.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

asio::awaitable<Result<Response>> healthz(RequestContext&) {
  // Built once: this is the HTTP layer's ceiling in benchmarks, so it does no work.
  static const std::string body = json::serialize(json::object{{"status", "ok"}, {"version", GPUCLOUD_VERSION}});
  co_return Response{200, "application/json", body, {}, {}, {}};
}

// The HTTP front's own counters, then the platform's gauges: the store's totals read on the
// reader pool (one read transaction), the newest samples from memory.
// Whether the scrape may see every tenant's instances (labelled by user and name): it carries
// `[metrics] token` or an operator's token. Anyone else gets the platform's totals only.
asio::awaitable<bool> may_see_tenants(RequestContext& ctx) {
  if (ctx.principal) co_return ctx.principal->user.is_admin();  // metrics_require_auth: an operator
  const std::string token = App::bearer_token(ctx.request);
  if (token.empty()) co_return false;
  const std::string& scrape = ctx.app.config().metrics.token;
  if (!scrape.empty() && token.size() == scrape.size() &&
      CRYPTO_memcmp(token.data(), scrape.data(), token.size()) == 0)
    co_return true;
  auto principal = co_await ctx.app.authenticate_token(token);
  co_return principal && principal->user.is_admin();
}

asio::awaitable<Result<Response>> metrics(RequestContext& ctx) {
  ctx.app.metrics().set_gauge("gpucloud_platform_timers_pending", "Platform-clock timers waiting to fire.",
                              static_cast<double>(ctx.app.clock().pending_timers()));
  const bool tenants = co_await may_see_tenants(ctx);
  auto totals = co_await ctx.app.store().read(
      [](store::Database& db) { return monitoring::read_platform_totals(db); });
  if (!totals) co_return tl::unexpected(totals.error());
  std::string body = ctx.app.metrics().render();
  body += monitoring::render_platform_metrics(*totals, ctx.app.monitoring().latest(), std::chrono::steady_clock::now(),
                                              ctx.app.config().currency, tenants);
  co_return Response{200, "text/plain; version=0.0.4", std::move(body), {}, {}, {}};
}

asio::awaitable<Result<Response>> openapi(RequestContext& ctx) {
  co_return json_response(200, openapi_document(ctx.app.router()));
}

}  // namespace

void register_system_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/healthz", Access::public_route, "system", "Liveness", healthz);
  r.add("GET", "/api/v1/healthz", Access::public_route, "system", "Liveness", healthz);
  r.add("GET", "/metrics", app.config().server.metrics_require_auth ? Access::admin : Access::public_route, "system",
        "Prometheus metrics", metrics);
  r.add("GET", "/api/v1/openapi.json", Access::public_route, "system", "This document", openapi);
}

}  // namespace gpucloud::server
