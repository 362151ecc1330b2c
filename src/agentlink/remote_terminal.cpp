#include "agentlink/remote_terminal.h"

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

namespace gpucloud::agentlink {
namespace asio = boost::asio;
namespace json = boost::json;

RemoteTerminalStream::RemoteTerminalStream(asio::any_io_executor loop, std::weak_ptr<AgentConnection> link,
                                           std::int64_t id, std::size_t output_bound)
    : link_(std::move(link)), id_(id), bound_(output_bound), data_wake_(loop), open_wake_(loop) {}

void RemoteTerminalStream::send(const char* type, json::object body) {
  body["stream"] = id_;
  if (auto link = link_.lock()) link->send(envelope(type, std::move(body)));
}

void RemoteTerminalStream::end(Result<int> exit) {
  if (phase_ == Phase::ended) return;
  phase_ = Phase::ended;
  exit_ = std::move(exit);
  data_wake_.cancel();
  open_wake_.cancel();
}

void RemoteTerminalStream::opened() {
  if (phase_ != Phase::opening) return;
  phase_ = Phase::open;
  open_wake_.cancel();
}

void RemoteTerminalStream::failed(Error error) {
  if (phase_ == Phase::ended) return;
  open_error_ = error;
  end(fail(std::move(error)));
}

void RemoteTerminalStream::output(std::string bytes) {
  if (phase_ == Phase::ended || bytes.empty()) return;
  if (queued_ + bytes.size() > bound_) {
    // The reader (a browser) is slower than the shell: the stream goes, not the memory.
    spdlog::warn(R"({{"event":"remote_terminal_overflow","stream":{},"queued":{}}})", id_, queued_);
    queue_.clear();
    queued_ = 0;
    Error why{ErrorCode::unavailable,
              "the terminal's output outran its reader (over " + std::to_string(bound_ >> 10) + " KiB unread)", {}, 0};
    read_error_ = why;
    send("terminal_close", {});
    end(fail(std::move(why)));
    return;
  }
  queued_ += bytes.size();
  queue_.push_back(std::move(bytes));
  data_wake_.cancel();
}

void RemoteTerminalStream::exited(Result<int> code) { end(std::move(code)); }

void RemoteTerminalStream::dropped(std::string why) {
  if (phase_ == Phase::ended) return;
  if (phase_ == Phase::opening) open_error_ = Error{ErrorCode::unavailable, why, {}, 0};
  end(fail(ErrorCode::unavailable, std::move(why)));
}

asio::awaitable<Status> RemoteTerminalStream::wait_opened(std::chrono::milliseconds limit) {
  auto self = shared_from_this();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (phase_ == Phase::opening && std::chrono::steady_clock::now() < deadline) {
    open_wake_.expires_at(deadline);
    boost::system::error_code ec;
    co_await open_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (phase_ == Phase::open) co_return ok();
  if (open_error_) co_return fail(*open_error_);
  if (phase_ == Phase::opening) {
    close();
    co_return fail(ErrorCode::unavailable, "the host's agent did not open the stream within " +
                                               std::to_string(limit.count() / 1000) + " s");
  }
  // Ended right after it opened (the shell exited at once): still a session to read.
  co_return ok();
}

asio::awaitable<Result<std::string>> RemoteTerminalStream::read() {
  auto self = shared_from_this();
  for (;;) {
    if (!queue_.empty()) {
      std::string out = std::move(queue_.front());
      queue_.pop_front();
      while (!queue_.empty() && out.size() + queue_.front().size() <= 64 * 1024) {
        out += queue_.front();
        queue_.pop_front();
      }
      queued_ -= std::min(queued_, out.size());
      // Taken by the reader: the agent may send that much more (terminal_messages.h).
      unacked_ += out.size();
      if (unacked_ >= kTerminalAckEvery && phase_ != Phase::ended) {
        send("terminal_ack", json::object{{"bytes", unacked_}});
        unacked_ = 0;
      }
      co_return out;
    }
    if (read_error_) co_return fail(*read_error_);
    if (phase_ == Phase::ended) co_return std::string();
    data_wake_.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await data_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

Status RemoteTerminalStream::write(std::string data) {
  if (phase_ != Phase::open) return fail(ErrorCode::unavailable, "the terminal has ended");
  if (link_.expired()) return fail(ErrorCode::unavailable, "the host's agent is not connected");
  if (data.empty()) return ok();
  send("terminal_input", json::object{{"data", terminal_bytes_to_base64(data)}});
  return ok();
}

Status RemoteTerminalStream::resize(int rows, int cols) {
  if (phase_ != Phase::open) return fail(ErrorCode::unavailable, "the terminal has ended");
  if (rows <= 0 || cols <= 0) return fail(ErrorCode::invalid_argument, "rows and cols must be positive");
  send("terminal_resize", json::object{{"rows", rows}, {"cols", cols}});
  return ok();
}

Result<int> RemoteTerminalStream::exit_code() const {
  if (!exit_) return fail(ErrorCode::conflict, "terminal: the process is still running");
  return *exit_;
}

void RemoteTerminalStream::close() {
  if (phase_ == Phase::ended) return;
  send("terminal_close", {});
  queue_.clear();
  queued_ = 0;
  end(fail(ErrorCode::unavailable, "the terminal was closed"));
}

asio::awaitable<Result<std::string>> RemoteTerminalSession::read() { co_return co_await stream_->read(); }
asio::awaitable<Status> RemoteTerminalSession::write(std::string data) { co_return stream_->write(std::move(data)); }
asio::awaitable<Status> RemoteTerminalSession::resize(int rows, int cols) { co_return stream_->resize(rows, cols); }
asio::awaitable<Result<int>> RemoteTerminalSession::exit_code() { co_return stream_->exit_code(); }

}  // namespace gpucloud::agentlink
