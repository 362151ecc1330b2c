// /instances/{id}/jupyter/... and /instances/{id}/proxy/{port}/...: an authenticated reverse
// proxy (HTTP and WebSocket) to the instance's own address on the gpucloud bridge, for the
// owner only (others: 404), with nothing published on a host port. Jupyter gets its token from
// here (Authorization: token ...), never from the browser. What passes is in
// server/instance_proxy.h.
//
// How the bytes get there: an instance on a host this daemon serves in-process is reached by
// a TCP connection to its bridge address; one on a remote host (whose bridge this machine
// cannot route to) by a connection its agent makes, carried as a stream on the agent's link
// (connection_open, agentlink/terminal_messages.h) and bridged here through a socket pair, so
// the same HTTP and WebSocket code runs over either. With replicas (issue 27), a remote host
// whose agent's link another replica holds is reached through that replica: the request goes
// to the same path there, with the caller's token and the relay header (never relayed twice).
//
// Bounded and never blocking: a connection to the instance per request (5 s to connect);
// a response up to 4 MiB with a length is relayed whole (the browser's connection stays open),
// a larger or unsized one is streamed through a 64 KiB buffer (chunked; its connection then
// closes), each read with a time-out; a WebSocket is relayed message by message (16 MiB at
// most from the instance, 1 MiB from the browser, as every WebSocket here). The request body
// is the one the server has read (at most [server] max_body_bytes).
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include "agent/local_agent.h"
#include "instances/instance_record.h"
#include "server/app.h"
#include "server/browser_session.h"
#include "server/instance_proxy.h"
#include "server/replica_terminal.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using local_stream = asio::local::stream_protocol;
// The proxy's end of a connection that rides an agent's link.
using LinkStream = beast::basic_stream<local_stream, asio::any_io_executor>;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::uint64_t kWholeResponseMax = 4u << 20;
constexpr std::size_t kStreamChunk = 64 * 1024;
constexpr std::size_t kUpstreamMessageMax = 16u << 20;
constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr auto kResponseTimeout = std::chrono::seconds(120);  // a kernel start, a slow page
constexpr auto kStreamIdleTimeout = std::chrono::minutes(10);

enum class Service { jupyter, port };

// How the proxy reaches the service.
enum class Route {
  bridge,      // the instance's bridge address (its host is served in-process)
  agent_link,  // a connection its remote host's agent makes (agentlink/terminal_messages.h)
  replica,     // the replica holding that agent's link, which proxies it (address: its API)
};

struct Target {
  std::string instance_id, host;
  Route route = Route::bridge;
  std::string address;  // the instance's IPv4 on the bridge; for Route::replica its API's host
  int port = 0;
  std::string path;     // request target at the instance (at the replica: the browser's own)
  std::string prefix;   // what the browser's path had before it
  std::string jupyter_token;
  std::string relay_token;  // Route::replica: the caller's token, which the replica authenticates
};

// The owner's running instance and where its service is; not_found for anyone else.
asio::awaitable<Result<Target>> resolve(RequestContext& ctx, Service service) {
  auto read = [owner = ctx.caller().user.id, id = ctx.param("id")](store::Database& db) {
    return instances::find_owned_instance(db, owner, id);
  };
  auto instance = co_await ctx.app.store().read(std::move(read));
  if (!instance) co_return tl::unexpected(instance.error());
  Target t;
  const std::string base = "/api/v1/instances/" + ctx.param("id");
  if (service == Service::jupyter) {
    if (!instance->jupyter) co_return fail(ErrorCode::not_found, "instance " + instance->name + " has no Jupyter (its image has none)");
    t.port = kJupyterPort;
    t.prefix = base + "/jupyter";
    t.jupyter_token = ctx.app.instances().jupyter_token(instance->id);
  } else {
    const std::string& text = ctx.param("port");
    int port = 0;
    for (char c : text) port = (c >= '0' && c <= '9' && port < 100000) ? port * 10 + (c - '0') : 100000;
    bool declared = false;
    for (const auto& p : instance->ports) declared = declared || (p.container_port == port && p.protocol == "tcp");
    if (text.empty() || port < 1 || port > 65535 || !declared)
      co_return fail(ErrorCode::not_found, "port " + text + " is not a declared TCP port of instance " + instance->name);
    t.port = port;
    t.prefix = base + "/proxy/" + text;
  }
  if (instance->state != instances::InstanceState::running)
    co_return fail(ErrorCode::conflict, "the instance is " + std::string(instances::to_string(instance->state)));
  if (!instance->ipv4 || instance->ipv4->empty())
    co_return fail(ErrorCode::unavailable, "the instance's address is not known yet; try again in a moment");
  t.address = *instance->ipv4;
  t.instance_id = instance->id;
  t.host = instance->host_name.value_or("");
  t.route = Route::agent_link;
  for (const auto& h : agent::LocalAgent::effective_hosts(ctx.app.config()))
    if (h.name == t.host) t.route = Route::bridge;
  auto target = upstream_target(ctx.request.path, t.prefix, ctx.request.query_string);
  if (!target) co_return fail(ErrorCode::not_found, "no such path: " + ctx.request.path);
  // Notebook's base_url is /api/v1/instances/ID/jupyter/ (by id, whatever the browser named).
  t.path = service == Service::jupyter ? "/api/v1/instances/" + instance->id + "/jupyter" + *target : std::move(*target);
  co_return t;
}

// The headers the instance sees (besides Host and what Beast sets).
template <class Fields>
void copy_request_headers(const Request& request, const Target& t, Fields& out) {
  for (const auto& [name, value] : request.headers) {
    // Jupyter's answers are scrubbed of its token, so they must come uncompressed.
    if (!t.jupyter_token.empty() && name == "accept-encoding") continue;
    if (forwards_request_header(name)) out.insert(name, value);
  }
  if (auto cookies = without_session_cookie(request.header("cookie")); !cookies.empty()) out.set(http::field::cookie, cookies);
  if (!t.jupyter_token.empty()) out.set(http::field::authorization, "token " + t.jupyter_token);
  if (auto host = request.header("host"); !host.empty()) out.set("X-Forwarded-Host", host);
  out.set("X-Forwarded-Proto", request_is_https(request) ? "https" : "http");
  out.set("X-Forwarded-For", request.client_address);
  out.set("X-Forwarded-Prefix", t.prefix);
  if (t.route == Route::replica) {
    out.set(http::field::authorization, "Bearer " + t.relay_token);
    out.set(kReplicaRelayHeader, "1");
  }
}

// The replica that holds the instance's host's agent link, when it is not this one (and the
// request did not come from another replica): the target becomes that replica's own proxy.
asio::awaitable<void> route_through_replica(RequestContext& ctx, Target& t) {
  if (t.route != Route::agent_link || !ctx.request.header(kReplicaRelayHeader).empty()) co_return;
  auto other = co_await ctx.app.other_replica_serving(t.host);
  if (!other) co_return;
  auto url = boost::urls::parse_absolute_uri(*other);
  if (!url || url->scheme() != "http" || !url->has_authority()) co_return;  // the link's error then says why
  std::string host(url->encoded_host_name());
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  t.route = Route::replica;
  t.address = host;
  t.port = url->has_port() ? static_cast<int>(url->port_number()) : 80;
  t.path = encode_path(ctx.request.path) + (ctx.request.query_string.empty() ? "" : "?" + ctx.request.query_string);
  t.jupyter_token.clear();  // the serving replica adds it
  t.relay_token = App::bearer_token(ctx.request);
  spdlog::info(R"({{"event":"proxy_relayed","instance":"{}","to":"{}"}})", t.instance_id, *other);
}

asio::awaitable<Result<void>> connect(beast::tcp_stream& stream, const Target& t) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address_v4(t.address, ec);
  if (ec) co_return fail(ErrorCode::unavailable, "the instance's address " + t.address + " is not IPv4");
  stream.expires_after(kConnectTimeout);
  auto [connect_ec] = co_await stream.async_connect(tcp::endpoint(address, static_cast<unsigned short>(t.port)), use_tuple);
  if (connect_ec)
    co_return fail(ErrorCode::unavailable, "nothing answers on port " + std::to_string(t.port) + " in the instance (" +
                                               connect_ec.message() + ")");
  co_return Result<void>{};
}

// A stream on the agent's link <-> the far end of the socket pair, until either ends: the
// service's end shuts the pair's sending side (the proxy reads EOF), the proxy's close ends the
// stream (the agent closes its connection).
asio::awaitable<void> link_to_pair(std::shared_ptr<agent::TerminalSession> session, std::shared_ptr<local_stream::socket> far) {
  for (;;) {
    auto bytes = co_await session->read();
    if (!bytes || bytes->empty()) break;
    auto [ec, n] = co_await asio::async_write(*far, asio::buffer(*bytes), use_tuple);
    if (ec) break;
  }
  boost::system::error_code ignored;
  far->shutdown(local_stream::socket::shutdown_send, ignored);
}
asio::awaitable<void> pair_to_link(std::shared_ptr<agent::TerminalSession> session, std::shared_ptr<local_stream::socket> far) {
  std::vector<char> chunk(kStreamChunk);
  for (;;) {
    auto [ec, n] = co_await far->async_read_some(asio::buffer(chunk), use_tuple);
    if (ec) break;
    if (!co_await session->write(std::string(chunk.data(), n))) break;
  }
  session->close();
}
asio::awaitable<void> bridge_link(std::shared_ptr<agent::TerminalSession> session, std::shared_ptr<local_stream::socket> far) {
  co_await (link_to_pair(session, far) && pair_to_link(session, far));
  boost::system::error_code ignored;
  far->close(ignored);
}

// A connection made by the instance's host agent, its bytes on the agent's link.
asio::awaitable<Result<void>> connect(App& app, LinkStream& stream, const Target& t) {
  auto session = co_await app.hosts().agent().open_connection(t.host, t.instance_id, t.port);
  if (!session) co_return tl::unexpected(session.error());
  auto executor = co_await asio::this_coro::executor;
  auto far = std::make_shared<local_stream::socket>(executor);
  boost::system::error_code ec;
  local_stream::socket near(executor);
  asio::local::connect_pair(near, *far, ec);
  if (ec) co_return fail(ErrorCode::unavailable, "socket pair: " + ec.message());
  stream.socket() = std::move(near);
  std::shared_ptr<agent::TerminalSession> shared(std::move(*session));
  asio::co_spawn(executor, bridge_link(std::move(shared), std::move(far)), asio::detached);
  co_return Result<void>{};
}
// The serving replica's API, by name (a replica's address may be a host name).
asio::awaitable<Result<void>> connect_replica(beast::tcp_stream& stream, const Target& t) {
  tcp::resolver resolver(co_await asio::this_coro::executor);
  auto [resolve_ec, endpoints] = co_await resolver.async_resolve(t.address, std::to_string(t.port), use_tuple);
  if (resolve_ec)
    co_return fail(ErrorCode::unavailable, "the replica serving the instance's host (" + t.address + ") cannot be resolved: " +
                                               resolve_ec.message());
  stream.expires_after(kConnectTimeout);
  auto [connect_ec, endpoint] = co_await stream.async_connect(endpoints, use_tuple);
  if (connect_ec)
    co_return fail(ErrorCode::unavailable, "the replica serving the instance's host (" + t.address + ":" +
                                               std::to_string(t.port) + ") does not answer: " + connect_ec.message());
  co_return Result<void>{};
}

asio::awaitable<Result<void>> connect(App&, beast::tcp_stream& stream, const Target& t) {
  if (t.route == Route::replica) return connect_replica(stream, t);
  return connect(stream, t);
}

template <class Stream>
struct Upstream {
  explicit Upstream(asio::any_io_executor ex) : stream(std::move(ex)) {}
  Stream stream;
  beast::flat_buffer buffer;
};

Response response_head(const http::response_header<>& head, std::string_view secret) {
  Response r{static_cast<int>(head.result_int()), "", "", {}, {}, {}};
  for (const auto& field : head) {
    std::string name(field.name_string());
    for (char& c : name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (name == "content-type") {
      r.content_type = std::string(field.value());
      continue;
    }
    if (forwards_response_header(name, field.value()))
      r.headers.emplace_back(std::move(name), scrub(std::string(field.value()), secret));
  }
  return r;
}

// The rest of a large or unsized body, chunk by chunk.
template <class Stream>
asio::awaitable<void> relay_body(std::shared_ptr<Upstream<Stream>> up, std::shared_ptr<http::response_parser<http::buffer_body>> parser,
                                 std::string secret, StreamSink& sink) {
  std::vector<char> chunk(kStreamChunk);
  Scrubber scrubber(std::move(secret));
  bool open = true;
  while (!parser->is_done()) {
    parser->get().body().data = chunk.data();
    parser->get().body().size = chunk.size();
    up->stream.expires_after(kStreamIdleTimeout);
    auto [ec, n] = co_await http::async_read(up->stream, up->buffer, *parser, use_tuple);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    std::size_t got = chunk.size() - parser->get().body().size;
    if (got > 0 && !co_await sink.write(scrubber.feed(std::string_view(chunk.data(), got)))) {
      open = false;
      break;
    }
  }
  if (open) (void)co_await sink.write(scrubber.finish());
  boost::system::error_code ignored;
  up->stream.socket().shutdown(Stream::socket_type::shutdown_both, ignored);
}

template <class Stream>
asio::awaitable<Result<Response>> proxy_http(RequestContext& ctx, Target t) {
  auto up = std::make_shared<Upstream<Stream>>(co_await asio::this_coro::executor);
  if (auto s = co_await connect(ctx.app, up->stream, t); !s) co_return tl::unexpected(s.error());
  http::request<http::string_body> req;
  req.method_string(ctx.request.method);
  req.target(t.path);
  req.version(11);
  copy_request_headers(ctx.request, t, req);
  req.set(http::field::host, t.address + ":" + std::to_string(t.port));
  req.body() = ctx.request.body;
  if (!ctx.request.body.empty() || ctx.request.method == "POST" || ctx.request.method == "PUT" ||
      ctx.request.method == "PATCH")
    req.prepare_payload();
  req.keep_alive(false);
  up->stream.expires_after(kResponseTimeout);
  auto [write_ec, written] = co_await http::async_write(up->stream, req, use_tuple);
  if (write_ec) co_return fail(ErrorCode::unavailable, "the instance's service closed the connection: " + write_ec.message());
  http::response_parser<http::empty_body> head_parser;
  head_parser.skip(ctx.request.method == "HEAD");
  auto [head_ec, head_n] = co_await http::async_read_header(up->stream, up->buffer, head_parser, use_tuple);
  if (head_ec) co_return fail(ErrorCode::unavailable, "the instance's service did not answer: " + head_ec.message());
  // Notebook writes its token into its pages: the browser gets them without it (the proxy
  // adds the token to every request anyway).
  Response r = response_head(head_parser.get().base(), t.jupyter_token);
  if (head_parser.is_done()) co_return r;  // no body (HEAD, 204, 304, Content-Length: 0)
  auto length = head_parser.content_length();
  if (length && *length <= kWholeResponseMax) {
    http::response_parser<http::string_body> whole(std::move(head_parser));
    whole.body_limit(kWholeResponseMax);
    auto [body_ec, body_n] = co_await http::async_read(up->stream, up->buffer, whole, use_tuple);
    if (body_ec) co_return fail(ErrorCode::unavailable, "the instance's service broke off its answer: " + body_ec.message());
    r.body = scrub(std::move(whole.get().body()), t.jupyter_token);
    co_return r;
  }
  auto parser = std::make_shared<http::response_parser<http::buffer_body>>(std::move(head_parser));
  parser->body_limit(boost::none);
  r.stream = [up, parser, secret = t.jupyter_token](StreamSink& sink) { return relay_body<Stream>(up, parser, secret, sink); };
  co_return r;
}

// Instance -> browser; the only writer of the browser's socket.
template <class Stream>
asio::awaitable<void> pump_down(websocket::stream<Stream>* up, WebSocketChannel* channel) {
  for (;;) {
    beast::flat_buffer buffer;
    auto [ec, n] = co_await up->async_read(buffer, use_tuple);
    if (ec) break;
    if (!co_await channel->write(beast::buffers_to_string(buffer.data()), up->got_binary())) break;
  }
  co_await channel->close();
}

// Browser -> instance; the only writer of the instance's socket.
template <class Stream>
asio::awaitable<void> pump_up(websocket::stream<Stream>* up, WebSocketChannel* channel) {
  for (;;) {
    auto message = co_await channel->read();
    if (!message) break;
    up->binary(message->binary);
    auto [ec, n] = co_await up->async_write(asio::buffer(message->data), use_tuple);
    if (ec) break;
  }
  if (up->is_open()) {
    auto [ec] = co_await up->async_close(websocket::close_code::normal, use_tuple);
    (void)ec;
  }
}

// Both pumps, then stops the watcher.
template <class Stream>
asio::awaitable<void> pump_both(websocket::stream<Stream>* up, WebSocketChannel* channel, bool* done,
                                asio::steady_timer* watcher) {
  co_await (pump_down(up, channel) && pump_up(up, channel));
  *done = true;
  watcher->cancel();
}

// Cuts the relay once the caller's token or session is revoked (a logout, a password change),
// its user disabled or demoted: the timer is parked with the app's waiters, so a revoke wakes
// it at once (as for terminals).
template <class Stream>
asio::awaitable<void> watch_access(App* app, AccessWatch access, websocket::stream<Stream>* up,
                                   const bool* done, asio::steady_timer* timer) {
  struct Parked {
    std::weak_ptr<App::Waiters> waiters;
    asio::steady_timer* timer;
    ~Parked() {
      if (auto w = waiters.lock()) w->erase(timer);
    }
  } parked{app->event_waiters_handle(), timer};
  while (!*done) {
    timer->expires_after(std::chrono::seconds(1));
    app->event_waiters().insert(timer);
    auto [ec] = co_await timer->async_wait(use_tuple);
    (void)ec;
    if (*done) break;
    if (!co_await access.still_valid()) {
      spdlog::info(R"({{"event":"proxy_websocket_revoked"}})");
      boost::system::error_code ignored;
      beast::get_lowest_layer(*up).socket().close(ignored);  // ends both pumps
      break;
    }
  }
}

template <class Stream>
asio::awaitable<void> relay_websocket(App* app, Request request, Target t, std::string token, auth::Principal principal,
                                      WebSocketChannel* channel) {
  websocket::stream<Stream> up(co_await asio::this_coro::executor);
  if (auto s = co_await connect(*app, beast::get_lowest_layer(up), t); !s) {
    std::string reason = s.error().detail;  // a named local: g++ 12, see architecture.md
    co_await channel->close(1011, std::move(reason));
    co_return;
  }
  beast::get_lowest_layer(up).expires_never();
  up.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  up.read_message_max(kUpstreamMessageMax);
  up.set_option(websocket::stream_base::decorator(
      [&request, &t](websocket::request_type& req) { copy_request_headers(request, t, req); }));
  beast::get_lowest_layer(up).expires_after(kConnectTimeout * 2);
  std::string host = t.address + ":" + std::to_string(t.port);
  auto [ec] = co_await up.async_handshake(host, t.path, use_tuple);
  if (ec) {
    std::string reason = "the instance's service refused the WebSocket: " + ec.message();
    co_await channel->close(1011, std::move(reason));
    co_return;
  }
  beast::get_lowest_layer(up).expires_never();
  bool done = false;
  asio::steady_timer watcher(co_await asio::this_coro::executor);
  AccessWatch access(*app, std::move(token), std::move(principal));
  co_await (pump_both(&up, channel, &done, &watcher) && watch_access(app, std::move(access), &up, &done, &watcher));
}

asio::awaitable<Result<Response>> proxy(RequestContext& ctx, Service service) {
  auto target = co_await resolve(ctx, service);
  if (!target) co_return tl::unexpected(target.error());
  co_await route_through_replica(ctx, *target);
  if (ctx.request.websocket_upgrade) {
    Response r{101, "", "", {}, {}, {}};
    r.websocket = [app = &ctx.app, request = ctx.request, t = std::move(*target), token = App::bearer_token(ctx.request),
                   principal = ctx.caller()](WebSocketChannel& channel) {
      if (t.route == Route::agent_link) return relay_websocket<LinkStream>(app, request, t, token, principal, &channel);
      return relay_websocket<beast::tcp_stream>(app, request, t, token, principal, &channel);
    };
    co_return r;
  }
  if (target->route == Route::agent_link) co_return co_await proxy_http<LinkStream>(ctx, std::move(*target));
  co_return co_await proxy_http<beast::tcp_stream>(ctx, std::move(*target));
}

asio::awaitable<Result<Response>> jupyter(RequestContext& ctx) { return proxy(ctx, Service::jupyter); }
asio::awaitable<Result<Response>> port(RequestContext& ctx) { return proxy(ctx, Service::port); }

}  // namespace

void register_proxy_routes(App& app) {
  auto& r = app.router();
  for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    r.add_prefix(method, "/api/v1/instances/{id}/jupyter/{path}", Access::user, "instances",
                 "The instance's Jupyter (HTTP and WebSocket; the owner only; the token is added here)", jupyter);
    r.add_prefix(method, "/api/v1/instances/{id}/proxy/{port}/{path}", Access::user, "instances",
                 "A declared TCP port's HTTP service (HTTP and WebSocket; the owner only; the prefix is stripped)", port);
  }
}

}  // namespace gpucloud::server
