#pragma once
// `gpucloud ssh` and `gpucloud ssh-config`: OpenSSH pinned to the instance's host key.
// The key the platform reports goes into the CLI's own known_hosts file
// ($XDG_CONFIG_HOME/gpucloud/known_hosts) under the alias "gpucloud-<instance id>", and ssh
// runs with HostKeyAlias=<alias> and StrictHostKeyChecking=yes: a server presenting another
// key is refused by ssh itself (exit 255), whatever host and port it is reached at.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "cli/app.h"
#include "cli/cli_config.h"
#include "core/result.h"

namespace gpucloud::cli {

// What ssh needs from an instance object, checked.
struct SshTarget {
  std::string id;
  std::string name;
  std::string host;
  int port = 22;
  std::string user = "root";
  std::string host_key;  // "TYPE BASE64" (any comment dropped)
};

// Refuses (exit 1, a sentence naming the instance) when the instance is not running, has no
// SSH access (ssh null), has no host key yet, or reports values unsafe to hand to ssh.
Expected<SshTarget> ssh_target(const boost::json::value& instance);

// "gpucloud-<instance id>".
std::string host_key_alias(std::string_view instance_id);

// $XDG_CONFIG_HOME/gpucloud/known_hosts, else ~/.config/gpucloud/known_hosts (beside
// config.toml).
Result<std::filesystem::path> known_hosts_path(const EnvLookup& env);

// `current` (a known_hosts file's text) with each alias's lines replaced by one
// "ALIAS KEY" line; other lines are kept as they are, in their order.
std::string update_known_hosts(std::string_view current,
                               const std::vector<std::pair<std::string, std::string>>& entries);

// Reads, updates and atomically rewrites the file (mode 0600, its directory created 0700),
// under an flock so concurrent invocations do not lose each other's lines.
Status write_known_hosts(const std::filesystem::path& path,
                         const std::vector<std::pair<std::string, std::string>>& entries);

// A path as an ssh option value: `%` doubled (ssh expands %-tokens in these options) and
// double-quoted when it holds whitespace. Paths with `"` or control characters are refused.
Result<std::string> ssh_path_value(const std::filesystem::path& path);

// ssh -p PORT -o HostKeyAlias=ALIAS -o UserKnownHostsFile=FILE -o StrictHostKeyChecking=yes
//     [-i IDENTITY] USER@HOST [COMMAND...]
Result<std::vector<std::string>> ssh_argv(const SshTarget& target,
                                          const std::filesystem::path& known_hosts,
                                          const std::optional<std::string>& identity,
                                          const std::vector<std::string>& command);

// One `Host` block for ~/.ssh/config (ends with a newline).
Result<std::string> ssh_config_block(const SshTarget& target,
                                     const std::filesystem::path& known_hosts,
                                     const std::optional<std::string>& identity);

// The real Deps::exec: execvp(argv[0], argv). Returns only when the program could not be
// started (an `unavailable` error naming it).
Result<int> exec_program(const std::vector<std::string>& argv);

}  // namespace gpucloud::cli
