#pragma once
// The HTTP/1.1 front: one coroutine per connection on the single event loop, keep-alive,
// header/body size limits, idle and read timeouts, graceful shutdown.
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "config/config.h"
#include "core/result.h"
#include "server/http_types.h"

namespace gpucloud::server {

class App;

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, App& app, const config::Server& limits);

  // Binds "HOST:PORT" (port 0 picks a free one); returns the bound endpoint.
  Result<boost::asio::ip::tcp::endpoint> listen(const std::string& host_port);
  void start();
  // Stops accepting, closes idle connections, lets in-flight requests finish (up to `grace`).
  boost::asio::awaitable<void> shutdown(std::chrono::seconds grace);

  std::size_t open_connections() const { return connections_.size(); }

 private:
  struct Connection {
    boost::beast::tcp_stream* stream;
    bool busy;
  };
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);
  boost::asio::awaitable<void> websocket_session(
      boost::beast::tcp_stream& stream,
      boost::beast::http::request<boost::beast::http::string_body> upgrade, Response response);
  boost::asio::awaitable<void> stream_response(boost::beast::tcp_stream& stream, Response response,
                                               unsigned version);

  boost::asio::io_context& io_;
  App& app_;
  config::Server limits_;
  boost::asio::ip::tcp::acceptor acceptor_;
  bool stopping_ = false;
  std::uint64_t next_connection_ = 0;
  std::unordered_map<std::uint64_t, Connection> connections_;
  std::size_t in_flight_ = 0;
};

}  // namespace gpucloud::server
