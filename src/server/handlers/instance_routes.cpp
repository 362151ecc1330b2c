// Instances: POST/GET /instances, GET/PATCH/DELETE /instances/{id}, POST .../stop|start|restart.
// Each action is a compare-and-set on the recorded state, committed first; the engine work
// follows in InstanceService::converge.
#include <algorithm>
#include <set>

#include "api/json_input.h"
#include "core/ids.h"
#include "core/time_format.h"
#include "core/fault_points.h"
#include "instances/images.h"
#include "instances/password_hash.h"
#include "instances/ssh_keys.h"
#include "market/prices.h"
#include "market/reservations.h"
#include "server/app.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
using instances::Instance;

namespace {

constexpr std::size_t kMaxPorts = 10;

struct CreateSpec {
  std::string name, zone, image;
  std::optional<std::string> gpu_model;
  int gpu_count = 0;
  int cpu = 0;
  std::int64_t memory_gib = 0;
  std::int64_t system_disk_gib = 30;
  std::vector<int> ports{22};
  std::vector<std::string> ssh_keys;
  std::optional<std::string> password_hash;
  std::string billing_mode = "hourly";
  bool auto_renew = true;
};

Result<std::vector<int>> parse_ports(const json::object& body) {
  auto it = body.find("ports");
  if (it == body.end() || it->value().is_null()) return std::vector<int>{22};
  if (!it->value().is_array()) return fail(ErrorCode::invalid_argument, "ports: must be a list of port numbers");
  std::vector<int> ports;
  for (const auto& v : it->value().as_array()) {
    std::int64_t p = v.is_int64() ? v.as_int64() : (v.is_uint64() ? static_cast<std::int64_t>(v.as_uint64()) : -1);
    if (p < 1 || p > 65535) return fail(ErrorCode::invalid_argument, "ports: each port must be an integer from 1 to 65535");
    if (std::find(ports.begin(), ports.end(), p) != ports.end())
      return fail(ErrorCode::invalid_argument, "ports: port " + std::to_string(p) + " is listed twice");
    ports.push_back(static_cast<int>(p));
  }
  if (ports.size() > kMaxPorts) return fail(ErrorCode::invalid_argument, "ports: at most 10 ports");
  return ports;
}

// Parts of the contract whose machinery comes with later work (security groups, idle
// autostop, scheduled stop and release): checked for shape, then refused with a reason rather
// than accepted and silently ignored.
Status check_not_yet_available(const json::object& body) {
  auto sg = api::optional_string(body, "security_group");
  if (!sg) return tl::unexpected(sg.error());
  if (*sg && **sg != "default")
    return fail(ErrorCode::invalid_argument, "security_group: no security group \"" + **sg +
                                                 "\" (this installation has only \"default\", and opens every declared port)");
  if (auto it = body.find("autostop"); it != body.end() && !it->value().is_null()) {
    if (!it->value().is_object())
      return fail(ErrorCode::invalid_argument, "autostop: must be an object {idle_minutes, gpu_util_below_percent}");
    const auto& a = it->value().as_object();
    if (auto s = api::only_fields(a, {"idle_minutes", "gpu_util_below_percent"}, "autostop."); !s) return s;
    auto idle = api::optional_int(a, "idle_minutes");
    if (!idle) return fail(ErrorCode::invalid_argument, "autostop." + idle.error().detail);
    if (*idle && (**idle < 1 || **idle > 10080)) return fail(ErrorCode::invalid_argument, "autostop.idle_minutes: must be from 1 to 10080");
    auto util = api::optional_int(a, "gpu_util_below_percent");
    if (!util) return fail(ErrorCode::invalid_argument, "autostop." + util.error().detail);
    if (*util && (**util < 0 || **util > 100))
      return fail(ErrorCode::invalid_argument, "autostop.gpu_util_below_percent: must be from 0 to 100");
    return fail(ErrorCode::invalid_argument, "autostop: idle autostop is not available on this installation yet");
  }
  auto stop_at = api::optional_string(body, "stop_at");
  if (!stop_at) return tl::unexpected(stop_at.error());
  if (*stop_at) {
    if (!parse_rfc3339(**stop_at)) return fail(ErrorCode::invalid_argument, "stop_at: must be an RFC 3339 time");
    return fail(ErrorCode::invalid_argument, "stop_at: scheduled stops are not available on this installation yet");
  }
  auto days = api::optional_int(body, "release_after_stopped_days");
  if (!days) return tl::unexpected(days.error());
  if (*days) {
    if (**days < 1 || **days > 3650)
      return fail(ErrorCode::invalid_argument, "release_after_stopped_days: must be from 1 to 3650");
    return fail(ErrorCode::invalid_argument,
                "release_after_stopped_days: automatic release is not available on this installation yet");
  }
  return ok();
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
    auto renew = api::optional_bool(billing->value().as_object(), "auto_renew");
    if (!renew) return fail(ErrorCode::invalid_argument, "billing." + renew.error().detail);
    s.auto_renew = renew->value_or(true);
  }
  if (auto disks = body.find("data_disks"); disks != body.end() && disks->value().is_array() && !disks->value().as_array().empty())
    return fail(ErrorCode::invalid_argument, "data_disks: data disks are not available on this installation yet");
  if (auto s = check_not_yet_available(body); !s) return tl::unexpected(s.error());
  return std::make_pair(std::move(s), *password);
}

std::int64_t hourly_price(const market::PriceTable& prices, const std::optional<std::string>& model, int gpus) {
  if (!model || gpus == 0) return prices.no_gpu_per_hour;
  auto it = prices.gpus.find(*model);
  return it == prices.gpus.end() ? 0 : it->second.per_gpu_hour * gpus;
}

Response instance_response(App& app, int status, const Instance& i) {
  auto& svc = app.instances();
  return json_response(status, instances::instance_json(i, svc.view(), svc.run_seconds_now(i)));
}

// The instance for this caller: their own by id or name; the operator may address anyone's.
Result<Instance> caller_instance(store::Database& db, const auth::Principal& caller, const std::string& id_or_name) {
  auto own = instances::find_owned_instance(db, caller.user.id, id_or_name);
  if (own || !caller.user.is_admin() || own.error().code != ErrorCode::not_found) return own;
  auto any = instances::load_instance(db, id_or_name);
  if (!any) return tl::unexpected(any.error());
  if (!*any) return own;
  return std::move(**any);
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
  auto effect = [&app, spec, id, owner = ctx.caller().user.id, now = app.clock().now()](store::Database& db) -> Result<Response> {
    const auto& quotas = app.config().quotas;
    auto counts = db.one("SELECT COUNT(*), COALESCE(SUM(CASE WHEN no_gpu = 0 AND state IN ('creating','starting','running','stopping') "
                         "THEN gpu_count ELSE 0 END), 0) FROM instances WHERE owner = ? AND state != 'released'",
                         {owner});
    if (!counts) return tl::unexpected(counts.error());
    if ((*counts)->int64(0) + 1 > quotas.instances)
      return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(quotas.instances) + " instances");
    // Only what adds GPUs can pass the GPU limit (a no-GPU instance never does).
    if (spec.gpu_count > 0 && (*counts)->int64(1) + spec.gpu_count > quotas.gpus)
      return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(quotas.gpus) + " GPUs held at once; you hold " +
                                                 std::to_string((*counts)->int64(1)));
    auto taken = db.one("SELECT 1 FROM instances WHERE owner = ? AND name = ? AND state != 'released'", {owner, spec.name});
    if (!taken) return tl::unexpected(taken.error());
    if (*taken) return fail(ErrorCode::conflict, "you already have an instance named " + spec.name);
    auto image = instances::find_image(db, owner, spec.image);
    if (!image) return fail(ErrorCode::invalid_argument, "image: " + image.error().detail);
    if (image->state != "available")
      return fail(ErrorCode::invalid_argument, "image: " + image->name + " is not available (" +
                                                   (image->state_reason.empty() ? image->state : image->state_reason) + ")");
    Instance i;
    i.id = id;
    i.owner = owner;
    i.name = spec.name;
    i.state = "creating";
    i.zone = spec.zone;
    i.gpu_model = spec.gpu_model;
    i.gpu_count = spec.gpu_count;
    i.cpu = spec.cpu;
    i.memory_gib = spec.memory_gib;
    i.system_disk_gib = spec.system_disk_gib;
    i.image_id = image->id;
    i.password_hash = spec.password_hash;
    i.billing_mode = spec.billing_mode;
    i.auto_renew = spec.auto_renew;
    i.created_at = now;
    for (const auto& k : spec.ssh_keys) {
      auto key = instances::find_ssh_key(db, owner, k);
      if (!key) return fail(ErrorCode::invalid_argument, "ssh_keys: " + key.error().detail);
      i.ssh_keys.push_back(key->id);
    }
    auto prices = market::load_prices(db);
    if (!prices) return tl::unexpected(prices.error());
    i.price_per_hour = hourly_price(*prices, i.gpu_model, i.gpu_count);
    scheduler::PlacementRequest request{spec.zone, spec.gpu_model.value_or(""), spec.gpu_count, spec.cpu, spec.memory_gib, {}};
    auto reservation = market::reserve(db, id, request, std::nullopt, now);
    if (!reservation) return tl::unexpected(reservation.error());
    i.host_id = reservation->host_id;
    if (auto s = instances::insert_instance(db, i); !s) return tl::unexpected(s.error());
    auto ports = instances::allocate_ports(db, id, reservation->host_id, spec.ports);
    if (!ports) return tl::unexpected(ports.error());
    if (auto s = instances::record_state_event(db, i, now); !s) return tl::unexpected(s.error());
    auto stored = instances::load_instance(db, id);
    if (!stored || !*stored) return fail(ErrorCode::internal, "instance not recorded");
    return instance_response(app, 202, **stored);
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
  std::optional<std::string> state;
  if (!query["state"].empty()) {
    static const std::set<std::string> kStates{"creating", "running", "stopping", "stopped", "starting", "releasing", "released", "error"};
    if (!kStates.contains(query["state"]))
      co_return fail(ErrorCode::invalid_argument, "state: must be one of creating, running, stopping, stopped, starting, releasing, released, error");
    state = query["state"];
  }
  auto read = [owner, state, with_released](store::Database& db) { return instances::list_instances(db, owner, state, with_released); };
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
  auto read = [caller = ctx.caller(), id = ctx.param("id")](store::Database& db) { return caller_instance(db, caller, id); };
  auto i = co_await ctx.app.store().read(std::move(read));
  if (!i) co_return tl::unexpected(i.error());
  co_return instance_response(ctx.app, 200, *i);
}

// One action = one transaction: load, compare-and-set, then the engine work is kicked.
template <class Step>
asio::awaitable<Result<Response>> act(RequestContext& ctx, Step step) {
  App& app = ctx.app;
  auto effect = [&app, caller = ctx.caller(), id = ctx.param("id"), step, now = app.clock().now()](store::Database& db) mutable -> Result<Response> {
    auto i = caller_instance(db, caller, id);
    if (!i) return tl::unexpected(i.error());
    std::string before = i->state;
    auto s = step(db, *i);
    if (!s) return tl::unexpected(s.error());
    auto stored = instances::load_instance(db, i->id);
    if (!stored || !*stored) return fail(ErrorCode::internal, "instance not recorded");
    if ((*stored)->state != before)
      if (auto r = instances::record_state_event(db, **stored, now); !r) return tl::unexpected(r.error());
    return instance_response(app, 202, **stored);
  };
  auto response = co_await app.store().write(std::move(effect));
  if (response) {
    boost::system::error_code ec;
    auto v = json::parse(response->body, ec);
    if (!ec) app.instances().kick(std::string(v.at("id").as_string()));
  }
  co_return response;
}

asio::awaitable<Result<Response>> stop(RequestContext& ctx) {
  auto step = [](store::Database& db, Instance& i) -> Status {
    // A stop while stopping answers 202; during a restart it also cancels the start that follows.
    if (i.state == "stopping")
      return i.state_reason == "restart" ? instances::compare_and_set_state(db, i.id, {"stopping"}, "stopping", "") : ok();
    if (i.state != "running") return fail(ErrorCode::conflict, "the instance is " + i.state + "; only a running instance can stop");
    return instances::compare_and_set_state(db, i.id, {"running"}, "stopping", "");
  };
  co_return co_await act(ctx, step);
}

asio::awaitable<Result<Response>> restart(RequestContext& ctx) {
  auto step = [](store::Database& db, Instance& i) -> Status {
    if (i.state == "stopping" && i.state_reason == "restart") return ok();
    if (i.state != "running") return fail(ErrorCode::conflict, "the instance is " + i.state + "; only a running instance can restart");
    return instances::compare_and_set_state(db, i.id, {"running"}, "stopping", "restart");
  };
  co_return co_await act(ctx, step);
}

asio::awaitable<Result<Response>> start(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto no_gpu_flag = api::optional_bool(*body, "no_gpu");
  if (!no_gpu_flag) co_return tl::unexpected(no_gpu_flag.error());
  bool no_gpu = no_gpu_flag->value_or(false);
  const config::Config& cfg = ctx.app.config();
  auto now = ctx.app.clock().now();
  const auto quotas = cfg.quotas;
  auto step = [&cfg, quotas, no_gpu, now](store::Database& db, Instance& i) -> Status {
    if (i.state == "starting") return ok();
    if (i.state != "stopped") return fail(ErrorCode::conflict, "the instance is " + i.state + "; only a stopped instance can start");
    if (!i.host_id) return fail(ErrorCode::conflict, "the instance has no host");
    bool gpu_run = !no_gpu && i.gpu_count > 0;
    if (gpu_run) {
      // A start takes GPUs again: the same limit as a create (spec, "Quotas").
      auto held = db.one("SELECT COALESCE(SUM(gpu_count), 0) FROM instances WHERE owner = ? AND id != ? AND no_gpu = 0 "
                         "AND state IN ('creating','starting','running','stopping')",
                         {i.owner, i.id});
      if (!held) return tl::unexpected(held.error());
      if ((*held)->int64(0) + i.gpu_count > quotas.gpus)
        return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(quotas.gpus) + " GPUs held at once; you hold " +
                                                   std::to_string((*held)->int64(0)) + "; start it with no_gpu to reach its data");
    }
    const config::Offer* offer = i.gpu_model ? cfg.find_offer(*i.gpu_model) : nullptr;
    Instance next = i;
    next.no_gpu = !gpu_run && i.gpu_count > 0;
    next.cpu = gpu_run && offer ? offer->cpu_per_gpu * i.gpu_count : cfg.no_gpu_offer.cpu;
    next.memory_gib = gpu_run && offer ? offer->memory_gib_per_gpu * i.gpu_count : cfg.no_gpu_offer.memory_gib;
    scheduler::PlacementRequest request{i.zone, gpu_run ? i.gpu_model.value_or("") : "", gpu_run ? i.gpu_count : 0, next.cpu,
                                        next.memory_gib, {}};
    auto reservation = market::reserve(db, i.id, request, i.host_id, now);
    if (!reservation) {
      Error e = reservation.error();
      if (e.code == ErrorCode::no_capacity)
        e.detail = "cannot start on its host " + i.host_name.value_or("") + ": " + e.detail +
                   (gpu_run ? "; start it with no_gpu to reach its data" : "");
      return tl::unexpected(e);
    }
    auto prices = market::load_prices(db);
    if (!prices) return tl::unexpected(prices.error());
    next.price_per_hour = hourly_price(*prices, gpu_run ? i.gpu_model : std::nullopt, gpu_run ? i.gpu_count : 0);
    next.state = "starting";
    next.state_reason.clear();
    return instances::update_instance_fields(db, next);
  };
  co_return co_await act(ctx, step);
}

asio::awaitable<Result<Response>> release(RequestContext& ctx) {
  auto step = [](store::Database& db, Instance& i) -> Status {
    if (i.state == "releasing" || i.state == "released") return ok();  // a repeat
    return instances::compare_and_set_state(db, i.id, {"creating", "running", "stopping", "stopped", "starting", "error"},
                                            "releasing", "");
  };
  co_return co_await act(ctx, step);
}

asio::awaitable<Result<Response>> patch(RequestContext& ctx) {
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  // Everything is checked before anything changes: no half-applied PATCH.
  if (auto s = api::only_fields(*body, {"name", "ports", "security_group", "autostop", "billing", "stop_at",
                                        "release_after_stopped_days"});
      !s)
    co_return tl::unexpected(s.error());
  if (auto s = check_not_yet_available(*body); !s) co_return tl::unexpected(s.error());
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
  std::optional<std::vector<int>> ports;
  if (body->contains("ports")) {
    auto p = parse_ports(*body);
    if (!p) co_return tl::unexpected(p.error());
    ports = *p;
  }
  App& app = ctx.app;
  auto effect = [&app, caller = ctx.caller(), id = ctx.param("id"), name = *name, ports, auto_renew](store::Database& db) -> Result<Response> {
    auto i = caller_instance(db, caller, id);
    if (!i) return tl::unexpected(i.error());
    if (i->state == "releasing" || i->state == "released") return fail(ErrorCode::conflict, "the instance is " + i->state);
    if (name && *name != i->name) {
      auto taken = db.one("SELECT 1 FROM instances WHERE owner = ? AND name = ? AND state != 'released'", {i->owner, *name});
      if (!taken) return tl::unexpected(taken.error());
      if (*taken) return fail(ErrorCode::conflict, "you already have an instance named " + *name);
      i->name = *name;
      if (auto s = instances::update_instance_fields(db, *i); !s) return tl::unexpected(s.error());
    }
    if (auto_renew && *auto_renew != i->auto_renew) {
      i->auto_renew = *auto_renew;
      if (auto s = instances::update_instance_fields(db, *i); !s) return tl::unexpected(s.error());
    }
    if (ports && i->host_id) {
      // Kept ports keep their host port; new ones get free ones; dropped ones are freed.
      std::vector<int> added;
      for (int p : *ports) {
        bool had = std::any_of(i->ports.begin(), i->ports.end(), [&](const instances::PortBinding& b) { return b.container_port == p; });
        if (!had) added.push_back(p);
      }
      for (const auto& b : i->ports)
        if (std::find(ports->begin(), ports->end(), b.container_port) == ports->end())
          if (auto s = db.run("DELETE FROM instance_ports WHERE instance_id = ? AND container_port = ?", {i->id, b.container_port}); !s)
            return tl::unexpected(s.error());
      if (auto a = instances::allocate_ports(db, i->id, *i->host_id, added); !a) return tl::unexpected(a.error());
    }
    auto stored = instances::load_instance(db, i->id);
    return instance_response(app, 200, **stored);
  };
  auto response = co_await app.store().write(std::move(effect));
  if (response && ports) {
    boost::system::error_code ec;
    auto v = json::parse(response->body, ec);
    if (!ec) app.instances().refresh_running(std::string(v.at("id").as_string()));
  }
  co_return response;
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
}

}  // namespace gpucloud::server
