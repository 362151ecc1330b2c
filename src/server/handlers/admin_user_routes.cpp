// Operator: GET/POST /admin/users, PATCH /admin/users/{id}.
#include "api/auth_views.h"
#include "api/json_input.h"
#include "auth/credentials.h"
#include "core/ids.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "instances/lifecycle.h"
#include "policy/user_access.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

asio::awaitable<Result<Response>> list_users(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  // Each user with their balance and its state (ok / low / arrears), as they see it: net of
  // what their running meters have accrued.
  struct Listed {
    auth::User user;
    json::object billing;
  };
  auto list = [now = ctx.app.clock().now(), currency = ctx.app.config().currency](
                  store::Database& db) -> Result<std::vector<Listed>> {
    auto users = auth::list_users(db);
    if (!users) return fail(users.error());
    std::vector<Listed> out;
    out.reserve(users->size());
    for (auto& u : *users) {
      json::object money;
      if (auto account = billing::account_of_user(db, u.id)) {
        auto pending = billing::unsettled_of_account(db, account->id, now);
        if (!pending) return fail(pending.error());
        money = billing::account_json(*account, currency, *pending);
      }
      out.push_back(Listed{std::move(u), std::move(money)});
    }
    return out;
  };
  auto users = co_await ctx.app.store().read(std::move(list));
  if (!users) co_return tl::unexpected(users.error());
  auto key = [](const Listed& l) { return std::make_pair(to_unix_micros(l.user.created_at), l.user.id); };
  auto to_json = [](const Listed& l) {
    json::object o = api::user_json(l.user);
    if (!l.billing.empty()) {
      o["balance"] = l.billing.at("balance");
      o["billing_state"] = l.billing.at("state");
      o["billing"] = l.billing;
    }
    return o;
  };
  co_return json_response(200, page_of(*users, *page, key, to_json));
}

Result<std::string> parse_role(const json::object& body, std::string fallback) {
  auto role = api::optional_string(body, "role");
  if (!role) return tl::unexpected(role.error());
  std::string value = role->value_or(fallback);
  if (value != "user" && value != "admin") return fail(ErrorCode::invalid_argument, "role: must be \"user\" or \"admin\"");
  return value;
}

asio::awaitable<Result<Response>> create_user(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto username = api::required_string(*body, "username");
  if (!username) co_return tl::unexpected(username.error());
  if (!is_valid_username(*username))
    co_return fail(ErrorCode::invalid_argument, "username: must match [a-z][a-z0-9_-]{2,31}");
  auto password = api::required_string(*body, "password");
  if (!password) co_return tl::unexpected(password.error());
  if (auto s = auth::check_password_strength(*password); !s) co_return tl::unexpected(s.error());
  auto role = parse_role(*body, "user");
  if (!role) co_return tl::unexpected(role.error());
  auto email = api::optional_string(*body, "email");
  if (!email) co_return tl::unexpected(email.error());
  // A repeat that arrives while this one hashes is `conflict`, and hashes nothing.
  if (auto held = ctx.app.hold_idempotency_key(ctx); !held) co_return tl::unexpected(held.error());
  auto hash_job = [password = *password]() { return auth::hash_password(password); };
  auto hash = co_await ctx.app.password_pool().run<std::string>(std::move(hash_job));
  if (!hash) co_return tl::unexpected(hash.error());
  auto effect = [username = *username, email = *email, hash = *hash, role = *role, now = ctx.app.clock().now(),
                 credit = ctx.app.config().billing.signup_credit](store::Database& db) -> Result<Response> {
    auto user = auth::create_user(db, username, email, hash, role, now);
    if (!user) return tl::unexpected(user.error());
    if (auto s = billing::open_account(db, user->id, user->username, credit, now); !s) return fail(s.error());
    return json_response(201, api::user_json(*user));
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect));
}

asio::awaitable<Result<Response>> patch_user(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto disabled = api::optional_bool(*body, "disabled");
  if (!disabled) co_return tl::unexpected(disabled.error());
  std::optional<std::string> role;
  if (body->contains("role")) {
    auto r = parse_role(*body, "");
    if (!r) co_return tl::unexpected(r.error());
    role = *r;
  }
  auto kicks = std::make_shared<std::vector<std::string>>();
  auto effect = [id = ctx.param("id"), disabled = *disabled, role, self = ctx.caller().user.id, kicks,
                 now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto user = auth::find_user(db, id);
    if (!user) return tl::unexpected(user.error());
    if (!*user) return fail(ErrorCode::not_found, "user " + id + " not found");
    if ((*user)->id == self && ((disabled && *disabled) || (role && *role != "admin")))
      return fail(ErrorCode::conflict, "an operator cannot disable or demote their own account");
    if (disabled) {
      // Disabling also stops what the user can no longer stop themselves (policy/user_access.h).
      auto change = policy::set_user_disabled(db, (*user)->id, *disabled, now);
      if (!change) return tl::unexpected(change.error());
      *kicks = std::move(change->instances_to_kick);
      (*user)->disabled = *disabled;
    }
    if (role) {
      if (auto s = auth::set_user_role(db, (*user)->id, *role); !s) return tl::unexpected(s.error());
      (*user)->role = *role;
    }
    return json_response(200, api::user_json(**user));
  };
  auto response = co_await ctx.app.store().write(std::move(effect));
  ctx.app.invalidate_auth_cache();  // a disabled user's tokens fail from the next request
  if (response)
    for (const auto& id : *kicks) ctx.app.instances().kick(id);
  co_return response;
}

}  // namespace

void register_admin_user_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/admin/users", Access::admin, "admin", "List every user", list_users);
  r.add("POST", "/api/v1/admin/users", Access::admin, "admin", "Create a user", create_user);
  r.add("PATCH", "/api/v1/admin/users/{id}", Access::admin, "admin", "Disable/enable a user or change their role", patch_user);
}

}  // namespace gpucloud::server
