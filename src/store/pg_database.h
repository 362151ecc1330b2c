#pragma once
// A Database on one PostgreSQL connection (libpq): statements translated once from the shared
// SQL (sql_dialect.h) and prepared on the server, parameters sent as text and typed by
// PostgreSQL from where they stand, results read back as the column's type says.
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
#include "store/database.h"

struct pg_conn;  // libpq's PGconn

namespace gpucloud::store {

struct PgConnectOptions {
  std::string url;       // postgresql://USER@HOST:PORT/DB (libpq's URI; no password in it)
  std::string password;  // from [store] password_file or GPUCLOUD_STORE_PASSWORD; may be empty
  std::string application_name = "gpucloudd";
};

Result<std::unique_ptr<Database>> connect_postgres(const PgConnectOptions& options);
// A bare libpq connection (PGconn*) with the same options, for a LISTEN connection (pg_listener.h).
Result<pg_conn*> open_pg_connection(const PgConnectOptions& options);

bool is_postgres_url(std::string_view url);
// The URL with any password taken out, for logs and messages.
std::string redacted_url(std::string_view url);

}  // namespace gpucloud::store
