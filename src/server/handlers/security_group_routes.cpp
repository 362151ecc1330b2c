// POST/GET /security-groups, GET/PUT/DELETE /security-groups/{id}. A PUT reaches the running
// instances of the group through their own queues (within 2 s, like a PATCH of their ports).
#include "api/json_input.h"
#include "core/ids.h"
#include "security_groups/security_group_actions.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
namespace sg = security_groups;

namespace {

Result<bool> acknowledge_risk(const json::object& body) {
  auto ack = api::optional_bool(body, "acknowledge_risk");
  if (!ack) return fail(ack.error());
  return ack->value_or(false);
}

Result<std::optional<std::string>> description_of(const json::object& body) {
  auto d = api::optional_string(body, "description");
  if (!d) return fail(d.error());
  if (*d && (*d)->size() > sg::kMaxDescription) return fail(ErrorCode::invalid_argument, "description: at most 255 bytes");
  return *d;
}

Result<std::vector<sg::Rule>> rules_of(const json::object& body, bool acknowledged) {
  auto it = body.find("rules");
  if (it == body.end()) return fail(ErrorCode::invalid_argument, "rules: required (a list, maybe empty)");
  return sg::parse_rules(it->value(), acknowledged);
}

asio::awaitable<Result<Response>> create_group(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"name", "description", "rules", "acknowledge_risk"}); !s)
    co_return tl::unexpected(s.error());
  auto name = api::required_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  if (!is_valid_resource_name(*name))
    co_return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  auto ack = acknowledge_risk(*body);
  if (!ack) co_return tl::unexpected(ack.error());
  auto description = description_of(*body);
  if (!description) co_return tl::unexpected(description.error());
  auto rules = rules_of(*body, *ack);
  if (!rules) co_return tl::unexpected(rules.error());
  sg::CreateGroupRequest request{*name, description->value_or(""), std::move(*rules)};
  auto effect = [actor = ctx.actor(), request, now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto g = sg::create_group(db, actor, request, now);
    if (!g) return tl::unexpected(g.error());
    return json_response(201, sg::group_json(*g));
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect));
}

asio::awaitable<Result<Response>> list_groups(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  // A write: the caller's default group is made on first sight.
  auto effect = [actor = ctx.actor(), now = ctx.app.clock().now()](store::Database& db) {
    return sg::groups_of(db, actor, now);
  };
  auto groups = co_await ctx.app.store().write(std::move(effect));
  if (!groups) co_return tl::unexpected(groups.error());
  auto key = [](const sg::SecurityGroup& g) { return std::make_pair(to_unix_micros(g.created_at), g.id); };
  co_return json_response(200, page_of(*groups, *page, key, sg::group_json));
}

asio::awaitable<Result<Response>> get_group(RequestContext& ctx) {
  auto effect = [actor = ctx.actor(), id = ctx.param("id"), now = ctx.app.clock().now()](store::Database& db) {
    return sg::group_of(db, actor, id, now);
  };
  auto g = co_await ctx.app.store().write(std::move(effect));
  if (!g) co_return tl::unexpected(g.error());
  co_return json_response(200, sg::group_json(*g));
}

asio::awaitable<Result<Response>> replace_rules(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  // Another user's group answers 404 before its body is judged.
  auto exists = [&]() -> asio::awaitable<Status> {
    auto read = [actor = ctx.actor(), id = ctx.param("id")](store::Database& db) -> Status {
      if (id == sg::kDefaultGroupName || id == sg::default_group_id(actor.user_id)) return ok();
      auto g = sg::find_owned_group(db, actor.user_id, id);
      if (!g) return fail(g.error());
      return ok();
    };
    co_return co_await ctx.app.store().read(std::move(read));
  };
  if (auto s = co_await exists(); !s) co_return tl::unexpected(s.error());
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"description", "rules", "acknowledge_risk"}); !s) co_return tl::unexpected(s.error());
  auto ack = acknowledge_risk(*body);
  if (!ack) co_return tl::unexpected(ack.error());
  auto description = description_of(*body);
  if (!description) co_return tl::unexpected(description.error());
  auto rules = rules_of(*body, *ack);
  if (!rules) co_return tl::unexpected(rules.error());
  sg::ReplaceRulesRequest request{std::move(*rules), *description};
  auto effect = [actor = ctx.actor(), id = ctx.param("id"), request, now = ctx.app.clock().now()](store::Database& db) {
    return sg::replace_rules(db, actor, id, request, now);
  };
  auto change = co_await ctx.app.store().write(std::move(effect));
  if (!change) co_return tl::unexpected(change.error());
  // Each instance's engine follows through its own queue: the agent applies the new sources.
  for (const auto& id : change->instances_to_refresh) ctx.app.instances().refresh(id);
  co_return json_response(200, sg::group_json(change->group));
}

asio::awaitable<Result<Response>> delete_group(RequestContext& ctx) {
  auto effect = [actor = ctx.actor(), id = ctx.param("id"), now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    if (auto s = sg::delete_group(db, actor, id, now); !s) return tl::unexpected(s.error());
    return empty_response(204);
  };
  co_return co_await ctx.app.store().write(std::move(effect));
}

}  // namespace

void register_security_group_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/security-groups", Access::user, "security-groups", "Create a security group", create_group);
  r.add("GET", "/api/v1/security-groups", Access::user, "security-groups", "List own security groups", list_groups);
  r.add("GET", "/api/v1/security-groups/{id}", Access::user, "security-groups", "A security group", get_group);
  r.add("PUT", "/api/v1/security-groups/{id}", Access::user, "security-groups",
        "Replace a security group's rules (applies to its running instances within 2 s)", replace_rules);
  r.add("DELETE", "/api/v1/security-groups/{id}", Access::user, "security-groups",
        "Delete a security group (not while an instance uses it)", delete_group);
}

}  // namespace gpucloud::server
