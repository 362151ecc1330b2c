#include "monitoring/cost_control.h"

#include <boost/json.hpp>

#include "events/events.h"
#include "instances/instance_record.h"
#include "instances/schedules.h"
#include "monitoring/idle_judge.h"
#include "store/meta.h"

namespace gpucloud::monitoring {

namespace json = boost::json;
using instances::Instance;
using instances::InstanceState;

namespace {
int platform_release_days(store::Database& db) {
  auto v = store::get_meta(db, instances::kReleaseDaysMetaKey);
  if (!v || !*v) return 15;
  try {
    return std::stoi(**v);
  } catch (const std::exception&) {
    return 15;
  }
}

Status record(store::Database& db, SysTime now, const Instance& i, const std::string& type, const std::string& message,
              json::object data) {
  data["name"] = i.name;
  return events::record(db, now, type, i.id, i.owner, message, std::move(data));
}

// Only the cost-control fields change here (no generation bump: the engine follows none).
Result<DueStep> write_fields(store::Database& db, const Instance& next) {
  if (auto s = instances::write_cost_control(db, next, next.state); !s) return fail(s.error());
  return DueStep{true, false};
}
}  // namespace

Result<DueStep> run_due_step(store::Database& db, const std::string& instance_id, SysTime now,
                             const std::optional<agent::InstanceSample>& fresh_reading,
                             const CostControlActions& actions) {
  if (!actions.stop || !actions.release) return fail(ErrorCode::internal, "cost control has no stop and release actions");
  auto loaded = instances::load_instance(db, instance_id);
  if (!loaded) return fail(loaded.error());
  if (!*loaded) return DueStep{};
  const Instance& i = **loaded;
  if (!i.schedule_at || *i.schedule_at > now) return DueStep{};  // planned again meanwhile
  Instance next = i;

  // A one-off stop: cleared once its time came, acted on only while the instance runs.
  if (i.stop_at && *i.stop_at <= now) {
    next.stop_at.reset();
    if (auto w = write_fields(db, next); !w) return w;
    if (i.state != InstanceState::running) return DueStep{true, false};
    if (auto s = actions.stop(db, i.id, now, "stop_at"); !s) return fail(s.error());
    if (auto s = record(db, now, i, "instance.scheduled_stop", "instance " + i.name + " stopped at its stop_at time",
                        {{"stop_at", format_rfc3339(*i.stop_at)}});
        !s)
      return fail(s.error());
    return DueStep{true, true};
  }

  if (auto a = instances::autostop_deadlines(i)) {
    if (now >= a->stop_at) {
      auto judged = fresh_reading ? judge_idle(i, *fresh_reading, now) : std::nullopt;
      if (!judged || !judged->idle) {
        // No recent reading says it is idle: never stop on old evidence; start over.
        next.idle_since.reset();
        next.schedule_warned &= ~instances::kAutostopWarned;
        next.busy_reason = "no fresh reading at " + format_rfc3339(now) + ": the idle window starts again";
        return write_fields(db, next);
      }
      if (auto s = actions.stop(db, i.id, now, "autostop"); !s) return fail(s.error());
      if (auto s = record(db, now, i, "instance.autostop",
                          "instance " + i.name + " was idle for " + std::to_string(i.autostop->idle_minutes) +
                              " minutes and is stopping",
                          {{"idle_since", format_rfc3339(*i.idle_since)},
                           {"idle_minutes", i.autostop->idle_minutes},
                           {"gpu_util_below_percent", i.autostop->below_percent},
                           {"reason", i.busy_reason.value_or("")}});
          !s)
        return fail(s.error());
      return DueStep{true, true};
    }
    if (now >= a->warn_at && !(i.schedule_warned & instances::kAutostopWarned)) {
      next.schedule_warned |= instances::kAutostopWarned;
      if (auto s = record(db, now, i, "instance.autostop_warning",
                          "instance " + i.name + " is idle and will stop at " + format_rfc3339(a->stop_at),
                          {{"idle_since", format_rfc3339(*i.idle_since)},
                           {"stop_at", format_rfc3339(a->stop_at)},
                           {"idle_minutes", i.autostop->idle_minutes}});
          !s)
        return fail(s.error());
      return write_fields(db, next);
    }
  }

  const int default_days = platform_release_days(db);
  if (auto r = instances::release_at(i, default_days)) {
    if (now >= *r) {
      if (auto s = actions.release(db, i.id, now, "release_after_stopped"); !s) return fail(s.error());
      return DueStep{true, true};
    }
    const auto warn3 = *r - std::chrono::hours(72), warn1 = *r - std::chrono::hours(24);
    int bit = 0, days_left = 0;
    if (now >= warn1 && !(i.schedule_warned & instances::kReleaseWarned1d)) {
      bit = instances::kReleaseWarned1d | instances::kReleaseWarned3d;
      days_left = 1;
    } else if (now >= warn3 && warn3 >= *i.stopped_at && !(i.schedule_warned & instances::kReleaseWarned3d)) {
      bit = instances::kReleaseWarned3d;
      days_left = 3;
    }
    if (bit != 0) {
      next.schedule_warned |= bit;
      if (auto s = record(db, now, i, "instance.release_warning",
                          "instance " + i.name + " has been stopped since " + format_rfc3339(*i.stopped_at) +
                              " and will be released at " + format_rfc3339(*r),
                          {{"release_at", format_rfc3339(*r)}, {"days_left", days_left}});
          !s)
        return fail(s.error());
      return write_fields(db, next);
    }
  }
  // Nothing is due after all (the plan was stale): plan again from the row.
  if (auto s = instances::write_cost_control(db, next, next.state); !s) return fail(s.error());
  return DueStep{false, false};
}

}  // namespace gpucloud::monitoring
