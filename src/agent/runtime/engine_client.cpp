#include "agent/runtime/engine_client.h"

#include <cctype>
#include <utility>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

namespace gpucloud::agent::docker {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using local = net::local::stream_protocol;
using Stream = beast::basic_stream<local, net::any_io_executor, beast::unlimited_rate_policy>;
using net::awaitable;
using net::redirect_error;
using net::use_awaitable;

namespace {

http::verb to_verb(Method method) {
  switch (method) {
    case Method::get: return http::verb::get;
    case Method::post: return http::verb::post;
    case Method::put: return http::verb::put;
    case Method::del: return http::verb::delete_;
  }
  return http::verb::get;
}

Error transport_error(std::string_view what, const boost::system::error_code& ec,
                      const std::string& socket_path) {
  if (ec == beast::error::timeout) {
    return Error{ErrorCode::unavailable,
                 "docker engine: timed out " + std::string(what), {}, 0};
  }
  return Error{ErrorCode::unavailable,
               "docker engine at " + socket_path + ": " + std::string(what) + ": " + ec.message(),
               {}, 0};
}

http::request<http::string_body> make_request(const EngineClient::Options& options, Method method,
                                              const std::string& target,
                                              const std::optional<json::value>& body) {
  http::request<http::string_body> req{to_verb(method), "/" + options.api_version + target, 11};
  req.set(http::field::host, "docker");
  req.set(http::field::user_agent, "gpucloud-agent");
  if (body) {
    req.set(http::field::content_type, "application/json");
    req.body() = json::serialize(*body);
  }
  req.prepare_payload();
  return req;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string error_message(const json::value& message) {
  if (const auto* obj = message.if_object()) {
    if (const auto* detail = obj->if_contains("errorDetail"); detail && detail->is_object()) {
      if (const auto* m = detail->as_object().if_contains("message"); m && m->is_string()) {
        return std::string(m->as_string());
      }
    }
    if (const auto* e = obj->if_contains("error"); e && e->is_string()) {
      return std::string(e->as_string());
    }
  }
  return {};
}

}  // namespace

Demuxed demux_stream(std::string_view data) {
  Demuxed result;
  while (!data.empty()) {
    if (data.size() < 8) {
      result.complete = false;
      break;
    }
    const auto kind = static_cast<unsigned char>(data[0]);
    if (kind > 2 || data[1] != 0 || data[2] != 0 || data[3] != 0) {
      result.complete = false;
      break;
    }
    const std::size_t size = (std::size_t{static_cast<unsigned char>(data[4])} << 24) |
                             (std::size_t{static_cast<unsigned char>(data[5])} << 16) |
                             (std::size_t{static_cast<unsigned char>(data[6])} << 8) |
                             std::size_t{static_cast<unsigned char>(data[7])};
    data.remove_prefix(8);
    const std::size_t take = std::min(size, data.size());
    (kind == 2 ? result.err : result.out).append(data.substr(0, take));
    data.remove_prefix(take);
    if (take < size) result.complete = false;
  }
  return result;
}

std::string url_encode(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

Error engine_error(unsigned status, std::string_view body) {
  std::string message;
  boost::system::error_code ec;
  const json::value parsed = json::parse(body, ec);
  if (!ec && parsed.is_object()) {
    if (const auto* m = parsed.as_object().if_contains("message"); m && m->is_string()) {
      message = std::string(m->as_string());
    }
  }
  if (message.empty()) {
    message = std::string(trim(body).substr(0, 500));
    if (message.empty()) message = "HTTP " + std::to_string(status);
  }
  ErrorCode code = ErrorCode::internal;
  switch (status) {
    case 400: code = ErrorCode::invalid_argument; break;
    case 404: code = ErrorCode::not_found; break;
    case 409: code = ErrorCode::conflict; break;
    case 503: code = ErrorCode::unavailable; break;
    default: break;
  }
  return Error{code, "docker engine: " + message, {}, 0};
}

Result<std::vector<json::value>> parse_message_stream(std::string_view body) {
  std::vector<json::value> messages;
  json::stream_parser parser;
  while (true) {
    body = trim(body);
    if (body.empty()) break;
    parser.reset();
    boost::system::error_code ec;
    const std::size_t used = parser.write_some(body.data(), body.size(), ec);
    if (!ec && !parser.done()) parser.finish(ec);
    if (ec) {
      return fail(ErrorCode::internal,
                  "docker engine: unreadable message stream: " + ec.message());
    }
    json::value message = parser.release();
    if (std::string error = error_message(message); !error.empty()) {
      return fail(ErrorCode::internal, "docker engine: " + error);
    }
    messages.push_back(std::move(message));
    body.remove_prefix(used);
  }
  return messages;
}

EngineClient::EngineClient(net::any_io_executor executor)
    : EngineClient(std::move(executor), Options{}) {}

EngineClient::EngineClient(net::any_io_executor executor, Options options)
    : executor_(std::move(executor)), options_(std::move(options)) {}

awaitable<Result<EngineResponse>> EngineClient::request(Method method, std::string target,
                                                        std::optional<json::value> body,
                                                        std::chrono::milliseconds timeout) {
  Stream stream(executor_);
  stream.expires_after(timeout.count() > 0 ? timeout : options_.timeout);
  boost::system::error_code ec;
  const local::endpoint endpoint(options_.socket_path);
  co_await stream.async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("connecting", ec, options_.socket_path));

  auto req = make_request(options_, method, target, body);
  co_await http::async_write(stream, req, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("sending " + target, ec, options_.socket_path));

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(options_.body_limit);
  co_await http::async_read(stream, buffer, parser, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("reading the answer to " + target, ec,
                                         options_.socket_path));

  auto& res = parser.get();
  EngineResponse out;
  out.status = res.result_int();
  out.content_type = std::string(res[http::field::content_type]);
  out.body = std::move(res.body());
  boost::system::error_code ignored;
  stream.socket().shutdown(local::socket::shutdown_both, ignored);
  co_return out;
}

awaitable<Result<json::value>> EngineClient::call(Method method, std::string target,
                                                  std::optional<json::value> body,
                                                  std::chrono::milliseconds timeout) {
  auto res = co_await request(method, std::move(target), std::move(body), timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status < 200 || res->status >= 300) co_return fail(engine_error(res->status, res->body));
  if (trim(res->body).empty()) co_return json::value(nullptr);
  boost::system::error_code ec;
  json::value parsed = json::parse(res->body, ec);
  if (ec) co_return fail(ErrorCode::internal, "docker engine: answer is not JSON: " + ec.message());
  co_return parsed;
}

awaitable<Result<std::vector<json::value>>> EngineClient::call_stream(
    Method method, std::string target, std::optional<json::value> body,
    std::chrono::milliseconds timeout) {
  auto res = co_await request(method, std::move(target), std::move(body), timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status < 200 || res->status >= 300) co_return fail(engine_error(res->status, res->body));
  co_return parse_message_stream(res->body);
}

void LineSplitter::feed(std::string_view piece, const std::function<void(std::string_view)>& on_line) {
  while (!piece.empty()) {
    const auto newline = piece.find('\n');
    const std::string_view part = piece.substr(0, newline);
    if (!dropping_) {
      if (partial_.size() + part.size() > max_line_) {
        partial_.clear();
        dropping_ = true;
      } else {
        partial_.append(part);
      }
    }
    if (newline == std::string_view::npos) return;
    if (!dropping_ && !partial_.empty()) on_line(partial_);
    partial_.clear();
    dropping_ = false;
    piece.remove_prefix(newline + 1);
  }
}

awaitable<Status> EngineClient::follow(std::string target, std::function<void(std::string_view)> on_line,
                                       std::function<void()> connected, std::chrono::milliseconds timeout) {
  Stream stream(executor_);
  stream.expires_after(timeout.count() > 0 ? timeout : options_.timeout);
  boost::system::error_code ec;
  const local::endpoint endpoint(options_.socket_path);
  co_await stream.async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("connecting", ec, options_.socket_path));
  auto req = make_request(options_, Method::get, target, std::nullopt);
  co_await http::async_write(stream, req, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("sending " + target, ec, options_.socket_path));

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);  // nothing is kept: the chunk callback consumes every piece
  co_await http::async_read_header(stream, buffer, parser, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("reading the answer to " + target, ec, options_.socket_path));
  const unsigned status = parser.get().result_int();
  if (status != 200) {
    parser.body_limit(1u << 20);
    co_await http::async_read(stream, buffer, parser, redirect_error(use_awaitable, ec));
    co_return fail(engine_error(status, ec ? std::string_view{} : std::string_view(parser.get().body())));
  }
  if (connected) connected();
  stream.expires_never();
  LineSplitter lines;
  auto on_chunk = [&](std::uint64_t, std::string_view body, boost::system::error_code&) -> std::size_t {
    lines.feed(body, on_line);
    return body.size();
  };
  parser.on_chunk_body(on_chunk);
  // Completes only when the engine ends the stream (or the connection breaks).
  co_await http::async_read(stream, buffer, parser, redirect_error(use_awaitable, ec));
  if (ec && ec != http::error::end_of_stream && ec != net::error::eof)
    co_return fail(transport_error("reading " + target, ec, options_.socket_path));
  co_return ok();
}

awaitable<Result<HijackedConnection>> EngineClient::hijack(Method method, std::string target,
                                                           std::optional<json::value> body,
                                                           std::chrono::milliseconds timeout) {
  Stream stream(executor_);
  stream.expires_after(timeout.count() > 0 ? timeout : options_.timeout);
  boost::system::error_code ec;
  const local::endpoint endpoint(options_.socket_path);
  co_await stream.async_connect(endpoint, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("connecting", ec, options_.socket_path));

  auto req = make_request(options_, method, target, body);
  req.set(http::field::connection, "Upgrade");
  req.set(http::field::upgrade, "tcp");
  co_await http::async_write(stream, req, redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("sending " + target, ec, options_.socket_path));

  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> header_parser;
  co_await http::async_read_header(stream, buffer, header_parser,
                                   redirect_error(use_awaitable, ec));
  if (ec) co_return fail(transport_error("reading the answer to " + target, ec,
                                         options_.socket_path));

  const unsigned status = header_parser.get().result_int();
  if (status != 101 && status != 200) {
    // An ordinary error answer: read its body for the engine's message.
    http::response_parser<http::string_body> parser(std::move(header_parser));
    parser.body_limit(1u << 20);
    co_await http::async_read(stream, buffer, parser, redirect_error(use_awaitable, ec));
    co_return fail(engine_error(status, ec ? std::string_view{} : parser.get().body()));
  }

  stream.expires_never();
  HijackedConnection out{stream.release_socket(), {}};
  const auto data = buffer.data();
  out.buffered.assign(static_cast<const char*>(data.data()), data.size());
  co_return out;
}

awaitable<Result<std::string>> EngineClient::exec_create(std::string container, ExecConfig config) {
  json::object body;
  body["AttachStdin"] = config.attach_stdin;
  body["AttachStdout"] = true;
  body["AttachStderr"] = true;
  body["Tty"] = config.tty;
  json::array cmd;
  for (auto& arg : config.cmd) cmd.emplace_back(arg);
  body["Cmd"] = std::move(cmd);
  if (!config.env.empty()) {
    json::array env;
    for (auto& e : config.env) env.emplace_back(e);
    body["Env"] = std::move(env);
  }
  if (!config.user.empty()) body["User"] = config.user;
  if (!config.working_dir.empty()) body["WorkingDir"] = config.working_dir;

  std::string target = "/containers/" + url_encode(container) + "/exec";
  std::optional<json::value> request_body(std::move(body));
  auto res = co_await call(Method::post, std::move(target), std::move(request_body));
  if (!res) co_return fail(std::move(res.error()));
  const auto* id = res->is_object() ? res->as_object().if_contains("Id") : nullptr;
  if (!id || !id->is_string()) co_return fail(ErrorCode::internal, "docker engine: exec create answered no Id");
  co_return std::string(id->as_string());
}

awaitable<Result<HijackedConnection>> EngineClient::exec_start_hijacked(std::string exec_id,
                                                                        bool tty) {
  json::object body{{"Detach", false}, {"Tty", tty}};
  std::string target = "/exec/" + url_encode(exec_id) + "/start";
  std::optional<json::value> request_body(std::move(body));
  co_return co_await hijack(Method::post, std::move(target), std::move(request_body));
}

awaitable<Status> EngineClient::exec_resize(std::string exec_id, int rows, int cols) {
  if (rows <= 0 || cols <= 0 || rows > 10000 || cols > 10000) {
    co_return fail(ErrorCode::invalid_argument, "terminal size out of range");
  }
  std::string target = "/exec/" + url_encode(exec_id) + "/resize?h=" + std::to_string(rows) +
                       "&w=" + std::to_string(cols);
  auto res = co_await call(Method::post, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  co_return ok();
}

awaitable<Result<ExecInspect>> EngineClient::exec_inspect(std::string exec_id) {
  std::string target = "/exec/" + url_encode(exec_id) + "/json";
  auto res = co_await call(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  ExecInspect out;
  if (const auto* obj = res->if_object()) {
    if (const auto* v = obj->if_contains("Running"); v && v->is_bool()) out.running = v->as_bool();
    if (const auto* v = obj->if_contains("ExitCode"); v && v->is_int64()) {
      out.exit_code = static_cast<int>(v->as_int64());
    }
    if (const auto* v = obj->if_contains("Pid"); v && v->is_int64()) out.pid = v->as_int64();
  }
  co_return out;
}

}  // namespace gpucloud::agent::docker
