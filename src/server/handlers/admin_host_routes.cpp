// Operator: POST /admin/hosts/{name}/drain, /undrain and DELETE /admin/hosts/{name} (issue 26's
// host states; GET /admin/hosts is in market_routes.cpp).
#include "market/host_admin.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;

namespace {

using HostAdminStep = Result<market::HostAdminChange> (*)(store::Database&, const std::string&, SysTime);

asio::awaitable<Result<Response>> change_host(RequestContext& ctx, HostAdminStep step) {
  auto write = [step, name = ctx.param("name"), now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto changed = step(db, name, now);
    if (!changed) return tl::unexpected(changed.error());
    return json_response(200, market::host_json(changed->host));
  };
  co_return co_await ctx.app.store().write(std::move(write));
}

asio::awaitable<Result<Response>> drain_host(RequestContext& ctx) {
  HostAdminStep step = &market::drain_host;
  co_return co_await change_host(ctx, step);
}

asio::awaitable<Result<Response>> undrain_host(RequestContext& ctx) {
  HostAdminStep step = &market::undrain_host;
  co_return co_await change_host(ctx, step);
}

asio::awaitable<Result<Response>> remove_host(RequestContext& ctx) {
  HostAdminStep step = &market::remove_host;
  co_return co_await change_host(ctx, step);
}

}  // namespace

void register_admin_host_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/admin/hosts/{name}/drain", Access::admin, "admin",
        "Drain a host: no new placements; what runs there stays", drain_host);
  r.add("POST", "/api/v1/admin/hosts/{name}/undrain", Access::admin, "admin", "Let a drained host take placements again",
        undrain_host);
  r.add("DELETE", "/api/v1/admin/hosts/{name}", Access::admin, "admin",
        "Remove a host on which nothing lives (its name may join again)", remove_host);
}

}  // namespace gpucloud::server
