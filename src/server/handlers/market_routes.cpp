// GET /zones, GET /market (live gpus_free); operator: GET /admin/hosts, GET/PUT /admin/prices.
#include "api/json_input.h"
#include "market/hosts.h"
#include "market/offers.h"
#include "market/prices.h"
#include "market/watches.h"
#include "billing/resource_meters.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

Result<Response> list_response(const RequestContext& ctx, const json::array& items) {
  auto page = parse_page_request(ctx.request);
  if (!page) return tl::unexpected(page.error());
  return json_response(200, page_in_order(items, *page));
}

asio::awaitable<Result<Response>> zones(RequestContext& ctx) {
  json::array items;
  for (const auto& z : ctx.app.config().zones)
    items.push_back(json::object{{"name", z.name}, {"region", z.region}, {"description", z.description}});
  co_return list_response(ctx, items);
}

struct MarketSnapshot {
  std::vector<market::HostRecord> hosts;
  market::PriceTable prices;
};

asio::awaitable<Result<Response>> market_list(RequestContext& ctx) {
  auto read = [](store::Database& db) -> Result<MarketSnapshot> {
    auto hosts = market::list_hosts(db);
    if (!hosts) return tl::unexpected(hosts.error());
    auto prices = market::load_prices(db);
    if (!prices) return tl::unexpected(prices.error());
    return MarketSnapshot{std::move(*hosts), std::move(*prices)};
  };
  auto snapshot = co_await ctx.app.store().read(std::move(read));
  if (!snapshot) co_return tl::unexpected(snapshot.error());
  co_return list_response(ctx, market::market_offers(ctx.app.config(), snapshot->hosts, snapshot->prices));
}


asio::awaitable<Result<Response>> admin_hosts(RequestContext& ctx) {
  // Removed hosts only when asked for (issue 26).
  const auto query = ctx.request.query();
  bool include_removed = false;
  if (auto it = query.find("include_removed"); it != query.end()) {
    if (it->second != "true" && it->second != "false")
      co_return fail(ErrorCode::invalid_argument, "include_removed: true or false");
    include_removed = it->second == "true";
  }
  auto read = [include_removed](store::Database& db) { return market::list_hosts(db, include_removed); };
  auto hosts = co_await ctx.app.store().read(std::move(read));
  if (!hosts) co_return tl::unexpected(hosts.error());
  json::array items;
  for (const auto& h : *hosts) items.push_back(market::host_json(h));
  co_return list_response(ctx, items);
}

asio::awaitable<Result<Response>> get_prices(RequestContext& ctx) {
  auto read = [](store::Database& db) { return market::load_prices(db); };
  auto prices = co_await ctx.app.store().read(std::move(read));
  if (!prices) co_return tl::unexpected(prices.error());
  co_return json_response(200, market::prices_json(*prices, ctx.app.config().currency));
}

asio::awaitable<Result<Response>> put_prices(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  std::vector<std::string> models;
  for (const auto& o : ctx.app.config().offers) models.push_back(o.gpu_model);
  auto table = market::prices_from_json(*body, models);
  if (!table) co_return tl::unexpected(table.error());
  auto save = [table = *table, currency = ctx.app.config().currency,
               now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    if (auto s = market::save_prices(db, table); !s) return tl::unexpected(s.error());
    // New storage prices apply from now to what already exists; running instances keep
    // the compute price of their run (a new one applies from the next start).
    if (auto s = billing::rerate_storage(db, now); !s) return tl::unexpected(s.error());
    auto saved = market::load_prices(db);
    if (!saved) return tl::unexpected(saved.error());
    return json_response(200, market::prices_json(*saved, currency));
  };
  co_return co_await ctx.app.store().write(std::move(save));
}

// POST /market/watches {zone, gpu_model}: "notify me" when a GPU of it frees up.
asio::awaitable<Result<Response>> create_watch(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"zone", "gpu_model"}, ""); !s) co_return tl::unexpected(s.error());
  auto zone = api::required_string(*body, "zone");
  if (!zone) co_return tl::unexpected(zone.error());
  auto model = api::required_string(*body, "gpu_model");
  if (!model) co_return tl::unexpected(model.error());
  auto effect = [user = ctx.caller().user.id, zone = *zone, model = *model,
                 now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto w = market::watch_model(db, user, zone, model, now);
    if (!w) return tl::unexpected(w.error());
    return json_response(201, market::watch_json(*w));
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect));
}

asio::awaitable<Result<Response>> list_watches(RequestContext& ctx) {
  auto read = [user = ctx.caller().user.id](store::Database& db) { return market::list_watches(db, user); };
  auto all = co_await ctx.app.store().read(std::move(read));
  if (!all) co_return tl::unexpected(all.error());
  json::array items;
  for (const auto& w : *all) items.push_back(market::watch_json(w));
  co_return list_response(ctx, items);
}

asio::awaitable<Result<Response>> delete_watch(RequestContext& ctx) {
  auto write = [user = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return market::delete_watch(db, user, id);
  };
  if (auto s = co_await ctx.app.store().write(std::move(write)); !s) co_return tl::unexpected(s.error());
  co_return empty_response(204);
}

}  // namespace

void register_market_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/zones", Access::user, "market", "Zones", zones);
  r.add("GET", "/api/v1/market", Access::user, "market", "GPU offers with live free counts and prices", market_list);
  r.add("POST", "/api/v1/market/watches", Access::user, "market", "Be told when a GPU of a model frees up", create_watch);
  r.add("GET", "/api/v1/market/watches", Access::user, "market", "Own market watches", list_watches);
  r.add("DELETE", "/api/v1/market/watches/{id}", Access::user, "market", "Stop watching", delete_watch);
  r.add("GET", "/api/v1/admin/hosts", Access::admin, "admin", "Hosts, their GPUs and who holds each", admin_hosts);
  r.add("GET", "/api/v1/admin/prices", Access::admin, "admin", "The price table", get_prices);
  r.add("PUT", "/api/v1/admin/prices", Access::admin, "admin", "Replace the price table", put_prices);
}

}  // namespace gpucloud::server
