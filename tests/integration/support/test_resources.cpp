#include "support/test_resources.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpucloud::testing {
namespace fs = std::filesystem;
namespace {

constexpr int kFirstPort = 20000;
constexpr int kLastPort = 32599;  // the kernel hands out 32768..60999 for bound port 0

std::string alloc_subdir(const std::string& name) {
  auto dir = fs::path(kAllocDir) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Other checkouts (other users) share the directory.
  fs::permissions(kAllocDir, fs::perms::all | fs::perms::sticky_bit, ec);
  fs::permissions(dir, fs::perms::all | fs::perms::sticky_bit, ec);
  return dir.string();
}

// Opens PATH and takes its lock without waiting; -1 when another live process holds it.
int try_lock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string cleanup_script() { return std::string(GPUCLOUD_SOURCE_DIR) + "/tests/integration/support/cleanup.py"; }

// A test process that died (ctest's time limit, a kill) leaves what its lease lists — its
// published ports among them, DNATed by its nftables table to containers that are gone — and
// frees its port block: the next process to take a block sweeps such leases first, so a
// reused block's ports reach this test's own daemon ("No route to host" otherwise). Only
// leases no live process holds are touched; the check is one flock try per lease file.
void sweep_dead_leases() {
  const std::string dir = alloc_subdir("leases");
  std::error_code ec;
  bool dead = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    dead = ::flock(fd, LOCK_EX | LOCK_NB) == 0;  // our own leases are locked by our other descriptor
    ::close(fd);
    if (dead) break;
  }
  if (!dead) return;
  const std::string cmd = "python3 " + shell_quote(cleanup_script()) + " sweep " + shell_quote(dir) + " >/dev/null 2>&1";
  (void)std::system(cmd.c_str());
}

}  // namespace

int port_block() {
  sweep_dead_leases();
  const std::string dir = alloc_subdir("ports");
  const int blocks = (kLastPort - kFirstPort + 1) / kPortBlockSize;
  // Start at a random block so parallel processes rarely contend for the same file.
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  const int start = static_cast<int>(rng() % static_cast<unsigned>(blocks));
  for (int i = 0; i < blocks; ++i) {
    const int block = (start + i) % blocks;
    const int base = kFirstPort + block * kPortBlockSize;
    // The descriptor stays open (and locked) until the process exits.
    if (try_lock(dir + "/" + std::to_string(base)) >= 0) return base;
  }
  throw std::runtime_error("no free test port block under " + dir);
}

std::string port_range(int count) {
  if (count > kPortBlockSize) throw std::invalid_argument("port_range: at most one block");
  const int base = port_block();
  return std::to_string(base) + "-" + std::to_string(base + count - 1);
}

std::string subnet_prefix() {
  const std::string dir = alloc_subdir("subnets");
  // What the host routes already (docker's own bridges, other networks): skipped.
  std::string used;
  if (FILE* p = ::popen("ip -4 -o addr show 2>/dev/null; ip -4 route show table all 2>/dev/null", "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) used.append(buf, n);
    ::pclose(p);
  }
  constexpr int kFirst = 100 * 256, kCount = 100 * 256;  // 10.100.0 .. 10.199.255
  static std::mt19937 rng(std::random_device{}() ^ (static_cast<unsigned>(::getpid()) << 8));
  const int start = static_cast<int>(rng() % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int n = kFirst + (start + i) % kCount;
    const std::string prefix = "10." + std::to_string(n / 256) + "." + std::to_string(n % 256);
    if (used.find(" " + prefix + ".") != std::string::npos || used.find("\n" + prefix + ".") != std::string::npos ||
        used.rfind(prefix + ".", 0) == 0)
      continue;
    // The descriptor stays open (and locked) until the process exits.
    if (try_lock(dir + "/" + prefix) >= 0) return prefix;
  }
  throw std::runtime_error("no free test subnet under " + dir);
}

std::string unique_name(const std::string& prefix, std::size_t max_len) {
  static std::atomic<int> counter{0};
  static std::mt19937_64 rng(std::random_device{}());
  std::string name = prefix + std::to_string(::getpid() % 100000) + "x" + std::to_string(counter++);
  while (name.size() < max_len && name.size() < prefix.size() + 14) name += static_cast<char>('a' + rng() % 26);
  if (name.size() > max_len) name = name.substr(name.size() - max_len);
  return name;
}

ResourceLease::ResourceLease() {
  const std::string dir = alloc_subdir("leases");
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    path_ = dir + "/" + unique_name("lease-", 40);
    fd_ = try_lock(path_);
    // A sweep may have taken the new empty file for a dead one and unlinked it between our
    // open and our flock: then the locked file is not the one at path_. Try another name.
    struct stat ours {}, named {};
    if (fd_ >= 0 && (::fstat(fd_, &ours) != 0 || ::stat(path_.c_str(), &named) != 0 || ours.st_ino != named.st_ino)) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  if (fd_ < 0) throw std::runtime_error("cannot create a resource lease under " + dir);
}

ResourceLease::~ResourceLease() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);  // drops the lock
}

void ResourceLease::add(const std::string& kind, const std::string& value) {
  const std::string line = kind + " " + value + "\n";
  // O_APPEND is not set: seek to the end so lines never overwrite each other.
  ::lseek(fd_, 0, SEEK_END);
  for (std::size_t done = 0; done < line.size();) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd_);
}

void ResourceLease::clean() {
  // Our own lease: cleanup.py must not try to lock it (we hold the lock).
  std::string cmd = "python3 " + shell_quote(cleanup_script()) + " release " + shell_quote(path_) + " >/dev/null 2>&1";
  (void)std::system(cmd.c_str());
}

}  // namespace gpucloud::testing
