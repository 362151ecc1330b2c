// Data disks: POST/GET /disks, GET/DELETE /disks/{id}, POST /disks/{id}/attach|detach|resize|
// restore|snapshots. Each action is one transaction in disks/disk_actions.h; the agent's work
// (make, grow, destroy, snapshot) follows in DiskService after the commit.
#include "api/json_input.h"
#include "core/fault_points.h"
#include "core/ids.h"
#include "disks/disk_actions.h"
#include "disks/disk_record.h"
#include "server/app.h"
#include "server/handlers/recycle_bin.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
using disks::Disk;

namespace {

// disk_json plus purge_at (recycle_bin.h).
json::object disk_view(const Disk& d, const App& app) {
  return with_purge_at(disks::disk_json(d), d.deleted_at, app.config().policy.recycle_days);
}
json::object snapshot_view(const disks::Snapshot& s, const App& app) {
  return with_purge_at(disks::snapshot_json(s), s.deleted_at, app.config().policy.recycle_days);
}

// The id in a 2xx answer (a replayed one names the first request's resource).
std::optional<std::string> answered_id(const Response& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  if (auto* id = v.as_object().if_contains("id"); id && id->is_string()) return std::string(id->as_string());
  return std::nullopt;
}

asio::awaitable<Result<Response>> create_disk(RequestContext& ctx) {
  App& app = ctx.app;
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"name", "zone", "host", "size_gib", "from_snapshot"}); !s) co_return tl::unexpected(s.error());
  disks::CreateDiskRequest r;
  auto name = api::required_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  r.name = *name;
  auto zone = api::optional_string(*body, "zone");
  if (!zone) co_return tl::unexpected(zone.error());
  r.zone = *zone;
  auto host = api::optional_string(*body, "host");
  if (!host) co_return tl::unexpected(host.error());
  r.host = *host;
  auto size = api::optional_int(*body, "size_gib");
  if (!size) co_return tl::unexpected(size.error());
  r.size_gib = *size;
  auto snap = api::optional_string(*body, "from_snapshot");
  if (!snap) co_return tl::unexpected(snap.error());
  r.from_snapshot = *snap;
  std::string id = new_id("d");
  auto effect = [&app, r, id, actor = ctx.actor(), now = app.clock().now()](store::Database& db) -> Result<Response> {
    auto d = disks::create_disk(db, app.config(), actor, id, r, now);
    if (!d) return tl::unexpected(d.error());
    return json_response(202, disk_view(*d, app));
  };
  auto response = co_await app.run_idempotent(ctx, std::move(effect));
  if (response && response->status == 202) {
    fault_point("disk.after_create_commit");
    if (auto made = answered_id(*response)) app.disks().kick_disk(*made);
  }
  co_return response;
}

asio::awaitable<Result<Response>> list_disks(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto query = ctx.request.query();
  std::optional<std::string> owner = ctx.caller().user.id;
  if (query["all"] == "true" && ctx.caller().user.is_admin()) owner.reset();
  std::optional<disks::DiskState> state;
  if (!query["state"].empty()) {
    state = disks::parse_disk_state(query["state"]);
    if (!state || *state == disks::DiskState::destroyed)
      co_return fail(ErrorCode::invalid_argument,
                     "state: must be one of creating, available, attached, deleting, deleted, error");
  }
  auto read = [owner, state](store::Database& db) { return disks::list_disks(db, owner, state); };
  auto all = co_await ctx.app.store().read(std::move(read));
  if (!all) co_return tl::unexpected(all.error());
  auto key = [](const Disk& d) { return std::make_pair(to_unix_micros(d.created_at), d.id); };
  co_return json_response(200, page_of(*all, *page, key, [&](const Disk& d) { return disk_view(d, ctx.app); }));
}

asio::awaitable<Result<Response>> get_disk(RequestContext& ctx) {
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return disks::find_owned_disk(db, owner, id, true);
  };
  auto d = co_await ctx.app.store().read(std::move(read));
  if (!d) co_return tl::unexpected(d.error());
  co_return json_response(200, disk_view(*d, ctx.app));
}

// A bad body on another user's disk answers 404 like any other request on it: whether a
// disk exists is not for others to learn from a 400.
asio::awaitable<Error> body_error(RequestContext& ctx, const Error& error) {
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return disks::find_owned_disk(db, owner, id, true);
  };
  auto d = co_await ctx.app.store().read(std::move(read));
  if (!d) co_return d.error();
  co_return error;
}

// One action = one write transaction; the disk is kicked after the commit.
template <class Action>
asio::awaitable<Result<Response>> act(RequestContext& ctx, int status, Action action) {
  App& app = ctx.app;
  auto effect = [&app, action, status, actor = ctx.actor(), id = ctx.param("id"), now = app.clock().now()](
                    store::Database& db) -> Result<Response> {
    auto d = action(db, app.config(), actor, id, now);
    if (!d) return tl::unexpected(d.error());
    return json_response(status, disk_view(*d, app));
  };
  auto response = co_await app.store().write(std::move(effect));
  if (response) {
    if (auto id = answered_id(*response)) app.disks().kick_disk(*id);
    co_await app.disks().rearm_recycle_bin();
  }
  co_return response;
}

asio::awaitable<Result<Response>> delete_disk(RequestContext& ctx) {
  auto action = [](store::Database& db, const config::Config& cfg, const instances::Actor& a, const std::string& id,
                   SysTime now) { return disks::delete_disk(db, cfg, a, id, now); };
  co_return co_await act(ctx, 202, action);
}

asio::awaitable<Result<Response>> restore_disk(RequestContext& ctx) {
  auto action = [](store::Database& db, const config::Config&, const instances::Actor& a, const std::string& id,
                   SysTime now) { return disks::restore_disk(db, a, id, now); };
  co_return co_await act(ctx, 200, action);
}

asio::awaitable<Result<Response>> detach_disk(RequestContext& ctx) {
  if (!ctx.request.body.empty()) {
    auto body = api::parse_object(ctx.request.body);
    Status empty = body ? api::only_fields(*body, {}) : Status(tl::unexpected(body.error()));
    if (!empty) co_return tl::unexpected(co_await body_error(ctx, empty.error()));
  }
  auto action = [](store::Database& db, const config::Config&, const instances::Actor& a, const std::string& id,
                   SysTime now) { return disks::detach_disk(db, a, id, now); };
  co_return co_await act(ctx, 200, action);
}

struct AttachBody {
  std::string instance, mount_path;
};
Result<AttachBody> parse_attach(const std::string& text) {
  auto body = api::parse_object(text);
  if (!body) return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"instance", "mount_path"}); !s) return tl::unexpected(s.error());
  auto instance = api::required_string(*body, "instance");
  if (!instance) return tl::unexpected(instance.error());
  auto path = api::optional_string(*body, "mount_path");
  if (!path) return tl::unexpected(path.error());
  return AttachBody{*instance, path->value_or(disks::kDefaultMountPath)};
}

asio::awaitable<Result<Response>> attach_disk(RequestContext& ctx) {
  auto parsed = parse_attach(ctx.request.body);
  if (!parsed) co_return tl::unexpected(co_await body_error(ctx, parsed.error()));
  auto action = [instance = parsed->instance, path = parsed->mount_path](
                    store::Database& db, const config::Config&, const instances::Actor& a, const std::string& id,
                    SysTime now) { return disks::attach_disk(db, a, id, instance, path, now); };
  co_return co_await act(ctx, 200, action);
}

Result<std::int64_t> parse_resize(const std::string& text) {
  auto body = api::parse_object(text);
  if (!body) return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"size_gib"}); !s) return tl::unexpected(s.error());
  auto size = api::optional_int(*body, "size_gib");
  if (!size) return tl::unexpected(size.error());
  if (!*size) return fail(ErrorCode::invalid_argument, "size_gib: required");
  return **size;
}

asio::awaitable<Result<Response>> resize_disk(RequestContext& ctx) {
  auto size = parse_resize(ctx.request.body);
  if (!size) co_return tl::unexpected(co_await body_error(ctx, size.error()));
  auto action = [size = *size](store::Database& db, const config::Config& cfg, const instances::Actor& a,
                               const std::string& id, SysTime now) { return disks::resize_disk(db, cfg, a, id, size, now); };
  co_return co_await act(ctx, 202, action);
}

Result<std::string> parse_snapshot(const std::string& text) {
  auto body = api::parse_object(text);
  if (!body) return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"name"}); !s) return tl::unexpected(s.error());
  return api::required_string(*body, "name");
}

asio::awaitable<Result<Response>> snapshot_disk(RequestContext& ctx) {
  App& app = ctx.app;
  auto name = parse_snapshot(ctx.request.body);
  if (!name) co_return tl::unexpected(co_await body_error(ctx, name.error()));
  std::string id = new_id("snap");
  // An Idempotency-Key is scoped to the disk, whether the path names it or gives its id.
  auto resolve = [owner = ctx.caller().user.id, disk = ctx.param("id")](store::Database& db) -> Result<std::string> {
    auto d = disks::find_owned_disk(db, owner, disk);
    if (!d) return fail(d.error());
    return d->id;
  };
  if (auto resolved = co_await app.store().read(std::move(resolve)))
    ctx.idempotency_resource = "/api/v1/disks/" + *resolved + "/snapshots";
  auto effect = [&app, name = *name, id, actor = ctx.actor(), disk = ctx.param("id"), now = app.clock().now()](
                    store::Database& db) -> Result<Response> {
    auto s = disks::snapshot_disk(db, app.config(), actor, disk, id, name, now);
    if (!s) return tl::unexpected(s.error());
    return json_response(202, snapshot_view(*s, app));
  };
  auto response = co_await app.run_idempotent(ctx, std::move(effect));
  if (response && response->status == 202)
    if (auto made = answered_id(*response)) app.disks().kick_snapshot(*made);
  co_return response;
}

}  // namespace

void register_disk_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/disks", Access::user, "disks", "Create a data disk (empty or from a snapshot)", create_disk);
  r.add("GET", "/api/v1/disks", Access::user, "disks", "List own data disks", list_disks);
  r.add("GET", "/api/v1/disks/{id}", Access::user, "disks", "A data disk", get_disk);
  r.add("DELETE", "/api/v1/disks/{id}", Access::user, "disks", "Delete a detached disk (to the recycle bin)", delete_disk);
  r.add("POST", "/api/v1/disks/{id}/attach", Access::user, "disks", "Attach a disk to a stopped instance", attach_disk);
  r.add("POST", "/api/v1/disks/{id}/detach", Access::user, "disks", "Detach a disk from its stopped instance", detach_disk);
  r.add("POST", "/api/v1/disks/{id}/resize", Access::user, "disks", "Grow a disk", resize_disk);
  r.add("POST", "/api/v1/disks/{id}/restore", Access::user, "disks", "Restore a deleted disk from the recycle bin", restore_disk);
  r.add("POST", "/api/v1/disks/{id}/snapshots", Access::user, "disks", "Take a snapshot of a disk", snapshot_disk);
}

}  // namespace gpucloud::server
