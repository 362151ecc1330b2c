#include "monitoring/ingest.h"

#include <map>

#include "instances/instance_record.h"
#include "instances/schedules.h"
#include "monitoring/idle_judge.h"
#include "monitoring/series.h"

namespace gpucloud::monitoring {

namespace {
std::int64_t unix_seconds(SysTime t) {
  return std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count();
}

// Autostop's judgment of one reading, written only when it says something new.
Result<bool> judge_and_record(store::Database& db, const std::string& id, const agent::InstanceSample& sample, SysTime at) {
  auto loaded = instances::load_instance(db, id);
  if (!loaded) return fail(loaded.error());
  if (!*loaded || (*loaded)->state != instances::InstanceState::running || !(*loaded)->autostop) return false;
  const instances::Instance& i = **loaded;
  auto judgment = judge_idle(i, sample, at);
  if (!judgment) return false;
  instances::Instance next = i;
  next.busy_reason = judgment->reason;
  if (judgment->idle) {
    if (!next.idle_since) next.idle_since = at;
  } else {
    next.idle_since.reset();
    next.schedule_warned &= ~instances::kAutostopWarned;  // a busy reading ends the idle window
  }
  if (next.idle_since == i.idle_since && next.busy_reason == i.busy_reason && next.schedule_warned == i.schedule_warned)
    return false;
  if (auto s = instances::write_cost_control(db, next, instances::InstanceState::running); !s) return fail(s.error());
  return true;
}
}  // namespace

std::vector<SampleRow> rows_of(const agent::InstanceSample& sample) {
  std::vector<SampleRow> rows;
  rows.push_back({kInstanceRow, sample.cpu_percent,
                  sample.memory_used_bytes});
  for (std::size_t n = 0; n < sample.gpus.size(); ++n)
    rows.push_back({static_cast<int>(n), static_cast<double>(sample.gpus[n].util_percent), sample.gpus[n].memory_used_bytes});
  return rows;
}

Result<IngestOutcome> ingest_round(store::Database& db, const agent::SampleReport& report, SysTime at,
                                   const Retention& retention) {
  IngestOutcome outcome;
  auto running = instances::running_on_host(db, report.host_name);
  if (!running) return fail(running.error());
  std::map<std::string, bool> autostop_of;
  for (const auto& r : *running) autostop_of[r.id] = r.autostop;
  const std::int64_t t = unix_seconds(at);
  for (const auto& sample : report.instances) {
    auto it = autostop_of.find(sample.instance_id);
    if (it == autostop_of.end()) continue;  // stopped or released meanwhile
    if (auto s = insert_raw(db, sample.instance_id, t, rows_of(sample)); !s) return fail(s.error());
    ++outcome.instances_written;
    if (it->second) {
      auto changed = judge_and_record(db, sample.instance_id, sample, at);
      if (!changed) return fail(changed.error());
      if (*changed) ++outcome.judgments_changed;
    }
  }
  // Whole minutes that ended since the last round become averages; old rows go.
  const std::int64_t minute = t / 60 * 60;
  auto watermark = downsampled_until(db);
  if (!watermark) return fail(watermark.error());
  if (!*watermark || **watermark < minute) {
    const std::int64_t from = std::max<std::int64_t>(watermark->value_or(0), minute - retention.raw.count());
    if (auto s = downsample(db, from / 60 * 60, minute); !s) return fail(s.error());
    if (auto s = set_downsampled_until(db, minute); !s) return fail(s.error());
    if (auto s = purge(db, t - retention.raw.count(), t - retention.downsampled.count()); !s) return fail(s.error());
  }
  return outcome;
}

}  // namespace gpucloud::monitoring
