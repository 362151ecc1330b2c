#include "cli/ssh_command.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "cli/output.h"

namespace gpucloud::cli {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

bool all_of_chars(std::string_view s, bool (*ok)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), ok);
}

bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool id_char(char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; }
// Host names, IPv4 and IPv6 addresses (no brackets, no zone with odd characters).
bool host_char(char c) { return alnum(c) || c == '-' || c == '_' || c == '.' || c == ':'; }
bool user_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
bool key_type_char(char c) { return alnum(c) || c == '-' || c == '_' || c == '.' || c == '@'; }
bool base64_char(char c) { return alnum(c) || c == '+' || c == '/' || c == '='; }
// Instance names are [a-z][a-z0-9-]{0,62}; anything else is not used as a Host pattern.
bool host_pattern_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

// "TYPE BASE64 [comment]" → "TYPE BASE64", or nullopt when it is not a public key line.
std::optional<std::string> normalise_host_key(std::string_view key) {
  auto skip_space = [&] {
    while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
  };
  auto word = [&] {
    skip_space();
    auto end = key.find_first_of(" \t");
    std::string_view w = key.substr(0, end);
    key.remove_prefix(w.size());
    return w;
  };
  std::string_view type = word();
  std::string_view blob = word();
  if (!all_of_chars(type, key_type_char) || !all_of_chars(blob, base64_char)) return std::nullopt;
  // A comment may follow, but nothing that could start another known_hosts line.
  if (key.find_first_of("\r\n") != std::string_view::npos) return std::nullopt;
  return fmt::format("{} {}", type, blob);
}

std::string io_error(std::string_view what, const fs::path& path) {
  return fmt::format("cannot {} {}: {}", what, path.string(), std::strerror(errno));
}

Status write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::internal, io_error("write", path));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return ok();
}

}  // namespace

Expected<SshTarget> ssh_target(const json::value& instance) {
  SshTarget t;
  t.id = text(instance, "id", "");
  t.name = text(instance, "name", t.id);
  const std::string& name = t.name;
  if (!all_of_chars(t.id, id_char)) {
    return refused(fmt::format("instance {} has no usable id in the server's answer", name));
  }
  const std::string state = text(instance, "state", "unknown");
  if (state != "running") {
    std::string hint = state == "stopped"
                           ? fmt::format(" (start it with `gpucloud start {}`)", name)
                       : state == "creating" || state == "starting" || state == "restarting"
                           ? " (wait until it runs)"
                           : "";
    return refused(fmt::format("instance {} is {}: ssh needs it running{}", name, state, hint));
  }
  const json::value* ssh = member(instance, "ssh");
  if (ssh == nullptr || !ssh->is_object()) {
    return refused(fmt::format(
        "instance {} has no SSH access (its image has no sshd, or port 22 is not exposed)",
        name));
  }
  const json::value* key = member(*ssh, "host_key");
  if (key == nullptr || !key->is_string() || key->get_string().empty()) {
    return refused(fmt::format(
        "instance {} has no SSH host key yet (sshd is still starting): try again in a few "
        "seconds",
        name));
  }
  auto normalised = normalise_host_key(std::string_view(key->get_string()));
  if (!normalised) {
    return refused(fmt::format("instance {} reports a malformed SSH host key", name));
  }
  t.host_key = *normalised;
  t.host = text(*ssh, "host", "");
  if (!all_of_chars(t.host, host_char) || t.host.front() == '-') {
    return refused(fmt::format("instance {} reports no usable SSH host (\"{}\")", name, t.host));
  }
  auto port = integer(*ssh, "port");
  if (!port || *port < 1 || *port > 65535) {
    return refused(fmt::format("instance {} reports no usable SSH port", name));
  }
  t.port = static_cast<int>(*port);
  t.user = text(*ssh, "user", "root");
  if (!all_of_chars(t.user, user_char) || t.user.front() == '-' || t.user.size() > 32) {
    return refused(fmt::format("instance {} reports an unusable SSH user", name));
  }
  return t;
}

std::string host_key_alias(std::string_view instance_id) {
  return "gpucloud-" + std::string(instance_id);
}

Result<fs::path> known_hosts_path(const EnvLookup& env) {
  auto config = config_path(env);
  if (!config) return tl::unexpected(config.error());
  return config->parent_path() / "known_hosts";
}

std::string update_known_hosts(std::string_view current,
                               const std::vector<std::pair<std::string, std::string>>& entries) {
  // The last entry for an alias wins.
  std::vector<std::pair<std::string, std::string>> unique;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    bool seen = std::any_of(unique.begin(), unique.end(),
                            [&](const auto& e) { return e.first == it->first; });
    if (!seen) unique.push_back(*it);
  }
  std::reverse(unique.begin(), unique.end());
  auto is_ours = [&](std::string_view hosts) {
    while (!hosts.empty()) {
      std::string_view pattern = hosts.substr(0, hosts.find(','));
      hosts.remove_prefix(std::min(hosts.size(), pattern.size() + 1));
      for (const auto& e : unique) {
        if (pattern == e.first) return true;
      }
    }
    return false;
  };

  std::string out;
  while (!current.empty()) {
    const std::size_t nl = current.find('\n');
    std::string_view line = current.substr(0, nl);
    current.remove_prefix(nl == std::string_view::npos ? current.size() : nl + 1);
    // Fields: [@marker] hosts keytype key [comment].
    std::string_view rest = line;
    auto next_field = [&] {
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
      std::string_view f = rest.substr(0, rest.find_first_of(" \t"));
      rest.remove_prefix(f.size());
      return f;
    };
    std::string_view first = next_field();
    bool keep = true;
    if (!first.empty() && first.front() != '#') {
      std::string_view hosts = first.front() == '@' ? next_field() : first;
      keep = !is_ours(hosts);
    }
    if (keep) {
      out.append(line);
      out.push_back('\n');
    }
  }
  for (const auto& [alias, key] : unique) out += fmt::format("{} {}\n", alias, key);
  return out;
}

Status write_known_hosts(const fs::path& path,
                         const std::vector<std::pair<std::string, std::string>>& entries) {
  std::error_code ec;
  const fs::path dir = path.parent_path();
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return fail(ErrorCode::internal,
                  fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    }
    ::chmod(dir.c_str(), 0700);
  }

  fs::path lock_path = path;
  lock_path += ".lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0) return fail(ErrorCode::internal, io_error("open", lock_path));
  struct LockGuard {
    int fd;
    ~LockGuard() { ::close(fd); }  // closing releases the flock
  } guard{lock};
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) return fail(ErrorCode::internal, io_error("lock", lock_path));
  }

  std::string current;
  if (fs::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return fail(ErrorCode::internal, io_error("read", path));
    current.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string updated = update_known_hosts(current, entries);

  std::string tmpl = path.string() + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());  // created 0600
  if (fd < 0) return fail(ErrorCode::internal, io_error("create a file beside", path));
  const fs::path tmp = tmpl;
  ::fchmod(fd, 0600);
  Status written = write_all(fd, updated, tmp);
  if (written && ::fsync(fd) != 0) {
    written = fail(ErrorCode::internal, io_error("sync", tmp));
  }
  ::close(fd);
  if (written && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written = fail(ErrorCode::internal, io_error("replace", path));
  }
  if (!written) ::unlink(tmp.c_str());
  return written;
}

Result<std::string> ssh_path_value(const fs::path& path) {
  const std::string s = path.string();
  std::string out;
  bool space = false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || u < 0x20 || u == 0x7f) {
      return fail(ErrorCode::invalid_argument,
                  fmt::format("cannot hand the path {} to ssh (it holds a quote or a control "
                              "character)",
                              s));
    }
    if (c == ' ') space = true;
    if (c == '%') out.push_back('%');
    out.push_back(c);
  }
  if (out.empty()) return fail(ErrorCode::invalid_argument, "empty path");
  return space ? "\"" + out + "\"" : out;
}

Result<std::vector<std::string>> ssh_argv(const SshTarget& target, const fs::path& known_hosts,
                                          const std::optional<std::string>& identity,
                                          const std::vector<std::string>& command) {
  auto file = ssh_path_value(known_hosts);
  if (!file) return tl::unexpected(file.error());
  std::vector<std::string> argv{"ssh",
                                "-p",
                                std::to_string(target.port),
                                "-o",
                                "HostKeyAlias=" + host_key_alias(target.id),
                                "-o",
                                "UserKnownHostsFile=" + *file,
                                "-o",
                                "StrictHostKeyChecking=yes"};
  if (identity) {
    if (identity->empty()) return fail(ErrorCode::invalid_argument, "--identity: empty path");
    argv.push_back("-i");
    argv.push_back(*identity);
  }
  argv.push_back(target.user + "@" + target.host);
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

Result<std::string> ssh_config_block(const SshTarget& target, const fs::path& known_hosts,
                                     const std::optional<std::string>& identity) {
  auto file = ssh_path_value(known_hosts);
  if (!file) return tl::unexpected(file.error());
  const std::string alias = host_key_alias(target.id);
  const bool usable_name = all_of_chars(target.name, host_pattern_char);
  std::string block = fmt::format(
      "Host {}\n"
      "  HostName {}\n"
      "  Port {}\n"
      "  User {}\n"
      "  HostKeyAlias {}\n"
      "  UserKnownHostsFile {}\n"
      "  StrictHostKeyChecking yes\n",
      usable_name ? target.name : alias, target.host, target.port, target.user, alias, *file);
  if (identity) {
    auto id_file = ssh_path_value(*identity);
    if (!id_file) return tl::unexpected(id_file.error());
    block += fmt::format("  IdentityFile {}\n", *id_file);
  }
  return block;
}

Result<int> exec_program(const std::vector<std::string>& argv) {
  if (argv.empty()) return fail(ErrorCode::internal, "nothing to run");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  return fail(ErrorCode::unavailable,
              fmt::format("cannot run {}: {}", argv[0], std::strerror(errno)));
}

}  // namespace gpucloud::cli
