#include "cli/app.h"

#include <exception>
#include <fstream>
#include <iterator>
#include <iostream>
#include <istream>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/version.h"

namespace gpucloud::cli {

namespace json = boost::json;

tl::unexpected<Failure> usage_error(std::string message) {
  return tl::unexpected<Failure>(Failure{kExitUsage, "error: " + std::move(message)});
}

tl::unexpected<Failure> refused(std::string message) {
  return tl::unexpected<Failure>(Failure{kExitRefused, "error: " + std::move(message)});
}

tl::unexpected<Failure> api_failure(const Error& error) {
  return tl::unexpected<Failure>(Failure{kExitRefused, error_message(error)});
}

Context::Context(Deps& deps, GlobalOptions options)
    : deps_(deps), options_(std::move(options)) {}

Context::~Context() = default;

Expected<std::filesystem::path> Context::config_file() {
  auto path = config_path(deps_.env);
  if (!path) return refused(path.error().detail);
  return *path;
}

Expected<CliConfig> Context::stored_config() {
  auto path = config_file();
  if (!path) return tl::unexpected(path.error());
  auto config = load_config(*path);
  if (!config) return refused(config.error().detail);
  return *config;
}

Expected<Settings> Context::settings() {
  if (settings_) return *settings_;
  // Without a usable config file location the file simply does not count.
  CliConfig file;
  if (auto path = config_path(deps_.env)) {
    auto config = load_config(*path);
    if (!config) return refused(config.error().detail);
    file = *config;
  }
  settings_ = resolve_settings(file, deps_.env, options_.endpoint, options_.token);
  return *settings_;
}

Expected<ApiClient*> Context::api() {
  if (api_) return api_.get();
  auto s = settings();
  if (!s) return tl::unexpected(s.error());
  auto endpoint = parse_endpoint(s->endpoint);
  if (!endpoint) {
    return usage_error(fmt::format("{} (from the {})", endpoint.error().detail,
                                   to_string(s->endpoint_source)));
  }
  transport_ = deps_.connect(*endpoint);
  api_ = std::make_unique<ApiClient>(*transport_, endpoint->base_path, s->token);
  return api_.get();
}

Expected<json::value> Context::check(Result<json::value> result) {
  if (result) return std::move(*result);
  Failure failure{kExitRefused, error_message(result.error())};
  if (result.error().code == ErrorCode::unauthorized && api_ && !api_->has_token()) {
    failure.message += "\nhint: log in first with `gpucloud login`, or pass --token";
  }
  return tl::unexpected(std::move(failure));
}

Expected<std::string> Context::read_stdin_line(std::string_view what) {
  std::string line;
  if (deps_.in == nullptr || !std::getline(*deps_.in, line)) {
    return usage_error(fmt::format("expected the {} on a line of standard input", what));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

Expected<std::string> Context::ask(const std::string& prompt, bool secret,
                                   std::string_view what) {
  if (!stdin_is_tty() || !deps_.prompt) return read_stdin_line(what);
  auto answer = deps_.prompt(prompt, secret);
  if (!answer) return usage_error(fmt::format("no {} given", what));
  return *answer;
}

Expected<std::string> Context::ask_new_password(bool from_stdin, const std::string& prompt) {
  if (from_stdin || !stdin_is_tty() || !deps_.prompt) return read_stdin_line("password");
  auto first = ask(prompt + ": ", true, "password");
  if (!first) return first;
  auto second = ask("Repeat " + prompt + ": ", true, "password");
  if (!second) return second;
  if (*first != *second) return usage_error("the passwords do not match");
  return first;
}

bool Context::confirm(const std::string& question) {
  if (!stdin_is_tty() || !deps_.prompt) return false;
  auto answer = deps_.prompt(question + " [y/N] ", false);
  return answer && (*answer == "y" || *answer == "Y" || *answer == "yes" || *answer == "YES" ||
                    *answer == "Yes");
}

void Context::print(const json::value& value, const std::function<void()>& human) {
  if (json()) {
    if (!value.is_null()) print_json(out(), value);
  } else {
    human();
  }
}

void Registry::on(const CLI::App* command, Handler handler) {
  handlers_.emplace_back(command, std::move(handler));
}

const Handler* Registry::find(const CLI::App* command) const {
  for (const auto& [cmd, handler] : handlers_) {
    if (cmd == command) return &handler;
  }
  return nullptr;
}

int run_cli(const std::vector<std::string>& args, Deps& deps) {
  std::ostream& out = *deps.out;
  std::ostream& err = *deps.err;

  CLI::App app{"gpucloud: rent GPU instances from a gpucloud platform", "gpucloud"};
  app.fallthrough();  // global flags are accepted after the subcommand too
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("error: {}\nRun with --help for more information.\n", e.what());
  });
  app.set_version_flag("--version", GPUCLOUD_CLI_VERSION);

  std::string endpoint, token;
  bool json_flag = false;
  auto* endpoint_opt = app.add_option("--endpoint", endpoint,
                                      "API endpoint, http://HOST:PORT (default: config file, "
                                      "$GPUCLOUD_ENDPOINT, else http://127.0.0.1:8080)");
  auto* token_opt = app.add_option("--token", token, "API token (default: config file or "
                                                     "$GPUCLOUD_TOKEN)");
  app.add_flag("--json", json_flag, "print the API's JSON instead of tables");

  Registry registry;
  add_auth_commands(app, registry);
  add_market_commands(app, registry);
  add_instance_commands(app, registry);
  add_set_command(app, registry);
  add_top_command(app, registry);
  add_key_commands(app, registry);
  add_disk_commands(app, registry);
  add_admin_commands(app, registry);
  add_connect_commands(app, registry);
  add_image_commands(app, registry);
  add_security_group_commands(app, registry);
  add_billing_commands(app, registry);
  add_admin_host_pki_commands(app, registry);  // under `admin host`

  std::vector<const char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(a.c_str());
  if (argv.empty()) argv.push_back("gpucloud");
  argv.push_back(nullptr);

  if (args.size() <= 1) {
    err << app.help();
    return kExitUsage;
  }
  try {
    app.parse(static_cast<int>(argv.size() - 1), argv.data());
  } catch (const CLI::ParseError& e) {
    // CLI11 reports "gpucloud bogus" as a missing subcommand; name the word instead.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && app.get_subcommands().empty()) {
      for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--endpoint" || a == "--token") {
          ++i;
          continue;
        }
        if (a.starts_with("-")) continue;
        err << fmt::format("error: unknown command \"{}\"\nRun with --help for the list of "
                           "commands.\n",
                           a);
        return kExitUsage;
      }
    }
    int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  const CLI::App* command = &app;
  for (;;) {
    auto parsed = command->get_subcommands();
    if (parsed.empty()) break;
    command = parsed.front();
  }
  const Handler* handler = registry.find(command);
  if (handler == nullptr) {
    err << command->help();
    return kExitUsage;
  }

  GlobalOptions options;
  if (endpoint_opt->count() > 0) options.endpoint = endpoint;
  if (token_opt->count() > 0) options.token = token;
  options.json = json_flag;
  Context context(deps, options);
  try {
    Outcome outcome = (*handler)(context);
    out.flush();
    if (outcome) return kExitOk;
    if (!outcome.error().message.empty()) err << outcome.error().message << "\n";
    return outcome.error().exit_code;
  } catch (const std::exception& e) {
    out.flush();
    err << "error: " << e.what() << "\n";
    return kExitRefused;
  }
}

}  // namespace gpucloud::cli

namespace gpucloud::cli {

Result<json::value> post_idempotent(Context& ctx, ApiClient& api, std::string_view path,
                                    const json::value& body) {
  const std::string key = ctx.deps().random_key();
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    auto answer = api.post(path, body, {{"Idempotency-Key", key}});
    if (answer || answer.error().code != ErrorCode::unavailable || attempt == kAttempts) {
      return answer;
    }
    ctx.deps().sleep(std::chrono::seconds(1));
  }
}

Expected<std::string> read_user_file(Context& ctx, const std::string& path,
                                     std::string_view what) {
  if (path == "-") {
    std::string all, line;
    if (ctx.deps().in == nullptr) return usage_error(fmt::format("no {} on standard input", what));
    while (std::getline(*ctx.deps().in, line)) all += line + "\n";
    return all;
  }
  std::filesystem::path file = path;
  if (path == "~" || path.starts_with("~/")) {
    auto home = ctx.deps().env("HOME");
    if (!home || home->empty()) return usage_error("cannot expand ~: HOME is not set");
    file = std::filesystem::path(*home) / path.substr(path.size() > 1 ? 2 : 1);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    return usage_error(fmt::format("{} {} is a directory", what, file.string()));
  }
  auto size = std::filesystem::file_size(file, ec);
  if (ec) return usage_error(fmt::format("cannot read {} {}: {}", what, file.string(), ec.message()));
  if (size > 1024 * 1024) return usage_error(fmt::format("{} {} is too large", what, file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) return usage_error(fmt::format("cannot read {} {}", what, file.string()));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return content;
}

}  // namespace gpucloud::cli
