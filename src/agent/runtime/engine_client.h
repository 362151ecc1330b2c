#pragma once
// HTTP/1.1 client for the Docker Engine API over its unix socket: Boost.Beast with C++20
// coroutines, for use on the agent's event loop (it never blocks a thread, and never runs
// the docker CLI). One connection per request: a unix-socket connect costs microseconds and
// it keeps exec/attach hijacking and long waits from tying up a shared connection.
//
// The API version is pinned (v1.41, what Debian 12's Docker 20.10 speaks; newer engines
// still serve it), so the engine's answers keep the shape this code was written against.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/json/value.hpp>


#include "core/result.h"

namespace gpucloud::agent::docker {

enum class Method { get, post, put, del };

struct EngineResponse {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// A connection the engine has taken over (exec start, attach): from here on raw bytes flow
// both ways. `buffered` holds what the HTTP reader had already read past the response
// header: it is the first output of the process and must be delivered before reading on.
struct HijackedConnection {
  boost::asio::local::stream_protocol::socket socket;
  std::string buffered;
};

struct ExecConfig {
  std::vector<std::string> cmd;
  std::vector<std::string> env;
  bool tty = false;
  bool attach_stdin = false;
  std::string user;         // empty: the container's user
  std::string working_dir;  // empty: the container's
};

struct ExecInspect {
  bool running = false;
  int exit_code = 0;
  std::int64_t pid = 0;
};

// stdout and stderr of a non-TTY exec or container log, split out of the engine's
// multiplexed stream (8-byte frame headers).
struct Demuxed {
  std::string out;
  std::string err;
  bool complete = true;  // false if the data ended inside a frame or had a bad header
};
Demuxed demux_stream(std::string_view data);

// Joins the pieces of a JSON-lines stream and hands out each complete line (without its
// newline; empty lines skipped). A line longer than `max_line` is dropped whole.
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 1u << 20) : max_line_(max_line) {}
  void feed(std::string_view piece, const std::function<void(std::string_view)>& on_line);

 private:
  std::string partial_;
  std::size_t max_line_;
  bool dropping_ = false;  // inside a line past max_line, until its newline
};

// Percent-encoding for query parameters.
std::string url_encode(std::string_view text);

// The engine's error answer as an Error: 400 → invalid_argument, 404 → not_found,
// 409 → conflict, 503 → unavailable, anything else → internal; the detail carries the
// engine's own message.
Error engine_error(unsigned status, std::string_view body);

// The messages of a streamed JSON answer (image pull/import/push: one JSON object after
// another). The engine answers such requests 200 even when they fail, with an "error" /
// "errorDetail" message in the stream: that is returned as an error here.
Result<std::vector<boost::json::value>> parse_message_stream(std::string_view body);

class EngineClient {
 public:
  struct Options {
    std::string socket_path = "/var/run/docker.sock";
    std::string api_version = "v1.41";
    std::chrono::milliseconds timeout{60'000};  // whole request, unless a call gives its own
    std::size_t body_limit = 64u << 20;         // largest answer read into memory
  };

  explicit EngineClient(boost::asio::any_io_executor executor);
  EngineClient(boost::asio::any_io_executor executor, Options options);

  const Options& options() const { return options_; }
  boost::asio::any_io_executor executor() const { return executor_; }

  // One request; the answer whatever its status. Errors only for transport failures
  // (engine not reachable → unavailable, timeout → unavailable). `target` is the path
  // below the version prefix, e.g. "/containers/json?all=1". timeout 0 = the default.
  boost::asio::awaitable<Result<EngineResponse>> request(
      Method method, std::string target, std::optional<boost::json::value> body = std::nullopt,
      std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

  // A request whose 2xx answer is JSON (or empty → null); other statuses → engine_error.
  boost::asio::awaitable<Result<boost::json::value>> call(
      Method method, std::string target, std::optional<boost::json::value> body = std::nullopt,
      std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

  // A request answered with a JSON message stream (chunked), see parse_message_stream.
  boost::asio::awaitable<Result<std::vector<boost::json::value>>> call_stream(
      Method method, std::string target, std::optional<boost::json::value> body = std::nullopt,
      std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

  // A GET answered with an endless stream of JSON lines (GET /events): `on_line` gets each
  // complete line as it arrives (chunks are joined and split at newlines). `connected` is
  // called once the engine has answered 200. Returns when the engine ends the stream (ok),
  // on a transport error or another status (an error). `timeout` covers only the exchange up
  // to the response header; the stream itself has none.
  boost::asio::awaitable<Status> follow(std::string target, std::function<void(std::string_view)> on_line,
                                        std::function<void()> connected = {},
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

  // Sends the request with "Connection: Upgrade / Upgrade: tcp" and, when the engine
  // answers 101 (or 200 with a raw stream), hands over the connection. `timeout` covers
  // only the exchange up to the response header; the connection itself has none.
  boost::asio::awaitable<Result<HijackedConnection>> hijack(
      Method method, std::string target, std::optional<boost::json::value> body = std::nullopt,
      std::chrono::milliseconds timeout = std::chrono::milliseconds{0});

  // Exec: create (returns the exec id), start on a taken-over connection, resize its TTY,
  // inspect (running / exit code).
  boost::asio::awaitable<Result<std::string>> exec_create(std::string container, ExecConfig config);
  boost::asio::awaitable<Result<HijackedConnection>> exec_start_hijacked(std::string exec_id,
                                                                         bool tty);
  boost::asio::awaitable<Status> exec_resize(std::string exec_id, int rows, int cols);
  boost::asio::awaitable<Result<ExecInspect>> exec_inspect(std::string exec_id);

 private:
  boost::asio::any_io_executor executor_;
  Options options_;
};

}  // namespace gpucloud::agent::docker
