// libFuzzer: the terminal WebSocket's read path as the daemon runs it. The input is what a
// client sends after the upgrade (masked frames: data, continuation, ping, pong, close, in
// any order and any shape), fed to Beast's server-role stream with the daemon's message
// limit; every text message goes to the terminal's control-message parser, like
// handlers/terminal_routes.cpp does. Crashes, sanitizer reports or a control message
// accepted outside its limits fail. (The CLI has no WebSocket client: the daemon's reader
// is the one that faces the network.)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "server/terminal_control.h"

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using gpucloud::server::kTerminalMaxDimension;

namespace {
http::request<http::empty_body> upgrade_request() {
  http::request<http::empty_body> req{http::verb::get, "/api/v1/instances/x/terminal", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::upgrade, "websocket");
  req.set(http::field::connection, "upgrade");
  req.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  req.set(http::field::sec_websocket_version, "13");
  return req;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto req = upgrade_request();
  boost::asio::io_context ioc;
  beast::test::stream server(ioc), client(ioc);
  server.connect(client);
  websocket::stream<beast::test::stream&> ws(server);
  ws.read_message_max(gpucloud::server::kWebSocketMessageMaxBytes);
  beast::error_code ec;
  ws.accept(req, ec);
  if (ec) std::abort();  // the fixed upgrade must always be accepted
  server.append(std::string_view(reinterpret_cast<const char*>(data), size));
  server.close_remote();  // after the input: end of stream
  for (int messages = 0; messages < 10000; ++messages) {
    beast::flat_buffer buffer;
    ws.read(buffer, ec);
    if (ec) break;
    if (buffer.size() > gpucloud::server::kWebSocketMessageMaxBytes) std::abort();
    if (ws.got_binary()) continue;  // keystrokes: passed through as bytes
    auto control = gpucloud::server::parse_terminal_control(beast::buffers_to_string(buffer.data()));
    if (control && (control->rows < 1 || control->cols < 1 || control->rows > kTerminalMaxDimension ||
                    control->cols > kTerminalMaxDimension))
      std::abort();
    if (!control && (control.error().detail.empty() || control.error().detail.size() > 123)) std::abort();
  }
  return 0;
}
