#include "agentlink/agent_terminals.h"

#include <optional>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agentlink/terminal_messages.h"

namespace gpucloud::agentlink {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
// One keystroke batch or one resize, applied in arrival order.
struct TerminalInboxItem {
  std::string data;
  int rows = 0, cols = 0;  // > 0: a resize
};
}  // namespace

struct AgentTerminals::Stream {
  std::unique_ptr<agent::TerminalSession> session;  // null while opening
  bool closed = false;                              // by terminal_close, or the link's end
  bool applying = false;
  std::deque<TerminalInboxItem> inbox;
  std::size_t in_flight = 0;  // output sent and not yet acknowledged (terminal_ack)
};

AgentTerminals::AgentTerminals(asio::any_io_executor loop, agent::HostAgent& agent, std::string host, Send send,
                               Backlog backlog)
    : loop_(loop), agent_(agent), host_(std::move(host)), send_(std::move(send)), backlog_(std::move(backlog)) {}

AgentTerminals::~AgentTerminals() { close_all(); }

void AgentTerminals::emit(std::string type, std::int64_t id, json::object body) {
  if (closed_) return;
  body["stream"] = id;
  send_(std::move(type), std::move(body));
}

void AgentTerminals::forget(std::int64_t id, const std::shared_ptr<Stream>& stream) {
  if (auto it = streams_.find(id); it != streams_.end() && it->second == stream) streams_.erase(it);
}

void AgentTerminals::close_all() {
  closed_ = true;
  for (auto& [id, stream] : streams_) {
    stream->closed = true;
    stream->inbox.clear();
    if (stream->session) stream->session->close();
  }
  streams_.clear();
}

void AgentTerminals::handle(const LinkMessage& message) {
  if (closed_) return;
  auto id = terminal_stream_of(message.body);
  if (!id) return;
  auto it = streams_.find(*id);
  if (message.type == "terminal_open" || message.type == "connection_open") {
    if (it != streams_.end()) {
      emit("terminal_failed", *id, json::object{{"code", "conflict"}, {"detail", "stream " + std::to_string(*id) + " is open"}});
      return;
    }
    Opening opening;
    opening.instance_id = terminal_string_field(message.body, "instance_id");
    if (message.type == "connection_open") {
      const auto port = terminal_int_field(message.body, "port");
      if (!port || *port < 1 || *port > 65535) {
        emit("terminal_failed", *id, json::object{{"code", "invalid_argument"}, {"detail", "connection_open: port must be 1-65535"}});
        return;
      }
      opening.port = static_cast<int>(*port);
    } else {
      opening.rows = static_cast<int>(terminal_int_field(message.body, "rows").value_or(24));
      opening.cols = static_cast<int>(terminal_int_field(message.body, "cols").value_or(80));
    }
    auto stream = std::make_shared<Stream>();
    streams_[*id] = stream;
    asio::co_spawn(loop_, open_and_pump(shared_from_this(), *id, stream, std::move(opening)), asio::detached);
    return;
  }
  if (it == streams_.end()) return;  // closed already, or never opened here
  auto stream = it->second;
  if (message.type == "terminal_input") {
    auto data = terminal_data_of(message.body);
    if (!data || data->empty()) return;
    stream->inbox.push_back(TerminalInboxItem{std::move(*data), 0, 0});
    kick(stream);
  } else if (message.type == "terminal_resize") {
    const auto rows = terminal_int_field(message.body, "rows"), cols = terminal_int_field(message.body, "cols");
    if (!rows || !cols || *rows <= 0 || *cols <= 0 || *rows > 10000 || *cols > 10000) return;
    stream->inbox.push_back(TerminalInboxItem{"", static_cast<int>(*rows), static_cast<int>(*cols)});
    kick(stream);
  } else if (message.type == "terminal_ack") {
    const auto bytes = terminal_int_field(message.body, "bytes");
    if (!bytes || *bytes <= 0) return;
    stream->in_flight -= std::min(stream->in_flight, static_cast<std::size_t>(*bytes));
  } else if (message.type == "terminal_close") {
    stream->closed = true;
    stream->inbox.clear();
    if (stream->session) stream->session->close();
    streams_.erase(it);
  }
}

void AgentTerminals::kick(const std::shared_ptr<Stream>& stream) {
  if (!stream->session || stream->applying || stream->inbox.empty()) return;
  stream->applying = true;
  asio::co_spawn(loop_, apply_inbox(shared_from_this(), stream), asio::detached);
}

asio::awaitable<void> AgentTerminals::apply_inbox(std::shared_ptr<AgentTerminals> self, std::shared_ptr<Stream> stream) {
  while (!stream->closed && !stream->inbox.empty()) {
    TerminalInboxItem item = std::move(stream->inbox.front());
    stream->inbox.pop_front();
    // A failed write or resize ends nothing here: the output pump sees the shell's end.
    if (item.rows > 0) (void)co_await stream->session->resize(item.rows, item.cols);
    else (void)co_await stream->session->write(std::move(item.data));
  }
  stream->applying = false;
  (void)self;
}

asio::awaitable<void> AgentTerminals::open_and_pump(std::shared_ptr<AgentTerminals> self, std::int64_t id,
                                                    std::shared_ptr<Stream> stream, Opening opening) {
  // This agent's own host only: the control plane cannot name another through this link.
  const std::string instance_id = opening.instance_id;
  const char* what = opening.port > 0 ? "connection" : "terminal";
  Result<std::unique_ptr<agent::TerminalSession>> opened = fail(ErrorCode::internal, "not opened");
  if (opening.port > 0) opened = co_await self->agent_.open_connection(self->host_, instance_id, opening.port);
  else opened = co_await self->agent_.open_terminal(self->host_, instance_id, opening.rows, opening.cols);
  if (stream->closed) {  // closed (or the link ended) while it opened
    if (opened) (*opened)->close();
    co_return;
  }
  if (!opened) {
    self->emit("terminal_failed", id,
               json::object{{"code", std::string(to_string(opened.error().code))}, {"detail", opened.error().detail}});
    self->forget(id, stream);
    co_return;
  }
  stream->session = std::move(*opened);
  spdlog::info(R"({{"event":"agent_{}_opened","stream":{},"instance":"{}","port":{}}})", what, id, instance_id, opening.port);
  self->emit("terminal_opened", id, {});
  self->kick(stream);
  asio::steady_timer pause(self->loop_);
  for (;;) {
    // Back-pressure: the shell waits while the link is behind, or while the control plane has
    // a window's worth unacknowledged (its reader, a browser, is slower than the shell).
    while (!stream->closed && (self->backlog_() > kTerminalOutputBound || stream->in_flight >= kTerminalWindow)) {
      pause.expires_after(std::chrono::milliseconds(5));
      boost::system::error_code ec;
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (stream->closed) break;
    auto bytes = co_await stream->session->read();
    if (stream->closed) break;
    if (!bytes || bytes->empty()) {
      auto code = co_await stream->session->exit_code();
      if (stream->closed) break;
      if (code) self->emit("terminal_exit", id, json::object{{"exit_code", *code}});
      else self->emit("terminal_exit", id, json::object{{"detail", code.error().detail}});
      break;
    }
    stream->in_flight += bytes->size();
    self->emit("terminal_output", id, json::object{{"data", terminal_bytes_to_base64(*bytes)}});
  }
  stream->closed = true;
  stream->session->close();
  self->forget(id, stream);
  spdlog::info(R"({{"event":"agent_{}_closed","stream":{},"instance":"{}"}})", what, id, instance_id);
}

}  // namespace gpucloud::agentlink
