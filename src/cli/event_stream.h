#pragma once
// Server-Sent Events for `gpucloud events --follow`: an incremental parser of the
// text/event-stream format (WHATWG HTML §9.2) and a streaming GET over the Beast client.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cli/http_client.h"
#include "core/result.h"

namespace gpucloud::cli {

struct SseEvent {
  std::string id;    // the last event ID when this event was dispatched ("" = none yet)
  std::string type;  // the `event:` field, "message" when absent
  std::string data;  // the `data:` lines joined with "\n"
};

// Bytes in, events out, whatever the chunking: lines may end in LF, CRLF or CR (a CR at the
// end of one chunk and its LF at the start of the next count once); `:` lines are comments
// (heartbeats); `data:` lines accumulate; a blank line dispatches. An event without data is
// not dispatched, but an `id:` it carried still becomes the last event ID.
class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;

  static constexpr std::size_t kMaxLine = 1024 * 1024;
  static constexpr std::size_t kMaxData = 8 * 1024 * 1024;

  // False when a line or an event grew past the limits (not an event stream); what was
  // dispatched before stays dispatched.
  bool feed(std::string_view chunk, const Handler& on_event);

  // A new connection: a partial line or event of the old one is dropped; the last event ID
  // (the one to send as Last-Event-ID) is kept.
  void reset();

  // The id of the last dispatched event (or set_last_event_id's): what to resume after.
  const std::string& last_event_id() const { return last_id_; }
  void set_last_event_id(std::string id);
  // The `retry:` field, in milliseconds, when the server sent one.
  std::optional<std::int64_t> retry_ms() const { return retry_ms_; }

 private:
  void process_line(std::string_view line, const Handler& on_event);
  bool append(std::string_view part);

  std::string line_;
  bool skip_lf_ = false;    // the previous chunk ended in CR
  bool at_start_ = true;    // a UTF-8 BOM is skipped here
  std::string data_;
  std::string type_;
  std::string id_buffer_;   // the id field seen so far (survives events, as the spec says)
  std::string last_id_;     // committed at dispatch
  bool overflow_ = false;
  std::optional<std::int64_t> retry_ms_;
};

// The streaming GET behind Deps::stream. Connects, sends `request`, and for a 2xx
// text/event-stream answer hands the body to `on_data` as it arrives (on_data returning
// false stops reading). Other answers come back whole in HttpResponse::body.
// Returns the response once the body ended or was stopped; a connection that cannot be made,
// is cut, or stays silent for `idle_timeout` is an `unavailable` error.
Result<HttpResponse> stream_http(const Endpoint& endpoint, const HttpRequest& request,
                                 const std::function<bool(std::string_view)>& on_data,
                                 std::chrono::milliseconds idle_timeout = std::chrono::seconds(60));

}  // namespace gpucloud::cli
