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

namespace {
// A create that failed (creating -> error) never ran, and its system disk bills nothing in
// whatever state it goes on to (a release clears its state_reason): it went to `error` and
// never reached `running`, as its state events (written with each change) say.
constexpr const char* kFailedCreate =
    "(EXISTS (SELECT 1 FROM events e WHERE e.resource = i.id AND e.type = 'instance.error') AND NOT EXISTS "
    "(SELECT 1 FROM events e WHERE e.resource = i.id AND e.type = 'instance.running'))";
}  // namespace

Result<int> reconcile_meters(store::Database& db, SysTime now) {
  int changed = 0;
  auto each = [&](const std::string& sql, auto&& fix) -> Status {
    auto rows = db.all(sql, {});
    if (!rows) return fail(rows.error());
    for (const auto& r : *rows) {
      if (auto s = fix(r); !s) return s;
      ++changed;
    }
    return ok();
  };
  // Running pay-as-you-go instances without an open compute meter accrue from now.
  if (auto s = each("SELECT i.id, i.owner, i.no_gpu, i.gpu_count, i.price_per_hour FROM instances i "
                    "WHERE i.state = 'running' AND i.billing_mode = 'hourly' AND NOT EXISTS (SELECT 1 FROM meters m "
                    "WHERE m.resource = i.id AND m.kind IN ('compute', 'compute_no_gpu') AND m.open_since IS NOT NULL) "
                    // A run on a lost GPU is not charged (the platform's fault) until it is back.
                    "AND NOT EXISTS (SELECT 1 FROM reservations r JOIN gpu_reservations gr ON gr.reservation_id = r.id "
                    "AND gr.active = 1 JOIN gpus g ON g.uuid = gr.gpu_uuid WHERE r.holder = i.id AND r.active = 1 "
                    "AND g.lost_at IS NOT NULL)",
                    [&](const store::Row& r) {
                      return open_run(db, r.text(0), r.text(1), r.int64(2) != 0 || r.int64(3) == 0, r.int64(4), now);
                    });
      !s)
    return fail(s.error());
  // Compute meters open for an instance that is not running stop now.
  if (auto s = each("SELECT m.resource FROM meters m LEFT JOIN instances i ON i.id = m.resource WHERE m.open_since IS NOT NULL "
                    "AND m.kind IN ('compute', 'compute_no_gpu') AND (i.state IS NULL OR i.state != 'running')",
                    [&](const store::Row& r) { return close_run(db, r.text(0), now, now); });
      !s)
    return fail(s.error());
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  if (auto s = each("SELECT i.id, i.owner, i.system_disk_gib FROM instances i WHERE i.state != 'released' AND "
                    // A failed create never ran: its system disk bills nothing.
                    "NOT " + std::string(kFailedCreate) + " AND "
                    "i.system_disk_gib > " + std::to_string(prices->system_disk_free_gib) + " AND NOT EXISTS (SELECT 1 FROM meters m WHERE m.resource = i.id AND "
                    "m.kind = 'system_disk' AND m.open_since IS NOT NULL)",
                    [&](const store::Row& r) { return follow_system_disk(db, r.text(0), r.text(1), r.int64(2), now); });
      !s)
    return fail(s.error());
  if (auto s = each("SELECT d.id, d.owner, d.size_gib FROM disks d WHERE d.state IN ('creating', 'available', 'attached') "
                    "AND NOT EXISTS (SELECT 1 FROM meters m WHERE m.resource = d.id AND m.open_since IS NOT NULL)",
                    [&](const store::Row& r) { return follow_data_disk(db, r.text(0), r.text(1), r.int64(2), now); });
      !s)
    return fail(s.error());
  if (auto s = each("SELECT s.id, s.owner, s.used_bytes FROM snapshots s WHERE s.state = 'available' AND s.used_bytes > 0 "
                    "AND NOT EXISTS (SELECT 1 FROM meters m WHERE m.resource = s.id AND m.open_since IS NOT NULL)",
                    [&](const store::Row& r) { return follow_snapshot(db, r.text(0), r.text(1), r.int64(2), now); });
      !s)
    return fail(s.error());
  if (auto s = each("SELECT im.id, im.owner, im.own_size_bytes FROM images im WHERE im.visibility = 'private' AND "
                    "im.state = 'available' AND im.own_size_bytes > 0 AND NOT EXISTS (SELECT 1 FROM meters m WHERE "
                    "m.resource = im.id AND m.open_since IS NOT NULL)",
                    [&](const store::Row& r) { return follow_image(db, r.text(0), r.text(1), r.int64(2), now); });
      !s)
    return fail(s.error());
  return changed;
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
  // A lower free allowance makes system disks bill that were inside the old one (they have
  // no open meter, so the loop above did not see them): they bill from now.
  auto prices = market::load_prices(db);
  if (!prices) return fail(prices.error());
  auto newly = db.all("SELECT i.id, i.owner, i.system_disk_gib FROM instances i WHERE i.state != 'released' AND "
                    // A failed create never ran: its system disk bills nothing.
                    "NOT " + std::string(kFailedCreate) + " AND "
                      "i.system_disk_gib > ? AND NOT EXISTS (SELECT 1 FROM meters m WHERE m.resource = i.id AND "
                      "m.kind = 'system_disk' AND m.open_since IS NOT NULL)",
                      {prices->system_disk_free_gib});
  if (!newly) return fail(newly.error());
  for (const auto& r : *newly)
    if (auto s = follow_system_disk(db, r.text(0), r.text(1), r.int64(2), now); !s) return s;
  return ok();
}

}  // namespace gpucloud::billing
