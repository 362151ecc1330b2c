#include "cli/cli_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace gpucloud::cli {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> non_empty(const std::optional<std::string>& v) {
  if (v && !v->empty()) return v;
  return std::nullopt;
}

std::string_view trim_slash(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return s;
}

Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::internal, std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return ok();
}

}  // namespace

std::string_view to_string(Source source) {
  switch (source) {
    case Source::default_value: return "default";
    case Source::file: return "config file";
    case Source::env: return "environment";
    case Source::flag: return "flag";
  }
  return "default";
}

Result<fs::path> config_path(const EnvLookup& env) {
  if (auto xdg = non_empty(env("XDG_CONFIG_HOME")); xdg && fs::path(*xdg).is_absolute()) {
    return fs::path(*xdg) / "gpucloud" / "config.toml";
  }
  if (auto home = non_empty(env("HOME"))) {
    return fs::path(*home) / ".config" / "gpucloud" / "config.toml";
  }
  return fail(ErrorCode::invalid_argument,
              "cannot locate the config file: neither XDG_CONFIG_HOME nor HOME is set");
}

Result<CliConfig> load_config(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return CliConfig{};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(ErrorCode::internal,
                fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  CliConfig config;
  try {
    toml::table table = toml::parse(text.str(), path.string());
    if (auto v = table["endpoint"].value<std::string>()) config.endpoint = *v;
    if (auto v = table["token"].value<std::string>()) config.token = *v;
  } catch (const toml::parse_error& e) {
    return fail(ErrorCode::invalid_argument,
                fmt::format("{} is not valid TOML (line {}): {}", path.string(),
                            e.source().begin.line, e.description()));
  }
  return config;
}

Status save_config(const fs::path& path, const CliConfig& config) {
  std::error_code ec;
  fs::path dir = path.parent_path();
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return fail(ErrorCode::internal,
                  fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    }
    ::chmod(dir.c_str(), 0700);
  }
  // Keep whatever else the user put in the file.
  toml::table table;
  if (fs::exists(path, ec)) {
    try {
      table = toml::parse_file(path.string());
    } catch (const toml::parse_error&) {
      table = toml::table{};
    }
  }
  table.erase("endpoint");
  table.erase("token");
  if (!config.endpoint.empty()) table.insert("endpoint", config.endpoint);
  if (!config.token.empty()) table.insert("token", config.token);
  std::ostringstream text;
  text << "# gpucloud CLI settings (written by `gpucloud login`)\n" << table << "\n";

  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return fail(ErrorCode::internal,
                fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
  }
  ::fchmod(fd, 0600);  // in case the file existed with a wider mode
  auto written = write_all(fd, text.str());
  if (written && ::fsync(fd) != 0) {
    written = fail(ErrorCode::internal, std::strerror(errno));
  }
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal,
                fmt::format("cannot write {}: {}", tmp.string(), written.error().detail));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal,
                fmt::format("cannot replace {}: {}", path.string(), std::strerror(err)));
  }
  return ok();
}

bool same_endpoint(std::string_view a, std::string_view b) {
  return trim_slash(a) == trim_slash(b);
}

Settings resolve_settings(const CliConfig& file, const EnvLookup& env,
                          const std::optional<std::string>& flag_endpoint,
                          const std::optional<std::string>& flag_token) {
  Settings s;
  s.endpoint = std::string(kDefaultEndpoint);
  if (!file.endpoint.empty()) {
    s.endpoint = file.endpoint;
    s.endpoint_source = Source::file;
  }
  if (auto v = non_empty(env("GPUCLOUD_ENDPOINT"))) {
    s.endpoint = *v;
    s.endpoint_source = Source::env;
  }
  if (auto v = non_empty(flag_endpoint)) {
    s.endpoint = *v;
    s.endpoint_source = Source::flag;
  }
  while (s.endpoint.size() > 1 && s.endpoint.back() == '/') s.endpoint.pop_back();

  const std::string file_endpoint =
      file.endpoint.empty() ? std::string(kDefaultEndpoint) : file.endpoint;
  if (!file.token.empty() && same_endpoint(file_endpoint, s.endpoint)) {
    s.token = file.token;
    s.token_source = Source::file;
  }
  if (auto v = non_empty(env("GPUCLOUD_TOKEN"))) {
    s.token = *v;
    s.token_source = Source::env;
  }
  if (auto v = non_empty(flag_token)) {
    s.token = *v;
    s.token_source = Source::flag;
  }
  return s;
}

}  // namespace gpucloud::cli
