#pragma once
// The monitoring series of instances, in the store (portable SQL): raw samples (resolution
// 0, one row per instance, second and GPU; the same second again replaces it) kept for
// [monitoring] raw_retention, and 1-minute averages (resolution 60) kept for
// downsampled_retention. Row gpu -1 is the instance itself: util = CPU percent of one core,
// memory_bytes = memory used. Rows 0..n-1 are its GPUs in the order it holds them.
// Sizes stay bounded: at most one raw row per (instance, second, GPU), purged by age, and
// the series of a released instance are deleted with it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::monitoring {

inline constexpr int kInstanceRow = -1;
inline constexpr int kRaw = 0, kMinute = 60;

struct SampleRow {
  int gpu = kInstanceRow;
  std::optional<double> util;
  std::optional<std::int64_t> memory_bytes;
};

// One sampling of one instance at unix second `t`.
Status insert_raw(store::Database& db, const std::string& instance_id, std::int64_t t, const std::vector<SampleRow>& rows);
// Averages every whole minute in [from, to) (unix seconds, multiples of 60) of the raw rows
// into resolution-60 rows (replacing any there).
Status downsample(store::Database& db, std::int64_t from, std::int64_t to);
// Drops raw rows older than `raw_before` and minute rows older than `minute_before`.
Status purge(store::Database& db, std::int64_t raw_before, std::int64_t minute_before);
Status delete_instance_series(store::Database& db, const std::string& instance_id);

struct SeriesQuery {
  std::int64_t since = 0, until = 0, step = 60;  // unix seconds; points are [since, until)
  int resolution = kRaw;
};
struct Point {
  std::int64_t t = 0;  // the step's start
  double value = 0;
};
struct QueriedSeries {
  int gpu = kInstanceRow;
  std::vector<Point> util, memory;  // steps without a reading have no point
};
// Every row of the instance (gpu -1 first, then its GPUs), averaged per step.
Result<std::vector<QueriedSeries>> query_series(store::Database& db, const std::string& instance_id,
                                                const SeriesQuery& query);

// The downsampling watermark (unix seconds, a minute boundary), in meta.
Result<std::optional<std::int64_t>> downsampled_until(store::Database& db);
Status set_downsampled_until(store::Database& db, std::int64_t t);

}  // namespace gpucloud::monitoring
