// POST/GET /ssh-keys, DELETE /ssh-keys/{id}.
#include <algorithm>

#include "api/json_input.h"
#include "core/ids.h"
#include "instances/instance_record.h"
#include "instances/lifecycle.h"
#include "instances/ssh_keys.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

json::object key_json(const instances::SshKey& k) {
  return {{"id", k.id},
          {"name", k.name},
          {"public_key", k.public_key},
          {"fingerprint", k.fingerprint},
          {"created_at", format_rfc3339(k.created_at)}};
}

asio::awaitable<Result<Response>> add_key(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto name = api::required_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  if (!is_valid_resource_name(*name))
    co_return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  auto text = api::required_string(*body, "public_key");
  if (!text) co_return tl::unexpected(text.error());
  auto parsed = instances::parse_public_key(*text);
  if (!parsed) co_return tl::unexpected(parsed.error());
  auto effect = [owner = ctx.caller().user.id, name = *name, key = *parsed, now = ctx.app.clock().now()](store::Database& db) -> Result<Response> {
    auto k = instances::add_ssh_key(db, owner, name, key, now);
    if (!k) return tl::unexpected(k.error());
    return json_response(201, key_json(*k));
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect));
}

asio::awaitable<Result<Response>> list_keys(RequestContext& ctx) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto read = [owner = ctx.caller().user.id](store::Database& db) { return instances::list_ssh_keys(db, owner); };
  auto keys = co_await ctx.app.store().read(std::move(read));
  if (!keys) co_return tl::unexpected(keys.error());
  auto key = [](const instances::SshKey& k) { return std::make_pair(to_unix_micros(k.created_at), k.id); };
  co_return json_response(200, page_of(*keys, *page, key, key_json));
}

asio::awaitable<Result<Response>> get_key(RequestContext& ctx) {
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return instances::find_ssh_key(db, owner, id);
  };
  auto k = co_await ctx.app.store().read(std::move(read));
  if (!k) co_return tl::unexpected(k.error());
  co_return json_response(200, key_json(*k));
}

asio::awaitable<Result<Response>> delete_key(RequestContext& ctx) {
  // The owner's running instances that held the key get their key set again (the agent
  // rewrites their authorized keys live): a deleted key stops logging in at once, not at
  // their next boot.
  auto effect = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) -> Result<std::vector<std::string>> {
    auto key = instances::find_ssh_key(db, owner, id);
    if (!key) return tl::unexpected(key.error());
    if (auto s = instances::delete_ssh_key(db, owner, key->id); !s) return tl::unexpected(s.error());
    auto running = instances::list_instances(db, owner, instances::InstanceState::running);
    if (!running) return tl::unexpected(running.error());
    std::vector<std::string> holders;
    for (const auto& i : *running)
      if (std::find(i.ssh_keys.begin(), i.ssh_keys.end(), key->id) != i.ssh_keys.end()) holders.push_back(i.id);
    return holders;
  };
  auto holders = co_await ctx.app.store().write(std::move(effect));
  if (!holders) co_return tl::unexpected(holders.error());
  for (const auto& instance : *holders) ctx.app.instances().refresh(instance);
  co_return empty_response(204);
}

}  // namespace

void register_ssh_key_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/ssh-keys", Access::user, "ssh-keys", "Add an OpenSSH public key", add_key);
  r.add("GET", "/api/v1/ssh-keys", Access::user, "ssh-keys", "List own SSH keys", list_keys);
  r.add("GET", "/api/v1/ssh-keys/{id}", Access::user, "ssh-keys", "An SSH key", get_key);
  r.add("DELETE", "/api/v1/ssh-keys/{id}", Access::user, "ssh-keys", "Delete an SSH key", delete_key);
}

}  // namespace gpucloud::server
