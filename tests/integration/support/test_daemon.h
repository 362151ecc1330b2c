#pragma once
// Starts the real gpucloudd on 127.0.0.1:0 with a temporary data dir and talks to it over
// HTTP and through the real CLI: the integration tests' only window into the system.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <sys/types.h>

namespace gpucloud::testing {

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
};

class TestDaemon {
 public:
  explicit TestDaemon(DaemonOptions options = {});
  ~TestDaemon();
  TestDaemon(const TestDaemon&) = delete;

  void start();             // spawns and waits for "listening on"
  int stop();               // SIGTERM, waits; returns the exit status
  void kill9();
  void restart() { stop(); start(); }

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
  // Polls GET /instances/NAME until it reaches `state` (or `timeout` passes); returns the last answer.
  boost::json::value wait_for_state(const std::string& name, const std::string& state, const std::string& token,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

 private:
  DaemonOptions options_;
  std::string dir_;
  std::string data_dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int generation_ = 0;
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
bool docker_available();                        // an engine answers and the base image exists
std::string docker_api(const std::string& method, const std::string& path, const std::string& body = "");

}  // namespace gpucloud::testing
