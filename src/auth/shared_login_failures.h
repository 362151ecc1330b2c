#pragma once
// The login throttle's failures in the store, for gpucloudd replicas sharing a PostgreSQL
// store (issue 27): a guess made through one replica counts against the next made through
// another. The in-process LoginThrottle still reserves attempts in flight; this adds the
// failures every replica recorded in the window.
#include <chrono>
#include <cstdint>
#include <string>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::auth {

std::string login_failure_key(const std::string& username, const std::string& address);
// Seconds to wait before another attempt under `key`, or 0 when fewer than `limit` failures
// fall inside `window` before `now`.
Result<std::int64_t> shared_login_wait(store::Database& db, const std::string& key, int limit,
                                       std::chrono::seconds window, SysTime now);
// A failure at `now`; the key's failures older than the window go.
Status record_shared_login_failure(store::Database& db, const std::string& key, std::chrono::seconds window, SysTime now);
// Every key's failures older than the window (an hourly purge).
Status purge_shared_login_failures(store::Database& db, std::chrono::seconds window, SysTime now);
// A success clears the key's failures.
Status clear_shared_login_failures(store::Database& db, const std::string& key);

}  // namespace gpucloud::auth
