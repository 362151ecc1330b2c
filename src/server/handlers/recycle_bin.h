#pragma once
// `purge_at` on what the recycle bin holds (disks, snapshots, custom images): when a deleted,
// still restorable object is destroyed for good, deleted_at (its first deletion's time) plus
// [policy] recycle_days, the same arithmetic as the bin's sweeps; null for anything else.
#include <optional>

#include <boost/json/object.hpp>

#include "core/time_format.h"

namespace gpucloud::server {

inline boost::json::object with_purge_at(boost::json::object o, const std::optional<SysTime>& deleted_at,
                                         int recycle_days) {
  const auto* state = o.if_contains("state");
  const bool binned = deleted_at && state != nullptr && state->is_string() && state->as_string() == "deleted";
  o["purge_at"] = binned ? boost::json::value(format_rfc3339(*deleted_at + std::chrono::days(recycle_days)))
                         : boost::json::value(nullptr);
  return o;
}

}  // namespace gpucloud::server
