#pragma once
// The agent interface as the control plane sees it (the control plane never calls an
// engine or NVML itself). Asynchronous; every call carries agent_protocol value types.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "agent/agent_protocol.h"
#include "agent/runtime/runtime_driver.h"

namespace gpucloud::agent {

// A host whose agent joined after register_hosts: its inventory, the agent's version and the
// address it connected from.
struct LateRegistration {
  HostInventory inventory;
  std::string agent_version;
  std::string address;
};

class HostAgent {
 public:
  virtual ~HostAgent() = default;
  // Registration: the hosts this agent serves, with their inventories.
  virtual boost::asio::awaitable<Result<std::vector<HostInventory>>> register_hosts() = 0;
  // Runs a command (idempotent by command id) and reports the outcome.
  virtual boost::asio::awaitable<Result<CommandOutcome>> execute(Command command) = 0;
  // The agent reports heartbeats through this sink (set once, before register_hosts).
  virtual void on_heartbeat(std::function<void(Heartbeat)> sink) = 0;
  // The agent reports each sampling round (instances' CPU, memory and GPUs) through this sink
  // (set once, before register_hosts). An agent that samples nothing never calls it.
  virtual void on_samples(std::function<void(SampleReport)> sink) { (void)sink; }
  // The agent reports containers that started, died or went away through this sink (set once,
  // before register_hosts), so the control plane reconciles at once. An agent that watches
  // nothing never calls it (the periodic reconcile still finds every change).
  virtual void on_changes(std::function<void(ChangeReport)> sink) { (void)sink; }
  // Hosts whose agent joins after register_hosts (a remote agent dialling in): the control
  // plane records each inventory through this sink before the host takes commands. An agent
  // whose hosts are all known at register_hosts never calls it.
  virtual void on_registration(std::function<boost::asio::awaitable<Status>(LateRegistration)> sink) { (void)sink; }
  // The control plane's heartbeat interval for this agent (a remote agent's welcome says it);
  // takes effect from the next beat. An agent that has its own never changes.
  virtual void set_heartbeat_interval(std::chrono::milliseconds interval) { (void)interval; }
  // A remote host's link came up (true) or went down (false).
  virtual void on_link_change(std::function<void(const std::string& host, bool connected)> sink) { (void)sink; }
  // An interactive shell in a running instance (a TTY exec). Bytes, not messages: a wire
  // transport carries it as its own stream beside the command channel.
  virtual boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string host_name,
                                                                                       std::string instance_id,
                                                                                       int rows, int cols) = 0;
  // A TCP connection to `port` at a running instance's own address, made from its host (the
  // web-service and Jupyter proxies ride it to an instance on a remote host; see
  // agent/instance_connection.h). Bytes both ways; read() returns "" at the service's end.
  virtual boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_connection(std::string host_name,
                                                                                         std::string instance_id,
                                                                                         int port) {
    (void)host_name, (void)instance_id, (void)port;
    co_return fail(ErrorCode::unavailable, "this agent does not open connections to instances");
  }
};

}  // namespace gpucloud::agent
