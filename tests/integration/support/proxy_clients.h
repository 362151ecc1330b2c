#pragma once
// What the instance-proxy tests drive through the proxy (an instance on this machine's host
// or on a remote one): a command started detached in the instance's container, a WebSocket
// client, and one Jupyter cell run over a kernel's channels.
#include <chrono>
#include <map>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {

// Runs `command` detached in the container (the engine's exec API).
inline void exec_detached(const std::string& container, const std::string& command) {
  boost::json::object create{{"Cmd", boost::json::array{"sh", "-c", command}}, {"AttachStdout", false}, {"AttachStderr", false}};
  auto made = boost::json::parse(docker_api("POST", "/containers/" + container + "/exec", boost::json::serialize(create)));
  ASSERT_TRUE(made.as_object().contains("Id")) << boost::json::serialize(made);
  docker_api("POST", "/exec/" + std::string(made.at("Id").as_string()) + "/start", R"({"Detach":true})");
}

struct WsClient {
  boost::asio::io_context io;
  boost::beast::websocket::stream<boost::beast::tcp_stream> ws{io};
  void connect(int port, const std::string& path, const std::string& token) {
    connect_with(port, path, {{"Authorization", "Bearer " + token}});
  }
  void connect_with(int port, const std::string& path, std::map<std::string, std::string> headers) {
    boost::beast::get_lowest_layer(ws).connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    ws.set_option(boost::beast::websocket::stream_base::decorator([headers](boost::beast::websocket::request_type& req) {
      for (const auto& [name, value] : headers) req.set(name, value);
    }));
    boost::beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(30));
    ws.handshake("127.0.0.1", path);
  }
  // Reads text messages until one contains `needle` (30 s at most); all of them, a line each.
  std::string read_until(const std::string& needle) {
    std::string seen;
    boost::beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(30));
    while (seen.find(needle) == std::string::npos) {
      boost::beast::flat_buffer buffer;
      boost::beast::error_code ec;
      ws.read(buffer, ec);
      if (ec) break;
      seen += boost::beast::buffers_to_string(buffer.data()) + "\n";
    }
    return seen;
  }
};

// Runs `code` as one cell on the kernel whose channels `ws` is connected to; the
// execute_result's text/plain ("" when none came; `seen` gets every message read).
inline std::string run_jupyter_cell(WsClient& ws, const std::string& code, std::string* seen = nullptr) {
  namespace json = boost::json;
  json::object execute{
      {"header", {{"msg_id", "m-1"}, {"username", "test"}, {"session", "test-session"}, {"msg_type", "execute_request"},
                  {"version", "5.3"}, {"date", ""}}},
      {"parent_header", json::object{}},
      {"metadata", json::object{}},
      {"content", {{"code", code}, {"silent", false}, {"store_history", true}, {"user_expressions", json::object{}},
                   {"allow_stdin", false}, {"stop_on_error", true}}},
      {"channel", "shell"},
      {"buffers", json::array{}}};
  ws.ws.text(true);
  ws.ws.write(boost::asio::buffer(json::serialize(execute)));
  const std::string messages = ws.read_until("execute_result");
  if (seen) *seen = messages;
  std::string result;
  std::size_t from = 0;
  for (auto nl = messages.find('\n'); nl != std::string::npos; from = nl + 1, nl = messages.find('\n', from)) {
    boost::system::error_code ec;
    auto message = json::parse(messages.substr(from, nl - from), ec);
    if (ec || !message.is_object() || !message.as_object().contains("msg_type")) continue;
    if (message.at("msg_type") == "execute_result")
      result = std::string(message.at("content").at("data").at("text/plain").as_string());
  }
  return result;
}

// Through `d`'s proxy to instance `id`'s Jupyter: waits for its API (60 s), starts a kernel and
// runs 6*7 over the kernel's WebSocket. "42", or what went wrong instead.
inline std::string jupyter_six_times_seven(const TestDaemon& d, const std::string& id, const std::string& token) {
  const std::string nb = "/api/v1/instances/" + id + "/jupyter";
  HttpResult status;
  const bool up = static_cast<bool>(wait_until(
      [&] {
        status = d.get(nb + "/api/status", token);
        return status.status == 200;
      },
      std::chrono::seconds(60), "Jupyter's API through the proxy", std::chrono::milliseconds(300)));
  if (!up) return "Jupyter's API answered " + std::to_string(status.status) + " " + status.body;
  auto kernel = d.request("POST", nb + "/api/kernels", "{}", token);
  if (kernel.status != 201) return "starting a kernel answered " + std::to_string(kernel.status) + " " + kernel.body;
  WsClient ws;
  ws.connect(d.port(), nb + "/api/kernels/" + std::string(kernel.json().at("id").as_string()) + "/channels?session_id=proxied",
             token);
  std::string seen;
  const std::string result = run_jupyter_cell(ws, "6*7", &seen);
  return result == "42" ? result : "the cell gave '" + result + "'; messages:\n" + seen;
}

}  // namespace gpucloud::testing
