#pragma once
// The control plane's end of a web terminal on a remote host (issue 26): one stream of the
// host agent's link (terminal_messages.h). The hub feeds a RemoteTerminalStream with what
// the agent says about it (opened, failed, output, exit) and ends it when the link drops;
// the web terminal holds it as an agent::TerminalSession (RemoteTerminalSession), whose
// read() waits on the queued output and whose write/resize/close become messages.
//
// Bounded: a stream holding more than kTerminalOutputBound of unread output (a reader slower
// than the shell) is dropped with an error rather than queued without bound.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/runtime/runtime_driver.h"
#include "agentlink/agent_hub.h"
#include "agentlink/terminal_messages.h"

namespace gpucloud::agentlink {

class RemoteTerminalStream : public std::enable_shared_from_this<RemoteTerminalStream> {
 public:
  RemoteTerminalStream(boost::asio::any_io_executor loop, std::weak_ptr<AgentConnection> link, std::int64_t id,
                       std::size_t output_bound = kTerminalOutputBound);
  std::int64_t id() const { return id_; }
  bool ended() const { return phase_ == Phase::ended; }

  // The hub's side: what the agent said about this stream, and the link's end.
  void opened();
  void failed(Error error);
  void output(std::string bytes);
  void exited(Result<int> code);
  void dropped(std::string why);  // the link went, or the control plane stops: read() ends with ""

  // Waits for the agent's terminal_opened or terminal_failed, at most `limit` (then the
  // stream is closed and an error returned).
  boost::asio::awaitable<Status> wait_opened(std::chrono::milliseconds limit);

  // The session's side (agent::TerminalSession's contract).
  boost::asio::awaitable<Result<std::string>> read();  // "" once ended; an error once dropped for its bound
  Status write(std::string data);
  Status resize(int rows, int cols);
  Result<int> exit_code() const;  // after read() returned "" (conflict before)
  void close();                   // sends terminal_close once; read() then returns ""

 private:
  enum class Phase { opening, open, ended };
  void end(Result<int> exit);
  void send(const char* type, boost::json::object body);

  std::weak_ptr<AgentConnection> link_;
  std::int64_t id_;
  std::size_t bound_;
  Phase phase_ = Phase::opening;
  std::optional<Error> open_error_;   // terminal_failed's
  std::optional<Error> read_error_;   // the output bound's
  std::optional<Result<int>> exit_;   // once ended: the code, or why there is none
  std::deque<std::string> queue_;
  std::size_t queued_ = 0;
  std::size_t unacked_ = 0;  // read by the session, not yet acknowledged to the agent
  boost::asio::steady_timer data_wake_, open_wake_;
};

class RemoteTerminalSession final : public agent::TerminalSession {
 public:
  explicit RemoteTerminalSession(std::shared_ptr<RemoteTerminalStream> stream) : stream_(std::move(stream)) {}
  ~RemoteTerminalSession() override { stream_->close(); }
  boost::asio::awaitable<Result<std::string>> read() override;
  boost::asio::awaitable<Status> write(std::string data) override;
  boost::asio::awaitable<Status> resize(int rows, int cols) override;
  boost::asio::awaitable<Result<int>> exit_code() override;
  void close() override { stream_->close(); }

 private:
  std::shared_ptr<RemoteTerminalStream> stream_;
};

}  // namespace gpucloud::agentlink
