#include "billing/resource_meters.h"

#include "billing/meters.h"
#include "core/units.h"
#include "market/prices.h"

namespace gpucloud::billing {

std::int64_t gib_rounded_up(std::int64_t bytes) { return bytes <= 0 ? 0 : (bytes + kGiB - 1) / kGiB; }

Status open_run(store::Database& db, const std::string& instance_id, const std::string& owner, bool no_gpu,
                std::int64_t price_per_hour, SysTime since) {
  // A run is on one meter; the other kind's meter (a previous run at the other size) stays closed.
  const MeterKind kind = no_gpu ? MeterKind::compute_no_gpu : MeterKind::compute;
  return open_meter(db, owner, instance_id, kind, price_per_hour, 0, since);
}

Status close_run(store::Database& db, const std::string& instance_id, SysTime until, SysTime now) {
  if (auto s = close_meter(db, instance_id, MeterKind::compute, until, now); !s) return s;
  return close_meter(db, instance_id, MeterKind::compute_no_gpu, until, now);
}

Status follow_system_disk(store::Database& db, const std::string& instance_id, const std::string& owner,
                          std::optional<std::int64_t> system_disk_gib, SysTime now) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  std::optional<std::int64_t> billed;
  if (system_disk_gib) billed = std::max<std::int64_t>(0, *system_disk_gib - prices->system_disk_free_gib);
  return follow_storage(db, owner, instance_id, MeterKind::system_disk, billed, prices->system_disk_per_gib_hour_micros,
                        now);
}

Status follow_data_disk(store::Database& db, const std::string& disk_id, const std::string& owner,
                        std::optional<std::int64_t> size_gib, SysTime now) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  return follow_storage(db, owner, disk_id, MeterKind::data_disk, size_gib, prices->data_disk_per_gib_hour_micros, now);
}

Status follow_snapshot(store::Database& db, const std::string& snapshot_id, const std::string& owner,
                       std::optional<std::int64_t> used_bytes, SysTime now) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  std::optional<std::int64_t> gib;
  if (used_bytes) gib = gib_rounded_up(*used_bytes);
  return follow_storage(db, owner, snapshot_id, MeterKind::snapshot, gib, prices->snapshot_per_gib_hour_micros, now);
}

Status follow_image(store::Database& db, const std::string& image_id, const std::string& owner,
                    std::optional<std::int64_t> own_size_bytes, SysTime now) {
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  std::optional<std::int64_t> gib;
  if (own_size_bytes) gib = gib_rounded_up(*own_size_bytes);
  return follow_storage(db, owner, image_id, MeterKind::image, gib, prices->image_per_gib_hour_micros, now);
}

Status rerate_storage(store::Database& db, SysTime now) {
  auto open = open_meters(db);
  if (!open) return fail(open.error());
  for (const auto& m : *open) {
    Status s = ok();
    switch (m.kind) {
      case MeterKind::system_disk: {
        auto row = db.one("SELECT system_disk_gib FROM instances WHERE id = ?", {m.resource});
        if (!row) return fail(row.error());
        if (*row) s = follow_system_disk(db, m.resource, m.user_id, (*row)->int64(0), now);
        break;
      }
      case MeterKind::data_disk: s = follow_data_disk(db, m.resource, m.user_id, m.gib, now); break;
      case MeterKind::snapshot: s = follow_snapshot(db, m.resource, m.user_id, m.gib * kGiB, now); break;
      case MeterKind::image: s = follow_image(db, m.resource, m.user_id, m.gib * kGiB, now); break;
      default: break;
    }
    if (!s) return s;
  }
  return ok();
}

}  // namespace gpucloud::billing
