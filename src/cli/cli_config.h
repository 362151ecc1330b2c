#pragma once
// The CLI's own settings: $XDG_CONFIG_HOME/gpucloud/config.toml (fallback ~/.config),
// overridden by GPUCLOUD_ENDPOINT / GPUCLOUD_TOKEN, then by --endpoint / --token.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::cli {

inline constexpr std::string_view kDefaultEndpoint = "http://127.0.0.1:8080";

using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// What the file holds. Empty strings mean "not set".
struct CliConfig {
  std::string endpoint;
  std::string token;
};

// $XDG_CONFIG_HOME/gpucloud/config.toml, else $HOME/.config/gpucloud/config.toml.
Result<std::filesystem::path> config_path(const EnvLookup& env);

// A missing file is an empty config; a malformed one is an error naming the file.
Result<CliConfig> load_config(const std::filesystem::path& path);

// Writes atomically (temporary file + rename) with mode 0600, in a directory created 0700.
// Keys of the file other than endpoint/token are kept.
Status save_config(const std::filesystem::path& path, const CliConfig& config);

enum class Source { default_value, file, env, flag };
std::string_view to_string(Source source);

struct Settings {
  std::string endpoint;
  Source endpoint_source = Source::default_value;
  std::string token;  // empty: none
  Source token_source = Source::default_value;
};

// Precedence: flag > env > file > default, each key on its own. Empty values count as unset.
// The file's token belongs to the file's endpoint: it is not sent when the endpoint is
// overridden to another server (that would hand the credential to a different host).
Settings resolve_settings(const CliConfig& file, const EnvLookup& env,
                          const std::optional<std::string>& flag_endpoint,
                          const std::optional<std::string>& flag_token);

// Compares endpoints ignoring a trailing slash.
bool same_endpoint(std::string_view a, std::string_view b);

}  // namespace gpucloud::cli
