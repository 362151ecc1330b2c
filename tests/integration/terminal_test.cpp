// The web terminal: a real WebSocket client against the real daemon and engine.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;

struct TerminalClient {
  asio::io_context io;
  websocket::stream<beast::tcp_stream> ws{io};
  std::string seen;

  void connect(int port, const std::string& path, const std::string& token) {
    beast::get_lowest_layer(ws).connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws.set_option(websocket::stream_base::decorator(
        [token](websocket::request_type& req) { req.set(beast::http::field::authorization, "Bearer " + token); }));
    ws.handshake("127.0.0.1", path);
  }
  void send(const std::string& keys) {
    ws.binary(true);
    ws.write(asio::buffer(keys));
  }
  void resize(int cols, int rows) {
    ws.text(true);
    ws.write(asio::buffer(json::serialize(json::object{{"type", "resize"}, {"cols", cols}, {"rows", rows}})));
  }
  // Reads until `needle` appears in everything received (or 15 s pass).
  bool wait_for(const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(15));
    while (seen.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      beast::flat_buffer buffer;
      beast::error_code ec;
      ws.read(buffer, ec);
      if (ec) return false;
      seen += beast::buffers_to_string(buffer.data());
    }
    return seen.find(needle) != std::string::npos;
  }
  void send_text(const std::string& text) {
    ws.text(true);
    ws.write(asio::buffer(text));
  }
  // Reads (keeping what arrives) until the server closes; its close code, or -1 when the
  // connection ended without a close frame or 15 s passed.
  int read_until_closed() {
    beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(15));
    for (;;) {
      beast::flat_buffer buffer;
      beast::error_code ec;
      ws.read(buffer, ec);
      if (ec == websocket::error::closed) return ws.reason().code;
      if (ec) return -1;
      seen += beast::buffers_to_string(buffer.data());
    }
  }
};

std::string terminal_host_config() {
  return R"(
[[hosts]]
name = "node-1"
cpu = 4
memory_gib = 16
port_range = ")" + port_range() + R"("
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
)";
}

// A daemon per test: DOCKER_ tests, which ctest runs one per entry (a shared suite holds none,
// CMakeLists.txt).
TEST(TerminalTest, DOCKER_ROOT_EchoResizeOwnerOnlyAndADroppedSocketEndsTheExec) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon daemon(DaemonOptions{terminal_host_config()});
  daemon.start();
  std::string alice = daemon.register_and_login("alice");
  ASSERT_EQ(daemon.post("/api/v1/instances", {{"name", "shell"}, {"gpu_count", 0}}, alice).status, 202);
  auto running = daemon.wait_for_state("shell", "running", alice);
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  std::string path = "/api/v1/instances/shell/terminal";

  TerminalClient client;
  client.connect(daemon.port(), path, alice);
  client.send("echo hello-$((20+22))\n");
  EXPECT_TRUE(client.wait_for("hello-42")) << client.seen;
  client.resize(120, 40);
  client.send("stty size\n");
  EXPECT_TRUE(client.wait_for("40 120")) << client.seen;

  // Another user's upgrade is refused before any WebSocket exists.
  std::string bob = daemon.register_and_login("bob");
  TerminalClient intruder;
  EXPECT_THROW(intruder.connect(daemon.port(), path, bob), boost::system::system_error);
  EXPECT_EQ(daemon.get(path, bob).status, 404);
  EXPECT_EQ(daemon.get(path, alice).status, 400) << "a plain GET is told to upgrade";

  // A dropped tab: close the TCP connection without a close frame; the exec must end.
  std::string container = "gpucloud-" + daemon.installation_id() + "-" + std::string(running.at("id").as_string());
  auto execs_running = [&] {
    auto inspect = json::parse(docker_api("GET", "/containers/" + container + "/json"));
    int count = 0;
    if (inspect.as_object().contains("ExecIDs") && inspect.at("ExecIDs").is_array())
      for (const auto& e : inspect.at("ExecIDs").as_array()) {
        auto exec = json::parse(docker_api("GET", "/exec/" + std::string(e.as_string()) + "/json"));
        count += exec.at("Running").as_bool();
      }
    return count;
  };
  EXPECT_GE(execs_running(), 1);
  beast::get_lowest_layer(client.ws).socket().close();
  EXPECT_TRUE(wait_until([&] { return execs_running() == 0; }, std::chrono::seconds(10),
                         "the shell's exec to end after its socket dropped", std::chrono::milliseconds(200)));
}

// The shell exiting closes the socket with a normal close; a text frame that is not a valid
// control message closes it with 1008 and a reason; a frame over 1 MiB with 1009. None of
// them harms the daemon: a new terminal works afterwards (and the harness fails the test if
// the daemon died).
TEST(TerminalTest, DOCKER_ROOT_AnExitedShellClosesTheSocketAndMalformedFramesCloseItWithAReason) {
  GPUCLOUD_NEED_ENGINE();
  TestDaemon daemon(DaemonOptions{terminal_host_config()});
  daemon.start();
  std::string alice = daemon.register_and_login("alice");
  ASSERT_EQ(daemon.post("/api/v1/instances", {{"name", "shell"}, {"gpu_count", 0}}, alice).status, 202);
  auto running = daemon.wait_for_state("shell", "running", alice);
  ASSERT_EQ(running.at("state").as_string(), "running") << json::serialize(running);
  const std::string path = "/api/v1/instances/shell/terminal";

  {
    TerminalClient client;
    client.connect(daemon.port(), path, alice);
    client.send("echo bye-$((6*7)); exit\n");
    EXPECT_EQ(client.read_until_closed(), static_cast<int>(websocket::close_code::normal)) << client.seen;
    EXPECT_NE(client.seen.find("bye-42"), std::string::npos) << client.seen;
  }

  struct Bad {
    const char* what;
    std::string text;
    const char* reason_has;
  };
  const Bad bad[] = {
      {"not JSON", "{\"type\":\"resize\",", "not JSON"},
      {"not an object", "[\"resize\", 80, 24]", "object"},
      {"an unknown type", R"({"type":"paste","data":"rm -rf /"})", "unknown control message type"},
      {"a huge resize", R"({"type":"resize","cols":100000,"rows":24})", "cols"},
      {"a negative resize", R"({"type":"resize","cols":80,"rows":-1})", "rows"},
  };
  for (const auto& b : bad) {
    TerminalClient client;
    client.connect(daemon.port(), path, alice);
    client.send_text(b.text);
    EXPECT_EQ(client.read_until_closed(), static_cast<int>(websocket::close_code::policy_error)) << b.what;
    EXPECT_NE(std::string(client.ws.reason().reason.c_str()).find(b.reason_has), std::string::npos)
        << b.what << ": " << client.ws.reason().reason.c_str();
  }

  {  // Over the 1 MiB message limit: Beast fails the connection with 1009.
    TerminalClient client;
    client.connect(daemon.port(), path, alice);
    client.ws.binary(true);
    beast::error_code ec;
    client.ws.write(asio::buffer(std::string((1 << 20) + 4096, 'x')), ec);  // may fail once the server closes
    const int code = client.read_until_closed();
    EXPECT_TRUE(code == static_cast<int>(websocket::close_code::too_big) || code == -1) << code;
  }

  // The daemon is unharmed: health, and a new shell that answers.
  EXPECT_EQ(daemon.get("/healthz").status, 200);
  TerminalClient client;
  client.connect(daemon.port(), path, alice);
  client.send("echo still-$((40+2))\n");
  EXPECT_TRUE(client.wait_for("still-42")) << client.seen;
}

}  // namespace
}  // namespace gpucloud::testing
