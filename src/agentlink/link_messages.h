#pragma once
// What travels on an agent's link, one JSON text frame each: {"type": T, "body": {...}}.
// The bodies are agent_protocol's own JSON forms; the link adds only the envelope and the
// handshake ("hello" from the agent, "welcome" or "refused" from the control plane).
//   agent -> control plane: hello, heartbeat, samples, changes, outcome
//   control plane -> agent: welcome, refused, command, heartbeat_ack {sequence}
// Terminal streams (the web terminal; terminal_messages.h has the fields, data is base64):
//   control plane -> agent: terminal_open, terminal_input, terminal_resize, terminal_ack, terminal_close
//   agent -> control plane: terminal_opened, terminal_failed, terminal_output, terminal_exit
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "agent/agent_protocol.h"
#include "core/time_format.h"

namespace gpucloud::agentlink {

inline constexpr int kLinkVersion = 1;
// A link that carries nothing for this long is dead (a cut cable, a frozen peer); both ends
// ping at half of it, so a live idle link always carries something.
inline constexpr auto kLinkIdleTimeout = std::chrono::seconds(20);

// Certificates and tokens count in unix seconds.
inline std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(system_now().time_since_epoch()).count();
}

struct Hello {
  int link_version = kLinkVersion;
  std::string agent_version;
  agent::HostInventory inventory;  // the one host this agent serves (its certificate names it)
};

struct Welcome {
  int link_version = kLinkVersion;
  std::string control_plane_version;
  // How often the agent should beat ([agents] heartbeat_interval); 0: its own default.
  // Optional in the message ("heartbeat_interval_ms").
  std::int64_t heartbeat_interval_ms = 0;
};

struct LinkMessage {
  std::string type;
  boost::json::object body;
};

std::string envelope(std::string_view type, boost::json::object body);
Result<LinkMessage> read_envelope(std::string_view text);  // never throws

boost::json::object to_json(const Hello&);
Result<Hello> hello_from_json(const boost::json::object&);
boost::json::object to_json(const Welcome&);
Result<Welcome> welcome_from_json(const boost::json::object&);

}  // namespace gpucloud::agentlink
