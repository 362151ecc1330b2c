#include "market/disk_pool.h"

#include <algorithm>

namespace gpucloud::market {
namespace json = boost::json;

namespace {
// "1.5 GiB", "600 MiB": a size as a message shows it.
std::string size_text(std::int64_t bytes) {
  if (bytes < 0) bytes = 0;
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  if (bytes >= kGiB) {
    const std::int64_t tenths = bytes * 10 / kGiB;
    return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") + " GiB";
  }
  return std::to_string(bytes / kMiB) + " MiB";
}
}  // namespace

Status take_disk_pool(store::Database& db, const std::string& host_id, std::int64_t bytes, const std::string& what) {
  if (bytes == 0) return ok();
  if (bytes < 0) {
    return db.run("UPDATE hosts SET disk_pool_provisioned_bytes = MAX(0, disk_pool_provisioned_bytes - ?) WHERE id = ?",
                  {-bytes, host_id});
  }
  // The condition is the invariant: evaluated against the row as this transaction sees it,
  // so a concurrent take that committed first is counted, and a stale one fails.
  if (auto s = db.run("UPDATE hosts SET disk_pool_provisioned_bytes = disk_pool_provisioned_bytes + ? WHERE id = ? AND "
                      "(disk_pool_capacity_bytes IS NULL OR disk_pool_provisioned_bytes + ? <= disk_pool_capacity_bytes)",
                      {bytes, host_id, bytes});
      !s)
    return s;
  if (db.changes() == 1) return ok();
  auto row = db.one("SELECT name, disk_pool_capacity_bytes, disk_pool_provisioned_bytes FROM hosts WHERE id = ?", {host_id});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::internal, "host " + host_id + " is not recorded");
  const std::string name = (*row)->text(0);
  const std::int64_t capacity = (*row)->opt_int64(1).value_or(0);
  const std::int64_t provisioned = (*row)->int64(2);
  const std::int64_t free = std::max<std::int64_t>(0, capacity - provisioned);
  Error e{ErrorCode::no_capacity,
          "host " + name + "'s disk pool has " + size_text(free) + " free of " + size_text(capacity) + " (" +
              size_text(provisioned) + " provisioned); " + what + " needs " + size_text(bytes) + ", " +
              size_text(bytes - free) + " short",
          {},
          0};
  return fail(std::move(e));
}

Result<std::optional<DiskPoolState>> load_disk_pool(store::Database& db, const std::string& host_id) {
  auto row = db.one("SELECT disk_pool_capacity_bytes, disk_pool_provisioned_bytes, disk_pool_size_bytes, "
                    "disk_pool_used_bytes, disk_pool_reserve_bytes, disk_pool_warned_percent FROM hosts WHERE id = ?",
                    {host_id});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<DiskPoolState>{};
  const auto& r = **row;
  DiskPoolState p;
  p.capacity_bytes = r.opt_int64(0);
  p.provisioned_bytes = r.int64(1);
  p.size_bytes = r.opt_int64(2);
  p.used_bytes = r.opt_int64(3);
  p.reserve_bytes = r.opt_int64(4);
  p.warned_percent = static_cast<int>(r.int64(5));
  return std::optional<DiskPoolState>{p};
}

json::object disk_pool_json(const DiskPoolState& p) {
  auto v = [](const std::optional<std::int64_t>& x) { return x ? json::value(*x) : json::value(nullptr); };
  json::object o{{"capacity_bytes", v(p.capacity_bytes)},
                 {"provisioned_bytes", p.provisioned_bytes},
                 {"free_bytes", p.capacity_bytes ? json::value(std::max<std::int64_t>(0, *p.capacity_bytes - p.provisioned_bytes))
                                                 : json::value(nullptr)},
                 {"size_bytes", v(p.size_bytes)},
                 {"used_bytes", v(p.used_bytes)},
                 {"reserve_bytes", v(p.reserve_bytes)}};
  if (p.size_bytes && p.used_bytes && *p.size_bytes > 0)
    o["used_percent"] = static_cast<double>(*p.used_bytes * 1000 / *p.size_bytes) / 10.0;
  else
    o["used_percent"] = nullptr;
  return o;
}

int disk_pool_level(std::int64_t used, std::int64_t size) {
  if (size <= 0) return 0;
  if (used * 100 >= size * 95) return 95;
  if (used * 100 >= size * 80) return 80;
  return 0;
}

Result<std::optional<DiskPoolCrossing>> record_disk_pool(store::Database& db, const std::string& host_id,
                                                         const agent::DiskPool& pool) {
  auto before = load_disk_pool(db, host_id);
  if (!before) return fail(before.error());
  if (!*before) return std::optional<DiskPoolCrossing>{};
  const int level = disk_pool_level(pool.used_bytes, pool.size_bytes);
  const int warned = (*before)->warned_percent;
  if (auto s = db.run("UPDATE hosts SET disk_pool_capacity_bytes = ?, disk_pool_size_bytes = ?, disk_pool_used_bytes = ?, "
                      "disk_pool_reserve_bytes = ? WHERE id = ?",
                      {pool.capacity_bytes, pool.size_bytes, pool.used_bytes, pool.reserve_bytes, host_id});
      !s)
    return fail(s.error());
  if (level == warned) return std::optional<DiskPoolCrossing>{};
  // Compare-and-set on the level last warned: one crossing, one warning, whichever writer.
  if (auto s = db.run("UPDATE hosts SET disk_pool_warned_percent = ? WHERE id = ? AND disk_pool_warned_percent = ?",
                      {level, host_id, warned});
      !s)
    return fail(s.error());
  if (db.changes() == 0 || level < warned) return std::optional<DiskPoolCrossing>{};
  return std::optional<DiskPoolCrossing>{DiskPoolCrossing{level, pool.used_bytes, pool.size_bytes}};
}

}  // namespace gpucloud::market
