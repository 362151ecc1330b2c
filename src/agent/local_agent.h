#pragma once
// The in-process agent of all-in-one mode: serves every [[hosts]] entry of the config on
// this machine (each with its own inventory, CPU, memory and port range), keeps its own
// state, and answers commands through the same interface a remote agent would.
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/gpu/gpu_inventory.h"
#include "agent/host_agent.h"
#include "config/config.h"

namespace gpucloud::agent {

// Handles one kind of command ("instance.ensure", ...); registered by the runtime layers.
using CommandHandler = std::function<boost::asio::awaitable<Result<CommandOutcome>>(const Command&)>;

class LocalAgent : public HostAgent {
 public:
  LocalAgent(boost::asio::any_io_executor loop, const config::Config& config,
             std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(5));
  ~LocalAgent() override;

  boost::asio::awaitable<Result<std::vector<HostInventory>>> register_hosts() override;
  boost::asio::awaitable<Result<CommandOutcome>> execute(Command command) override;
  void on_heartbeat(std::function<void(Heartbeat)> sink) override { heartbeat_sink_ = std::move(sink); }

  void add_command_handler(std::string kind, CommandHandler handler) { handlers_[std::move(kind)] = std::move(handler); }

  using TerminalOpener = std::function<boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>>(
      std::string instance_id, int rows, int cols)>;
  void set_terminal_opener(TerminalOpener opener) { terminal_opener_ = std::move(opener); }
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string host_name,
                                                                               std::string instance_id, int rows,
                                                                               int cols) override;

  // The hosts an all-in-one daemon serves: the config's, or one named after this machine.
  static std::vector<config::Host> effective_hosts(const config::Config& config);

 private:
  struct ServedHost {
    config::Host config;
    std::unique_ptr<gpu::GpuInventorySource> inventory;
    HostInventory last;
  };
  HostInventory discover(ServedHost& host);
  void schedule_heartbeat();

  boost::asio::any_io_executor loop_;
  std::vector<ServedHost> hosts_;
  std::function<void(Heartbeat)> heartbeat_sink_;
  std::chrono::milliseconds heartbeat_interval_;
  boost::asio::steady_timer heartbeat_timer_;
  std::uint64_t heartbeat_sequence_ = 0;
  std::map<std::string, CommandHandler> handlers_;
  TerminalOpener terminal_opener_;
  // Outcomes of recent commands, so a repeated command id is answered, not re-run.
  std::unordered_map<std::string, CommandOutcome> outcomes_;
  std::deque<std::string> outcome_order_;
};

}  // namespace gpucloud::agent
