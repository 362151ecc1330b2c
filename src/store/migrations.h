#pragma once
// Numbered schema migrations (Incus's schema.go): a list applied in order, all pending ones
// in ONE transaction, so a store is always at a version the code knows.
#include <span>
#include <string_view>

#include "store/database.h"

namespace gpucloud::store {

struct Migration {
  int version;
  std::string_view sql;
  std::string_view postgres_only = {};  // run after `sql` on PostgreSQL only (storage settings)
};

// The product's schema, oldest first. Append only: never edit a released migration.
std::span<const Migration> schema_migrations();

// Applies the pending migrations of `migrations` to `db`. Returns the version reached.
// Refuses a store newer than the code (a downgrade would misread it).
Result<int> apply_migrations(Database& db, std::span<const Migration> migrations);
Result<int> current_schema_version(Database& db);

}  // namespace gpucloud::store
