// A connection into another network namespace (agent/instance_connection.h), as the agent
// makes one into an instance's: a child process in a namespace of its own serves on its own
// 127.0.0.1, which this process's namespace does not have; the connection reaches it, and
// the pool thread that entered the namespace is back in the agent's afterwards.
#include "agent/instance_connection.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "support/capabilities.h"

namespace gpucloud::testing {
namespace {
namespace asio = boost::asio;
using namespace std::chrono_literals;

// A child in a new network namespace, serving "inside-<pid>" to one connection on
// 127.0.0.1:`port` there. Its pid once it listens, or -1.
pid_t serve_in_new_namespace(int port) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(2);
    const int ctl = ::socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq lo {};
    std::strncpy(lo.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(ctl, SIOCGIFFLAGS, &lo) != 0) ::_exit(3);
    lo.ifr_flags = static_cast<short>(lo.ifr_flags | IFF_UP);
    if (::ioctl(ctl, SIOCSIFFLAGS, &lo) != 0) ::_exit(4);
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(static_cast<std::uint16_t>(port));
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 || ::listen(listener, 4) != 0) ::_exit(5);
    (void)!::write(ready[1], "r", 1);
    const int client = ::accept(listener, nullptr, nullptr);
    char text[64];
    const int n = std::snprintf(text, sizeof text, "inside-%d", static_cast<int>(::getpid()));
    (void)!::write(client, text, static_cast<std::size_t>(n));
    ::close(client);
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  const bool listening = pid > 0 && ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (pid > 0 && !listening) ::waitpid(pid, nullptr, 0);
  return listening ? pid : -1;
}

template <class T>
T run_on(asio::io_context& io, asio::awaitable<T> work) {
  std::optional<T> got;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr e, T r) {
    if (e) got.emplace(fail(ErrorCode::internal, "threw"));
    else got.emplace(std::move(r));
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!got && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(5ms);
  }
  return got ? std::move(*got) : T(fail(ErrorCode::internal, "did not finish"));
}

TEST(InstanceConnectionTest, ROOT_AConnectionIsMadeInsideTheProcesssNetworkNamespace) {
  GPUCLOUD_NEED("root", have_root(), "needs root (entering a network namespace)");
  // A port bound (not listening) here for the whole test: nothing in this namespace can
  // answer on it, so only the child's namespace can.
  asio::io_context io;
  asio::ip::tcp::socket reserved(io, asio::ip::tcp::v4());
  reserved.bind(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const int port = reserved.local_endpoint().port();
  const pid_t child = serve_in_new_namespace(port);
  ASSERT_GT(child, 0) << "could not make a namespace";
  asio::thread_pool pool(1);
  auto session = run_on(io, agent::connect_to_instance(io.get_executor(), pool, child, "127.0.0.1", port, 3s));
  ASSERT_TRUE(session) << session.error().detail;
  std::string seen;
  for (;;) {
    auto bytes = run_on(io, (*session)->read());
    ASSERT_TRUE(bytes) << bytes.error().detail;
    if (bytes->empty()) break;
    seen += *bytes;
  }
  EXPECT_EQ(seen, "inside-" + std::to_string(child));
  int status = -1;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // The same pool thread makes the next socket in this process's namespace again: a listener
  // here (the child's namespace has none) answers it.
  asio::ip::tcp::acceptor here(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto back = run_on(io, agent::connect_to_instance(io.get_executor(), pool, static_cast<int>(::getpid()), "127.0.0.1",
                                                    here.local_endpoint().port(), 3s));
  EXPECT_TRUE(back) << back.error().detail;
  // And nothing in this namespace answers on the child's port.
  auto outside = run_on(io, agent::connect_to_instance(io.get_executor(), pool, 0, "127.0.0.1", port, 3s));
  EXPECT_FALSE(outside) << "the child's port is not in this namespace";
}

}  // namespace
}  // namespace gpucloud::testing
