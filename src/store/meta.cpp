#include "store/meta.h"

namespace gpucloud::store {

Result<std::optional<std::string>> get_meta(Database& db, const std::string& key) {
  auto row = db.one("SELECT value FROM meta WHERE key = ?", {key});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<std::string>{};
  return std::optional<std::string>{(*row)->text(0)};
}

Status set_meta(Database& db, const std::string& key, const std::string& value) {
  return db.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                {key, value});
}

Result<std::string> get_or_set_meta(Database& db, const std::string& key, const std::string& value) {
  // A unique key and DO NOTHING: two daemons starting at once agree on the first value.
  if (auto s = db.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", {key, value}); !s)
    return fail(s.error());
  auto now = get_meta(db, key);
  if (!now) return fail(now.error());
  if (!*now) return fail(ErrorCode::internal, "meta " + key + " vanished");
  return **now;
}

}  // namespace gpucloud::store
