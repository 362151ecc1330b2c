#pragma once
// The HTTP request and response as handlers see them: plain values, no Beast, so handler
// files stay quick to compile and easy to test.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include "core/result.h"

namespace gpucloud::server {

struct Request {
  std::string method;   // "GET", "POST", ...
  std::string path;     // without the query string
  std::string query_string;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;
  std::string client_address;
  std::map<std::string, std::string> params;  // path parameters, e.g. {"id": "i-..."}
  bool websocket_upgrade = false;

  std::string_view header(std::string_view lower_name) const;
  std::map<std::string, std::string> query() const;  // decoded; last value wins
};

// Where a streaming response (Server-Sent Events) writes its chunks; write() is false once
// the client has gone.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual boost::asio::awaitable<bool> write(std::string chunk) = 0;
};

// A WebSocket after the upgrade: binary and text messages both ways. One reader and one
// writer at a time (the writer side serialises writes).
class WebSocketChannel {
 public:
  struct Message {
    bool binary = false;
    std::string data;
  };
  virtual ~WebSocketChannel() = default;
  virtual boost::asio::awaitable<std::optional<Message>> read() = 0;  // nullopt once closed
  virtual boost::asio::awaitable<bool> write(std::string data, bool binary) = 0;
  // Closes with 1000 (normal). Once one close has begun, later ones return at once.
  virtual boost::asio::awaitable<void> close() = 0;
  // Closes with `code` (e.g. 1008, policy violation) and a reason of at most 123 bytes.
  virtual boost::asio::awaitable<void> close(std::uint16_t code, std::string reason) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is produced by this coroutine, chunk by chunk, after the headers.
  std::function<boost::asio::awaitable<void>(StreamSink&)> stream;
  // When set on an upgrade request, the connection becomes this WebSocket session.
  std::function<boost::asio::awaitable<void>(WebSocketChannel&)> websocket;
};

Response json_response(int status, const boost::json::value& body);
Response problem_response(const Error& error);
Response empty_response(int status);

}  // namespace gpucloud::server
