// GET /images, GET /images/{id}: public images plus the caller's own (?state=deleted: the
// caller's deleted, still restorable ones). POST /instances/{id}/images saves an instance as
// a custom image (202, creating → available | error); DELETE /images/{id} puts it in the
// recycle bin; POST /images/{id}/restore takes it out. The rules are instances/image_actions.h.
#include "api/json_input.h"
#include "core/ids.h"
#include "instances/actions.h"
#include "instances/image_actions.h"
#include "instances/images.h"
#include "server/app.h"
#include "server/handlers/recycle_bin.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;

namespace {

// image_json plus purge_at (recycle_bin.h).
boost::json::object image_view(const instances::Image& i, const App& app) {
  return with_purge_at(instances::image_json(i), i.deleted_at, app.config().policy.recycle_days);
}

asio::awaitable<Result<Response>> list_images(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto query = ctx.request.query();
  const std::string state = query["state"];
  if (!state.empty() && state != "deleted")
    co_return fail(ErrorCode::invalid_argument, "state: only \"deleted\" (the recycle bin) may be asked for");
  auto read = [viewer = ctx.caller().user.id, deleted = state == "deleted"](store::Database& db) {
    return instances::list_images(db, viewer, deleted);
  };
  auto images = co_await ctx.app.store().read(std::move(read));
  if (!images) co_return tl::unexpected(images.error());
  auto key = [](const instances::Image& i) { return std::make_pair(to_unix_micros(i.created_at), i.id); };
  co_return json_response(200, page_of(*images, *page, key, [&](const instances::Image& i) { return image_view(i, ctx.app); }));
}

asio::awaitable<Result<Response>> get_image(RequestContext& ctx) {
  auto read = [viewer = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return instances::find_image_for_view(db, viewer, id);
  };
  auto image = co_await ctx.app.store().read(std::move(read));
  if (!image) co_return tl::unexpected(image.error());
  co_return json_response(200, image_view(*image, ctx.app));
}

asio::awaitable<Result<Response>> save_image(RequestContext& ctx) {
  App& app = ctx.app;
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"name", "description"}); !s) co_return tl::unexpected(s.error());
  // Required, but checked after the instance is found: another user's instance is
  // not_found whatever the body says.
  auto name = api::optional_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  auto description = api::optional_string(*body, "description");
  if (!description) co_return tl::unexpected(description.error());
  if (*description && (*description)->size() > 1000)
    co_return fail(ErrorCode::invalid_argument, "description: at most 1000 characters");
  instances::SaveImageRequest request{name->value_or(""), description->value_or("")};
  std::string image_id = new_id("img");
  // An Idempotency-Key is scoped to the instance, whether the path names it or gives its id.
  auto resolve = [actor = ctx.actor(), instance = ctx.param("id")](store::Database& db) -> Result<std::string> {
    auto i = instances::find_for(db, actor, instance);
    if (!i) return fail(i.error());
    return i->id;
  };
  if (auto resolved = co_await app.store().read(std::move(resolve)))
    ctx.idempotency_resource = "/api/v1/instances/" + *resolved + "/images";
  auto effect = [&app, request, image_id, actor = ctx.actor(), instance = ctx.param("id"),
                 now = app.clock().now()](store::Database& db) -> Result<Response> {
    auto image = instances::begin_save_image(db, app.config(), actor, instance, request, image_id, now);
    if (!image) return tl::unexpected(image.error());
    return json_response(202, image_view(*image, app));
  };
  auto response = co_await app.run_idempotent(ctx, std::move(effect));
  if (response && response->status == 202) {
    // A replayed answer names the first request's image (saving it again is harmless).
    boost::system::error_code ec;
    auto v = boost::json::parse(response->body, ec);
    if (!ec && v.is_object() && v.as_object().contains("id")) app.images().save(std::string(v.at("id").as_string()));
  }
  co_return response;
}

asio::awaitable<Result<Response>> delete_image(RequestContext& ctx) {
  App& app = ctx.app;
  auto effect = [&app, actor = ctx.actor(), id = ctx.param("id"), now = app.clock().now()](store::Database& db) {
    return instances::delete_image(db, app.config(), actor, id, now);
  };
  auto deleted = co_await app.store().write(std::move(effect));
  if (!deleted) co_return tl::unexpected(deleted.error());
  app.images().arm(*deleted);
  co_return json_response(200, image_view(*deleted, app));
}

asio::awaitable<Result<Response>> restore_image(RequestContext& ctx) {
  App& app = ctx.app;
  auto effect = [&app, actor = ctx.actor(), id = ctx.param("id"), now = app.clock().now()](store::Database& db) {
    return instances::restore_image(db, app.config(), actor, id, now);
  };
  auto restored = co_await app.store().write(std::move(effect));
  if (!restored) co_return tl::unexpected(restored.error());
  co_return json_response(200, image_view(*restored, app));
}

}  // namespace

void register_image_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/images", Access::user, "images", "The image market and own custom images (?state=deleted: the recycle bin)",
        list_images);
  r.add("GET", "/api/v1/images/{id}", Access::user, "images", "An image", get_image);
  r.add("DELETE", "/api/v1/images/{id}", Access::user, "images",
        "Delete an own custom image (hidden and unbilled at once; restorable for [policy] recycle_days)", delete_image);
  r.add("POST", "/api/v1/images/{id}/restore", Access::user, "images", "Restore a deleted custom image", restore_image);
  r.add("POST", "/api/v1/instances/{id}/images", Access::user, "images",
        "Save the instance's system disk as a private image (202; creating, then available or error)", save_image);
}

}  // namespace gpucloud::server
