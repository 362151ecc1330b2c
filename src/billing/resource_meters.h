#pragma once
// What the resource modules call, in the transaction that changes a resource, so its meter
// follows it exactly (spec "Billing"): compute per second of `running`, storage per GiB-hour
// while the resource exists and bills (the recycle bin does not). Prices come from the
// store's price table; compute keeps the price captured at the run's start.
#include <cstdint>
#include <optional>
#include <string>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::billing {

// A run opens at `since` at `price_per_hour` (the no-GPU meter when `no_gpu`).
Status open_run(store::Database& db, const std::string& instance_id, const std::string& owner, bool no_gpu,
                std::int64_t price_per_hour, SysTime since);
// The run ends at `until` (whole seconds, like run_seconds) and is settled at once.
Status close_run(store::Database& db, const std::string& instance_id, SysTime until, SysTime now);

// The system disk bills beyond the free allowance while the instance exists (nullopt: released).
Status follow_system_disk(store::Database& db, const std::string& instance_id, const std::string& owner,
                          std::optional<std::int64_t> system_disk_gib, SysTime now);
// A data disk by provisioned size; nullopt when it no longer bills (deleted, destroyed, failed).
Status follow_data_disk(store::Database& db, const std::string& disk_id, const std::string& owner,
                        std::optional<std::int64_t> size_gib, SysTime now);
// Snapshots and custom images by their own bytes, rounded up to whole GiB.
Status follow_snapshot(store::Database& db, const std::string& snapshot_id, const std::string& owner,
                       std::optional<std::int64_t> used_bytes, SysTime now);
Status follow_image(store::Database& db, const std::string& image_id, const std::string& owner,
                    std::optional<std::int64_t> own_size_bytes, SysTime now);

std::int64_t gib_rounded_up(std::int64_t bytes);

// At start: every live resource has the meter it should (a store from before billing, or
// any hook missed), and no meter accrues for what no longer bills. Returns how many changed.
Result<int> reconcile_meters(store::Database& db, SysTime now);

// After a storage price change (PUT /admin/prices): every open storage meter accrues at the
// new price from `now` (what accrued before is kept at the old one), and a system disk that a
// lower free allowance puts beyond it starts billing from `now`. Compute meters keep the
// price of their run.
Status rerate_storage(store::Database& db, SysTime now);

}  // namespace gpucloud::billing
