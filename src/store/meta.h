#pragma once
// The store's small key/value table: the installation id, the persisted test-clock time,
// the config's last prices. Portable SQL (an upsert both SQLite and PostgreSQL speak).
#include <optional>
#include <string>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::store {

Result<std::optional<std::string>> get_meta(Database& db, const std::string& key);
Status set_meta(Database& db, const std::string& key, const std::string& value);
// Sets `key` to `value` unless it is already set; returns the value that holds.
Result<std::string> get_or_set_meta(Database& db, const std::string& key, const std::string& value);

}  // namespace gpucloud::store
