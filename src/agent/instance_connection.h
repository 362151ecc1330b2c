#pragma once
// A TCP connection from an instance's host to a service in the instance (its own address,
// one of its ports): what the web-service and Jupyter proxies ride for an instance on a
// remote host (the control plane cannot route to that host's bridge; the agent's link
// carries the bytes, agentlink/terminal_messages.h).
//
// The socket is made inside the instance's own network namespace (/proc/PID/ns/net, by a
// pool thread that enters it and returns), so it reaches the instance's address whatever the
// agent's own namespace, routes or host firewall; where that is not allowed (not root) it is
// made in the agent's namespace, as a host's own connection to its bridge would be.
//
// Held as a TerminalSession, so the link's streams carry it unchanged: read() answers the
// service's bytes and "" at its end, write() sends, resize() does nothing, exit_code() is 0.
#include <chrono>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "agent/runtime/runtime_driver.h"
#include "core/result.h"

namespace gpucloud::agent {

// A blocking TCP socket's descriptor made in /proc/`pid`/ns/net (pid 0: this thread's own
// namespace). Call on a thread of its own (a pool's): the thread enters the namespace and
// leaves it again before returning.
Result<int> tcp_socket_in_namespace_of(int pid);

// Connects to `ipv4`:`port` with a socket from the namespace of `pid` (falling back to the
// agent's own when that namespace cannot be entered); `pool` makes the socket. Fails
// "unavailable" naming the port when nothing answers within `limit`.
boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> connect_to_instance(
    boost::asio::any_io_executor loop, boost::asio::thread_pool& pool, int pid, std::string ipv4, int port,
    std::chrono::milliseconds limit);

}  // namespace gpucloud::agent
