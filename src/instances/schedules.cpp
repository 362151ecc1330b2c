#include "instances/schedules.h"

#include <algorithm>

#include "instances/instance_record.h"

namespace gpucloud::instances {

std::optional<AutostopDeadlines> autostop_deadlines(const Instance& i) {
  if (!i.autostop || !i.idle_since || i.state != InstanceState::running) return std::nullopt;
  const auto window = std::chrono::minutes(i.autostop->idle_minutes);
  // The warning comes a sixth of the window ahead, never less than a minute (nor before the
  // window began).
  auto lead = std::max<std::chrono::microseconds>(window / 6, std::chrono::minutes(1));
  lead = std::min<std::chrono::microseconds>(lead, window);
  return AutostopDeadlines{*i.idle_since + window - lead, *i.idle_since + window};
}

std::optional<SysTime> release_at(const Instance& i, int default_release_days) {
  if (i.state != InstanceState::stopped || !i.stopped_at) return std::nullopt;
  const int days = i.release_after_stopped_days.value_or(default_release_days);
  if (days <= 0) return std::nullopt;
  SysTime from = *i.stopped_at;
  if (i.billing_mode != "hourly" && i.expires_at) from = std::max(from, *i.expires_at);
  return from + std::chrono::hours(24) * days;
}

std::optional<SysTime> next_deadline(const Instance& i, int default_release_days) {
  std::optional<SysTime> best;
  auto consider = [&](SysTime t) {
    if (!best || t < *best) best = t;
  };
  if (i.stop_at && i.state != InstanceState::released) consider(*i.stop_at);
  if (auto a = autostop_deadlines(i)) consider((i.schedule_warned & kAutostopWarned) ? a->stop_at : a->warn_at);
  if (auto r = release_at(i, default_release_days)) {
    // A warning whose time was already past when the instance stopped is not sent late.
    const auto warn3 = *r - std::chrono::hours(72), warn1 = *r - std::chrono::hours(24);
    if (!(i.schedule_warned & kReleaseWarned3d) && warn3 >= *i.stopped_at) consider(warn3);
    else if (!(i.schedule_warned & kReleaseWarned1d) && warn1 >= *i.stopped_at) consider(warn1);
    else consider(*r);
  }
  return best;
}

}  // namespace gpucloud::instances
