#include "server/http_server.h"

#include <string.h>

#include <algorithm>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include "server/app.h"
#include "server/request_conversion.h"
#include "server/terminal_control.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

HttpServer::HttpServer(asio::io_context& io, App& app, const config::Server& limits)
    : io_(io), app_(app), limits_(limits), acceptor_(io) {}

Result<tcp::endpoint> HttpServer::listen(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos) return fail(ErrorCode::invalid_argument, "listen: expected HOST:PORT, got " + host_port);
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "listen: \"" + host + "\" is not an IP address");
  int port = 0;
  try {
    port = std::stoi(host_port.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) return fail(ErrorCode::invalid_argument, "listen: bad port in " + host_port);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(ErrorCode::unavailable, "listen on " + host_port + ": " + ec.message());
  return acceptor_.local_endpoint();
}

void HttpServer::start() { asio::co_spawn(io_, accept_loop(), asio::detached); }

asio::awaitable<void> HttpServer::accept_loop() {
  // Out of descriptors (EMFILE/ENFILE) or kernel memory, the pending connection stays queued
  // and accept fails again at once: retrying without a pause would spin the event loop.
  constexpr auto kFirstPause = std::chrono::milliseconds(10);
  constexpr auto kLongestPause = std::chrono::milliseconds(1000);
  asio::steady_timer backoff(io_);
  auto pause = kFirstPause;
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) break;
      bool resource = ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
                      ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
      if (!resource) continue;  // e.g. the client reset before we accepted: the next one is fine
      // strerror_r, not a category's virtual message(): with no descriptor left, UBSan's check
      // of a virtual call it has not seen before cannot open the pipe it probes memory with
      // and reports a false "invalid vptr" (clang builds). Accept's errors are errno values.
      char text[128];
      spdlog::warn(R"({{"event":"accept_failed","error":"{}","retry_in_ms":{}}})",
                   ::strerror_r(ec.value(), text, sizeof text), pause.count());
      backoff.expires_after(pause);
      auto [wait_ec] = co_await backoff.async_wait(use_tuple);
      (void)wait_ec;
      pause = std::min(pause * 2, kLongestPause);
      continue;
    }
    pause = kFirstPause;
    if (connections_.size() >= static_cast<std::size_t>(limits_.max_connections)) {
      // Full: this one is closed at once, so the open ones keep being served.
      socket.close(ec);
      app_.metrics().connection_refused();
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
  }
}

namespace {

// A response's own headers replace the defaults set before them; several Set-Cookie headers
// (a proxied service's) all go out, each on its own line.
template <class Message>
void add_headers(Message& out, const std::vector<std::pair<std::string, std::string>>& headers) {
  for (const auto& [name, value] : headers) {
    if (beast::iequals(name, "set-cookie")) out.insert(http::field::set_cookie, value);
    else out.set(name, value);
  }
}

// A target that may name an instance's web-service proxy (/api/v1/instances/ID/jupyter/...
// or .../proxy/PORT/...): the router decides; this only spares every other request the look.
bool may_be_proxy_target(std::string_view target) {
  return target.starts_with("/api/v1/instances/") &&
         (target.find("/jupyter") != std::string_view::npos || target.find("/proxy/") != std::string_view::npos);
}

http::response<http::string_body> to_beast(Response&& r, unsigned version, bool keep_alive) {
  http::response<http::string_body> out{static_cast<http::status>(r.status), version};
  out.set(http::field::server, "gpucloudd");
  if (!r.content_type.empty()) out.set(http::field::content_type, r.content_type);
  add_headers(out, r.headers);
  out.body() = std::move(r.body);
  out.keep_alive(keep_alive);
  out.prepare_payload();
  return out;
}

}  // namespace

asio::awaitable<void> HttpServer::serve(tcp::socket socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  std::string client = ec ? "unknown" : remote.address().to_string();
  beast::tcp_stream stream(std::move(socket));
  std::uint64_t id = next_connection_++;
  Connection& connection = connections_.emplace(id, Connection{&stream, false}).first->second;  // stable
  app_.metrics().connection_opened();
  beast::flat_buffer buffer;
  bool unread_body = false;  // a refused body is still arriving when we close

  bool first_request = true;
  while (!stopping_) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    // The larger limit while the header comes; the request's own is set once it is known.
    const auto body_limit = static_cast<std::uint64_t>(limits_.max_body_bytes);
    const auto proxy_body_limit = static_cast<std::uint64_t>(limits_.proxy_max_body_bytes);
    parser.body_limit(std::max(body_limit, proxy_body_limit));
    // A connection's first request must bring its header within header_timeout of the
    // accept; between keep-alive requests the idle timeout runs until the next first byte,
    // then header_timeout for the rest of that header, so a client that trickles a header
    // cannot hold its connection.
    if (buffer.size() == 0) {
      stream.expires_after(first_request ? limits_.header_timeout : limits_.idle_timeout);
      auto [first_ec, n] = co_await stream.async_read_some(buffer.prepare(beast::read_size(buffer, 65536)), use_tuple);
      if (first_ec) break;
      buffer.commit(n);
    }
    first_request = false;
    stream.expires_after(limits_.header_timeout);
    // Usually the whole header came in that one read: parse it here rather than through
    // another asynchronous read (which would complete through the scheduler).
    beast::error_code header_ec;
    buffer.consume(parser.put(buffer.data(), header_ec));
    if (header_ec == http::error::need_more && !parser.is_header_done()) {
      auto [rest_ec, rest_n] = co_await http::async_read_header(stream, buffer, parser, use_tuple);
      header_ec = rest_ec;
    } else if (header_ec == http::error::need_more) {
      header_ec = {};  // the header is complete; the body follows below
    }
    bool too_large = header_ec == http::error::body_limit;
    if (header_ec && !too_large) break;  // closed, timeout, garbage, or shutdown
    connection.busy = true;
    ++in_flight_;
    std::uint64_t limit = body_limit;
    if (!too_large && !parser.is_done()) {
      // Only an authenticated caller of an instance's web-service proxy may send more than
      // max_body_bytes (a Notebook upload): nobody else makes the server hold that much.
      if (proxy_body_limit > body_limit && may_be_proxy_target(parser.get().target())) {
        Status header_valid = ok();
        Request header_only = to_request(parser.get(), client, header_valid);
        bool admitted = false;
        if (header_valid) admitted = co_await app_.admits_proxy_body(header_only);
        if (admitted) limit = proxy_body_limit;
      }
      auto length = parser.content_length();
      if (length && *length > limit) too_large = true;
      else parser.body_limit(limit);  // before any body octet: a chunked body counts against it
    } else if (too_large) {
      limit = may_be_proxy_target(parser.get().target()) ? std::max(body_limit, proxy_body_limit) : body_limit;
    }
    stream.expires_after(limits_.read_timeout);
    if (!too_large && !parser.is_done()) {
      auto [body_ec, body_bytes] = co_await http::async_read(stream, buffer, parser, use_tuple);
      too_large = body_ec == http::error::body_limit;
      if (body_ec && !too_large) {
        --in_flight_;
        break;
      }
    }
    Response response;
    bool keep_alive = false;
    unsigned version = parser.get().version();
    if (too_large) {
      unread_body = true;
      response = problem_response(Error{ErrorCode::payload_too_large,
                                        "request body exceeds " + std::to_string(limit) + " bytes",
                                        {}, 0});
    } else {
      keep_alive = parser.get().keep_alive();
      Status valid = ok();
      Request request = to_request(parser.get(), client, valid);
      // Not a ?: around co_await: g++ 12 miscompiles co_await inside conditional expressions.
      request.websocket_upgrade = beast::websocket::is_upgrade(parser.get());
      if (valid) {
        response = co_await app_.handle(request);
      } else {
        response = problem_response(valid.error());
      }
    }
    keep_alive = keep_alive && !stopping_;
    if (parser.get().method() == http::verb::head) {
      // HEAD: the GET's status and headers, its length, no body (and no stream).
      http::response<http::empty_body> head{static_cast<http::status>(response.status), version};
      head.set(http::field::server, "gpucloudd");
      if (!response.content_type.empty()) head.set(http::field::content_type, response.content_type);
      add_headers(head, response.headers);
      if (response.stream || response.websocket) keep_alive = false;
      else head.content_length(response.body.size());
      head.keep_alive(keep_alive);
      http::response_serializer<http::empty_body> serializer(head);
      auto [head_ec, head_written] = co_await http::async_write_header(stream, serializer, use_tuple);
      --in_flight_;
      connection.busy = false;
      if (head_ec || !keep_alive) break;
      continue;
    }
    if (response.websocket && beast::websocket::is_upgrade(parser.get())) {
      --in_flight_;
      connection.busy = false;
      co_await websocket_session(stream, parser.release(), std::move(response));
      connections_.erase(id);
      app_.metrics().connection_closed();
      co_return;  // the WebSocket owned the connection to its end
    }
    if (response.stream) {
      co_await stream_response(stream, std::move(response), version);
      --in_flight_;
      break;  // a stream ends its connection
    }
    auto out = to_beast(std::move(response), version, keep_alive);
    auto [write_ec, written] = co_await http::async_write(stream, out, use_tuple);
    --in_flight_;
    connection.busy = false;
    if (write_ec || !keep_alive) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (unread_body) {
    // Lingering close: read and drop what the client is still sending, so closing does not
    // reset the connection under it before it has read our 413 (bounded in time and bytes).
    stream.expires_after(std::chrono::seconds(2));
    // On the heap, only here: an array would sit in every connection's coroutine frame.
    std::vector<char> sink(16 * 1024);
    std::size_t drained = 0;
    while (drained < 64u * 1024 * 1024) {
      auto [drain_ec, n] = co_await stream.async_read_some(asio::buffer(sink), use_tuple);
      if (drain_ec) break;
      drained += n;
    }
  }
  stream.close();
  connections_.erase(id);
  app_.metrics().connection_closed();
}

namespace {
// Chunked transfer for long-lived answers; each write has its own timeout so a stuck
// client cannot hold the coroutine forever.
class ChunkSink : public StreamSink {
 public:
  explicit ChunkSink(beast::tcp_stream& stream) : stream_(stream) {}
  asio::awaitable<bool> write(std::string chunk) override {
    if (chunk.empty()) co_return true;
    stream_.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await asio::async_write(stream_, http::make_chunk(asio::buffer(chunk)), use_tuple);
    co_return !ec;
  }

 private:
  beast::tcp_stream& stream_;
};
}  // namespace

namespace {
class BeastWebSocket : public WebSocketChannel {
 public:
  explicit BeastWebSocket(beast::websocket::stream<beast::tcp_stream>& ws) : ws_(ws) {}
  asio::awaitable<std::optional<Message>> read() override {
    beast::flat_buffer buffer;
    auto [ec, n] = co_await ws_.async_read(buffer, use_tuple);
    if (ec) co_return std::nullopt;
    co_return Message{ws_.got_binary(), beast::buffers_to_string(buffer.data())};
  }
  asio::awaitable<bool> write(std::string data, bool binary) override {
    ws_.binary(binary);
    auto [ec, n] = co_await ws_.async_write(asio::buffer(data), use_tuple);
    co_return !ec;
  }
  asio::awaitable<void> close() override {
    std::string no_reason;
    co_await close(static_cast<std::uint16_t>(beast::websocket::close_code::normal), std::move(no_reason));
  }
  asio::awaitable<void> close(std::uint16_t code, std::string reason) override {
    // Beast allows one close at a time: the terminal's two pumps may both ask for one.
    if (closing_ || !ws_.is_open()) co_return;
    closing_ = true;
    if (reason.size() > 123) reason.resize(123);
    beast::websocket::close_reason why(static_cast<beast::websocket::close_code>(code), beast::string_view(reason));
    auto [ec] = co_await ws_.async_close(why, use_tuple);
    (void)ec;
  }

 private:
  beast::websocket::stream<beast::tcp_stream>& ws_;
  bool closing_ = false;
};
}  // namespace

asio::awaitable<void> HttpServer::websocket_session(beast::tcp_stream& stream, http::request<http::string_body> upgrade,
                                                     Response response) {
  beast::websocket::stream<beast::tcp_stream> ws(std::move(stream));
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(beast::websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws.read_message_max(kWebSocketMessageMaxBytes);
  auto [ec] = co_await ws.async_accept(upgrade, use_tuple);
  if (ec) co_return;
  BeastWebSocket channel(ws);
  co_await response.websocket(channel);
  if (ws.is_open()) co_await channel.close();
}

asio::awaitable<void> HttpServer::stream_response(beast::tcp_stream& stream, Response response, unsigned version) {
  http::response<http::empty_body> head{static_cast<http::status>(response.status), version};
  head.set(http::field::server, "gpucloudd");
  head.set(http::field::content_type, response.content_type);
  head.set(http::field::cache_control, "no-cache");
  add_headers(head, response.headers);
  head.chunked(true);
  head.keep_alive(false);
  http::response_serializer<http::empty_body> serializer{head};
  stream.expires_after(std::chrono::seconds(30));
  auto [ec, n] = co_await http::async_write_header(stream, serializer, use_tuple);
  if (ec) co_return;
  ChunkSink sink(stream);
  co_await response.stream(sink);
  stream.expires_after(std::chrono::seconds(5));
  auto [last_ec, last_n] = co_await asio::async_write(stream, http::make_chunk_last(), use_tuple);
  (void)last_ec;
}

asio::awaitable<void> HttpServer::shutdown(std::chrono::seconds grace) {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& [id, conn] : connections_)
    if (!conn.busy) conn.stream->socket().cancel(ec);  // wakes the idle reader, which exits
  auto deadline = std::chrono::steady_clock::now() + grace;
  asio::steady_timer wait(io_);
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < deadline) {
    wait.expires_after(std::chrono::milliseconds(20));
    co_await wait.async_wait(use_tuple);
  }
  if (in_flight_ > 0) spdlog::warn("shutdown: {} requests still running after {} s", in_flight_, grace.count());
  for (auto& [id, conn] : connections_) conn.stream->socket().cancel(ec);
}

}  // namespace gpucloud::server
