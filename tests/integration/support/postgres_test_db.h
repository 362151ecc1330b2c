#pragma once
// The tests' PostgreSQL (scripts/start-postgres.sh, started by ./dev test): where it is, and a
// database of its own for each test, dropped afterwards. Tests that need it are named POSTGRES_
// and start with GPUCLOUD_NEED_POSTGRES().
#include <optional>
#include <string>

#include "store/pg_database.h"
#include "support/capabilities.h"

namespace gpucloud::testing {

struct PostgresServer {
  std::string url;            // postgresql://gpucloud@127.0.0.1:PORT/postgres
  std::string password_file;  // the role's password, one line
  std::string password;
};

// From GPUCLOUD_TEST_POSTGRES_URL / _PASSWORD_FILE, or the file start-postgres.sh writes
// (/var/run/gpucloud/postgres.env); nullopt when there is none or it does not answer.
const std::optional<PostgresServer>& test_postgres();
bool have_postgres();

// CREATE DATABASE gct_<random> on construction, DROP DATABASE ... WITH (FORCE) on destruction.
class PostgresTestDatabase {
 public:
  PostgresTestDatabase();
  ~PostgresTestDatabase();
  PostgresTestDatabase(const PostgresTestDatabase&) = delete;
  PostgresTestDatabase& operator=(const PostgresTestDatabase&) = delete;

  bool ok() const { return !url_.empty(); }
  const std::string& url() const { return url_; }  // no password in it
  const std::string& name() const { return name_; }
  store::PgConnectOptions options() const;

 private:
  std::string name_;
  std::string url_;
};

}  // namespace gpucloud::testing

#define GPUCLOUD_NEED_POSTGRES()                                                                          \
  GPUCLOUD_NEED("postgres", ::gpucloud::testing::have_postgres(),                                         \
                "needs the tests' PostgreSQL (scripts/start-postgres.sh; /var/run/gpucloud/postgres.env)")
