// Quotas: GET /me/quota (a user's limits and what they use), GET/PUT /admin/users/{id}/quota
// (the operator's per-user overrides; null = the config's default).
#include "api/json_input.h"
#include "auth/user_quotas.h"
#include "disks/disk_record.h"
#include "instances/images.h"
#include "instances/instance_record.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// {gpus, instances, disk_gib, images, snapshots} in use: GPUs held by live instances, live
// instances, GiB of disks not destroyed (the recycle bin counts), custom images, snapshots not
// destroyed (the recycle bin counts).
Result<json::object> usage_json(store::Database& db, const std::string& user_id) {
  auto inst = instances::instance_usage(db, user_id, std::nullopt);
  if (!inst) return fail(inst.error());
  auto gib = disks::disk_gib_used(db, user_id);
  if (!gib) return fail(gib.error());
  auto images = instances::custom_image_count(db, user_id);
  if (!images) return fail(images.error());
  auto snapshots = disks::snapshot_count(db, user_id);
  if (!snapshots) return fail(snapshots.error());
  return json::object{{"gpus", inst->gpus_held},
                      {"instances", inst->instances},
                      {"disk_gib", *gib},
                      {"images", *images},
                      {"snapshots", *snapshots}};
}

asio::awaitable<Result<Response>> my_quota(RequestContext& ctx) {
  auto read = [&cfg = ctx.app.config(), user = ctx.caller().user.id](store::Database& db) -> Result<json::object> {
    auto limits = auth::effective_quotas(db, cfg.quotas, user);
    if (!limits) return fail(limits.error());
    auto used = usage_json(db, user);
    if (!used) return fail(used.error());
    json::object o = auth::quotas_json(*limits);
    o["used"] = std::move(*used);
    return o;
  };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

// The operator's view: the overrides at the top level (as PUT takes them), the limits that
// bind and the use beside them.
Result<json::object> admin_view(store::Database& db, const config::Config& cfg, const std::string& user_ref) {
  auto user = auth::find_user(db, user_ref);
  if (!user) return fail(user.error());
  if (!*user) return fail(ErrorCode::not_found, "no user " + user_ref);
  auto overrides = auth::load_quota_overrides(db, (*user)->id);
  if (!overrides) return fail(overrides.error());
  auto limits = auth::effective_quotas(db, cfg.quotas, (*user)->id);
  if (!limits) return fail(limits.error());
  auto used = usage_json(db, (*user)->id);
  if (!used) return fail(used.error());
  json::object o = auth::overrides_json(*overrides);
  o["user"] = (*user)->id;
  o["effective"] = auth::quotas_json(*limits);
  o["defaults"] = auth::quotas_json(cfg.quotas);
  o["used"] = std::move(*used);
  return o;
}

asio::awaitable<Result<Response>> get_user_quota(RequestContext& ctx) {
  auto read = [&cfg = ctx.app.config(), id = ctx.param("id")](store::Database& db) { return admin_view(db, cfg, id); };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

asio::awaitable<Result<Response>> put_user_quota(RequestContext& ctx) {
  boost::system::error_code ec;
  auto body = json::parse(ctx.request.body, ec);
  if (ec) co_return fail(ErrorCode::invalid_argument, "body: not valid JSON");
  auto overrides = auth::quota_overrides_from_json(body);
  if (!overrides) co_return tl::unexpected(overrides.error());
  // A lowered quota binds the next create, start or disk operation; nothing running is touched.
  auto write = [&cfg = ctx.app.config(), id = ctx.param("id"), o = *overrides](store::Database& db) -> Result<json::object> {
    auto user = auth::find_user(db, id);
    if (!user) return fail(user.error());
    if (!*user) return fail(ErrorCode::not_found, "no user " + id);
    if (auto s = auth::save_quota_overrides(db, (*user)->id, o); !s) return fail(s.error());
    return admin_view(db, cfg, (*user)->id);
  };
  auto doc = co_await ctx.app.store().write(std::move(write));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

}  // namespace

void register_quota_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/me/quota", Access::user, "auth", "Own quota limits and use", my_quota);
  r.add("GET", "/api/v1/admin/users/{id}/quota", Access::admin, "admin", "A user's quota overrides, limits and use",
        get_user_quota);
  r.add("PUT", "/api/v1/admin/users/{id}/quota", Access::admin, "admin", "Set a user's quota overrides (null = default)",
        put_user_quota);
}

}  // namespace gpucloud::server
