#include "monitoring/series.h"

#include <map>

#include "store/meta.h"

namespace gpucloud::monitoring {

namespace {
constexpr const char* kWatermarkKey = "monitoring.downsampled_until";
}

Status insert_raw(store::Database& db, const std::string& instance_id, std::int64_t t, const std::vector<SampleRow>& rows) {
  for (const auto& r : rows)
    if (auto s = db.run("INSERT INTO instance_samples (instance_id, resolution, t, gpu, util, memory_bytes) "
                        "VALUES (?, 0, ?, ?, ?, ?) ON CONFLICT (instance_id, resolution, t, gpu) "
                        "DO UPDATE SET util = excluded.util, memory_bytes = excluded.memory_bytes",
                        {instance_id, t, r.gpu, r.util, r.memory_bytes});
        !s)
      return s;
  return ok();
}

Status downsample(store::Database& db, std::int64_t from, std::int64_t to) {
  if (to <= from) return ok();
  return db.run(
      "INSERT INTO instance_samples (instance_id, resolution, t, gpu, util, memory_bytes) "
      "SELECT instance_id, 60, (t / 60) * 60, gpu, AVG(util), CAST(AVG(memory_bytes) AS BIGINT) FROM instance_samples "
      "WHERE resolution = 0 AND t >= ? AND t < ? GROUP BY instance_id, (t / 60) * 60, gpu "
      "ON CONFLICT (instance_id, resolution, t, gpu) DO UPDATE SET util = excluded.util, "
      "memory_bytes = excluded.memory_bytes",
      {from, to});
}

Status purge(store::Database& db, std::int64_t raw_before, std::int64_t minute_before) {
  if (auto s = db.run("DELETE FROM instance_samples WHERE resolution = 0 AND t < ?", {raw_before}); !s) return s;
  return db.run("DELETE FROM instance_samples WHERE resolution = 60 AND t < ?", {minute_before});
}

Status delete_instance_series(store::Database& db, const std::string& instance_id) {
  return db.run("DELETE FROM instance_samples WHERE instance_id = ?", {instance_id});
}

Result<std::vector<QueriedSeries>> query_series(store::Database& db, const std::string& instance_id,
                                                const SeriesQuery& q) {
  auto rows = db.all("SELECT gpu, (t - ?) / ? AS step_index, AVG(util), AVG(memory_bytes) FROM instance_samples "
                     "WHERE instance_id = ? AND resolution = ? AND t >= ? AND t < ? "
                     "GROUP BY gpu, (t - ?) / ? ORDER BY gpu, step_index",
                     {q.since, q.step, instance_id, q.resolution, q.since, q.until, q.since, q.step});
  if (!rows) return fail(rows.error());
  std::map<int, QueriedSeries> by_gpu;
  by_gpu[kInstanceRow].gpu = kInstanceRow;  // the instance's own series are always listed
  for (const auto& r : *rows) {
    const int gpu = static_cast<int>(r.int64(0));
    auto& series = by_gpu[gpu];
    series.gpu = gpu;
    const std::int64_t t = q.since + r.int64(1) * q.step;
    if (auto u = r.opt_double(2)) series.util.push_back({t, *u});
    if (auto m = r.opt_double(3)) series.memory.push_back({t, *m});
  }
  std::vector<QueriedSeries> out;
  for (auto& [gpu, s] : by_gpu) out.push_back(std::move(s));
  return out;
}

Result<std::optional<std::int64_t>> downsampled_until(store::Database& db) {
  auto v = store::get_meta(db, kWatermarkKey);
  if (!v) return fail(v.error());
  if (!*v) return std::optional<std::int64_t>{};
  try {
    return std::optional<std::int64_t>{std::stoll(**v)};
  } catch (const std::exception&) {
    return std::optional<std::int64_t>{};
  }
}

Status set_downsampled_until(store::Database& db, std::int64_t t) {
  return store::set_meta(db, kWatermarkKey, std::to_string(t));
}

}  // namespace gpucloud::monitoring
