#include "instances/actions.h"

#include "instances/schedules.h"

#include <algorithm>

#include "auth/user_quotas.h"
#include "billing/affordability.h"
#include "billing/ledger.h"
#include "billing/subscriptions.h"
#include "instances/images.h"
#include "instances/schedules.h"
#include "instances/ssh_keys.h"
#include "instances/transition.h"
#include "market/hosts.h"
#include "market/prices.h"
#include "market/reservations.h"

namespace gpucloud::instances {

namespace {

using S = InstanceState;

std::string state_name(S s) { return std::string(to_string(s)); }

using market::hourly_price;

Result<Instance> reload(store::Database& db, const std::string& id) {
  auto stored = load_instance(db, id);
  if (!stored) return fail(stored.error());
  if (!*stored) return fail(ErrorCode::internal, "instance " + id + " not recorded");
  return std::move(**stored);
}

// Moves the instance with `change`, or answers 202 for an action already under way.
Result<Instance> move(store::Database& db, const Instance& i, const Transition& change, SysTime now) {
  Instance next = i;
  if (auto s = transition(db, i, next, change, now); !s) return fail(s.error());
  return reload(db, i.id);
}

}  // namespace

Result<Instance> find_for(store::Database& db, const Actor& actor, const std::string& id_or_name) {
  auto own = find_owned_instance(db, actor.user_id, id_or_name);
  if (own || !actor.operator_role || own.error().code != ErrorCode::not_found) return own;
  auto any = load_instance(db, id_or_name);
  if (!any) return fail(any.error());
  if (!*any) return own;
  return std::move(**any);
}

Result<NewInstance> check_create(store::Database& db, const config::Config& config, const Actor& actor,
                                 const std::string& id, const CreateRequest& spec, SysTime now) {
  if (spec.stop_at && *spec.stop_at <= now)
    return fail(ErrorCode::invalid_argument, "stop_at: must be in the future (it is now " + format_rfc3339(now) + ")");
  auto limits = auth::effective_quotas(db, config.quotas, actor.user_id);
  if (!limits) return fail(limits.error());
  const auto& quotas = *limits;
  auto usage = instance_usage(db, actor.user_id, std::nullopt);
  if (!usage) return fail(usage.error());
  if (usage->instances + 1 > quotas.instances)
    return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(quotas.instances) + " instances");
  // Only what adds GPUs can pass the GPU limit (a no-GPU instance never does).
  if (spec.gpu_count > 0 && usage->gpus_held + spec.gpu_count > quotas.gpus)
    return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(quotas.gpus) + " GPUs held at once; you hold " +
                                               std::to_string(usage->gpus_held));
  auto taken = live_name_taken(db, actor.user_id, spec.name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you already have an instance named " + spec.name);
  auto image = find_image(db, actor.user_id, spec.image);
  if (!image) return fail(ErrorCode::invalid_argument, "image: " + image.error().detail);
  if (image->state != "available")
    return fail(ErrorCode::invalid_argument, "image: " + image->name + " is not available (" +
                                                 (image->state_reason.empty() ? image->state : image->state_reason) + ")");
  Instance i;
  i.id = id;
  i.owner = actor.user_id;
  i.name = spec.name;
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
  i.spend_limit = spec.spend_limit;
  i.autostop = spec.autostop;
  i.stop_at = spec.stop_at;
  i.release_after_stopped_days = spec.release_after_stopped_days;
  i.security_group_id = spec.security_group_id;
  for (const auto& k : spec.ssh_keys) {
    auto key = find_ssh_key(db, actor.user_id, k);
    if (!key) return fail(ErrorCode::invalid_argument, "ssh_keys: " + key.error().detail);
    i.ssh_keys.push_back(key->id);
  }
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  i.price_per_hour = hourly_price(*prices, i.gpu_model, i.gpu_count);
  std::int64_t upfront = 0;
  if (i.billing_mode == "hourly") {
    if (auto s = billing::check_affordable(db, actor.user_id, i.price_per_hour, "one hour of its price", config.currency, now);
        !s)
      return fail(s.error());
  } else {
    auto price = billing::subscription_price(db, i.gpu_model, i.gpu_count, i.billing_mode);
    if (!price) return fail(price.error());
    if (auto s = billing::check_affordable(db, actor.user_id, *price, "the subscription's price", config.currency, now);
        !s)
      return fail(s.error());
    upfront = *price;
  }
  return NewInstance{std::move(i), upfront};
}

Result<Instance> record_create(store::Database& db, NewInstance made, const CreateRequest& spec,
                               const std::optional<std::string>& host, SysTime now) {
  Instance& i = made.instance;
  if (!i.security_group_id || i.security_group_id->empty())
    return fail(ErrorCode::internal, "instance " + i.id + " has no security group (policy::create_instance resolves it)");
  scheduler::PlacementRequest request{spec.zone, spec.gpu_model.value_or(""), spec.gpu_count, spec.cpu, spec.memory_gib, {}};
  auto reservation = market::reserve(db, i.id, request, host, now);
  if (!reservation) {
    Error e = reservation.error();
    if (host && e.code == ErrorCode::no_capacity) e.detail = "on the host of its data disks: " + e.detail;
    return tl::unexpected(e);
  }
  i.host_id = reservation->host_id;
  if (auto s = begin_instance(db, i, now); !s) return fail(s.error());
  if (made.upfront > 0)
    if (auto s = billing::pay_subscription(db, i, made.upfront, "the", now); !s) return fail(s.error());
  auto ports = allocate_ports(db, i.id, reservation->host_id, spec.ports);
  if (!ports) return fail(ports.error());
  return reload(db, i.id);
}

Result<Instance> stop_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now,
                               const std::string& reason) {
  auto i = find_for(db, actor, id_or_name);
  if (!i) return i;
  // A stop while stopping answers 202; during a restart it also cancels the start that follows.
  if (i->state == S::stopping)
    return i->state_reason == "restart" ? move(db, *i, Transition{S::stopping, reason, {}}, now) : i;
  if (i->state != S::running)
    return fail(ErrorCode::conflict, "the instance is " + state_name(i->state) + "; only a running instance can stop");
  return move(db, *i, Transition{S::stopping, reason, {}}, now);
}

Result<Instance> restart_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now) {
  auto i = find_for(db, actor, id_or_name);
  if (!i) return i;
  if (i->state == S::stopping && i->state_reason == "restart") return i;
  if (i->state != S::running)
    return fail(ErrorCode::conflict, "the instance is " + state_name(i->state) + "; only a running instance can restart");
  return move(db, *i, Transition{S::stopping, "restart", {}}, now);
}

Result<Instance> start_instance(store::Database& db, const config::Config& cfg, const Actor& actor,
                                const std::string& id_or_name, bool no_gpu, SysTime now) {
  auto found = find_for(db, actor, id_or_name);
  if (!found) return found;
  const Instance& i = *found;
  if (i.state == S::starting) return i;
  if (i.state != S::stopped)
    return fail(ErrorCode::conflict, "the instance is " + state_name(i.state) + "; only a stopped instance can start");
  if (!i.host_id) return fail(ErrorCode::conflict, "the instance has no host");
  const bool gpu_run = !no_gpu && i.gpu_count > 0;
  if (gpu_run) {
    // A start takes GPUs again: the same limit as a create (spec, "Quotas").
    auto usage = instance_usage(db, i.owner, i.id);
    if (!usage) return fail(usage.error());
    auto limits = auth::effective_quotas(db, cfg.quotas, i.owner);
    if (!limits) return fail(limits.error());
    if (usage->gpus_held + i.gpu_count > limits->gpus)
      return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(limits->gpus) +
                                                 " GPUs held at once; you hold " + std::to_string(usage->gpus_held) +
                                                 "; start it with no_gpu to reach its data");
  }
  // A subscription in its paid term still holds its GPUs: it starts on them, already paid for.
  // Unless one of them is missing or unhealthy: then it gives them up and is placed like any
  // start (its usable ones preferred); a refusal rolls back, so it keeps them.
  if (i.in_paid_term(now) && i.expires_at && !no_gpu) {
    auto held = market::active_reservation(db, i.id);
    if (!held) return fail(held.error());
    if (*held && !i.degraded()) {
      Instance next = i;
      if (auto s = transition(db, i, next, Transition{S::starting, "", {}}, now); !s) return fail(s.error());
      return reload(db, i.id);
    }
    if (*held)
      if (auto r = market::release_reservation(db, i.id, now); !r) return fail(r.error());
  }
  const config::Offer* offer = i.gpu_model ? cfg.find_offer(*i.gpu_model) : nullptr;
  Instance next = i;
  next.no_gpu = !gpu_run && i.gpu_count > 0;
  next.cpu = gpu_run && offer ? offer->cpu_per_gpu * i.gpu_count : cfg.no_gpu_offer.cpu;
  next.memory_gib = gpu_run && offer ? offer->memory_gib_per_gpu * i.gpu_count : cfg.no_gpu_offer.memory_gib;
  scheduler::PlacementRequest request{i.zone, gpu_run ? i.gpu_model.value_or("") : "", gpu_run ? i.gpu_count : 0,
                                      next.cpu, next.memory_gib, {}};
  auto reservation = market::reserve(db, i.id, request, i.host_id, now);
  if (!reservation) {
    Error e = reservation.error();
    if (e.code == ErrorCode::no_capacity)
      e.detail = "cannot start on its host " + i.host_name.value_or("") + ": " + e.detail +
                 (gpu_run ? "; start it with no_gpu to reach its data" : "");
    return tl::unexpected(e);
  }
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  next.price_per_hour = hourly_price(*prices, gpu_run ? i.gpu_model : std::nullopt, gpu_run ? i.gpu_count : 0);
  if (i.billing_mode == "hourly")
    if (auto s = billing::check_affordable(db, i.owner, next.price_per_hour, "one hour of its price", cfg.currency, now);
        !s)
      return fail(s.error());
  if (auto s = transition(db, i, next, Transition{S::starting, "", {}}, now); !s) return fail(s.error());
  return reload(db, i.id);
}

Result<Instance> release_instance(store::Database& db, const Actor& actor, const std::string& id_or_name, SysTime now,
                                  const std::string& reason) {
  auto i = find_for(db, actor, id_or_name);
  if (!i) return i;
  if (i->state == S::releasing || i->state == S::released) return i;  // a repeat
  return move(db, *i, Transition{S::releasing, reason, {}}, now);
}

Result<PatchOutcome> patch_instance(store::Database& db, const Actor& actor, const std::string& id_or_name,
                                    const PatchRequest& request, SysTime now) {
  auto i = find_for(db, actor, id_or_name);
  if (!i) return fail(i.error());
  if (i->state == S::releasing || i->state == S::released)
    return fail(ErrorCode::conflict, "the instance is " + state_name(i->state));
  Instance next = *i;
  bool engine_follows = false, changed = false;
  if (request.name && *request.name != i->name) {
    auto taken = live_name_taken(db, i->owner, *request.name);
    if (!taken) return fail(taken.error());
    if (*taken) return fail(ErrorCode::conflict, "you already have an instance named " + *request.name);
    next.name = *request.name;
    changed = engine_follows = true;
  }
  if (request.auto_renew && *request.auto_renew != i->auto_renew) {
    next.auto_renew = *request.auto_renew;
    changed = true;
  }
  if (request.spend_limit && *request.spend_limit != i->spend_limit) {
    // A new limit is warned about afresh at its own 80 %.
    next.spend_limit = *request.spend_limit;
    next.spend_warned = false;
    changed = true;
    db.note_billing_change(billing::account_id_for_user(i->owner));  // its stop is planned again
  }
  if (request.autostop) {
    auto same = [](const std::optional<Instance::Autostop>& a, const std::optional<Instance::Autostop>& b) {
      if (!a || !b) return a.has_value() == b.has_value();
      return a->idle_minutes == b->idle_minutes && a->below_percent == b->below_percent;
    };
    if (!same(*request.autostop, i->autostop)) {
      // Another rule is judged afresh: the idle window and its warning start over.
      next.autostop = *request.autostop;
      next.idle_since.reset();
      next.busy_reason.reset();
      next.schedule_warned &= ~kAutostopWarned;
      changed = true;
    }
  }
  if (request.stop_at && *request.stop_at != i->stop_at) {
    if (*request.stop_at && **request.stop_at <= now)
      return fail(ErrorCode::invalid_argument, "stop_at: must be in the future (it is now " + format_rfc3339(now) + ")");
    next.stop_at = *request.stop_at;
    changed = true;
  }
  if (request.release_after_stopped_days && *request.release_after_stopped_days != i->release_after_stopped_days) {
    next.release_after_stopped_days = *request.release_after_stopped_days;
    next.schedule_warned &= ~(kReleaseWarned3d | kReleaseWarned1d);  // warned afresh for the new date
    changed = true;
  }
  if (request.security_group_id && *request.security_group_id != i->security_group_id) {
    next.security_group_id = *request.security_group_id;
    changed = engine_follows = true;
  }
  if (request.ports && i->host_id) {
    // Kept ports keep their host port; new ones get free ones; dropped ones are freed. The
    // agent learns the new set from the next ensure of whatever state the instance is in, so
    // store and agent agree on which host ports this instance holds.
    auto declared = [](const PortBinding& b) { return PortSpec{b.container_port, b.protocol}; };
    std::vector<PortSpec> added;
    for (const auto& p : *request.ports)
      if (std::none_of(i->ports.begin(), i->ports.end(), [&](const PortBinding& b) { return declared(b) == p; }))
        added.push_back(p);
    bool dropped = false;
    for (const auto& b : i->ports)
      if (std::find(request.ports->begin(), request.ports->end(), declared(b)) == request.ports->end()) {
        if (auto s = free_port(db, i->id, declared(b)); !s) return fail(s.error());
        dropped = true;
      }
    if (auto a = allocate_ports(db, i->id, *i->host_id, added); !a) return fail(a.error());
    if (dropped || !added.empty()) changed = engine_follows = true;
  }
  if (changed)
    if (auto s = update_desired(db, *i, next); !s) return fail(s.error());
  auto stored = reload(db, i->id);
  if (!stored) return fail(stored.error());
  return PatchOutcome{std::move(*stored), engine_follows};
}

}  // namespace gpucloud::instances
