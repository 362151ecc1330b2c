#include "store/migrations.h"

#include <string>

namespace gpucloud::store {
namespace {

// Times are unix microseconds (INTEGER); money is INTEGER smallest units.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE users (
  id TEXT PRIMARY KEY,
  username TEXT NOT NULL UNIQUE,
  email TEXT,
  password_hash TEXT NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
  disabled INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL REFERENCES users(id),
  kind TEXT NOT NULL CHECK (kind IN ('session', 'api')),
  name TEXT,
  token_hash TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  revoked_at INTEGER
);
CREATE INDEX tokens_by_user ON tokens(user_id, created_at);
CREATE TABLE idempotency_keys (
  user_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
  status INTEGER,
  response TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (user_id, method, path, key)
);
CREATE INDEX idempotency_by_age ON idempotency_keys(created_at);
)sql"},
};

}  // namespace

std::span<const Migration> schema_migrations() { return kMigrations; }

Result<int> current_schema_version(Database& db) {
  if (auto s = db.exec_script("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); !s)
    return fail(s.error());
  auto row = db.one("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!row) return fail(row.error());
  return static_cast<int>((*row)->int64(0));
}

Result<int> apply_migrations(Database& db, std::span<const Migration> migrations) {
  if (auto s = db.exec_script("BEGIN IMMEDIATE"); !s) return fail(s.error());
  auto rollback_with = [&](Error e) -> Result<int> {
    (void)db.exec_script("ROLLBACK");
    return fail(std::move(e));
  };
  auto version = current_schema_version(db);
  if (!version) return rollback_with(version.error());
  int latest = migrations.empty() ? 0 : migrations.back().version;
  if (*version > latest)
    return rollback_with(Error{ErrorCode::internal,
                               "store schema version " + std::to_string(*version) +
                                   " is newer than this gpucloudd knows (" + std::to_string(latest) + ")",
                               {}, 0});
  int reached = *version;
  for (const Migration& m : migrations) {
    if (m.version <= reached) continue;
    if (m.version != reached + 1)
      return rollback_with(Error{ErrorCode::internal, "migration " + std::to_string(m.version) + " out of order", {}, 0});
    if (auto s = db.exec_script(m.sql); !s)
      return rollback_with(Error{ErrorCode::internal,
                                 "migration " + std::to_string(m.version) + " failed: " + s.error().detail, {}, 0});
    if (auto s = db.run("INSERT INTO schema_version (version) VALUES (?)", {m.version}); !s)
      return rollback_with(s.error());
    reached = m.version;
  }
  if (auto s = db.exec_script("COMMIT"); !s) return rollback_with(s.error());
  return reached;
}

}  // namespace gpucloud::store
