#pragma once
// Terminal streams on an agent's link (issue 26): the web terminal's bytes multiplexed beside
// the commands, each stream named by an id the control plane chooses (unique per link).
// Every message is a JSON text frame in the link's envelope; terminal bytes travel base64 in
// "data" (text frames only: one framing for everything on the link).
// A stream is a shell (terminal_open) or a TCP connection to a port at the instance's own
// address, made by its host's agent (connection_open: the proxies to instances on remote
// hosts); once open, both speak the same messages (a connection ignores resizes and exits 0
// when the service closes it).
//   control plane -> agent: terminal_open {stream, instance_id, rows, cols},
//                           connection_open {stream, instance_id, port},
//                           terminal_input {stream, data}, terminal_resize {stream, rows, cols},
//                           terminal_ack {stream, bytes}, terminal_close {stream}
//   agent -> control plane: terminal_opened {stream}, terminal_failed {stream, code, detail},
//                           terminal_output {stream, data},
//                           terminal_exit {stream, exit_code} (or {stream, detail} when the
//                           exit code could not be read)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "core/result.h"

namespace gpucloud::agentlink {

// The most output one stream may hold unread on either end of the link: beyond it the
// control plane drops the stream (its reader is too slow), and the agent stops reading the
// shell while its link has that much unsent.
inline constexpr std::size_t kTerminalOutputBound = 1 << 20;
// Flow control: the agent has at most kTerminalWindow bytes of a stream's output sent and not
// yet acknowledged; the control plane acknowledges (terminal_ack {bytes}) what its reader took,
// once at least kTerminalAckEvery bytes are unacknowledged. So a browser slower than the shell
// slows the shell down, and the control plane's queue stays far below kTerminalOutputBound
// (which remains the bound for an agent that ignores the window).
inline constexpr std::size_t kTerminalWindow = 256 * 1024;
inline constexpr std::size_t kTerminalAckEvery = 32 * 1024;

std::string terminal_bytes_to_base64(std::string_view bytes);
Result<std::string> terminal_bytes_from_base64(std::string_view text);

// The fields every terminal message reads: "stream" (a positive integer) and the optional ones.
Result<std::int64_t> terminal_stream_of(const boost::json::object& body);
std::optional<std::int64_t> terminal_int_field(const boost::json::object& body, std::string_view name);
std::string terminal_string_field(const boost::json::object& body, std::string_view name);
// "data", decoded.
Result<std::string> terminal_data_of(const boost::json::object& body);

}  // namespace gpucloud::agentlink
