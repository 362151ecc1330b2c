// GET /instances/{id}/terminal: a WebSocket shell in the instance (an engine exec with a
// TTY). Binary frames carry terminal bytes both ways; text frames carry JSON control
// messages ({"type":"resize","cols":120,"rows":40}). The owner only.
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "instances/instance_record.h"
#include "server/app.h"
#include "server/replica_terminal.h"
#include "server/terminal_control.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr std::uint16_t kPolicyViolation = 1008;  // RFC 6455 close code

// Terminal -> browser. The only writer of the socket, so frames never interleave.
asio::awaitable<void> pump_out(agent::TerminalSession* terminal, WebSocketChannel* channel) {
  for (;;) {
    auto bytes = co_await terminal->read();
    if (!bytes || bytes->empty()) break;  // the shell ended
    if (!co_await channel->write(std::move(*bytes), true)) break;
  }
  co_await channel->close();  // wakes the reader
}

// Browser -> terminal: keystrokes and resizes, until the socket closes. A text frame that is
// not a valid control message closes the socket with 1008 and the reason (a client bug
// shows at once instead of a resize silently lost); the shell ends with it.
asio::awaitable<void> pump_in(agent::TerminalSession* terminal, WebSocketChannel* channel) {
  for (;;) {
    auto message = co_await channel->read();
    if (!message) break;
    if (message->binary) {
      if (!co_await terminal->write(std::move(message->data))) break;
      continue;
    }
    auto control = parse_terminal_control(message->data);
    if (!control) {
      spdlog::info(R"({{"event":"terminal_bad_control","detail":{}}})",
                   json::serialize(json::value(json::string(control.error().detail))));
      terminal->close();
      std::string reason = std::move(control.error().detail);  // a named local: g++ 12, see architecture.md
      co_await channel->close(kPolicyViolation, std::move(reason));
      break;
    }
    (void)co_await terminal->resize(control->rows, control->cols);
  }
  terminal->close();  // a dropped tab ends the exec's input; the shell exits
}

// Both pumps, then stops the watcher.
asio::awaitable<void> pump_both(agent::TerminalSession* terminal, WebSocketChannel* channel, bool* done,
                                asio::steady_timer* watcher) {
  co_await (pump_out(terminal, channel) && pump_in(terminal, channel));
  *done = true;
  watcher->cancel();
}

// Hangs the terminal up (which ends both pumps) once its token is revoked, its user disabled
// or demoted. The timer is parked with the app's waiters so a revoke wakes it at once.
asio::awaitable<void> watch_access(App* app, AccessWatch access, agent::TerminalSession* terminal, const bool* done,
                                   asio::steady_timer* timer) {
  struct Parked {  // unparked on every exit, a destroyed coroutine too (even after the App)
    std::weak_ptr<App::Waiters> waiters;
    asio::steady_timer* timer;
    ~Parked() {
      if (auto w = waiters.lock()) w->erase(timer);
    }
  } parked{app->event_waiters_handle(), timer};
  while (!*done) {
    timer->expires_after(std::chrono::seconds(1));
    app->event_waiters().insert(timer);
    auto [ec] = co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
    if (*done) break;
    if (!co_await access.still_valid()) {
      spdlog::info(R"({{"event":"terminal_revoked"}})");
      terminal->close();
      break;
    }
  }
}

asio::awaitable<void> terminal_session(App* app, std::string host, std::string instance_id, WebSocketChannel* channel,
                                       std::string token, auth::Principal principal, bool relayed) {
  auto terminal = co_await app->hosts().agent().open_terminal(host, instance_id, 24, 80);
  if (!terminal && terminal.error().code == ErrorCode::unavailable && !relayed) {
    // Replicas: another one serves this host (the leader, or the holder of its agent's link).
    auto other = co_await app->other_replica_serving(host);
    if (other) {
      auto executor = co_await asio::this_coro::executor;
      terminal = co_await open_replica_terminal(executor, *other, instance_id, token);
      if (terminal) spdlog::info(R"({{"event":"terminal_relayed","instance":"{}","to":"{}"}})", instance_id, *other);
    }
  }
  if (!terminal) {
    (void)co_await channel->write("gpucloud: " + terminal.error().detail + "\r\n", true);
    co_await channel->close();
    co_return;
  }
  spdlog::info(R"({{"event":"terminal_opened","instance":"{}"}})", instance_id);
  agent::TerminalSession* t = terminal->get();
  bool done = false;
  asio::steady_timer watcher(co_await asio::this_coro::executor);
  AccessWatch access(*app, std::move(token), std::move(principal));
  co_await (pump_both(t, channel, &done, &watcher) && watch_access(app, std::move(access), t, &done, &watcher));
  t->close();
  spdlog::info(R"({{"event":"terminal_closed","instance":"{}"}})", instance_id);
}

asio::awaitable<Result<Response>> open(RequestContext& ctx) {
  // The owner only: not even the operator gets a shell in a user's instance.
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return instances::find_owned_instance(db, owner, id);
  };
  auto instance = co_await ctx.app.store().read(std::move(read));
  if (!instance) co_return tl::unexpected(instance.error());
  if (instance->state != instances::InstanceState::running)
    co_return fail(ErrorCode::conflict, "the instance is " + std::string(instances::to_string(instance->state)));
  if (!ctx.request.websocket_upgrade)
    co_return fail(ErrorCode::invalid_argument, "this endpoint speaks WebSocket: send an Upgrade request");
  Response r{101, "", "", {}, {}, {}};
  App* app = &ctx.app;
  // A terminal another replica handed here is served here or not at all (never handed on).
  const bool relayed = !ctx.request.header(kReplicaRelayHeader).empty();
  r.websocket = [app, host = instance->host_name.value_or(""), id = instance->id, token = App::bearer_token(ctx.request),
                 principal = ctx.caller(), relayed](WebSocketChannel& channel) {
    return terminal_session(app, host, id, &channel, token, principal, relayed);
  };
  co_return r;
}

}  // namespace

void register_terminal_routes(App& app) {
  app.router().add("GET", "/api/v1/instances/{id}/terminal", Access::user, "instances",
                   "A shell in the instance over WebSocket (binary frames; text frames for resize)", open);
}

}  // namespace gpucloud::server
