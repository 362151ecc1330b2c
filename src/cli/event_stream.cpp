#include "cli/event_stream.h"

#include <algorithm>
#include <charconv>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "cli/http_connection.h"

namespace gpucloud::cli {

// --- the parser ---------------------------------------------------------------------------

bool SseParser::append(std::string_view part) {
  if (line_.size() + part.size() > kMaxLine) {
    overflow_ = true;
    return false;
  }
  line_.append(part);
  return true;
}

bool SseParser::feed(std::string_view chunk, const Handler& on_event) {
  if (overflow_) return false;
  std::size_t i = 0;
  if (skip_lf_ && !chunk.empty()) {
    if (chunk.front() == '\n') i = 1;
    skip_lf_ = false;
  }
  while (i < chunk.size()) {
    const std::size_t end = chunk.find_first_of("\r\n", i);
    if (end == std::string_view::npos) return append(chunk.substr(i));
    if (!append(chunk.substr(i, end - i))) return false;
    std::string line = std::move(line_);
    line_.clear();
    process_line(line, on_event);
    if (overflow_) return false;
    if (chunk[end] == '\r') {
      if (end + 1 < chunk.size()) {
        i = end + 1 + (chunk[end + 1] == '\n' ? 1 : 0);
      } else {
        skip_lf_ = true;  // its LF, if any, starts the next chunk
        i = end + 1;
      }
    } else {
      i = end + 1;
    }
  }
  return true;
}

void SseParser::process_line(std::string_view line, const Handler& on_event) {
  if (at_start_) {
    at_start_ = false;
    if (line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);
  }
  if (line.empty()) {
    last_id_ = id_buffer_;
    if (data_.empty()) {
      type_.clear();
      return;
    }
    data_.pop_back();  // the "\n" after the last data line
    SseEvent event{last_id_, type_.empty() ? "message" : std::move(type_), std::move(data_)};
    data_.clear();
    type_.clear();
    if (on_event) on_event(event);
    return;
  }
  if (line.front() == ':') return;  // a comment: heartbeat
  const std::size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view{}
                                                           : line.substr(colon + 1);
  if (value.starts_with(' ')) value.remove_prefix(1);
  if (field == "event") {
    type_ = std::string(value);
  } else if (field == "data") {
    if (data_.size() + value.size() + 1 > kMaxData) {
      overflow_ = true;
      return;
    }
    data_.append(value);
    data_.push_back('\n');
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_buffer_ = std::string(value);
  } else if (field == "retry") {
    std::int64_t ms = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (!value.empty() && ec == std::errc() && end == value.data() + value.size() && ms >= 0) {
      retry_ms_ = ms;
    }
  }
  // Other fields are ignored, as the format says.
}

void SseParser::reset() {
  line_.clear();
  skip_lf_ = false;
  at_start_ = true;
  data_.clear();
  type_.clear();
  id_buffer_ = last_id_;
  overflow_ = false;
}

void SseParser::set_last_event_id(std::string id) {
  last_id_ = id;
  id_buffer_ = std::move(id);
}

// --- the streaming GET --------------------------------------------------------------------

namespace beast = boost::beast;
namespace http = beast::http;

Result<HttpResponse> stream_http(const Endpoint& endpoint, const HttpRequest& request,
                                 const std::function<bool(std::string_view)>& on_data,
                                 std::chrono::milliseconds idle_timeout) {
  HttpConnection conn(endpoint, fmt::format("nothing received for {} s", idle_timeout.count() / 1000.0));
  if (auto c = conn.connect(idle_timeout); !c) return fail(c.error());
  HttpRequest with_headers = request;
  with_headers.headers.emplace_back("Cache-Control", "no-cache");
  if (auto w = conn.send(with_headers, "text/event-stream", idle_timeout); !w) return fail(w.error());
  auto& stream = conn.stream();
  boost::system::error_code ec;

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // a stream has no end to measure
  stream.expires_after(idle_timeout);
  http::async_read_header(stream, buffer, parser,
                          [&](const boost::system::error_code& e, std::size_t) { ec = e; });
  conn.run();
  if (ec) return fail(conn.unreachable("read the answer of", ec));

  HttpResponse out;
  {
    const auto& head = parser.get();
    out.status = static_cast<int>(head.result_int());
    out.content_type = std::string(head[http::field::content_type]);
    out.retry_after = std::string(head[http::field::retry_after]);
  }
  const bool streaming = out.status / 100 == 2 && out.content_type.starts_with("text/event-stream");
  constexpr std::size_t kMaxErrorBody = 1024 * 1024;

  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    stream.expires_after(idle_timeout);
    http::async_read_some(stream, buffer, parser,
                          [&](const boost::system::error_code& e, std::size_t) { ec = e; });
    conn.run();
    if (ec == http::error::need_buffer) ec = {};
    const std::size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      if (streaming) {
        if (!on_data(std::string_view(chunk, n))) break;
      } else if (out.body.size() < kMaxErrorBody) {
        out.body.append(chunk, std::min(n, kMaxErrorBody - out.body.size()));
      }
    }
    if (ec) {
      if (streaming || out.body.empty()) {
        return fail(ErrorCode::unavailable,
                    fmt::format("the connection to gpucloud at {} was cut: {}", endpoint.url,
                                ec == beast::error::timeout
                                    ? fmt::format("nothing received for {} s",
                                                  idle_timeout.count() / 1000.0)
                                    : ec.message()));
      }
      break;  // an error answer cut short: what came is enough to report it
    }
  }
  conn.shutdown();
  return out;
}

}  // namespace gpucloud::cli
