#include "instances/transition.h"

#include <algorithm>

#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "billing/subscriptions.h"
#include "disks/disk_record.h"
#include "instances/system_disk.h"
#include "market/prices.h"
#include "market/reservations.h"
#include "monitoring/series.h"

namespace gpucloud::instances {

namespace {
std::int64_t seconds_between(SysTime from, SysTime to) {
  return std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(to - from).count());
}
}  // namespace

Status begin_instance(store::Database& db, Instance& i, SysTime now) {
  i.state = InstanceState::creating;
  i.generation = 1;
  i.created_at = now;
  if (auto s = insert_instance(db, i); !s) return s;
  // An enforced system disk takes its size from the host's disk pool (409 when it lacks it).
  if (i.host_id)
    if (auto s = take_system_disk(db, i.id, i.name, *i.host_id, i.system_disk_gib); !s) return s;
  // The system disk bills (beyond the free allowance) from now until the release.
  if (auto s = billing::follow_system_disk(db, i.id, i.owner, i.system_disk_gib, now); !s) return s;
  return record_state_event(db, i, now);
}

Status transition(store::Database& db, const Instance& loaded, Instance& next, const Transition& change, SysTime now) {
  const InstanceState from = loaded.state, to = change.to;
  next.state = to;
  next.state_reason = change.reason;

  // Run accounting: a run is open while started_at is set, exactly the time the instance is
  // `running` (spec: compute bills from reaching running until leaving it; never while
  // stopping). It ends at the stop request, or at the container's real exit when it died.
  const bool run_ends = next.started_at && to != InstanceState::running;
  if (run_ends) {
    SysTime end = change.ended_at.value_or(now);
    end = std::clamp(end, *next.started_at, std::max(now, *next.started_at));
    next.run_seconds += seconds_between(*next.started_at, end);
    next.started_at.reset();
    next.stopped_at = end;
  }
  if (to == InstanceState::running && from != InstanceState::running) {
    next.started_at = now;
    // A run bills at the price of the moment it starts, whichever way it got here (a start,
    // a restart, a repair): the operator's new prices apply from the next run.
    if (next.billing_mode == "hourly") {
      auto prices = market::load_prices(db);
      if (!prices) return fail(prices.error());
      const bool gpu_run = !next.no_gpu && next.gpu_count > 0;
      // A model the table no longer prices keeps the price of the request; a price of 0 (the
      // operator made it free) is a price like any other.
      const bool priced = !gpu_run || (next.gpu_model && prices->gpus.contains(*next.gpu_model));
      if (priced)
        next.price_per_hour =
            market::hourly_price(*prices, gpu_run ? next.gpu_model : std::nullopt, gpu_run ? next.gpu_count : 0);
    }
  }
  // A subscription's paid term starts at its first `running`, the anchor of all its terms.
  if (to == InstanceState::running && next.billing_mode != "hourly" && !next.expires_at) {
    auto end = billing::term_end(db, now, next.billing_mode);
    if (!end) return fail(end.error());
    next.expires_at = *end;
    next.term_anchor = now;
    db.note_billing_change(billing::account_id_for_user(next.owner));  // its renewal and expiry are planned
  }
  // A create that failed never ran: its subscription is paid back in full and its system
  // disk bills nothing (the meter closes where it opened).
  const bool never_ran = from == InstanceState::creating && to == InstanceState::error;
  if ((to == InstanceState::stopped || to == InstanceState::error) && !run_ends) next.stopped_at = now;
  if (to == InstanceState::released) next.released_at = now;
  // Cost control restarts with each run and each stop: idleness is judged afresh from the
  // readings of this run, and a release's warnings count from this stop.
  if (to != from) {
    next.idle_since.reset();
    next.busy_reason.reset();
    next.schedule_warned = 0;
  }
  if (to == InstanceState::released) next.stop_at.reset();

  // The compare-and-set: nothing else may have moved the row since it was loaded.
  next.generation = loaded.generation + 1;
  if (auto s = write_instance_state(db, loaded.id, from, loaded.generation, next); !s) return s;

  // Compute meters follow the run exactly: open from the moment it is running, closed (and
  // settled, so every state change writes its ledger entry) when the run ends. A
  // subscription's compute is paid up front, so it has no compute meter.
  if (run_ends)
    if (auto s = billing::close_run(db, loaded.id, *next.stopped_at, now); !s) return s;
  // A run on a lost GPU accrues nothing until it is back (instance_record.cpp,
  // follow_gpu_health_in_billing): the platform is at fault.
  if (to == InstanceState::running && from != InstanceState::running && loaded.billing_mode == "hourly" &&
      !next.degraded())
    if (auto s = billing::open_run(db, loaded.id, loaded.owner, next.no_gpu || next.gpu_count == 0, next.price_per_hour,
                                   *next.started_at);
        !s)
      return s;
  if (to == InstanceState::released)
    if (auto s = billing::follow_system_disk(db, loaded.id, loaded.owner, std::nullopt, now); !s) return s;
  if (never_ran) {
    // Voided, not closed at its opening: a price change re-rated it into intervals that
    // began before this moment, and an hourly pass may have charged it already.
    if (auto s = billing::void_meter(db, loaded.id, billing::MeterKind::system_disk, now); !s) return s;
    if (auto r = billing::refund_subscription(db, next, now, "the instance never ran (" + change.reason + ")"); !r)
      return fail(r.error());
  }
  // Released early: the unused part of its paid terms goes back (billing/subscriptions.h).
  if (to == InstanceState::releasing && from != InstanceState::releasing && loaded.billing_mode != "hourly")
    if (auto r = billing::refund_subscription(db, next, now, "released early"); !r) return fail(r.error());

  // Reservations and ports follow the state (releasing keeps both until the container is gone);
  // a subscription inside its paid term keeps its GPUs while stopped.
  const bool keeps_gpus = (to == InstanceState::stopping || to == InstanceState::stopped) && next.expires_at &&
                          next.in_paid_term(now);
  if (!holds_reservation(to) && !keeps_gpus)
    if (auto r = market::release_reservation(db, loaded.id, now); !r) return fail(r.error());
  if (to == InstanceState::released) {
    if (auto s = free_ports(db, loaded.id); !s) return s;
    if (auto s = free_system_disk(db, loaded.id); !s) return s;
    // Data disks outlive the instance: detached and kept, or binned when delete_on_release
    // (a record step of disks/, in this transaction; no disk action is called from here).
    if (auto s = disks::release_instance_disks(db, loaded.id, now); !s) return s;
    // Its monitoring series go with it.
    if (auto s = monitoring::delete_instance_series(db, loaded.id); !s) return s;
  }

  if (to != from) return record_state_event(db, next, now);
  return ok();
}

}  // namespace gpucloud::instances
