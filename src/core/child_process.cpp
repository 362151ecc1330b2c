#include "core/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

namespace gpucloud {

namespace {

using Clock = std::chrono::steady_clock;

// Moves a descriptor out of 0-2 (an agent started with those closed gets them back from
// memfd_create or pipe2), so the child's dup2 onto 0, 1, 2 cannot clobber one another.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

}  // namespace

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// stdin is a memfd: nft reads "-f -" by opening /dev/stdin, which works for a memfd and
// never blocks us.
Result<ProcessResult> run_process(const std::vector<std::string>& argv, std::string_view input,
                                  std::chrono::milliseconds timeout,
                                  const std::vector<std::string>& environment) {
  Fd in(above_stdio(::memfd_create("gpucloud-child-stdin", MFD_CLOEXEC)));
  if (in.get() < 0) return fail(ErrorCode::unavailable, errno_text("memfd_create"));
  for (std::size_t done = 0; done < input.size();) {
    const ssize_t n = ::write(in.get(), input.data() + done, input.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(ErrorCode::unavailable, errno_text("write to memfd"));
    done += static_cast<std::size_t>(n);
  }
  if (::lseek(in.get(), 0, SEEK_SET) < 0) return fail(ErrorCode::unavailable, errno_text("lseek"));

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(ErrorCode::unavailable, errno_text("pipe2"));
  Fd out_r(above_stdio(out_pipe[0])), out_w(above_stdio(out_pipe[1]));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return fail(ErrorCode::unavailable, errno_text("pipe2"));
  Fd err_r(above_stdio(err_pipe[0])), err_w(above_stdio(err_pipe[1]));
  if (out_r.get() < 0 || out_w.get() < 0 || err_r.get() < 0 || err_w.get() < 0) {
    return fail(ErrorCode::unavailable, errno_text("fcntl(F_DUPFD_CLOEXEC)"));
  }

  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (const auto& e : environment) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) return fail(ErrorCode::unavailable, errno_text("fork"));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::dup2(in.get(), 0) < 0 || ::dup2(out_w.get(), 1) < 0 || ::dup2(err_w.get(), 2) < 0) {
      ::_exit(127);
    }
    ::close_range(3, ~0u, 0);  // whatever else the agent has open without CLOEXEC
    ::execve(args[0], args.data(), env.data());  // never the daemon's `environ`
    ::_exit(127);
  }
  out_w.reset();
  err_w.reset();
  in.reset();

  ProcessResult result;
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  int poll_errno = 0;
  char buf[4096];
  while (out_r.get() >= 0 || err_r.get() >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      poll_errno = errno;
      break;
    }
    Fd* pipes[2] = {&out_r, &err_r};
    std::string* sinks[2] = {&result.out, &result.err};
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        pipes[i]->reset();
      }
    }
  }
  if (timed_out || poll_errno != 0) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (poll_errno != 0) {
    errno = poll_errno;
    return fail(ErrorCode::unavailable, errno_text(("poll on " + argv[0]).c_str()));
  }
  if (timed_out) {
    return fail(ErrorCode::unavailable, argv[0] + " did not finish within " +
                                            std::to_string(timeout.count()) + " ms");
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 127 && result.err.empty()) {
      return fail(ErrorCode::unavailable, "could not execute " + argv[0]);
    }
  }
  return result;
}

}  // namespace gpucloud
