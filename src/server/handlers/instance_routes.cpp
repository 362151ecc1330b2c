// Instances: POST/GET /instances, GET/PATCH/DELETE /instances/{id}, POST .../stop|start|restart.
// Each action is a compare-and-set on the recorded state, committed first; the engine work
// follows in InstanceService::converge.
#include <algorithm>
#include <set>

#include "api/json_input.h"
#include "billing/reports.h"
#include "core/ids.h"
#include "core/time_format.h"
#include "core/fault_points.h"
#include "instances/actions.h"
#include "instances/images.h"
#include "instances/password_hash.h"
#include "instances/ssh_keys.h"
#include "policy/instances.h"
#include "market/prices.h"
#include "market/reservations.h"
#include "billing/meters.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
using instances::Instance;

namespace {

constexpr std::size_t kMaxPorts = 10;

using CreateSpec = policy::CreateInstanceRequest;

// One declared port: 8888 (tcp), "8888/tcp", "53/udp", or {"port": 53, "protocol": "udp"}.
Result<instances::PortSpec> parse_port(const json::value& v) {
  const auto bad = [] {
    return fail(ErrorCode::invalid_argument,
                "ports: each port is a number from 1 to 65535 (tcp), \"PORT/udp\", or {\"port\", \"protocol\"}");
  };
  instances::PortSpec spec;
  std::int64_t port = -1;
  if (v.is_int64() || v.is_uint64()) {
    port = v.is_int64() ? v.as_int64() : static_cast<std::int64_t>(v.as_uint64());
  } else if (v.is_string()) {
    const std::string text(v.as_string());
    const auto slash = text.find('/');
    const std::string number = text.substr(0, slash);
    if (number.empty() || number.size() > 5 || number.find_first_not_of("0123456789") != std::string::npos) return bad();
    port = std::stoll(number);
    if (slash != std::string::npos) spec.protocol = text.substr(slash + 1);
  } else if (v.is_object()) {
    const auto& o = v.as_object();
    if (auto s = api::only_fields(o, {"port", "protocol"}, "ports[]."); !s) return tl::unexpected(s.error());
    auto p = api::required_int(o, "port");
    if (!p) return fail(ErrorCode::invalid_argument, "ports[]." + p.error().detail);
    port = *p;
    auto protocol = api::optional_string(o, "protocol");
    if (!protocol) return fail(ErrorCode::invalid_argument, "ports[]." + protocol.error().detail);
    spec.protocol = protocol->value_or("tcp");
  } else {
    return bad();
  }
  if (port < 1 || port > 65535) return bad();
  if (spec.protocol != "tcp" && spec.protocol != "udp")
    return fail(ErrorCode::invalid_argument, "ports: protocol must be tcp or udp, not \"" + spec.protocol + "\"");
  spec.port = static_cast<int>(port);
  return spec;
}

Result<std::vector<instances::PortSpec>> parse_ports(const json::object& body) {
  auto it = body.find("ports");
  if (it == body.end() || it->value().is_null()) return std::vector<instances::PortSpec>{{22, "tcp"}};
  if (!it->value().is_array()) return fail(ErrorCode::invalid_argument, "ports: must be a list of ports");
  std::vector<instances::PortSpec> ports;
  for (const auto& v : it->value().as_array()) {
    auto p = parse_port(v);
    if (!p) return tl::unexpected(p.error());
    if (std::find(ports.begin(), ports.end(), *p) != ports.end())
      return fail(ErrorCode::invalid_argument, "ports: " + std::to_string(p->port) + "/" + p->protocol + " is listed twice");
    ports.push_back(*p);
  }
  if (ports.size() > kMaxPorts) return fail(ErrorCode::invalid_argument, "ports: at most 10 ports");
  return ports;
}

// "security_group": an id or a name of the caller's own groups (checked in the store).
Result<std::optional<std::string>> parse_security_group(const json::object& body) {
  auto sg = api::optional_string(body, "security_group");
  if (!sg) return tl::unexpected(sg.error());
  if (*sg && ((*sg)->empty() || (*sg)->size() > 64))
    return fail(ErrorCode::invalid_argument, "security_group: a security group id or name");
  return *sg;
}

constexpr std::size_t kMaxDataDisks = 8;

// "data_disks": [{"size_gib", "mount_path"?, "delete_on_release"?} | {"id", "mount_path"?}].
// Paths default to /root/data, then /root/data2, ...; the rules are checked in disks/.
Result<std::vector<disks::InstanceDataDisk>> parse_data_disks(const json::value& v) {
  if (!v.is_array()) return fail(ErrorCode::invalid_argument, "data_disks: must be a list");
  if (v.as_array().size() > kMaxDataDisks) return fail(ErrorCode::invalid_argument, "data_disks: at most 8 disks");
  std::vector<disks::InstanceDataDisk> out;
  for (std::size_t n = 0; n < v.as_array().size(); ++n) {
    const std::string field = "data_disks[" + std::to_string(n) + "]";
    const auto& item = v.as_array()[n];
    if (!item.is_object()) return fail(ErrorCode::invalid_argument, field + ": must be an object");
    const auto& o = item.as_object();
    if (auto s = api::only_fields(o, {"id", "size_gib", "mount_path", "delete_on_release"}, field + "."); !s)
      return tl::unexpected(s.error());
    disks::InstanceDataDisk d;
    auto id = api::optional_string(o, "id");
    if (!id) return fail(ErrorCode::invalid_argument, field + "." + id.error().detail);
    auto size = api::optional_int(o, "size_gib");
    if (!size) return fail(ErrorCode::invalid_argument, field + "." + size.error().detail);
    auto path = api::optional_string(o, "mount_path");
    if (!path) return fail(ErrorCode::invalid_argument, field + "." + path.error().detail);
    auto dor = api::optional_bool(o, "delete_on_release");
    if (!dor) return fail(ErrorCode::invalid_argument, field + "." + dor.error().detail);
    if (*id && *size) return fail(ErrorCode::invalid_argument, field + ": give either id (an existing disk) or size_gib (a new one)");
    if (!*id && !*size) return fail(ErrorCode::invalid_argument, field + ".size_gib: required for a new disk (or give id)");
    if (*id && *dor) return fail(ErrorCode::invalid_argument, field + ".delete_on_release: only for a new disk");
    d.existing = *id;
    d.size_gib = size->value_or(0);
    d.mount_path = path->value_or(n == 0 ? std::string(disks::kDefaultMountPath)
                                         : std::string(disks::kDefaultMountPath) + std::to_string(n + 1));
    d.delete_on_release = dor->value_or(false);
    out.push_back(std::move(d));
  }
  return out;
}

// Cost control (spec, "Cost control"): each field absent (outer nullopt), null (cleared:
// inner nullopt) or set. `autostop.gpu_util_below_percent` defaults to 5.
struct CostControlFields {
  std::optional<std::optional<instances::Instance::Autostop>> autostop;
  std::optional<std::optional<SysTime>> stop_at;
  std::optional<std::optional<int>> release_after_stopped_days;
};
Result<CostControlFields> parse_cost_control(const json::object& body) {
  CostControlFields out;
  if (auto it = body.find("autostop"); it != body.end()) {
    if (it->value().is_null()) {
      out.autostop.emplace();
    } else {
      if (!it->value().is_object())
        return fail(ErrorCode::invalid_argument, "autostop: must be an object {idle_minutes, gpu_util_below_percent} or null");
      const auto& a = it->value().as_object();
      if (auto s = api::only_fields(a, {"idle_minutes", "gpu_util_below_percent"}, "autostop."); !s) return fail(s.error());
      auto idle = api::optional_int(a, "idle_minutes");
      if (!idle) return fail(ErrorCode::invalid_argument, "autostop." + idle.error().detail);
      if (!*idle) return fail(ErrorCode::invalid_argument, "autostop.idle_minutes: required (minutes, from 1 to 10080)");
      if (**idle < 1 || **idle > 10080)
        return fail(ErrorCode::invalid_argument, "autostop.idle_minutes: must be from 1 to 10080");
      auto util = api::optional_int(a, "gpu_util_below_percent");
      if (!util) return fail(ErrorCode::invalid_argument, "autostop." + util.error().detail);
      if (*util && (**util < 1 || **util > 100))
        return fail(ErrorCode::invalid_argument, "autostop.gpu_util_below_percent: must be from 1 to 100");
      out.autostop = std::optional<instances::Instance::Autostop>(
          instances::Instance::Autostop{static_cast<int>(**idle), static_cast<int>(util->value_or(5))});
    }
  }
  if (auto it = body.find("stop_at"); it != body.end()) {
    if (it->value().is_null()) {
      out.stop_at.emplace();
    } else {
      if (!it->value().is_string()) return fail(ErrorCode::invalid_argument, "stop_at: must be an RFC 3339 time or null");
      auto t = parse_rfc3339(std::string(it->value().as_string()));
      if (!t) return fail(ErrorCode::invalid_argument, "stop_at: must be an RFC 3339 time like 2026-12-02T18:00:00Z");
      out.stop_at = std::optional<SysTime>(*t);
    }
  }
  if (auto it = body.find("release_after_stopped_days"); it != body.end()) {
    if (it->value().is_null()) {
      out.release_after_stopped_days.emplace();
    } else {
      auto days = api::optional_int(body, "release_after_stopped_days");
      if (!days) return fail(days.error());
      if (!*days || **days < 1 || **days > 3650)
        return fail(ErrorCode::invalid_argument, "release_after_stopped_days: must be from 1 to 3650, or null for the platform's default");
      out.release_after_stopped_days = std::optional<int>(static_cast<int>(**days));
    }
  }
  return out;
}

// `spend_limit`: absent (nullopt), null (clear: inner nullopt) or a positive amount.
Result<std::optional<std::optional<std::int64_t>>> parse_spend_limit(const json::object& body) {
  auto it = body.find("spend_limit");
  if (it == body.end()) return std::optional<std::optional<std::int64_t>>{};
  if (it->value().is_null()) return std::optional<std::optional<std::int64_t>>{std::optional<std::int64_t>{}};
  auto v = api::optional_int(body, "spend_limit");
  if (!v) return tl::unexpected(v.error());
  if (!*v || **v < 1 || **v > 1'000'000'000'000)
    return fail(ErrorCode::invalid_argument, "spend_limit: must be a positive amount in the smallest unit, or null");
  return std::optional<std::optional<std::int64_t>>{*v};
}

// Everything that can be checked without the store; the password is hashed off the loop later.
Result<std::pair<CreateSpec, std::optional<std::string>>> parse_create(const json::object& body, const config::Config& cfg) {
  CreateSpec s;
  auto name = api::required_string(body, "name");
  if (!name) return tl::unexpected(name.error());
  if (!is_valid_resource_name(*name))
    return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  s.name = *name;
  auto zone = api::optional_string(body, "zone");
  if (!zone) return tl::unexpected(zone.error());
  s.zone = zone->value_or(cfg.zones.empty() ? "zone-a" : cfg.zones.front().name);
  if (!cfg.find_zone(s.zone)) return fail(ErrorCode::invalid_argument, "zone: \"" + s.zone + "\" is not a zone");
  auto model = api::optional_string(body, "gpu_model");
  if (!model) return tl::unexpected(model.error());
  auto count = api::optional_int(body, "gpu_count");
  if (!count) return tl::unexpected(count.error());
  std::int64_t gpus = count->value_or(*model ? 1 : 0);
  if (gpus < 0 || gpus > 64) return fail(ErrorCode::invalid_argument, "gpu_count: must be from 0 to 64");
  if (gpus > 0) {
    if (!*model) return fail(ErrorCode::invalid_argument, "gpu_model: is required when gpu_count > 0");
    const auto* offer = cfg.find_offer(**model);
    if (!offer) return fail(ErrorCode::invalid_argument, "gpu_model: \"" + **model + "\" is not in the market");
    s.gpu_model = **model;
    s.cpu = offer->cpu_per_gpu * static_cast<int>(gpus);
    s.memory_gib = offer->memory_gib_per_gpu * gpus;
  } else {
    if (*model && count->has_value()) return fail(ErrorCode::invalid_argument, "gpu_model: must be omitted when gpu_count is 0");
    s.cpu = cfg.no_gpu_offer.cpu;
    s.memory_gib = cfg.no_gpu_offer.memory_gib;
  }
  s.gpu_count = static_cast<int>(gpus);
  auto image = api::optional_string(body, "image");
  if (!image) return tl::unexpected(image.error());
  s.image = image->value_or(instances::kBaseImageName);
  auto disk = api::optional_int(body, "system_disk_gib");
  if (!disk) return tl::unexpected(disk.error());
  s.system_disk_gib = disk->value_or(30);
  if (s.system_disk_gib < 10 || s.system_disk_gib > 4096)
    return fail(ErrorCode::invalid_argument, "system_disk_gib: must be from 10 to 4096");
  auto ports = parse_ports(body);
  if (!ports) return tl::unexpected(ports.error());
  s.ports = *ports;
  auto group = parse_security_group(body);
  if (!group) return tl::unexpected(group.error());
  s.security_group = *group;
  if (auto keys = body.find("ssh_keys"); keys != body.end() && !keys->value().is_null()) {
    if (!keys->value().is_array()) return fail(ErrorCode::invalid_argument, "ssh_keys: must be a list of key ids or names");
    for (const auto& k : keys->value().as_array()) {
      if (!k.is_string()) return fail(ErrorCode::invalid_argument, "ssh_keys: must be a list of key ids or names");
      s.ssh_keys.emplace_back(k.as_string());
    }
  }
  auto password = api::optional_string(body, "password");
  if (!password) return tl::unexpected(password.error());
  if (*password && ((*password)->size() < 8 || (*password)->size() > 256))
    return fail(ErrorCode::invalid_argument, "password: must be 8 to 256 characters");
  if (auto billing = body.find("billing"); billing != body.end() && !billing->value().is_null()) {
    if (!billing->value().is_object()) return fail(ErrorCode::invalid_argument, "billing: must be an object");
    auto mode = api::optional_string(billing->value().as_object(), "mode");
    if (!mode) return fail(ErrorCode::invalid_argument, "billing." + mode.error().detail);
    s.billing_mode = mode->value_or("hourly");
    if (s.billing_mode != "hourly" && s.billing_mode != "weekly" && s.billing_mode != "monthly")
      return fail(ErrorCode::invalid_argument, "billing.mode: must be hourly, weekly or monthly");
    if (s.billing_mode != "hourly" && s.gpu_count == 0)
      return fail(ErrorCode::invalid_argument, "billing.mode: subscriptions are for GPU instances; a no-GPU one is hourly");
    auto renew = api::optional_bool(billing->value().as_object(), "auto_renew");
    if (!renew) return fail(ErrorCode::invalid_argument, "billing." + renew.error().detail);
    s.auto_renew = renew->value_or(true);
  }
  if (auto disks = body.find("data_disks"); disks != body.end() && !disks->value().is_null()) {
    auto parsed = parse_data_disks(disks->value());
    if (!parsed) return tl::unexpected(parsed.error());
    s.data_disks = std::move(*parsed);
    for (const auto& d : s.data_disks)
      if (!d.existing) s.new_disk_ids.push_back(new_id("d"));
  }
  auto cost = parse_cost_control(body);
  if (!cost) return tl::unexpected(cost.error());
  if (cost->autostop) s.autostop = *cost->autostop;
  if (cost->stop_at) s.stop_at = *cost->stop_at;
  if (cost->release_after_stopped_days) s.release_after_stopped_days = *cost->release_after_stopped_days;
  auto limit = parse_spend_limit(body);
  if (!limit) return tl::unexpected(limit.error());
  if (*limit) s.spend_limit = **limit;
  return std::make_pair(std::move(s), *password);
}

// `charged` as the console shows it: the cost so far, the running run's accrual included
// (what a settlement now would charge), not only what the last settlement charged.
Result<Instance> with_live_charge(store::Database& db, Result<Instance> i, SysTime now) {
  if (!i || i->state != instances::InstanceState::running) return i;
  auto cost = billing::compute_cost_at(db, i->id, now);
  if (!cost) return fail(cost.error());
  i->charged = *cost;
  return i;
}
Result<std::vector<Instance>> with_live_charges(store::Database& db, Result<std::vector<Instance>> all, SysTime now) {
  if (!all) return all;
  for (auto& i : *all) {
    if (i.state != instances::InstanceState::running) continue;
    auto cost = billing::compute_cost_at(db, i.id, now);
    if (!cost) return fail(cost.error());
    i.charged = *cost;
  }
  return all;
}

Response instance_response(App& app, int status, const Instance& i) {
  auto& svc = app.instances();
  return json_response(status, instances::instance_json(i, svc.view(), svc.run_seconds_now(i)));
}

asio::awaitable<Result<Response>> create_instance(RequestContext& ctx) {
  App& app = ctx.app;
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto parsed = parse_create(*body, app.config());
  if (!parsed) co_return tl::unexpected(parsed.error());
  CreateSpec spec = std::move(parsed->first);
  if (parsed->second) {
    auto hash_job = [password = *parsed->second]() { return instances::shadow_password_hash(password); };
    auto hash = co_await offload<Result<std::string>>(app.password_pool().get_executor(), std::move(hash_job));
    if (!hash) co_return tl::unexpected(hash.error());
    spec.password_hash = *hash;
  }
  std::string id = new_id("i");
  auto effect = [&app, spec, id, actor = ctx.actor(), now = app.clock().now()](store::Database& db) -> Result<Response> {
    auto created = policy::create_instance(db, app.config(), actor, id, spec, now);
    if (!created) return tl::unexpected(created.error());
    return instance_response(app, 202, *created);
  };
  auto response = co_await app.run_idempotent(ctx, std::move(effect));
  if (response && response->status == 202) {
    fault_point("create.after_reservation_commit");
    app.instances().kick(id);
    // A replayed answer names the first request's instance: kick that one (harmless if done).
    if (response->headers.size() && response->headers.front().first == "Idempotent-Replayed") {
      boost::system::error_code ec;
      auto v = json::parse(response->body, ec);
      if (!ec && v.is_object() && v.as_object().contains("id")) app.instances().kick(std::string(v.at("id").as_string()));
    }
  }
  co_return response;
}

asio::awaitable<Result<Response>> list_for(RequestContext& ctx, bool everyone) {
  auto page = parse_page_request(ctx.request);
  if (!page) co_return tl::unexpected(page.error());
  auto query = ctx.request.query();
  std::optional<std::string> owner = ctx.caller().user.id;
  // ?all=true: the operator sees every user's; a user sees all of their own, released too.
  bool with_released = false;
  if (query["all"] == "true") {
    if (ctx.caller().user.is_admin()) everyone = true;
    else with_released = true;
  }
  if (everyone) owner.reset();
  std::optional<instances::InstanceState> state;
  if (!query["state"].empty()) {
    state = instances::parse_instance_state(query["state"]);
    if (!state)
      co_return fail(ErrorCode::invalid_argument, "state: must be one of creating, running, stopping, stopped, starting, releasing, released, error");
  }
  auto read = [owner, state, with_released, now = ctx.app.clock().now()](store::Database& db) {
    return with_live_charges(db, instances::list_instances(db, owner, state, with_released), now);
  };
  auto all = co_await ctx.app.store().read(std::move(read));
  if (!all) co_return tl::unexpected(all.error());
  auto& svc = ctx.app.instances();
  auto key = [](const Instance& i) { return std::make_pair(to_unix_micros(i.created_at), i.id); };
  auto to_json = [&svc](const Instance& i) { return instances::instance_json(i, svc.view(), svc.run_seconds_now(i)); };
  co_return json_response(200, page_of(*all, *page, key, to_json));
}

asio::awaitable<Result<Response>> list(RequestContext& ctx) { co_return co_await list_for(ctx, false); }
asio::awaitable<Result<Response>> list_all(RequestContext& ctx) { co_return co_await list_for(ctx, true); }

asio::awaitable<Result<Response>> get(RequestContext& ctx) {
  auto read = [actor = ctx.actor(), id = ctx.param("id"), now = ctx.app.clock().now()](store::Database& db) {
    return with_live_charge(db, instances::find_for(db, actor, id), now);
  };
  auto i = co_await ctx.app.store().read(std::move(read));
  if (!i) co_return tl::unexpected(i.error());
  co_return instance_response(ctx.app, 200, *i);
}

// One action = one transaction (instances/actions.h); the engine work is kicked after the commit.
template <class Action>
asio::awaitable<Result<Response>> act(RequestContext& ctx, Action action) {
  App& app = ctx.app;
  auto effect = [&app, actor = ctx.actor(), id = ctx.param("id"), action,
                 now = app.clock().now()](store::Database& db) -> Result<Instance> { return action(db, actor, id, now); };
  auto moved = co_await app.store().write(std::move(effect));
  if (!moved) co_return tl::unexpected(moved.error());
  app.instances().kick(moved->id);
  co_return instance_response(app, 202, *moved);
}

Result<Instance> user_stop(store::Database& db, const instances::Actor& actor, const std::string& id, SysTime now) {
  return instances::stop_instance(db, actor, id, now);
}
asio::awaitable<Result<Response>> stop(RequestContext& ctx) { co_return co_await act(ctx, user_stop); }
asio::awaitable<Result<Response>> restart(RequestContext& ctx) { co_return co_await act(ctx, instances::restart_instance); }
Result<Instance> user_release(store::Database& db, const instances::Actor& actor, const std::string& id, SysTime now) {
  return instances::release_instance(db, actor, id, now);
}
asio::awaitable<Result<Response>> release(RequestContext& ctx) { co_return co_await act(ctx, user_release); }

asio::awaitable<Result<Response>> start(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto no_gpu_flag = api::optional_bool(*body, "no_gpu");
  if (!no_gpu_flag) co_return tl::unexpected(no_gpu_flag.error());
  const bool no_gpu = no_gpu_flag->value_or(false);
  const config::Config& cfg = ctx.app.config();
  auto action = [&cfg, no_gpu](store::Database& db, const instances::Actor& actor, const std::string& id, SysTime now) {
    return instances::start_instance(db, cfg, actor, id, no_gpu, now);
  };
  co_return co_await act(ctx, action);
}

asio::awaitable<Result<Response>> patch(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  // Everything is checked before anything changes: no half-applied PATCH.
  if (auto s = api::only_fields(*body, {"name", "ports", "security_group", "autostop", "billing", "stop_at",
                                        "release_after_stopped_days", "spend_limit"});
      !s)
    co_return tl::unexpected(s.error());
  auto cost = parse_cost_control(*body);
  if (!cost) co_return tl::unexpected(cost.error());
  std::optional<bool> auto_renew;
  if (auto it = body->find("billing"); it != body->end() && !it->value().is_null()) {
    if (!it->value().is_object()) co_return fail(ErrorCode::invalid_argument, "billing: must be an object {auto_renew}");
    if (auto s = api::only_fields(it->value().as_object(), {"auto_renew"}, "billing."); !s) co_return tl::unexpected(s.error());
    auto renew = api::optional_bool(it->value().as_object(), "auto_renew");
    if (!renew) co_return fail(ErrorCode::invalid_argument, "billing." + renew.error().detail);
    auto_renew = *renew;
  }
  auto name = api::optional_string(*body, "name");
  if (!name) co_return tl::unexpected(name.error());
  if (*name && !is_valid_resource_name(**name))
    co_return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  std::optional<std::vector<instances::PortSpec>> ports;
  if (body->contains("ports")) {
    auto p = parse_ports(*body);
    if (!p) co_return tl::unexpected(p.error());
    ports = *p;
  }
  auto group = parse_security_group(*body);
  if (!group) co_return tl::unexpected(group.error());
  auto limit = parse_spend_limit(*body);
  if (!limit) co_return tl::unexpected(limit.error());
  App& app = ctx.app;
  policy::PatchInstanceRequest change;
  change.name = *name;
  change.ports = ports;
  change.auto_renew = auto_renew;
  change.spend_limit = *limit;
  change.autostop = cost->autostop;
  change.stop_at = cost->stop_at;
  change.release_after_stopped_days = cost->release_after_stopped_days;
  change.security_group = *group;
  auto effect = [actor = ctx.actor(), id = ctx.param("id"), change,
                 now = app.clock().now()](store::Database& db) { return policy::patch_instance(db, actor, id, change, now); };
  auto patched = co_await app.store().write(std::move(effect));
  if (!patched) co_return tl::unexpected(patched.error());
  // The engine follows through the instance's own queue (ports within 2 s while it runs).
  if (patched->engine_follows) app.instances().refresh(patched->instance.id);
  co_return instance_response(app, 200, patched->instance);
}

// POST /billing/estimate: the body of POST /instances (its name may be left out), priced
// without creating anything; a subscription mode is priced even where it cannot be bought yet.
asio::awaitable<Result<Response>> estimate(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  json::object priced = *body;
  if (!priced.contains("name")) priced["name"] = "estimate";
  std::string mode = "hourly";
  if (auto b = priced.find("billing"); b != priced.end() && b->value().is_object())
    if (auto m = b->value().as_object().find("mode"); m != b->value().as_object().end() && m->value().is_string()) {
      mode = std::string(m->value().as_string());
      if (mode != "hourly" && mode != "weekly" && mode != "monthly")
        co_return fail(ErrorCode::invalid_argument, "billing.mode: must be hourly, weekly or monthly");
      b->value().as_object().erase("mode");
    }
  auto parsed = parse_create(priced, ctx.app.config());
  if (!parsed) co_return tl::unexpected(parsed.error());
  billing::EstimateRequest q;
  q.gpu_model = parsed->first.gpu_model;
  q.gpu_count = parsed->first.gpu_count;
  q.billing_mode = mode;
  q.system_disk_gib = parsed->first.system_disk_gib;
  for (const auto& d : parsed->first.data_disks)
    if (!d.existing) q.new_data_disk_gib += d.size_gib;
  auto read = [q, currency = ctx.app.config().currency](store::Database& db) { return billing::estimate(db, q, currency); };
  auto doc = co_await ctx.app.store().read(std::move(read));
  if (!doc) co_return tl::unexpected(doc.error());
  co_return json_response(200, *doc);
}

}  // namespace

void register_instance_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/instances", Access::user, "instances", "Create an instance (202; follow its state)", create_instance);
  r.add("GET", "/api/v1/instances", Access::user, "instances", "List own instances (?state=, operator: ?all=true)", list);
  r.add("GET", "/api/v1/admin/instances", Access::admin, "admin", "Every user's instances (?state=)", list_all);
  r.add("GET", "/api/v1/instances/{id}", Access::user, "instances", "An instance", get);
  r.add("PATCH", "/api/v1/instances/{id}", Access::user, "instances", "Rename, change ports", patch);
  r.add("DELETE", "/api/v1/instances/{id}", Access::user, "instances", "Release: delete the instance and its system disk", release);
  r.add("POST", "/api/v1/instances/{id}/stop", Access::user, "instances", "Stop (compute billing ends; GPUs freed)", stop);
  r.add("POST", "/api/v1/instances/{id}/start", Access::user, "instances", "Start on its host ({\"no_gpu\": true} for the no-GPU size)", start);
  r.add("POST", "/api/v1/instances/{id}/restart", Access::user, "instances", "Restart", restart);
  r.add("POST", "/api/v1/billing/estimate", Access::user, "billing", "What an instance would cost (the body of POST /instances)",
        estimate);
}

}  // namespace gpucloud::server
