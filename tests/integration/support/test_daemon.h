#pragma once
// Starts the real gpucloudd on 127.0.0.1:0 with a temporary data dir and talks to it over
// HTTP and through the real CLI: the integration tests' only window into the system.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>
#include <sys/types.h>

#include "support/capabilities.h"
#include "support/test_resources.h"
#include "support/wait.h"

namespace gpucloud::testing {

class PostgresTestDatabase;

struct HttpResult {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  boost::json::value json() const;
  std::string code() const;  // problem code, "" when none
};

// One request on a fresh connection.
HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                        const std::map<std::string, std::string>& headers = {});

struct DaemonOptions {
  std::string config_toml;  // written to DATA_DIR/../gpucloud.toml when non-empty
  bool test_clock = false;
  std::string admin_password = "admin-password-1";
  std::map<std::string, std::string> env = {{"GPUCLOUD_AGENT_TRANSPORT", "loopback-json"}};
  // Every new user's first ledger entry ([billing] signup_credit, added to the config unless
  // it has a [billing] table): creates need a balance. 0 leaves new users at zero.
  std::int64_t signup_credit = 1'000'000;  // ¥10,000
  // "" = a data directory of its own; replicas on one machine (issue 27) share one.
  std::string data_dir;
  // [agent] system_disk_filesystems (on by default in gpucloudd): off unless a test asks. The
  // suite's daemons share the machine's one disk, and on overlay2 each instance's 30 GiB
  // system disk would then count against its pool (tests/integration/system_disk_test.cpp
  // covers them).
  bool system_disk_filesystems = false;
};

// At teardown a TestDaemon fails the test (ADD_FAILURE) when its daemon died on its own, did
// not exit cleanly on SIGTERM, or wrote a sanitizer report; the daemon's logs are then kept
// (their path and tail are printed). They are also kept when the test failed otherwise.
class TestDaemon {
 public:
  explicit TestDaemon(DaemonOptions options = {});
  ~TestDaemon();
  TestDaemon(const TestDaemon&) = delete;

  // Spawns and waits for "listening on". With `armed_fault_point`, this run of the daemon
  // has GPUCLOUD_FAULT_POINT set to it (see core/fault_points.h).
  void start(const std::string& armed_fault_point = "");
  int stop();               // SIGTERM, waits; returns the exit status (128+N for signal N)
  void kill9();             // SIGKILL on purpose (never counted as a failure)
  void restart() { stop(); start(); }
  // Waits for the daemon armed with `point` to die; success only if it died of SIGKILL and
  // its log says that point fired. ASSERT_TRUE(daemon.killed_at("create.after_engine")).
  ::testing::AssertionResult killed_at(const std::string& point,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Waits for the daemon to end on its own, as the test expects (a deposed leader exits 75):
  // its exit code (128+N for signal N), or -1 while it still runs after `timeout`. Such an
  // exit is not counted as a failure at teardown.
  int wait_for_expected_exit(std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0; }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }  // the running daemon's process id (-1 when stopped)
  const std::string& dir() const { return dir_; }
  const std::string& data_dir() const { return data_dir_; }
  std::string log() const;  // everything the daemon wrote (stdout + stderr)
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  HttpResult request(const std::string& method, const std::string& path, const std::string& body = "",
                     const std::string& token = "", const std::map<std::string, std::string>& headers = {}) const;
  HttpResult get(const std::string& path, const std::string& token = "") const { return request("GET", path, "", token); }
  HttpResult post(const std::string& path, const boost::json::value& body, const std::string& token = "") const {
    return request("POST", path, boost::json::serialize(body), token);
  }

  // Registers (through the API) and logs in; returns a session token.
  std::string register_and_login(const std::string& username, const std::string& password = "password-123");
  std::string login(const std::string& username, const std::string& password) const;
  std::string admin_token() const { return login("admin", options_.admin_password); }
  std::string installation_id() const;  // from the store's meta table
  // Polls GET /instances/NAME until it reaches `state`; returns the last answer. Fails the
  // test (ADD_FAILURE, naming the last state and its reason) when `timeout` passes or when the
  // instance reaches a terminal state (error, released) other than `state`, at once.
  boost::json::value wait_for_state(const std::string& name, const std::string& state, const std::string& token,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  // Whether this daemon's store is PostgreSQL: GPUCLOUD_TEST_STORE=postgres runs every daemon
  // of a test run on a database of its own on the tests' PostgreSQL (the suites that run on
  // both backends, tests/CMakeLists: the *.OnPostgres entries).
  bool on_postgres() const { return postgres_ != nullptr; }

 private:
  std::string log_path(int generation) const;
  void note_problem(const std::string& what);  // a failure found at stop or teardown
  int wait_exit(std::chrono::milliseconds timeout);  // status, or -1 when still alive

  DaemonOptions options_;
  std::string dir_;
  std::string data_dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int generation_ = 0;
  std::string armed_;                 // the fault point armed in the current run
  std::vector<std::string> problems_;  // reported once, at teardown
  std::unique_ptr<ResourceLease> lease_;
  std::unique_ptr<PostgresTestDatabase> postgres_;
};

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs build/bin/gpucloud with the given arguments, environment additions and stdin.
CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                  const std::string& stdin_text = "");

std::string random_suffix();

// Shell helpers for tests that look at the engine and the firewall directly.
std::string shell(const std::string& command);  // stdout of `sh -c command`
bool docker_available();                        // an engine answers and the base image exists (cached)
std::string docker_api(const std::string& method, const std::string& path, const std::string& body = "");

}  // namespace gpucloud::testing
