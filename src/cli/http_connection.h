#pragma once
// One synchronous HTTP/1.1 connection of the CLI, shared by the plain request/response
// transport (http_client.cpp) and the Server-Sent Events reader (event_stream.cpp).
// Beast's timeouts apply to asynchronous operations, so each operation is started on
// stream() and run to completion on a private io_context with run().
#include <chrono>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>

#include "cli/http_client.h"
#include "core/result.h"

namespace gpucloud::cli {

class HttpConnection {
 public:
  // `timeout_reason`: how a timed-out operation reads in an error ("no answer within 60 s").
  HttpConnection(const Endpoint& endpoint, std::string timeout_reason);

  // Resolves and connects within min(timeout, 10 s).
  Status connect(std::chrono::milliseconds timeout);
  // Writes `request` with Host, User-Agent, `accept`, Connection: close and a JSON
  // Content-Type when it has a body and names none.
  Status send(const HttpRequest& request, std::string_view accept, std::chrono::milliseconds timeout);

  boost::beast::tcp_stream& stream() { return stream_; }
  void run();
  // An `unavailable` error naming the endpoint: "cannot WHAT gpucloud at URL: reason".
  Error unreachable(std::string_view what, const boost::system::error_code& ec) const;
  void shutdown();

 private:
  const Endpoint& endpoint_;
  std::string timeout_reason_;
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
};

}  // namespace gpucloud::cli
