#pragma once
// Running a helper program (nft, iptables, ssh-keygen) from the agent: fork + execve with
// stdin from memory and stdout/stderr captured, killed past a deadline. Blocking: call it
// only from a thread that may block (the firewall's, a blocking pool), never the event loop.
//
// The child gets an explicit minimal environment (kChildEnvironment), never the daemon's:
// gpucloudd's environment holds GPUCLOUD_ADMIN_PASSWORD and whatever else its operator set.
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace gpucloud {

inline constexpr const char* kChildPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

// "what: strerror(errno)".
std::string errno_text(const char* what);

// Runs `argv` (argv[0] an absolute path) with `input` as its stdin and only
// `environment` (KEY=VALUE entries; default: PATH alone) as its environment. An exit code
// is a result, not an error; not being able to run it, or a timeout, is `unavailable`.
Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::string_view input,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(15000),
                                  const std::vector<std::string>& environment = {kChildPath});

}  // namespace gpucloud
