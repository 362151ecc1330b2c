#include "agent/firewall/nftables.h"

#include "core/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

namespace gpucloud::agent::firewall {

namespace {

using gpucloud::Fd;
using gpucloud::ProcessResult;
using gpucloud::errno_text;
using gpucloud::run_process;
constexpr const char* kRouteLocalnet = "/proc/sys/net/ipv4/conf/all/route_localnet";

// The executable `name` from PATH, then the sbin directories (an agent started with a
// user's PATH may lack them).
std::optional<std::string> find_executable(const std::string& name) {
  std::string dirs;
  if (const char* path = std::getenv("PATH")) dirs = path;
  dirs += ":/usr/sbin:/sbin:/usr/local/sbin:/usr/bin:/bin";
  std::stringstream in(dirs);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// kHostLockPath held exclusively for the object's lifetime (best effort: without the file,
// e.g. when not root, nft fails anyway with a clearer message).
class HostLock {
 public:
  HostLock() : fd_(::open(kHostLockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (fd_.get() < 0) return;
    while (::flock(fd_.get(), LOCK_EX) != 0 && errno == EINTR) {
    }
  }

 private:
  Fd fd_;  // closing it releases the lock
};

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<std::string> nft_path() {
  if (auto path = find_executable("nft")) return *path;
  return fail(ErrorCode::unavailable, "nft not found (apt-get install nftables)");
}

// Runs `nft -f -` with `script`.
Status nft_script(const std::string& script, const std::string& what) {
  auto nft = nft_path();
  if (!nft) return fail(nft.error());
  auto run = run_process({*nft, "-f", "-"}, script);
  if (!run) return fail(run.error());
  if (run->exit_code != 0) {
    return fail(ErrorCode::internal, what + ": nft -f failed (exit " +
                                         std::to_string(run->exit_code) + "): " + trimmed(run->err));
  }
  return ok();
}

Result<std::string> read_sysctl(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  if (!(in >> value)) return fail(ErrorCode::unavailable, "cannot read " + path);
  return value;
}

Status write_sysctl(const std::string& path, const std::string& value) {
  auto current = read_sysctl(path);
  if (current && *current == value) return ok();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::unavailable, errno_text(("open " + path).c_str()));
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    errno = saved;
    return fail(ErrorCode::unavailable, errno_text(("write " + value + " to " + path).c_str()));
  }
  return ok();
}

std::vector<std::string> docker_user_rule_spec(const std::string& table) {
  char mark[32];
  std::snprintf(mark, sizeof mark, "0x%x/0x%x", kAllowedConnmark, kAllowedConnmark);
  return {"-m", "connmark", "--mark", mark, "-m", "comment", "--comment", "gpucloud:" + table,
          "-j", "ACCEPT"};
}

// `iptables -w 5 ARGS...`; nullopt when there is no iptables binary.
Result<std::optional<ProcessResult>> iptables(const std::vector<std::string>& args) {
  const auto path = find_executable("iptables");
  if (!path) return std::optional<ProcessResult>();
  std::vector<std::string> argv{*path, "-w", "5"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto run = run_process(argv, "");
  if (!run) return fail(run.error());
  return std::optional<ProcessResult>(std::move(*run));
}

// Whether Docker's DOCKER-USER chain exists (in whichever backend iptables uses). iptables
// exits 1 for a missing chain; other failures (4: the xtables lock stayed busy) are errors,
// not a reason to skip the rule.
Result<bool> docker_user_chain_exists() {
  auto listed = iptables({"-S", "DOCKER-USER"});
  if (!listed) return fail(listed.error());
  if (!listed->has_value()) return false;
  const auto& run = **listed;
  if (run.exit_code == 0 || run.exit_code == 1) return run.exit_code == 0;
  return fail(ErrorCode::unavailable, "iptables -S DOCKER-USER failed (exit " +
                                          std::to_string(run.exit_code) + "): " + trimmed(run.err));
}

}  // namespace

NftablesFirewall::NftablesFirewall(std::string table_name) : table_name_(std::move(table_name)) {}

Status NftablesFirewall::ensure_sysctls() {
  if (auto s = write_sysctl("/proc/sys/net/ipv4/ip_forward", "1"); !s) return s;
  return write_sysctl(kRouteLocalnet, "1");
}

Status NftablesFirewall::ensure_docker_user_rule() {
  const auto spec = docker_user_rule_spec(table_name_);
  std::vector<std::string> check{"-C", "DOCKER-USER"};
  check.insert(check.end(), spec.begin(), spec.end());
  // The rule is normally there already: one iptables run says so (each run costs a fork and
  // a read of the whole ruleset, the slowest part of an apply). Only when it is not do we
  // look whether the chain exists at all (-C exits 1 both for a missing rule and chain).
  auto checked = iptables(check);
  if (!checked) return fail(checked.error());
  if (!checked->has_value()) return ok();  // no iptables: no DOCKER-USER chain to mind
  if ((*checked)->exit_code == 0) return ok();
  auto exists = docker_user_chain_exists();
  if (!exists) return fail(exists.error());
  if (!*exists) return ok();
  std::vector<std::string> insert{"-I", "DOCKER-USER", "1"};
  insert.insert(insert.end(), spec.begin(), spec.end());
  auto inserted = iptables(insert);
  if (!inserted) return fail(inserted.error());
  if ((*inserted)->exit_code != 0) {
    return fail(ErrorCode::internal,
                "iptables -I DOCKER-USER failed: " + trimmed((*inserted)->err));
  }
  return ok();
}

Status NftablesFirewall::remove_docker_user_rule() {
  auto exists = docker_user_chain_exists();
  if (!exists) return fail(exists.error());
  if (!*exists) return ok();
  std::vector<std::string> del{"-D", "DOCKER-USER"};
  const auto spec = docker_user_rule_spec(table_name_);
  del.insert(del.end(), spec.begin(), spec.end());
  // Every copy (two agents racing on an empty chain could both have inserted one).
  for (int i = 0; i < 64; ++i) {
    auto deleted = iptables(del);
    if (!deleted) return fail(deleted.error());
    if ((*deleted)->exit_code != 0) break;
  }
  return ok();
}

Status NftablesFirewall::apply(const std::vector<PublishedPort>& ports, const HostGuard& guard) {
  auto script = render_ruleset(table_name_, ports, guard);
  if (!script) return fail(script.error());
  std::lock_guard lock(mutex_);
  HostLock host_lock;
  if (auto s = ensure_sysctls(); !s) return s;
  // Before the table: the DOCKER-USER rule accepts only what the table marks, so on its own it
  // changes nothing, and a failure here leaves the previous rules in place.
  if (auto s = ensure_docker_user_rule(); !s) return s;
  return nft_script(*script, "applying table ip " + table_name_);
}

Status NftablesFirewall::remove_table() {
  if (!is_valid_table_name(table_name_)) {
    return fail(ErrorCode::invalid_argument, "invalid nftables table name \"" + table_name_ + "\"");
  }
  std::lock_guard lock(mutex_);
  HostLock host_lock;
  // Declaring the table first makes the delete succeed when it is already gone, in one
  // transaction.
  const std::string t = "table ip " + table_name_;
  if (auto s = nft_script(t + " {}\ndelete " + t + "\n", "removing " + t); !s) return s;
  if (auto s = remove_docker_user_rule(); !s) return s;
  return release_route_localnet();
}

Status NftablesFirewall::release_route_localnet() {
  auto nft = nft_path();
  if (!nft) return fail(nft.error());
  auto listed = run_process({*nft, "list", "tables", "ip"}, "");
  if (!listed) return fail(listed.error());
  if (listed->exit_code != 0) {
    return fail(ErrorCode::internal, "nft list tables failed: " + trimmed(listed->err));
  }
  std::istringstream lines(listed->out);
  for (std::string line; std::getline(lines, line);) {
    // "table ip NAME": another gpucloud table still relies on the setting (and guards it).
    constexpr std::string_view prefix = "table ip ";
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string name = line.substr(prefix.size());
    if (name != table_name_ && is_valid_table_name(name)) return ok();
  }
  return write_sysctl(kRouteLocalnet, "0");
}

Result<std::string> NftablesFirewall::current() {
  if (!is_valid_table_name(table_name_)) {
    return fail(ErrorCode::invalid_argument, "invalid nftables table name \"" + table_name_ + "\"");
  }
  auto nft = nft_path();
  if (!nft) return fail(nft.error());
  auto run = run_process({*nft, "list", "table", "ip", table_name_}, "");
  if (!run) return fail(run.error());
  if (run->exit_code != 0) {
    if (run->err.find("No such file or directory") != std::string::npos) {
      return fail(ErrorCode::not_found, "nftables table ip " + table_name_ + " does not exist");
    }
    return fail(ErrorCode::internal, "nft list table ip " + table_name_ + " failed: " + trimmed(run->err));
  }
  return run->out;
}

}  // namespace gpucloud::agent::firewall
