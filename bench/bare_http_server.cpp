// The reference for bench/http_load.sh: the least an HTTP/1.1 server on gpucloudd's stack can
// do per request. Same shape as gpucloudd's front (one event-loop thread, one coroutine per
// connection, Boost.Beast parser and serializer, a timeout per request, keep-alive), but no
// routing, no authentication, no metrics, no log: every request gets the /healthz body.
//
//   bare_http_server [HOST:PORT]      (default 127.0.0.1:0; prints "listening on HOST:PORT")
#include <cstdio>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
const std::string kBody = R"({"status":"ok","version":")" GPUCLOUD_VERSION R"("})";

asio::awaitable<void> serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> request;
    stream.expires_after(std::chrono::seconds(120));
    auto [read_ec, read_n] = co_await http::async_read(stream, buffer, request, use_tuple);
    if (read_ec) break;
    http::response<http::string_body> response{http::status::ok, request.version()};
    response.set(http::field::server, "bare");
    response.set(http::field::content_type, "application/json");
    response.body() = kBody;
    response.keep_alive(request.keep_alive());
    response.prepare_payload();
    auto [write_ec, write_n] = co_await http::async_write(stream, response, use_tuple);
    if (write_ec || !response.keep_alive()) break;
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec) continue;
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = argc > 1 ? argv[1] : "127.0.0.1:0";
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "usage: bare_http_server [HOST:PORT]\n");
    return 2;
  }
  asio::io_context io(1);
  tcp::endpoint endpoint(asio::ip::make_address(listen.substr(0, colon)),
                         static_cast<unsigned short>(std::stoi(listen.substr(colon + 1))));
  tcp::acceptor acceptor(io, endpoint);
  std::printf("listening on %s:%u\n", acceptor.local_endpoint().address().to_string().c_str(),
              acceptor.local_endpoint().port());
  std::fflush(stdout);
  asio::co_spawn(io, accept_loop(acceptor), asio::detached);
  io.run();
}
