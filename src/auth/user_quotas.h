#pragma once
// Per-user quota overrides (GET/PUT /admin/users/{id}/quota): each limit is either the
// user's own or, when null, the config's default. What a user uses is counted by the
// domains that own it (instances, disks, images); this file only knows the limits.
#include <cstdint>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "config/config.h"
#include "core/result.h"
#include "store/database.h"

namespace gpucloud::auth {

struct QuotaOverrides {
  std::optional<std::int64_t> gpus, instances, disk_gib, images, snapshots;
};

Result<QuotaOverrides> load_quota_overrides(store::Database& db, const std::string& user_id);
Status save_quota_overrides(store::Database& db, const std::string& user_id, const QuotaOverrides& overrides);
// The limits that bind the user: their overrides over the config's defaults.
Result<config::Quotas> effective_quotas(store::Database& db, const config::Quotas& defaults, const std::string& user_id);

// {"gpus","instances","disk_gib","images","snapshots"} each an integer >= 0 or null; every key optional
// (absent = null). invalid_argument naming the field otherwise.
Result<QuotaOverrides> quota_overrides_from_json(const boost::json::value& body);
boost::json::object quotas_json(const config::Quotas& limits);
boost::json::object overrides_json(const QuotaOverrides& overrides);

}  // namespace gpucloud::auth
