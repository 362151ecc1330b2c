#pragma once
// The control plane's one HostAgent: the in-process agent's hosts go to it, every other host
// to its remote agent's link. Commands for a remote host are journaled before they are sent
// and sent again when its agent reconnects; an outcome completes the journal row and wakes
// the caller. What a remote agent reports is accepted only about its own host (the one its
// certificate names): heartbeats and samples of another host, outcomes of commands never sent
// to it, and instance ids not placed on it are dropped.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/host_agent.h"
#include "agentlink/link_messages.h"
#include "store/store.h"

namespace gpucloud::agentlink {

class RemoteTerminalStream;

// One remote agent's live link as the hub sees it (a WebSocket over TLS; a fake in tests).
class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  virtual void send(std::string text) = 0;  // queued; dropped once closed
  virtual void close(std::string why) = 0;
  virtual std::string address() const = 0;  // the peer, "10.0.0.2:40112"
};

class AgentHub : public agent::HostAgent {
 public:
  struct Options {
    std::string journal_key;  // 32 bytes (command_journal.h)
    // How long execute() waits for an outcome while the host's agent is connected, and while
    // it is not (the command stays journaled either way and runs when the agent returns).
    std::chrono::milliseconds connected_wait = std::chrono::minutes(10);
    std::chrono::milliseconds disconnected_wait = std::chrono::seconds(60);
    // How long open_terminal waits for a remote agent's terminal_opened or terminal_failed.
    std::chrono::milliseconds terminal_open_wait = std::chrono::seconds(15);
    // What the welcome tells agents to beat at ([agents] heartbeat_interval); 0: their default.
    std::chrono::milliseconds heartbeat_interval{0};
    // Replicas on one PostgreSQL store (issue 27): a command for a host this replica does not
    // serve (a remote host whose link another replica holds; an in-process host while this
    // replica stands by) is journaled, delivered by the replica that serves it (woken by
    // NOTIFY), and its outcome read back from the journal.
    bool relay = false;
  };
  AgentHub(boost::asio::any_io_executor loop, store::Store& store, std::unique_ptr<agent::HostAgent> local, Options options);
  ~AgentHub() override;

  boost::asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override;
  boost::asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override;
  void on_heartbeat(std::function<void(agent::Heartbeat)> sink) override;
  void on_samples(std::function<void(agent::SampleReport)> sink) override;
  void on_changes(std::function<void(agent::ChangeReport)> sink) override;
  void on_registration(std::function<boost::asio::awaitable<Status>(agent::LateRegistration)> sink) override {
    registration_sink_ = std::move(sink);
  }
  void on_link_change(std::function<void(const std::string& host, bool connected)> sink) override {
    link_sink_ = std::move(sink);
  }
  boost::asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string host_name,
                                                                                      std::string instance_id, int rows,
                                                                                      int cols) override;
  // A connection to an instance's port: an in-process host's from here (its runtime), a
  // remote host's as a stream on its agent's link (connection_open), opened within
  // terminal_open_wait.
  boost::asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_connection(std::string host_name,
                                                                                        std::string instance_id,
                                                                                        int port) override;

  // The link's side. A hello from `host` (the name its certificate carries) on `connection`:
  // refused (an error to send back) unless the inventory is that host's and not an
  // in-process one; else registered, attached (replacing an older link of the host) and its
  // journaled commands sent again.
  boost::asio::awaitable<Status> hello(std::string host, std::shared_ptr<AgentConnection> connection, Hello hello);
  // A message after the hello.
  void receive(const std::string& host, const AgentConnection* connection, LinkMessage message);
  // The link closed (only the host's current link detaches it).
  void closed(const std::string& host, const AgentConnection* connection);

  // Shutting down: callers waiting on remote commands are answered "unavailable" now (their
  // commands stay journaled for the next start) so the daemon's shutdown does not wait on them.
  void stop();

  // Replicas (issue 27). Whether this replica runs the in-process hosts' commands, heartbeats,
  // samples and change reports (the leader does; a standby relays its commands to it). Turned
  // on, it runs what was journaled for them meanwhile.
  void serve_in_process(bool serve);
  // Another replica journaled a command for `host` (NOTIFY): sent on its link when this
  // replica holds it, run when `host` is in-process and served here.
  void commands_queued(const std::string& host);
  // Another replica recorded the outcome of `command_id` (NOTIFY): a caller waiting here reads it.
  void outcome_recorded(const std::string& command_id);
  // After notifications may have been missed (the LISTEN connection was down): all of the above.
  void catch_up();

  bool connected(const std::string& host) const { return links_.contains(host); }
  bool serves_in_process(const std::string& host) const { return local_hosts_.contains(host); }
  const std::set<std::string>& in_process_hosts() const { return local_hosts_; }
  std::size_t connected_count() const { return links_.size(); }
  std::size_t terminal_streams() const { return terminals_.size(); }  // open or opening on any link
  std::uint64_t connections_opened() const { return connections_opened_; }  // to remote instances, ever

 private:
  struct Waiter;
  // A terminal stream on a remote host's link (remote_terminal.h): only that link feeds it.
  struct TerminalRoute {
    std::string host;
    const AgentConnection* link = nullptr;
    std::weak_ptr<RemoteTerminalStream> stream;
  };
  // A stream on a remote host's link, opened by `type` with `body` (its "stream" added).
  boost::asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_stream(std::string host_name,
                                                                                    std::string type,
                                                                                    boost::json::object body);
  void receive_terminal(const std::string& host, const AgentConnection* connection, const LinkMessage& message);
  void end_terminals(const AgentConnection* link, const std::string& why);  // every stream the link carried
  void deliver_outcome(const std::string& host, agent::CommandOutcome outcome);
  // Drops the ids not placed on `host` (the store says where each instance is).
  boost::asio::awaitable<std::vector<std::string>> own_instances(std::string host, std::vector<std::string> ids);
  boost::asio::awaitable<void> forward_samples(std::string host, agent::SampleReport report);
  boost::asio::awaitable<void> forward_changes(std::string host, agent::ChangeReport report);
  // A caller is done waiting for `id`: an outcome goes on to an earlier caller of the same id.
  void release_waiter(const std::string& id, const std::shared_ptr<Waiter>& waiter, const std::shared_ptr<Waiter>& earlier);
  // A command for a host another replica serves: journaled, then its outcome read back.
  boost::asio::awaitable<Result<agent::CommandOutcome>> execute_relayed(agent::Command command);
  // The host's journaled commands not yet sent on its current link.
  boost::asio::awaitable<void> send_pending(std::string host);
  // An in-process host's journaled commands, run here (this replica leads).
  boost::asio::awaitable<void> run_pending_local(std::string host);
  boost::asio::awaitable<void> run_local(agent::Command command);

  boost::asio::any_io_executor loop_;
  store::Store& store_;
  std::unique_ptr<agent::HostAgent> local_;
  Options options_;
  std::set<std::string> local_hosts_;
  std::map<std::string, std::shared_ptr<AgentConnection>> links_;
  std::map<std::string, std::shared_ptr<Waiter>> waiters_;  // by command id
  std::map<std::int64_t, TerminalRoute> terminals_;          // by stream id (unique across links)
  std::int64_t next_stream_ = 0;
  std::uint64_t connections_opened_ = 0;
  std::function<void(agent::Heartbeat)> heartbeat_sink_;
  std::function<void(agent::SampleReport)> sample_sink_;
  std::function<void(agent::ChangeReport)> change_sink_;
  std::function<boost::asio::awaitable<Status>(agent::LateRegistration)> registration_sink_;
  std::function<void(const std::string&, bool)> link_sink_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool stopping_ = false;
  bool serve_local_ = true;
  std::map<std::string, std::set<std::string>> sent_on_link_;  // per host: pending ids its link has
  std::set<std::string> running_local_;  // journaled in-process commands running here
};

}  // namespace gpucloud::agentlink
