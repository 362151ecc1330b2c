#pragma once
// The structured per-request log line, batched. Written one line at a time (as spdlog does,
// with a flush per line), it was the request path's only syscall besides the socket's own:
// lines now collect in memory and reach stdout in one write per few KiB, or at most 100 ms
// after they were made. Same line format as the daemon's other log lines. Loop only.
#include <ctime>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace gpucloud::server {

class RequestLog {
 public:
  explicit RequestLog(boost::asio::any_io_executor loop, int fd = 1);
  ~RequestLog();  // flushes what is left
  RequestLog(const RequestLog&) = delete;

  // No body, no headers: no password or token can reach the log.
  void record(std::string_view method, std::string_view route, int status, double ms, std::string_view user,
              std::string_view client);
  void flush();

 private:
  void append_timestamp();

  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  int fd_;
  std::string buffer_;
  std::time_t cached_second_ = -1;
  std::string cached_prefix_;  // "YYYY-MM-DDTHH:MM:SS." of cached_second_
};

}  // namespace gpucloud::server
