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
  void on_samples(std::function<void(SampleReport)> sink) override;
  void on_changes(std::function<void(ChangeReport)> sink) override;
  // Terminal bytes are a stream, not messages: passed through as they are.
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string host_name,
                                                                               std::string instance_id, int rows,
                                                                               int cols) override {
    return inner_->open_terminal(std::move(host_name), std::move(instance_id), rows, cols);
  }
  std::uint64_t messages() const { return messages_; }

 private:
  std::unique_ptr<HostAgent> inner_;
  std::uint64_t messages_ = 0;
};

}  // namespace gpucloud::agent
