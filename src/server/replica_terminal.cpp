#include "server/replica_terminal.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

namespace gpucloud::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::chrono::seconds kOpenTimeout{10};

// One read and one write at a time, as the terminal route's two pumps use it.
class ReplicaTerminalSession final : public agent::TerminalSession {
 public:
  explicit ReplicaTerminalSession(std::unique_ptr<websocket::stream<beast::tcp_stream>> ws) : ws_(std::move(ws)) {}
  ~ReplicaTerminalSession() override { close(); }

  asio::awaitable<Result<std::string>> read() override {
    for (;;) {
      beast::flat_buffer buffer;
      auto [ec, n] = co_await ws_->async_read(buffer, kUseTuple);
      if (ec) co_return std::string();  // closed by either side: the shell's end, as seen from here
      if (buffer.size() > 0) co_return beast::buffers_to_string(buffer.data());  // "" would mean the end
    }
  }
  asio::awaitable<Status> write(std::string data) override {
    ws_->binary(true);
    auto [ec, n] = co_await ws_->async_write(asio::buffer(data), kUseTuple);
    if (ec) co_return fail(ErrorCode::unavailable, "the serving replica's terminal: " + ec.message());
    co_return ok();
  }
  asio::awaitable<Status> resize(int rows, int cols) override {
    std::string control =
        boost::json::serialize(boost::json::object{{"type", "resize"}, {"cols", cols}, {"rows", rows}});
    ws_->text(true);
    auto [ec, n] = co_await ws_->async_write(asio::buffer(control), kUseTuple);
    if (ec) co_return fail(ErrorCode::unavailable, "the serving replica's terminal: " + ec.message());
    co_return ok();
  }
  asio::awaitable<Result<int>> exit_code() override {
    co_return fail(ErrorCode::unavailable, "the exit code stays with the replica that served the shell");
  }
  void close() override {
    boost::system::error_code ignored;
    beast::get_lowest_layer(*ws_).socket().close(ignored);  // ends a pending read and write
  }

 private:
  std::unique_ptr<websocket::stream<beast::tcp_stream>> ws_;
};

}  // namespace

std::string replica_api_url(const std::string& address, unsigned short port) {
  std::string host = address;
  if (host == "0.0.0.0" || host == "::") {
    char name[256] = {};
    (void)::gethostname(name, sizeof name - 1);
    host = name;
  } else if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  return "http://" + host + ":" + std::to_string(port);
}

asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_replica_terminal(asio::any_io_executor executor,
                                                                                     std::string api_url,
                                                                                     std::string instance_id,
                                                                                     std::string token) {
  auto url = boost::urls::parse_absolute_uri(api_url);
  if (!url || url->scheme() != "http" || !url->has_authority())
    co_return fail(ErrorCode::unavailable, "the serving replica's address is not http://HOST:PORT: " + api_url);
  std::string host(url->encoded_host_name());
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  std::string port = url->has_port() ? std::string(url->port()) : "80";
  tcp::resolver resolver(executor);
  auto [resolve_ec, endpoints] = co_await resolver.async_resolve(host, port, kUseTuple);
  if (resolve_ec)
    co_return fail(ErrorCode::unavailable, "the serving replica " + api_url + " cannot be resolved: " + resolve_ec.message());
  auto ws = std::make_unique<websocket::stream<beast::tcp_stream>>(executor);
  beast::get_lowest_layer(*ws).expires_after(kOpenTimeout);
  auto [connect_ec, endpoint] = co_await beast::get_lowest_layer(*ws).async_connect(endpoints, kUseTuple);
  if (connect_ec)
    co_return fail(ErrorCode::unavailable, "the serving replica " + api_url + " does not answer: " + connect_ec.message());
  ws->set_option(websocket::stream_base::decorator([token](websocket::request_type& req) {
    req.set(beast::http::field::authorization, "Bearer " + token);
    req.set(kReplicaRelayHeader, "1");
  }));
  const std::string target = "/api/v1/instances/" + instance_id + "/terminal";
  const std::string host_header = host + ":" + port;
  auto [handshake_ec] = co_await ws->async_handshake(host_header, target, kUseTuple);
  if (handshake_ec)
    co_return fail(ErrorCode::unavailable, "the serving replica " + api_url + " refused the terminal: " + handshake_ec.message());
  beast::get_lowest_layer(*ws).expires_never();
  ws->set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  co_return std::unique_ptr<agent::TerminalSession>(std::make_unique<ReplicaTerminalSession>(std::move(ws)));
}

}  // namespace gpucloud::server
