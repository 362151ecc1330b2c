#pragma once
// A web terminal handed to the replica that serves the instance's host (issue 27: several
// gpucloudd on one PostgreSQL store, any of them answering every API call). The replica the
// browser reached opens the same endpoint, GET /api/v1/instances/{id}/terminal, on the serving
// replica as a WebSocket client with the caller's own token, and carries its frames: binary
// frames are terminal bytes both ways, a resize is the same JSON text frame the browser sends.
// The request says X-Gpucloud-Replica-Relay, so the serving replica never relays it again.
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "agent/runtime/runtime_driver.h"
#include "core/result.h"

namespace gpucloud::server {

inline constexpr const char* kReplicaRelayHeader = "x-gpucloud-replica-relay";

// Opens the terminal of `instance_id` on the replica at `api_url` (http://HOST:PORT). Fails
// unavailable when it cannot be reached or refuses the WebSocket.
boost::asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_replica_terminal(
    boost::asio::any_io_executor executor, std::string api_url, std::string instance_id, std::string token);

// http://HOST:PORT for an API bound to `address`:`port` ("0.0.0.0" / "::": this machine's
// host name, which the other replicas must be able to resolve).
std::string replica_api_url(const std::string& address, unsigned short port);

}  // namespace gpucloud::server
