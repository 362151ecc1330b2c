#include "agent/runtime/engine_pipe.h"

#include <functional>
#include <string_view>
#include <vector>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace gpucloud::agent::docker {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = net::local::stream_protocol;
using Stream = beast::basic_stream<local, net::any_io_executor, beast::unlimited_rate_policy>;
using net::awaitable;
using net::redirect_error;
using net::use_awaitable;

namespace {
Error pipe_error(const std::string& what, const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) return Error{ErrorCode::unavailable, "docker engine: timed out " + what, {}, 0};
  return Error{ErrorCode::unavailable, "docker engine: " + what + ": " + ec.message(), {}, 0};
}
}  // namespace

awaitable<Result<EngineResponse>> pipe_between(net::any_io_executor executor, EngineClient::Options options,
                                               std::string source_target, std::string sink_target,
                                               std::string sink_content_type, std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  const local::endpoint endpoint(options.socket_path);
  Stream source(executor);
  source.expires_after(timeout);
  co_await source.async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("connecting", ec));
  http::request<http::empty_body> get{http::verb::get, "/" + options.api_version + source_target, 11};
  get.set(http::field::host, "docker");
  get.set(http::field::user_agent, "gpucloud-agent");
  co_await http::async_write(source, get, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("sending " + source_target, ec));
  beast::flat_buffer source_buffer;
  http::response_parser<http::buffer_body> from;
  from.body_limit(boost::none);  // a whole filesystem
  co_await http::async_read_header(source, source_buffer, from, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("reading the answer to " + source_target, ec));
  std::vector<char> piece(1 << 20);
  if (from.get().result_int() != 200) {
    // The engine's error: small, read whole.
    std::string message;
    while (!from.is_done() && message.size() < (64u << 10)) {
      from.get().body().data = piece.data();
      from.get().body().size = piece.size();
      co_await http::async_read(source, source_buffer, from, redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      message.append(piece.data(), piece.size() - from.get().body().size);
    }
    co_return fail(engine_error(from.get().result_int(), message));
  }

  // The body, piece by piece, into the sink's chunked POST.
  std::function<awaitable<Result<std::string_view>>()> next = [&]() -> awaitable<Result<std::string_view>> {
    while (!from.is_done()) {
      from.get().body().data = piece.data();
      from.get().body().size = piece.size();
      co_await http::async_read(source, source_buffer, from, redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return fail(pipe_error("reading " + source_target, ec));
      const std::size_t n = piece.size() - from.get().body().size;
      if (n > 0) co_return std::string_view(piece.data(), n);
    }
    co_return std::string_view();
  };
  auto out = co_await post_streamed(executor, options, sink_target, sink_content_type, next, timeout);
  boost::system::error_code ignored;
  source.socket().shutdown(local::socket::shutdown_both, ignored);
  co_return out;
}

awaitable<Result<EngineResponse>> post_streamed(net::any_io_executor executor, EngineClient::Options options,
                                                std::string sink_target, std::string content_type,
                                                std::function<awaitable<Result<std::string_view>>()> next,
                                                std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  const local::endpoint endpoint(options.socket_path);
  Stream sink(executor);
  sink.expires_after(timeout);
  co_await sink.async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("connecting", ec));
  http::request<http::empty_body> post{http::verb::post, "/" + options.api_version + sink_target, 11};
  post.set(http::field::host, "docker");
  post.set(http::field::user_agent, "gpucloud-agent");
  post.set(http::field::content_type, content_type);
  post.chunked(true);
  http::request_serializer<http::empty_body> header(post);
  co_await http::async_write_header(sink, header, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("sending " + sink_target, ec));
  for (;;) {
    auto piece = co_await next();
    if (!piece) {
      // Cut the request short: the engine sees a broken body and keeps nothing of it.
      boost::system::error_code ignored;
      sink.socket().shutdown(local::socket::shutdown_both, ignored);
      co_return fail(std::move(piece.error()));
    }
    if (piece->empty()) break;
    co_await net::async_write(sink, http::make_chunk(net::const_buffer(piece->data(), piece->size())),
                              redirect_error(use_awaitable, ec));
    if (ec) co_return fail(pipe_error("sending to " + sink_target, ec));
  }
  co_await net::async_write(sink, http::make_chunk_last(), redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("sending to " + sink_target, ec));
  beast::flat_buffer sink_buffer;
  http::response_parser<http::string_body> answer;
  answer.body_limit(options.body_limit);
  co_await http::async_read(sink, sink_buffer, answer, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(pipe_error("reading the answer to " + sink_target, ec));
  EngineResponse out;
  out.status = answer.get().result_int();
  out.content_type = std::string(answer.get()[http::field::content_type]);
  out.body = std::move(answer.get().body());
  boost::system::error_code ignored;
  sink.socket().shutdown(local::socket::shutdown_both, ignored);
  co_return out;
}

}  // namespace gpucloud::agent::docker
