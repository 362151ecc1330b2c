#pragma once
// The command dispatcher: global flags, settings resolution, one Context per invocation,
// exit codes (0 success, 1 API refusal or connection failure, 2 usage error). Everything the
// process touches (streams, environment, terminal, network, clock) comes in through Deps so
// tests can run commands against canned answers.
#include <chrono>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>
#include <tl/expected.hpp>

#include "cli/api_client.h"
#include "cli/cli_config.h"
#include "cli/http_client.h"
#include "core/result.h"

namespace CLI {
class App;
}

namespace gpucloud::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;

struct Failure {
  int exit_code = kExitRefused;
  std::string message;  // printed on stderr as it is (already "error: ..."); may be empty
};
using Outcome = tl::expected<void, Failure>;
template <class T>
using Expected = tl::expected<T, Failure>;

tl::unexpected<Failure> usage_error(std::string message);
tl::unexpected<Failure> refused(std::string message);  // exit 1, "error: " prepended
tl::unexpected<Failure> api_failure(const Error& error);

struct Deps {
  std::istream* in = nullptr;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  EnvLookup env;
  std::function<std::unique_ptr<HttpTransport>(const Endpoint&)> connect;
  std::function<bool()> stdin_is_tty;
  std::function<bool()> stderr_is_tty;
  std::function<bool()> stdout_is_tty;
  // Live views (`top`) end cleanly on Ctrl-C: after trap_interrupt, SIGINT sets a flag that
  // `interrupted` reports instead of ending the process. Empty: never interrupted.
  std::function<void()> trap_interrupt;
  std::function<bool()> interrupted;
  // Prompts on the terminal and reads one line (echo off when `secret`); nullopt on EOF.
  std::function<std::optional<std::string>(const std::string& prompt, bool secret)> prompt;
  std::function<void(std::chrono::milliseconds)> sleep;
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<std::string()> random_key;  // Idempotency-Key values
  // Replaces the process with a program (execvp, argv[0] looked up in PATH), so its exit
  // status is ours; answers only when the program could not be started. Tests record the
  // argv and answer an exit status. Empty: the real execvp (cli/ssh_command.h).
  std::function<Result<int>(const std::vector<std::string>& argv)> exec;
  // A streaming GET (Server-Sent Events): a 2xx text/event-stream body goes to `on_data` as
  // it arrives (false stops reading); other answers come back whole. Empty: the real
  // connection (cli/event_stream.h).
  std::function<Result<HttpResponse>(const Endpoint&, const HttpRequest&,
                                     const std::function<bool(std::string_view)>& on_data)>
      stream;
};

// The real process: std streams, getenv, Beast transport, termios prompts, real clock.
Deps system_deps();

struct GlobalOptions {
  std::optional<std::string> endpoint;
  std::optional<std::string> token;
  bool json = false;
};

class Context {
 public:
  Context(Deps& deps, GlobalOptions options);
  ~Context();

  Deps& deps() { return deps_; }
  bool json() const { return options_.json; }
  std::ostream& out() { return *deps_.out; }
  std::ostream& err() { return *deps_.err; }
  bool stdin_is_tty() const { return deps_.stdin_is_tty && deps_.stdin_is_tty(); }
  bool stderr_is_tty() const { return deps_.stderr_is_tty && deps_.stderr_is_tty(); }
  bool stdout_is_tty() const { return deps_.stdout_is_tty && deps_.stdout_is_tty(); }

  Expected<std::filesystem::path> config_file();
  Expected<CliConfig> stored_config();
  Expected<Settings> settings();
  // The API client for the resolved endpoint and token (created on first use).
  Expected<ApiClient*> api();

  // One line of stdin (without its newline); `what` names it in the error on EOF.
  Expected<std::string> read_stdin_line(std::string_view what);
  // On a terminal: prompt (no echo when secret); otherwise one line of stdin.
  Expected<std::string> ask(const std::string& prompt, bool secret, std::string_view what);
  // A new password: from stdin with --password-stdin or without a terminal, else asked
  // twice on the terminal.
  Expected<std::string> ask_new_password(bool from_stdin, const std::string& prompt);
  // y/N question on the terminal.
  bool confirm(const std::string& question);

  // --json: the API's JSON; else the human rendering.
  void print(const boost::json::value& value, const std::function<void()>& human);

  Expected<boost::json::value> check(Result<boost::json::value> result);

 private:
  Deps& deps_;
  GlobalOptions options_;
  std::optional<Settings> settings_;
  std::unique_ptr<HttpTransport> transport_;
  std::unique_ptr<ApiClient> api_;
};

using Handler = std::function<Outcome(Context&)>;

class Registry {
 public:
  void on(const CLI::App* command, Handler handler);
  const Handler* find(const CLI::App* command) const;

 private:
  std::vector<std::pair<const CLI::App*, Handler>> handlers_;
};

// args[0] is the program name.
int run_cli(const std::vector<std::string>& args, Deps& deps);

}  // namespace gpucloud::cli
