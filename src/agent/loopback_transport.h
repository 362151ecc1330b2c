#pragma once
// A HostAgent that round-trips every message through JSON text before handing it to the
// real agent and back: what a wire transport would do, so tests prove the interface needs
// nothing but serialisable values.
#include <memory>

#include "agent/host_agent.h"

namespace gpucloud::agent {

class LoopbackJsonAgent : public HostAgent {
 public:
  explicit LoopbackJsonAgent(std::unique_ptr<HostAgent> inner) : inner_(std::move(inner)) {}
  boost::asio::awaitable<Result<std::vector<HostInventory>>> register_hosts() override;
  boost::asio::awaitable<Result<CommandOutcome>> execute(Command command) override;
  void on_heartbeat(std::function<void(Heartbeat)> sink) override;
  std::uint64_t messages() const { return messages_; }

 private:
  std::unique_ptr<HostAgent> inner_;
  std::uint64_t messages_ = 0;
};

}  // namespace gpucloud::agent
