#include "support/postgres_test_db.h"

#include <cstdlib>
#include <fstream>
#include <random>

namespace gpucloud::testing {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<PostgresServer> find_server() {
  PostgresServer server;
  if (const char* url = std::getenv("GPUCLOUD_TEST_POSTGRES_URL"); url && *url) {
    server.url = url;
    if (const char* file = std::getenv("GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE"); file && *file) server.password_file = file;
  } else {
    std::ifstream env("/var/run/gpucloud/postgres.env");
    std::string line;
    while (std::getline(env, line)) {
      auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(0, eq), value = line.substr(eq + 1);
      if (key == "GPUCLOUD_TEST_POSTGRES_URL") server.url = value;
      if (key == "GPUCLOUD_TEST_POSTGRES_PASSWORD_FILE") server.password_file = value;
    }
  }
  if (server.url.empty()) return std::nullopt;
  if (!server.password_file.empty()) server.password = read_line(server.password_file);
  auto db = store::connect_postgres({server.url, server.password, "gpucloud-tests"});
  if (!db) return std::nullopt;
  return server;
}

// The URL with its database name replaced.
std::string with_database(const std::string& url, const std::string& name) {
  auto scheme = url.find("://");
  auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  return base + "/" + name;
}

}  // namespace

const std::optional<PostgresServer>& test_postgres() {
  static const std::optional<PostgresServer> server = find_server();
  return server;
}

bool have_postgres() { return test_postgres().has_value(); }

PostgresTestDatabase::PostgresTestDatabase() {
  const auto& server = test_postgres();
  if (!server) return;
  std::random_device rd;
  std::mt19937_64 rng((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  name_ = "gct_" + std::to_string(rng() % 1000000000000ULL);
  auto admin = store::connect_postgres({server->url, server->password, "gpucloud-tests"});
  if (!admin || !(*admin)->exec_script("CREATE DATABASE " + name_)) return;
  url_ = with_database(server->url, name_);
}

PostgresTestDatabase::~PostgresTestDatabase() {
  const auto& server = test_postgres();
  if (!server || url_.empty()) return;
  if (auto admin = store::connect_postgres({server->url, server->password, "gpucloud-tests"}))
    (void)(*admin)->exec_script("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
}

store::PgConnectOptions PostgresTestDatabase::options() const {
  const auto& server = test_postgres();
  return {url_, server ? server->password : std::string(), "gpucloud-tests"};
}

}  // namespace gpucloud::testing
