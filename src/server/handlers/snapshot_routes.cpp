// Snapshots: GET /snapshots, GET/DELETE /snapshots/{id}, POST /snapshots/{id}/restore. They
// are taken with POST /disks/{id}/snapshots (disk_routes.cpp).
#include "disks/disk_actions.h"
#include "server/app.h"
#include "server/handlers/recycle_bin.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
using disks::Snapshot;

namespace {

// snapshot_json plus purge_at (recycle_bin.h).
json::object snapshot_view(const Snapshot& s, const App& app) {
  return with_purge_at(disks::snapshot_json(s), s.deleted_at, app.config().policy.recycle_days);
}

asio::awaitable<Result<Response>> list_snapshots(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto query = ctx.request.query();
  std::optional<std::string> owner = ctx.caller().user.id;
  if (query["all"] == "true" && ctx.caller().user.is_admin()) owner.reset();
  std::optional<disks::SnapshotState> state;
  if (!query["state"].empty()) {
    state = disks::parse_snapshot_state(query["state"]);
    if (!state || *state == disks::SnapshotState::destroyed)
      co_return fail(ErrorCode::invalid_argument, "state: must be one of creating, available, deleting, deleted, error");
  }
  auto read = [owner, state](store::Database& db) { return disks::list_snapshots(db, owner, state); };
  auto all = co_await ctx.app.store().read(std::move(read));
  if (!all) co_return tl::unexpected(all.error());
  auto key = [](const Snapshot& s) { return std::make_pair(to_unix_micros(s.created_at), s.id); };
  co_return json_response(200, page_of(*all, *page, key, [&](const Snapshot& s) { return snapshot_view(s, ctx.app); }));
}

asio::awaitable<Result<Response>> get_snapshot(RequestContext& ctx) {
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return disks::find_owned_snapshot(db, owner, id, true);
  };
  auto s = co_await ctx.app.store().read(std::move(read));
  if (!s) co_return tl::unexpected(s.error());
  co_return json_response(200, snapshot_view(*s, ctx.app));
}

asio::awaitable<Result<Response>> delete_snapshot(RequestContext& ctx) {
  App& app = ctx.app;
  auto effect = [&app, actor = ctx.actor(), id = ctx.param("id"),
                 now = app.clock().now()](store::Database& db) -> Result<std::pair<Response, std::string>> {
    auto s = disks::delete_snapshot(db, app.config(), actor, id, now);
    if (!s) return tl::unexpected(s.error());
    return std::pair{json_response(202, snapshot_view(*s, app)), s->id};
  };
  auto done = co_await app.store().write(std::move(effect));
  if (!done) co_return tl::unexpected(done.error());
  app.disks().kick_snapshot(done->second);
  co_await app.disks().rearm_recycle_bin();
  co_return std::move(done->first);
}

asio::awaitable<Result<Response>> restore_snapshot(RequestContext& ctx) {
  App& app = ctx.app;
  auto effect = [&app, actor = ctx.actor(), id = ctx.param("id"),
                 now = app.clock().now()](store::Database& db) -> Result<Response> {
    auto s = disks::restore_snapshot(db, actor, id, now);
    if (!s) return tl::unexpected(s.error());
    return json_response(200, snapshot_view(*s, app));
  };
  auto done = co_await app.store().write(std::move(effect));
  if (done) co_await app.disks().rearm_recycle_bin();
  co_return done;
}

}  // namespace

void register_snapshot_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/snapshots", Access::user, "disks", "List own snapshots", list_snapshots);
  r.add("GET", "/api/v1/snapshots/{id}", Access::user, "disks", "A snapshot", get_snapshot);
  r.add("DELETE", "/api/v1/snapshots/{id}", Access::user, "disks", "Delete a snapshot (to the recycle bin)", delete_snapshot);
  r.add("POST", "/api/v1/snapshots/{id}/restore", Access::user, "disks", "Restore a deleted snapshot", restore_snapshot);
}

}  // namespace gpucloud::server
