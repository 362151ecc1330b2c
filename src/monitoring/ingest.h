#pragma once
// One sampling round of a host into the store, in one write transaction: the raw rows of
// each of its running instances (a report about an instance the store no longer has
// running is dropped, so a released instance's series stay gone), autostop's judgment of
// each instance that has it on (idle_since, the reason; instances/schedules.h plans the
// deadlines from them), and, once a minute has passed, the minute averages and the purge.
#include <chrono>
#include <vector>

#include "agent/agent_protocol.h"
#include "core/result.h"
#include "core/time_format.h"
#include "monitoring/series.h"
#include "store/database.h"

namespace gpucloud::monitoring {

struct Retention {
  std::chrono::seconds raw{86400};
  std::chrono::seconds downsampled{7 * 86400};
};

// The rows one instance sample becomes (gpu -1: CPU and memory; 0..n-1: its GPUs).
std::vector<SampleRow> rows_of(const agent::InstanceSample& sample);

struct IngestOutcome {
  int instances_written = 0;
  int judgments_changed = 0;
};
Result<IngestOutcome> ingest_round(store::Database& db, const agent::SampleReport& report, SysTime at,
                                   const Retention& retention);

}  // namespace gpucloud::monitoring
