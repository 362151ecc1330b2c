#pragma once
// The terminal WebSocket's text frames: JSON control messages from the client, parsed with no
// I/O (the terminal route and the ws_frame fuzzer share it). Only `resize` exists; anything
// else is refused with a reason short enough for a WebSocket close frame.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::server {

struct TerminalResize {
  int rows = 0;
  int cols = 0;
};

inline constexpr std::size_t kTerminalControlMaxBytes = 4096;  // a control message is tiny
inline constexpr int kTerminalMaxDimension = 999;              // rows and cols, each 1..999
inline constexpr std::size_t kWebSocketMessageMaxBytes = 1 << 20;  // any frame, either kind

// {"type":"resize","rows":R,"cols":C}, or why not (invalid_argument; detail ≤ 120 bytes).
Result<TerminalResize> parse_terminal_control(std::string_view text);

}  // namespace gpucloud::server
