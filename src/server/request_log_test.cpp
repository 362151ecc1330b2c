#include "server/request_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {

std::string drain(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

TEST(RequestLog, LinesAreBatchedAndKeepTheLogFormat) {
  boost::asio::io_context io;
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  {
    RequestLog log(io.get_executor(), fds[1]);
    log.record("GET", "/api/v1/me", 200, 0.0425, "u-abc", "127.0.0.1");
    log.record("POST", "unmatched", 404, 12.3456, "", "::1");
    EXPECT_EQ(drain(fds[0]), "") << "written at once: not batched";
    io.run_for(std::chrono::milliseconds(300));  // the 100 ms flush timer
    std::string out = drain(fds[0]);
    auto first = out.substr(0, out.find('\n'));
    // 2026-12-01T22:28:01.123456Z info {...}: the daemon's other lines' format.
    ASSERT_GE(first.size(), 28u) << out;
    EXPECT_EQ(first[4], '-');
    EXPECT_EQ(first[10], 'T');
    EXPECT_EQ(first[19], '.');
    EXPECT_EQ(first.substr(26, 7), "Z info ");
    EXPECT_EQ(first.substr(33), R"({"event":"request","method":"GET","route":"/api/v1/me","status":200,"ms":0.043,)"
                                R"("user":"u-abc","client":"127.0.0.1"})");
    EXPECT_NE(out.find(R"("method":"POST","route":"unmatched","status":404,"ms":12.346,"user":"","client":"::1"})"
                       "\n"),
              std::string::npos)
        << out;
    log.record("GET", "/healthz", 200, 0.01, "", "127.0.0.1");
  }
  // Destroying the log flushes what is left.
  EXPECT_NE(drain(fds[0]).find(R"("route":"/healthz")"), std::string::npos);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(RequestLog, ManyLinesGoOutWholeInPipeSizedWrites) {
  boost::asio::io_context io;
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  RequestLog log(io.get_executor(), fds[1]);
  for (int i = 0; i < 1000; ++i) log.record("GET", "/healthz", 200, 0.01, "", "127.0.0.1");
  log.flush();
  std::string out = drain(fds[0]);
  std::size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 1000u);
  EXPECT_EQ(out.back(), '\n');
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace gpucloud::server
