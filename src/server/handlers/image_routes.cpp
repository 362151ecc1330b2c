// GET /images, GET /images/{id}: public images plus the caller's own.
#include "instances/images.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;

namespace {

asio::awaitable<Result<Response>> list_images(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto read = [viewer = ctx.caller().user.id](store::Database& db) { return instances::list_images(db, viewer); };
  auto images = co_await ctx.app.store().read(std::move(read));
  if (!images) co_return tl::unexpected(images.error());
  auto key = [](const instances::Image& i) { return std::make_pair(to_unix_micros(i.created_at), i.id); };
  co_return json_response(200, page_of(*images, *page, key, instances::image_json));
}

asio::awaitable<Result<Response>> get_image(RequestContext& ctx) {
  auto read = [viewer = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return instances::find_image(db, viewer, id);
  };
  auto image = co_await ctx.app.store().read(std::move(read));
  if (!image) co_return tl::unexpected(image.error());
  co_return json_response(200, instances::image_json(*image));
}

}  // namespace

void register_image_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/images", Access::user, "images", "The image market and own custom images", list_images);
  r.add("GET", "/api/v1/images/{id}", Access::user, "images", "An image", get_image);
}

}  // namespace gpucloud::server
