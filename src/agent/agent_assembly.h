#pragma once
// The agent as one piece: the LocalAgent with its instance runtime (Docker Engine), its data
// disks and GPU injection, for the hosts of a config. gpucloudd builds it for its in-process
// hosts, gpucloud-agent for its one host: the same code on both sides of the link.
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "agent/disk_runtime.h"
#include "agent/instance_runtime.h"
#include "agent/local_agent.h"
#include "config/config.h"

namespace gpucloud::agent {

struct AgentStack {
  std::unique_ptr<LocalAgent> agent;
  std::unique_ptr<InstanceRuntime> runtime;
  std::unique_ptr<DiskRuntime> disks;
};

// Builds the stack and starts its runtimes before anything is served (runs `io` until they
// have: the disks first, so the mounts of running instances are known when stale ones are
// cleaned, then the instance runtime's re-attach). An engine or disk that is not there is
// logged, not fatal: instances then fail with a reason. `installation_id` names the
// containers and networks (gpucloud-<id>-...).
// `start` false (a standby replica, issue 27: the leader serves the in-process hosts and may
// be using the same agent directory): nothing is started or cleaned until start_agent_stack.
Result<AgentStack> build_agent_stack(boost::asio::io_context& io, const config::Config& config,
                                     const std::string& installation_id, bool start = true);
// The deferred start, in the same order, on the loop (this replica became the leader).
boost::asio::awaitable<void> start_agent_stack(AgentStack* stack);

// From then on, containers that die or start behind the platform's back reach the agent's
// change sink (call after the control plane set its sinks and registered).
void report_runtime_changes(InstanceRuntime& runtime, LocalAgent& agent);

}  // namespace gpucloud::agent
