#include "auth/shared_login_failures.h"

#include <algorithm>

namespace gpucloud::auth {

std::string login_failure_key(const std::string& username, const std::string& address) {
  return username + "\n" + address;  // a username never holds a newline
}

Result<std::int64_t> shared_login_wait(store::Database& db, const std::string& key, int limit,
                                       std::chrono::seconds window, SysTime now) {
  const std::int64_t now_us = to_unix_micros(now);
  const std::int64_t window_us = static_cast<std::int64_t>(window.count()) * 1'000'000;
  // The failures inside the window, newest first: the limit-th newest decides when the next
  // attempt may go (when it leaves the window, fewer than `limit` remain).
  auto rows = db.all("SELECT at FROM login_failures WHERE key = ? AND at > ? ORDER BY at DESC LIMIT ?",
                     {key, now_us - window_us, limit});
  if (!rows) return fail(rows.error());
  if (limit <= 0 || static_cast<int>(rows->size()) < limit) return std::int64_t{0};
  const std::int64_t leaves_at = rows->back().int64(0) + window_us;
  return std::max<std::int64_t>(1, (leaves_at - now_us + 999'999) / 1'000'000);
}

Status record_shared_login_failure(store::Database& db, const std::string& key, std::chrono::seconds window, SysTime now) {
  const std::int64_t now_us = to_unix_micros(now);
  const std::int64_t window_us = static_cast<std::int64_t>(window.count()) * 1'000'000;
  if (auto s = db.run("DELETE FROM login_failures WHERE key = ? AND at <= ?", {key, now_us - window_us}); !s) return s;
  return db.run("INSERT INTO login_failures (key, at) VALUES (?, ?)", {key, now_us});
}

Status purge_shared_login_failures(store::Database& db, std::chrono::seconds window, SysTime now) {
  return db.run("DELETE FROM login_failures WHERE at <= ?",
                {to_unix_micros(now) - static_cast<std::int64_t>(window.count()) * 1'000'000});
}

Status clear_shared_login_failures(store::Database& db, const std::string& key) {
  return db.run("DELETE FROM login_failures WHERE key = ?", {key});
}

}  // namespace gpucloud::auth
