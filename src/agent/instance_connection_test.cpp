// Connections into instances (agent/instance_connection.h) against real sockets in this
// process's own network namespace: bytes both ways, the service's end, nothing listening, a
// process that is gone. Entering another namespace is tested with root in
// tests/integration/instance_connection_test.cpp.
#include "agent/instance_connection.h"

#include <unistd.h>

#include <optional>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

class InstanceConnectionTest : public ::testing::Test {
 protected:
  template <class T>
  T run(asio::awaitable<T> work) {
    std::optional<T> got;
    asio::co_spawn(io_, std::move(work), [&](std::exception_ptr e, T r) {
      if (e) got.emplace(fail(ErrorCode::internal, "threw"));
      else got.emplace(std::move(r));
    });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!got && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(5ms);
    }
    EXPECT_TRUE(got.has_value()) << "did not finish";
    return got ? std::move(*got) : T(fail(ErrorCode::internal, "did not finish"));
  }
  Result<std::unique_ptr<TerminalSession>> connect(int pid, const std::string& ip, int port) {
    return run(connect_to_instance(io_.get_executor(), pool_, pid, ip, port, 2s));
  }

  asio::io_context io_;
  asio::thread_pool pool_{1};
};

TEST_F(InstanceConnectionTest, CarriesBytesBothWaysAndEndsWithTheService) {
  asio::io_context server_io;
  tcp::acceptor acceptor(server_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const int port = acceptor.local_endpoint().port();
  // This process's own namespace (entered as root, made directly otherwise).
  auto opened = connect(static_cast<int>(::getpid()), "127.0.0.1", port);
  ASSERT_TRUE(opened) << opened.error().detail;
  auto& session = **opened;
  tcp::socket service(server_io);
  acceptor.accept(service);
  asio::write(service, asio::buffer(std::string("hello from the service")));
  auto got = run(session.read());
  ASSERT_TRUE(got) << got.error().detail;
  EXPECT_EQ(*got, "hello from the service");
  ASSERT_TRUE(run(session.write(std::string(200000, 'q'))));
  std::string seen(200000, '\0');
  asio::read(service, asio::buffer(seen));
  EXPECT_EQ(seen, std::string(200000, 'q'));
  EXPECT_TRUE(run(session.resize(40, 120))) << "a connection has no window: nothing to do";
  service.close();
  auto end = run(session.read());
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, "");
  auto code = run(session.exit_code());
  ASSERT_TRUE(code) << code.error().detail;
  EXPECT_EQ(*code, 0);
  session.close();
  EXPECT_FALSE(run(session.write("x"))) << "closed";
}

TEST_F(InstanceConnectionTest, NothingListeningABadPortOrAddressAndAGoneProcessAreErrors) {
  int closed_port = 0;
  {
    asio::io_context io;
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    closed_port = probe.local_endpoint().port();
  }
  auto refused = connect(static_cast<int>(::getpid()), "127.0.0.1", closed_port);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable);
  EXPECT_NE(refused.error().detail.find("nothing answers on port " + std::to_string(closed_port)), std::string::npos)
      << refused.error().detail;
  auto bad_port = connect(static_cast<int>(::getpid()), "127.0.0.1", 70000);
  ASSERT_FALSE(bad_port);
  EXPECT_EQ(bad_port.error().code, ErrorCode::invalid_argument);
  auto bad_address = connect(static_cast<int>(::getpid()), "fe80::1", 80);
  ASSERT_FALSE(bad_address);
  EXPECT_NE(bad_address.error().detail.find("not IPv4"), std::string::npos) << bad_address.error().detail;
  // A pid no process has (above the kernel's largest): the instance is not running.
  auto gone = connect(1 << 23, "127.0.0.1", closed_port);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::unavailable);
  EXPECT_NE(gone.error().detail.find("not running"), std::string::npos) << gone.error().detail;
}

TEST_F(InstanceConnectionTest, ASocketInThisProcesssOwnNamespaceNeedsNoPrivilege) {
  auto fd = tcp_socket_in_namespace_of(0);
  ASSERT_TRUE(fd) << fd.error().detail;
  EXPECT_GE(*fd, 0);
  ::close(*fd);
}

}  // namespace
}  // namespace gpucloud::agent
