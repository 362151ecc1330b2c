// POST /tokens, GET /tokens, DELETE /tokens/{id}: API tokens, shown once, stored hashed.
#include <boost/json.hpp>

#include "api/auth_views.h"
#include "api/json_input.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

asio::awaitable<Result<Response>> create_token(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto name = api::required_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  if (name->empty() || name->size() > 100) co_return fail(ErrorCode::invalid_argument, "name: must be 1-100 characters");
  // Resources are stamped with the platform clock (sessions expire by the machine's clock).
  auto effect = [user = ctx.caller().user.id, name = *name, now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto token = auth::issue_token(db, user, "api", name, now, std::nullopt);
    if (!token) return tl::unexpected(token.error());
    json::object o = api::token_json(token->info);
    o["token"] = token->secret;
    return json_response(201, o);
  };
  // The secret is shown once: the stored answer, and so a replay, has the token without it.
  auto without_secret = [](const Response& r) {
    json::object o = json::parse(r.body).as_object();
    o.erase("token");
    o["token_redacted"] = true;
    return json::serialize(o);
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect), std::move(without_secret));
}

asio::awaitable<Result<Response>> list_tokens(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto list = [user = ctx.caller().user.id](store::Database& db) { return auth::list_api_tokens(db, user); };
  auto tokens = co_await ctx.app.store().read(std::move(list));
  if (!tokens) co_return tl::unexpected(tokens.error());
  auto key = [](const auth::TokenInfo& t) { return std::make_pair(to_unix_micros(t.created_at), t.id); };
  co_return json_response(200, page_of(*tokens, *page, key, api::token_json));
}

asio::awaitable<Result<Response>> delete_token(RequestContext& ctx) {
  auto revoke = [user = ctx.caller().user.id, id_or_name = ctx.param("id")](store::Database& db) -> Result<Response> {
    // By id; else by name (api.md: a name is accepted wherever an id is), if it names one.
    auto id = auth::resolve_api_token(db, user, id_or_name);
    if (!id) return tl::unexpected(id.error());
    if (auto s = auth::revoke_token(db, user, *id, system_now()); !s) return tl::unexpected(s.error());
    return empty_response(204);
  };
  auto response = co_await ctx.app.store().write(std::move(revoke));
  ctx.app.invalidate_auth_cache();
  co_return response;
}

}  // namespace

void register_token_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/tokens", Access::user, "tokens", "Create an API token (shown once)", create_token);
  r.add("GET", "/api/v1/tokens", Access::user, "tokens", "List the caller's API tokens", list_tokens);
  r.add("DELETE", "/api/v1/tokens/{id}", Access::user, "tokens", "Revoke an API token", delete_token);
}

}  // namespace gpucloud::server
