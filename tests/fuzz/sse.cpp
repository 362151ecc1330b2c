// libFuzzer: the CLI's Server-Sent Events reader (cli::SseParser). The input is split into
// chunks at the positions its first byte picks, so CR/LF pairs and fields straddle chunks;
// feeding it whole must dispatch exactly the same events.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli/event_stream.h"

namespace {

struct Run {
  std::vector<gpucloud::cli::SseEvent> events;
  bool ok = true;
  std::string last_id;
};

Run feed(std::string_view text, std::size_t chunk) {
  Run r;
  gpucloud::cli::SseParser parser;
  auto on_event = [&](const gpucloud::cli::SseEvent& e) { r.events.push_back(e); };
  for (std::size_t at = 0; at < text.size() && r.ok; at += chunk) r.ok = parser.feed(text.substr(at, chunk), on_event);
  r.last_id = parser.last_event_id();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 16;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  Run whole = feed(text, text.size() + 1);
  Run pieces = feed(text, chunk);
  if (whole.ok != pieces.ok) return 0;  // the limits may trip at another point; both refuse
  if (whole.events.size() != pieces.events.size() || whole.last_id != pieces.last_id) std::abort();
  for (std::size_t i = 0; i < whole.events.size(); ++i) {
    const auto &a = whole.events[i], &b = pieces.events[i];
    if (a.id != b.id || a.type != b.type || a.data != b.data) std::abort();
  }
  return 0;
}
