#pragma once
// The agent's end of the terminal streams on one link (terminal_messages.h): terminal_open
// opens a shell through the agent's own open_terminal, connection_open a TCP connection to an
// instance's port through its open_connection (both for its own host only); one
// coroutine per stream pumps its output to the link, input and resizes are applied in the
// order they came, terminal_close closes it. The link's end closes every terminal it
// carried (close_all), and nothing is sent after that.
//
// Back-pressure: a stream's shell is not read while the link holds more than
// kTerminalOutputBound unsent, nor while kTerminalWindow of its output is unacknowledged by
// the control plane, so a fast shell (`yes`) grows no queue on either end.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "agent/host_agent.h"
#include "agentlink/link_messages.h"

namespace gpucloud::agentlink {

class AgentTerminals : public std::enable_shared_from_this<AgentTerminals> {
 public:
  using Send = std::function<void(std::string type, boost::json::object body)>;
  using Backlog = std::function<std::size_t()>;  // bytes the link has queued and not yet sent
  AgentTerminals(boost::asio::any_io_executor loop, agent::HostAgent& agent, std::string host, Send send,
                 Backlog backlog);
  ~AgentTerminals();

  // A terminal_* message from the control plane; anything malformed is ignored.
  void handle(const LinkMessage& message);
  // The link ended: every terminal closes, nothing more is sent.
  void close_all();
  std::size_t streams() const { return streams_.size(); }

 private:
  struct Stream;
  struct Opening {  // what terminal_open or connection_open asked for
    std::string instance_id;
    int rows = 24, cols = 80;
    int port = 0;  // > 0: a connection to this port, not a shell
  };
  static boost::asio::awaitable<void> open_and_pump(std::shared_ptr<AgentTerminals> self, std::int64_t id,
                                                    std::shared_ptr<Stream> stream, Opening opening);
  static boost::asio::awaitable<void> apply_inbox(std::shared_ptr<AgentTerminals> self, std::shared_ptr<Stream> stream);
  void kick(const std::shared_ptr<Stream>& stream);
  void emit(std::string type, std::int64_t id, boost::json::object body);
  void forget(std::int64_t id, const std::shared_ptr<Stream>& stream);

  boost::asio::any_io_executor loop_;
  agent::HostAgent& agent_;
  std::string host_;
  Send send_;
  Backlog backlog_;
  bool closed_ = false;
  std::map<std::int64_t, std::shared_ptr<Stream>> streams_;
};

}  // namespace gpucloud::agentlink
