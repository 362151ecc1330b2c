#include "server/request_log.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gpucloud::server {
namespace {
constexpr std::size_t kFlushAt = 16 * 1024;
constexpr auto kLongestDelay = std::chrono::milliseconds(100);
}  // namespace

RequestLog::RequestLog(boost::asio::any_io_executor loop, int fd) : timer_(loop), fd_(fd) {
  buffer_.reserve(kFlushAt + 512);
}

RequestLog::~RequestLog() { flush(); }

namespace {
// Appends `value` in decimal, zero-padded to `width` digits.
void append_int(std::string& out, std::int64_t value, int width = 0) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  for (int pad = width - static_cast<int>(end - digits); pad > 0; --pad) out += '0';
  out.append(digits, end);
}
}  // namespace

void RequestLog::append_timestamp() {
  // spdlog's pattern "%Y-%m-%dT%H:%M:%S.%fZ": the part up to the second changes once a second.
  auto now = std::chrono::system_clock::now();
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t second = static_cast<std::time_t>(micros / 1000000);
  if (second != cached_second_) {
    std::tm utc{};
    ::gmtime_r(&second, &utc);
    cached_prefix_ = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.", utc.tm_year + 1900, utc.tm_mon + 1,
                                 utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
    cached_second_ = second;
  }
  buffer_ += cached_prefix_;
  append_int(buffer_, micros % 1000000, 6);
  buffer_ += 'Z';
}

void RequestLog::record(std::string_view method, std::string_view route, int status, double ms, std::string_view user,
                        std::string_view client) {
  if (!spdlog::should_log(spdlog::level::info)) return;
  // Appended piece by piece, not through fmt: this runs for every request, and a format
  // string costs several times more than the line's own bytes.
  // The method is an HTTP token (the parser refuses quotes and controls); the rest are ours.
  append_timestamp();
  buffer_ += R"( info {"event":"request","method":")";
  buffer_ += method;
  buffer_ += R"(","route":")";
  buffer_ += route;
  buffer_ += R"(","status":)";
  append_int(buffer_, status);
  buffer_ += R"(,"ms":)";
  auto micros = static_cast<std::int64_t>(ms * 1000 + 0.5);
  append_int(buffer_, micros / 1000);
  buffer_ += '.';
  append_int(buffer_, micros % 1000, 3);
  buffer_ += R"(,"user":")";
  buffer_ += user;
  buffer_ += R"(","client":")";
  buffer_ += client;
  buffer_ += "\"}\n";
  if (buffer_.size() >= kFlushAt) {
    flush();
  } else if (!timer_armed_) {
    timer_armed_ = true;
    timer_.expires_after(kLongestDelay);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;  // cancelled: the log is being destroyed
      timer_armed_ = false;
      flush();
    });
  }
}

void RequestLog::flush() {
  // Writes of at most PIPE_BUF bytes, cut at line ends: on a pipe (a journal) each is atomic,
  // so the daemon's other log lines, written by other threads, never land inside one.
  std::size_t done = 0;
  while (done < buffer_.size()) {
    std::size_t end = buffer_.size();
    if (end - done > PIPE_BUF) {
      end = buffer_.rfind('\n', done + PIPE_BUF - 1);
      end = (end == std::string::npos || end < done) ? done + PIPE_BUF : end + 1;
    }
    ssize_t n = ::write(fd_, buffer_.data() + done, end - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // stdout is gone or full: drop rather than block the loop
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

}  // namespace gpucloud::server
