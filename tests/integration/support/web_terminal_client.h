#pragma once
// A blocking client of the web terminal (GET /api/v1/instances/{id}/terminal): binary frames
// carry keystrokes and output, text frames resizes. As terminal_test.cpp's, for other suites.
#include <chrono>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

namespace gpucloud::testing {

struct WebTerminalClient {
  boost::asio::io_context io;
  boost::beast::websocket::stream<boost::beast::tcp_stream> ws{io};
  std::string seen;

  void connect(int port, const std::string& path, const std::string& token) {
    namespace beast = boost::beast;
    beast::get_lowest_layer(ws).connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    ws.set_option(beast::websocket::stream_base::decorator([token](beast::websocket::request_type& req) {
      req.set(beast::http::field::authorization, "Bearer " + token);
    }));
    ws.handshake("127.0.0.1", path);
  }
  void send(const std::string& keys) {
    ws.binary(true);
    ws.write(boost::asio::buffer(keys));
  }
  void resize(int cols, int rows) {
    ws.text(true);
    ws.write(boost::asio::buffer(
        boost::json::serialize(boost::json::object{{"type", "resize"}, {"cols", cols}, {"rows", rows}})));
  }
  // One message, or an error once `limit` passed (the stream's timer; a blocking read would
  // ignore it and wait for ever).
  boost::beast::error_code read_one(std::chrono::steady_clock::duration limit) {
    namespace beast = boost::beast;
    beast::get_lowest_layer(ws).expires_after(limit);
    beast::flat_buffer buffer;
    beast::error_code ec;
    bool done = false;
    ws.async_read(buffer, [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    io.restart();
    while (!done && io.run_one() > 0) {
    }
    if (!ec) seen += beast::buffers_to_string(buffer.data());
    return ec;
  }
  // Reads until `needle` appears in everything received (or `limit` passes).
  bool wait_for(const std::string& needle, std::chrono::seconds limit = std::chrono::seconds(15)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (seen.find(needle) == std::string::npos) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero() || read_one(left)) break;
    }
    return seen.find(needle) != std::string::npos;
  }
  // Reads (keeping what arrives) until the server closes: its close code, or -1 when the
  // connection ended without a close frame or `limit` passed.
  int read_until_closed(std::chrono::seconds limit = std::chrono::seconds(15)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) return -1;
      auto ec = read_one(left);
      if (ec == boost::beast::websocket::error::closed) return ws.reason().code;
      if (ec) return -1;
    }
  }
};

}  // namespace gpucloud::testing
