#include "agent/instance_connection.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include "core/offload.h"

namespace gpucloud::agent {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

std::string errno_text(int err) {
  char buffer[256];
  return std::string(strerror_r(err, buffer, sizeof buffer));
}

class InstanceConnection final : public TerminalSession {
 public:
  explicit InstanceConnection(tcp::socket socket) : socket_(std::move(socket)) {}
  ~InstanceConnection() override { close(); }

  asio::awaitable<Result<std::string>> read() override {
    if (!socket_.is_open()) co_return std::string();
    std::string chunk(kReadChunk, '\0');
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(chunk), asio::as_tuple(asio::use_awaitable));
    if (ec) {
      // The service's end (EOF), or ours (close): "" either way; a reset is the exit's error.
      if (ec != asio::error::eof && ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor)
        error_ = ec.message();
      co_return std::string();
    }
    chunk.resize(n);
    co_return chunk;
  }
  asio::awaitable<Status> write(std::string data) override {
    if (!socket_.is_open()) co_return fail(ErrorCode::unavailable, "the connection is closed");
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return fail(ErrorCode::unavailable, "the instance's service closed the connection: " + ec.message());
    co_return ok();
  }
  asio::awaitable<Status> resize(int, int) override { co_return ok(); }  // a connection has no window
  asio::awaitable<Result<int>> exit_code() override {
    if (!error_.empty()) co_return fail(ErrorCode::unavailable, "the instance's service broke off: " + error_);
    co_return 0;
  }
  void close() override {
    boost::system::error_code ignored;
    if (socket_.is_open()) socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  tcp::socket socket_;
  std::string error_;
};

// The socket's descriptor, or why there is none (run on a pool thread).
struct MadeSocket {
  int fd = -1;
  std::string error;     // "" when made
  bool own_namespace = false;  // fell back to the agent's namespace
};

MadeSocket make_socket(int pid) {
  MadeSocket made;
  auto in_instance = tcp_socket_in_namespace_of(pid);
  if (in_instance) {
    made.fd = *in_instance;
    return made;
  }
  if (in_instance.error().code != ErrorCode::forbidden) {
    made.error = in_instance.error().detail;
    return made;
  }
  auto own = tcp_socket_in_namespace_of(0);  // not allowed to enter it: the host's own view
  if (!own) {
    made.error = own.error().detail;
    return made;
  }
  made.fd = *own;
  made.own_namespace = true;
  return made;
}

}  // namespace

Result<int> tcp_socket_in_namespace_of(int pid) {
  if (pid <= 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(ErrorCode::unavailable, "socket: " + errno_text(errno));
    return fd;
  }
  const int target = ::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) return fail(ErrorCode::forbidden, "the instance's network namespace: " + errno_text(err));
    return fail(ErrorCode::unavailable, "the instance is not running (its network namespace: " + errno_text(err) + ")");
  }
  const int own = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (own < 0) {
    const int err = errno;
    ::close(target);
    return fail(ErrorCode::unavailable, "this thread's network namespace: " + errno_text(err));
  }
  Result<int> made = fail(ErrorCode::internal, "no socket");
  if (::setns(target, CLONE_NEWNET) != 0) {
    const int err = errno;
    made = fail(err == EPERM ? ErrorCode::forbidden : ErrorCode::unavailable,
                "entering the instance's network namespace: " + errno_text(err));
  } else {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int err = errno;
    // Back to where this thread was; a pool thread left in an instance's namespace would
    // make every later socket there.
    if (::setns(own, CLONE_NEWNET) != 0) {
      spdlog::critical(R"({{"event":"netns_return_failed","error":"{}"}})", errno_text(errno));
      std::abort();
    }
    if (fd < 0) made = fail(ErrorCode::unavailable, "socket in the instance's network namespace: " + errno_text(err));
    else made = fd;
  }
  ::close(own);
  ::close(target);
  return made;
}

asio::awaitable<Result<std::unique_ptr<TerminalSession>>> connect_to_instance(asio::any_io_executor loop,
                                                                              asio::thread_pool& pool, int pid,
                                                                              std::string ipv4, int port,
                                                                              std::chrono::milliseconds limit) {
  if (port < 1 || port > 65535) co_return fail(ErrorCode::invalid_argument, "port " + std::to_string(port) + " is not a TCP port");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address_v4(ipv4, ec);
  if (ec) co_return fail(ErrorCode::unavailable, "the instance's address '" + ipv4 + "' is not IPv4");
  auto job = [pid] { return make_socket(pid); };
  MadeSocket made = co_await offload<MadeSocket>(pool.get_executor(), std::move(job));
  if (made.fd < 0) co_return fail(ErrorCode::unavailable, std::move(made.error));
  if (made.own_namespace)
    spdlog::debug(R"({{"event":"instance_connection_own_namespace","pid":{}}})", pid);
  tcp::socket socket(loop);
  socket.assign(tcp::v4(), made.fd, ec);
  if (ec) {
    ::close(made.fd);
    co_return fail(ErrorCode::unavailable, "socket: " + ec.message());
  }
  asio::steady_timer give_up(loop, limit);
  boost::system::error_code connected, timed;
  auto which = co_await (socket.async_connect(tcp::endpoint(address, static_cast<unsigned short>(port)),
                                              asio::redirect_error(asio::use_awaitable, connected)) ||
                         give_up.async_wait(asio::redirect_error(asio::use_awaitable, timed)));
  if (which.index() == 1) connected = asio::error::timed_out;
  if (connected)
    co_return fail(ErrorCode::unavailable,
                   "nothing answers on port " + std::to_string(port) + " in the instance (" + connected.message() + ")");
  socket.set_option(tcp::no_delay(true), ec);
  co_return std::unique_ptr<TerminalSession>(std::make_unique<InstanceConnection>(std::move(socket)));
}

}  // namespace gpucloud::agent
