#include "agentlink/agent_hub.h"

#include <optional>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agentlink/command_journal.h"
#include "agentlink/remote_terminal.h"
#include "core/time_format.h"

namespace gpucloud::agentlink {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
std::int64_t now_micros() { return to_unix_micros(system_now()); }
// A question journaled for another replica to ask is asked only this fresh (microseconds).
constexpr std::int64_t kQueryRelayLimit = 60'000'000;

// Questions, not changes: never journaled (an answer from a later link would describe a later
// state), answered "unavailable" at once while the host's agent is away, and waited for a
// minute at most.
bool is_query(const std::string& kind) {
  return kind == "instance.status" || kind == "disk.status" || kind == "image.inspect" || kind == "instance.exec";
}
}  // namespace

// A caller of execute() waiting for its command's outcome; the timer is its wake-up.
struct AgentHub::Waiter {
  Waiter(asio::any_io_executor loop, agent::Command command)
      : host(command.host_name), command(std::move(command)), wake(loop) {}
  std::string host;
  agent::Command command;  // sent again at the host's next hello while still unanswered
  std::optional<agent::CommandOutcome> outcome;
  asio::steady_timer wake;
};

AgentHub::AgentHub(asio::any_io_executor loop, store::Store& store, std::unique_ptr<agent::HostAgent> local,
                   Options options)
    : loop_(loop), store_(store), local_(std::move(local)), options_(std::move(options)) {}

AgentHub::~AgentHub() {
  *alive_ = false;
  for (auto& [host, link] : links_) link->close("the control plane is stopping");
  for (auto& [id, route] : terminals_)
    if (auto stream = route.stream.lock()) stream->dropped("the control plane is stopping");
}

asio::awaitable<Result<std::vector<agent::HostInventory>>> AgentHub::register_hosts() {
  auto hosts = co_await local_->register_hosts();
  if (hosts)
    for (const auto& h : *hosts) local_hosts_.insert(h.name);
  co_return hosts;
}

// The in-process hosts' reports count only while this replica serves them (the leader's do).
void AgentHub::on_heartbeat(std::function<void(agent::Heartbeat)> sink) {
  heartbeat_sink_ = sink;
  local_->on_heartbeat([this, sink = std::move(sink)](agent::Heartbeat beat) {
    if (serve_local_) sink(std::move(beat));
  });
}
void AgentHub::on_samples(std::function<void(agent::SampleReport)> sink) {
  sample_sink_ = sink;
  local_->on_samples([this, sink = std::move(sink)](agent::SampleReport report) {
    if (serve_local_) sink(std::move(report));
  });
}
void AgentHub::on_changes(std::function<void(agent::ChangeReport)> sink) {
  change_sink_ = sink;
  local_->on_changes([this, sink = std::move(sink)](agent::ChangeReport report) {
    if (serve_local_) sink(std::move(report));
  });
}

asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> AgentHub::open_terminal(std::string host_name,
                                                                                       std::string instance_id,
                                                                                       int rows, int cols) {
  if (local_hosts_.contains(host_name) && !serve_local_)
    co_return fail(ErrorCode::unavailable, "host " + host_name + " is served by the leader replica: open the terminal there");
  if (local_hosts_.contains(host_name))
    co_return co_await local_->open_terminal(std::move(host_name), std::move(instance_id), rows, cols);
  json::object body{{"instance_id", instance_id}, {"rows", rows}, {"cols", cols}};
  co_return co_await open_stream(std::move(host_name), "terminal_open", std::move(body));
}

asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> AgentHub::open_connection(std::string host_name,
                                                                                         std::string instance_id,
                                                                                         int port) {
  if (local_hosts_.contains(host_name))
    co_return co_await local_->open_connection(std::move(host_name), std::move(instance_id), port);
  json::object body{{"instance_id", instance_id}, {"port", port}};
  auto opened = co_await open_stream(std::move(host_name), "connection_open", std::move(body));
  if (opened) ++connections_opened_;
  co_return opened;
}

asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> AgentHub::open_stream(std::string host_name,
                                                                                     std::string type,
                                                                                     json::object body) {
  auto link = links_.find(host_name);
  if (link == links_.end()) co_return fail(ErrorCode::unavailable, "host " + host_name + "'s agent is not connected");
  // Streams whose sessions are gone (closed and destroyed) leave their routes behind: pruned here.
  std::erase_if(terminals_, [](const auto& entry) { return entry.second.stream.expired(); });
  const std::int64_t id = ++next_stream_;
  auto stream = std::make_shared<RemoteTerminalStream>(loop_, link->second, id);
  terminals_[id] = TerminalRoute{host_name, link->second.get(), stream};
  body["stream"] = id;
  link->second->send(envelope(type, std::move(body)));
  const std::shared_ptr<bool> live = alive_;
  auto opened = co_await stream->wait_opened(options_.terminal_open_wait);
  if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
  if (!opened) {
    terminals_.erase(id);
    co_return fail(opened.error());
  }
  co_return std::unique_ptr<agent::TerminalSession>(std::make_unique<RemoteTerminalSession>(std::move(stream)));
}

void AgentHub::receive_terminal(const std::string& host, const AgentConnection* connection,
                                const LinkMessage& message) {
  auto id = terminal_stream_of(message.body);
  auto route = id ? terminals_.find(*id) : terminals_.end();
  // Only the link the stream was opened on speaks for it: another host's agent (or an older
  // link of this one) cannot write into someone's terminal.
  if (route == terminals_.end() || route->second.host != host || route->second.link != connection) return;
  auto stream = route->second.stream.lock();
  if (!stream) {
    terminals_.erase(route);
    return;
  }
  if (message.type == "terminal_opened") {
    stream->opened();
  } else if (message.type == "terminal_output") {
    auto data = terminal_data_of(message.body);
    if (data) {
      stream->output(std::move(*data));
    } else {
      spdlog::warn(R"({{"event":"agent_terminal_unreadable","host":"{}","stream":{}}})", host, *id);
      stream->close();  // on the agent too
    }
  } else if (message.type == "terminal_failed") {
    // The agent's error code by name, as a command outcome carries it.
    agent::CommandOutcome said;
    said.error_code = terminal_string_field(message.body, "code");
    said.error_detail = terminal_string_field(message.body, "detail");
    stream->failed(agent::outcome_error(said));
  } else if (message.type == "terminal_exit") {
    auto code = terminal_int_field(message.body, "exit_code");
    if (code) stream->exited(static_cast<int>(*code));
    else stream->exited(fail(ErrorCode::unavailable, "terminal: " + terminal_string_field(message.body, "detail")));
  } else {
    return;
  }
  if (stream->ended()) terminals_.erase(*id);
}

void AgentHub::end_terminals(const AgentConnection* link, const std::string& why) {
  for (auto it = terminals_.begin(); it != terminals_.end();) {
    if (it->second.link != link) {
      ++it;
      continue;
    }
    if (auto stream = it->second.stream.lock()) stream->dropped(why);
    it = terminals_.erase(it);
  }
}

asio::awaitable<Result<agent::CommandOutcome>> AgentHub::execute(agent::Command command) {
  const bool in_process = local_hosts_.contains(command.host_name);
  if (in_process && serve_local_) co_return co_await local_->execute(std::move(command));
  // Another replica serves it: the leader runs in-process hosts, a link's holder sends.
  if (options_.relay && (in_process || !links_.contains(command.host_name)))
    co_return co_await execute_relayed(std::move(command));
  if (in_process) co_return fail(ErrorCode::unavailable, "host " + command.host_name + " is served by the leader");
  const std::string host = command.host_name, id = command.id;
  const bool query = is_query(command.kind);
  if (query && !links_.contains(host))
    co_return fail(ErrorCode::unavailable, "host " + host + "'s agent is not connected");
  if (!query) {
    // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
    auto journaled_work = [command, key = options_.journal_key](store::Database& db) {
      return journal_command(db, key, command, now_micros());
    };
    auto journaled = co_await store_.write(std::move(journaled_work));
    if (!journaled) co_return fail(journaled.error());
  }
  if (stopping_) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
  auto waiter = std::make_shared<Waiter>(loop_, command);
  // A repeat of a command still in flight shares nothing with the first caller: the later
  // one waits for the same id's outcome too (both are woken).
  auto previous = waiters_.find(id);
  std::shared_ptr<Waiter> earlier = previous != waiters_.end() ? previous->second : nullptr;
  waiters_[id] = waiter;
  std::weak_ptr<AgentConnection> sent_on;
  if (auto link = links_.find(host); link != links_.end()) {
    sent_on = link->second;
    link->second->send(envelope("command", agent::to_json(command)));
    if (!query) sent_on_link_[host].insert(id);
  }
  const auto started = std::chrono::steady_clock::now();
  auto disconnected_since = links_.contains(host) ? std::optional<std::chrono::steady_clock::time_point>()
                                                  : std::optional(started);
  const std::shared_ptr<bool> live = alive_;
  while (!waiter->outcome) {
    const auto now = std::chrono::steady_clock::now();
    if (links_.contains(host)) disconnected_since.reset();
    else if (!disconnected_since) disconnected_since = now;
    // Fix (issue 26 hub tests): a query is neither journaled nor sent again, so once the link
    // it went out on is gone (dropped, or replaced by a new hello) no answer can come: say so
    // now rather than after the whole wait.
    if (auto link = links_.find(host); query && (link == links_.end() || link->second != sent_on.lock())) break;
    if (now - started >= (query ? std::min<std::chrono::milliseconds>(options_.connected_wait, std::chrono::minutes(1))
                                : options_.connected_wait) ||
        (disconnected_since && now - *disconnected_since >= options_.disconnected_wait))
      break;
    // Woken by the outcome (the timer cancelled), else every second to look at the link.
    waiter->wake.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await waiter->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
    if (stopping_ && !waiter->outcome) break;  // the command stays journaled for the next start
  }
  release_waiter(id, waiter, earlier);
  if (waiter->outcome) co_return *waiter->outcome;
  co_return fail(ErrorCode::unavailable, "host " + host + "'s agent " +
                                             (links_.contains(host) ? "did not answer" : "is not connected") +
                                             (query ? "" : "; the command stays queued and runs when it answers"));
}

asio::awaitable<Status> AgentHub::hello(std::string host, std::shared_ptr<AgentConnection> connection, Hello hello) {
  if (hello.link_version != kLinkVersion)
    co_return fail(ErrorCode::invalid_argument, "link version " + std::to_string(hello.link_version) +
                                                    " is not this control plane's (" + std::to_string(kLinkVersion) + ")");
  if (hello.inventory.name != host)
    co_return fail(ErrorCode::forbidden, "this certificate is host " + host + "'s; it may not report host " +
                                             hello.inventory.name);
  if (local_hosts_.contains(host))
    co_return fail(ErrorCode::conflict, "host " + host + " is served in-process by the control plane");
  if (!registration_sink_) co_return fail(ErrorCode::unavailable, "the control plane is starting");
  const std::shared_ptr<bool> live = alive_;
  // A named argument: g++ 12 frees a temporary passed to a coroutine in a co_await twice.
  agent::LateRegistration registration{hello.inventory, hello.agent_version, connection->address()};
  auto registered = co_await registration_sink_(std::move(registration));
  if (!registered) co_return registered;
  if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
  if (auto old = links_.find(host); old != links_.end() && old->second != connection) {
    old->second->close("host " + host + "'s agent connected again");
    end_terminals(old->second.get(), "host " + host + "'s agent connected again");
  }
  links_[host] = connection;
  spdlog::info(R"({{"event":"agent_connected","host":"{}","address":"{}","agent_version":"{}"}})", host,
               connection->address(), hello.agent_version);
  const std::string version = GPUCLOUD_VERSION;
  connection->send(
      envelope("welcome", to_json(Welcome{kLinkVersion, version, static_cast<std::int64_t>(options_.heartbeat_interval.count())})));
  // Commands that were journaled while it was away (or whose outcome was lost): again, in order.
  // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
  auto pending_work = [host, key = options_.journal_key](store::Database& db) {
    return pending_commands(db, key, host, now_micros() - kQueryRelayLimit);
  };
  auto pending = co_await store_.read(std::move(pending_work));
  if (!*live) co_return ok();
  if (!pending) {
    spdlog::warn(R"({{"event":"agent_commands_unread","host":"{}","detail":{}}})", host,
                 json::serialize(json::value(json::string(pending.error().detail))));
  } else if (auto link = links_.find(host); link != links_.end() && link->second == connection) {
    std::set<std::string> sent;
    for (const auto& command : *pending) {
      connection->send(envelope("command", agent::to_json(command)));
      sent.insert(command.id);
    }
    sent_on_link_[host] = sent;
    // A caller may wait on a command whose journal row an earlier run of the control plane
    // completed (the same id issued again after a restart): its row is not pending, but the
    // caller needs the outcome, which the agent answers again for a repeated id.
    for (const auto& [id, waiter] : waiters_)
      if (waiter->host == host && !waiter->outcome && !is_query(waiter->command.kind) && !sent.contains(id))
        connection->send(envelope("command", agent::to_json(waiter->command)));
  }
  // The journal keeps done commands a day (an operator can read what ran) and gives up on
  // ones pending for a week (the control plane has sent newer ones since).
  auto purge_work = [](store::Database& db) {
    const std::int64_t now = now_micros(), day = 86'400'000'000LL;
    return purge_commands(db, now - day, now - 7 * day);
  };
  if (auto purged = co_await store_.write(std::move(purge_work)); !purged)
    spdlog::warn(R"({{"event":"agent_commands_not_purged","detail":{}}})",
                 json::serialize(json::value(json::string(purged.error().detail))));
  if (!*live) co_return ok();
  if (link_sink_) link_sink_(host, true);
  // Anything may have changed while it was away: reconcile its instances now.
  if (change_sink_) change_sink_(agent::ChangeReport{host, {}});
  co_return ok();
}

void AgentHub::receive(const std::string& host, const AgentConnection* connection, LinkMessage message) {
  if (auto link = links_.find(host); link == links_.end() || link->second.get() != connection) return;
  auto drop = [&](const std::string& why) {
    spdlog::warn(R"({{"event":"agent_message_dropped","host":"{}","type":"{}","why":{}}})", host, message.type,
                 json::serialize(json::value(json::string(why))));
  };
  if (message.type == "heartbeat") {
    auto beat = agent::heartbeat_from_json(message.body);
    if (!beat) return drop(beat.error().detail);
    if (beat->host_name != host) return drop("a heartbeat for host " + beat->host_name);
    // Acknowledged: the agent sees its link is alive end to end (and a load test times it).
    if (auto link = links_.find(host); link != links_.end())
      link->second->send(envelope("heartbeat_ack", json::object{{"sequence", beat->sequence}}));
    if (heartbeat_sink_) heartbeat_sink_(std::move(*beat));
  } else if (message.type == "samples") {
    auto report = agent::sample_report_from_json(message.body);
    if (!report) return drop(report.error().detail);
    if (report->host_name != host) return drop("samples for host " + report->host_name);
    asio::co_spawn(loop_, forward_samples(host, std::move(*report)), asio::detached);
  } else if (message.type == "changes") {
    auto report = agent::change_report_from_json(message.body);
    if (!report) return drop(report.error().detail);
    if (report->host_name != host) return drop("changes for host " + report->host_name);
    asio::co_spawn(loop_, forward_changes(host, std::move(*report)), asio::detached);
  } else if (message.type.starts_with("terminal_")) {
    receive_terminal(host, connection, message);
  } else if (message.type == "outcome") {
    auto outcome = agent::command_outcome_from_json(message.body);
    if (!outcome) return drop(outcome.error().detail);
    deliver_outcome(host, std::move(*outcome));
  } else {
    drop("unknown message type");
  }
}

void AgentHub::deliver_outcome(const std::string& host, agent::CommandOutcome outcome) {
  asio::co_spawn(
      loop_,
      [](AgentHub* self, std::shared_ptr<bool> live, std::string host,
         agent::CommandOutcome outcome) -> asio::awaitable<void> {
        // Only a command journaled for this host and still pending completes: an outcome for
        // another host's command, or a repeat, changes nothing.
        // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
        auto completed_work = [host, outcome, relay = self->options_.relay,
                               key = self->options_.journal_key](store::Database& db) -> Result<bool> {
          auto done = complete_command(db, host, outcome, now_micros());
          if (!done || !*done || !relay) return done;
          // The caller may wait on another replica: it reads the whole outcome from here.
          if (auto s = record_command_result(db, key, outcome); !s) return fail(s.error());
          return done;
        };
        auto completed = co_await self->store_.write(std::move(completed_work));
        if (!*live) co_return;
        if (!completed) {
          spdlog::warn(R"({{"event":"agent_outcome_unrecorded","host":"{}","command":"{}"}})", host, outcome.command_id);
          co_return;
        }
        auto it = self->waiters_.find(outcome.command_id);
        const bool ours = it != self->waiters_.end() && it->second->host == host;
        if (!*completed && !ours) co_return;  // not pending for this host: forged, or a repeat nobody waits for
        if (!ours) co_return;
        it->second->outcome = std::move(outcome);
        it->second->wake.cancel();
      }(this, alive_, host, std::move(outcome)),
      asio::detached);
}

asio::awaitable<std::vector<std::string>> AgentHub::own_instances(std::string host, std::vector<std::string> ids) {
  if (ids.empty()) co_return ids;
  // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
  auto placed_work = [host](store::Database& db) -> Result<std::set<std::string>> {
    auto rows = db.all("SELECT i.id FROM instances i JOIN hosts h ON h.id = i.host_id "
                       "WHERE h.name = ? AND i.state != 'released'",
                       {host});
    if (!rows) return fail(rows.error());
    std::set<std::string> out;
    for (const auto& r : *rows) out.insert(r.text(0));
    return out;
  };
  auto placed = co_await store_.read(std::move(placed_work));
  if (!placed) co_return std::vector<std::string>{};
  std::vector<std::string> kept;
  for (auto& id : ids) {
    if (placed->contains(id)) kept.push_back(std::move(id));
    else spdlog::warn(R"({{"event":"agent_report_dropped","host":"{}","instance":"{}","why":"not placed on this host"}})",
                      host, id);
  }
  co_return kept;
}

asio::awaitable<void> AgentHub::forward_samples(std::string host, agent::SampleReport report) {
  std::vector<std::string> ids;
  for (const auto& s : report.instances) ids.push_back(s.instance_id);
  const std::shared_ptr<bool> live = alive_;
  auto own = co_await own_instances(host, ids);
  if (!*live || !sample_sink_) co_return;
  std::set<std::string> keep(own.begin(), own.end());
  std::erase_if(report.instances, [&](const agent::InstanceSample& s) { return !keep.contains(s.instance_id); });
  sample_sink_(std::move(report));
}

asio::awaitable<void> AgentHub::forward_changes(std::string host, agent::ChangeReport report) {
  const bool everything = report.instance_ids.empty();
  const std::shared_ptr<bool> live = alive_;
  auto own = co_await own_instances(host, std::move(report.instance_ids));
  if (!*live || !change_sink_) co_return;
  if (!everything && own.empty()) co_return;
  change_sink_(agent::ChangeReport{host, std::move(own)});
}

void AgentHub::stop() {
  stopping_ = true;
  for (auto& [id, waiter] : waiters_) waiter->wake.cancel();
}

void AgentHub::closed(const std::string& host, const AgentConnection* connection) {
  // Every terminal it carried ends (a browser's terminal closes instead of hanging).
  end_terminals(connection, "host " + host + "'s agent disconnected");
  auto link = links_.find(host);
  if (link == links_.end() || link->second.get() != connection) return;
  links_.erase(link);
  spdlog::info(R"({{"event":"agent_disconnected","host":"{}"}})", host);
  if (link_sink_) link_sink_(host, false);
}

// ---- replicas (issue 27) ---------------------------------------------------------------------

asio::awaitable<Result<agent::CommandOutcome>> AgentHub::execute_relayed(agent::Command command) {
  const std::string host = command.host_name, id = command.id;
  const bool query = is_query(command.kind);
  const bool in_process = local_hosts_.contains(host);
  // Whether some replica holds the host's link (its row says so since the agent's hello).
  bool reachable = in_process;
  if (!in_process) {
    auto connected_work = [host](store::Database& db) -> Result<bool> {
      auto row = db.one("SELECT connected_at FROM hosts WHERE name = ?", {host});
      if (!row) return fail(row.error());
      return *row && !(*row)->is_null(0);
    };
    auto connected = co_await store_.read(std::move(connected_work));
    reachable = connected && *connected;
    if (query && !reachable) co_return fail(ErrorCode::unavailable, "host " + host + "'s agent is not connected");
  }
  auto journaled_work = [command, key = options_.journal_key](store::Database& db) {
    return journal_command(db, key, command, now_micros());
  };
  auto journaled = co_await store_.write(std::move(journaled_work));
  if (!journaled) co_return fail(journaled.error());
  auto waiter = std::make_shared<Waiter>(loop_, command);
  auto previous = waiters_.find(id);
  std::shared_ptr<Waiter> earlier = previous != waiters_.end() ? previous->second : nullptr;
  waiters_[id] = waiter;
  const auto limit = !reachable ? options_.disconnected_wait
                     : query    ? std::min<std::chrono::milliseconds>(options_.connected_wait, std::chrono::minutes(1))
                                : options_.connected_wait;
  const auto started = std::chrono::steady_clock::now();
  const std::shared_ptr<bool> live = alive_;
  while (!waiter->outcome) {
    auto result_work = [id, key = options_.journal_key](store::Database& db) { return command_result(db, key, id); };
    auto recorded = co_await store_.read(std::move(result_work));
    if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
    if (recorded && *recorded) {
      waiter->outcome = std::move(**recorded);
      break;
    }
    if (stopping_ || std::chrono::steady_clock::now() - started >= limit) break;
    // Woken by the outcome's NOTIFY, else every second to look in the journal.
    waiter->wake.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await waiter->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*live) co_return fail(ErrorCode::unavailable, "the control plane is stopping");
  }
  release_waiter(id, waiter, earlier);
  if (waiter->outcome) co_return *waiter->outcome;
  co_return fail(ErrorCode::unavailable, "host " + host + (in_process ? " (in-process, served by the leader)" : "'s agent") +
                                             " did not answer through another replica" +
                                             (query ? "" : "; the command stays queued and runs when it answers"));
}

void AgentHub::release_waiter(const std::string& id, const std::shared_ptr<Waiter>& waiter,
                              const std::shared_ptr<Waiter>& earlier) {
  // Fix (issue 26 hub tests): deliver_outcome wakes only the latest waiter of an id, so hand
  // the outcome on to the earlier caller of the same id (and it to its own earlier one);
  // otherwise that caller waited out connected_wait and failed though the command was done.
  if (waiter->outcome && earlier && !earlier->outcome) {
    earlier->outcome = waiter->outcome;
    earlier->wake.cancel();
  }
  if (auto it = waiters_.find(id); it != waiters_.end() && it->second == waiter) {
    if (earlier && !earlier->outcome) it->second = earlier;
    else waiters_.erase(it);
  }
}

void AgentHub::serve_in_process(bool serve) {
  serve_local_ = serve;
  if (serve)
    for (const auto& host : local_hosts_) commands_queued(host);
}

void AgentHub::commands_queued(const std::string& host) {
  if (stopping_ || !options_.relay) return;
  if (links_.contains(host)) asio::co_spawn(loop_, send_pending(host), asio::detached);
  else if (local_hosts_.contains(host) && serve_local_) asio::co_spawn(loop_, run_pending_local(host), asio::detached);
}

void AgentHub::outcome_recorded(const std::string& command_id) {
  if (auto it = waiters_.find(command_id); it != waiters_.end()) it->second->wake.cancel();  // it reads the journal
}

void AgentHub::catch_up() {
  if (!options_.relay) return;
  for (const auto& [host, link] : links_) commands_queued(host);
  if (serve_local_)
    for (const auto& host : local_hosts_) commands_queued(host);
  for (const auto& [id, waiter] : waiters_) waiter->wake.cancel();
}

asio::awaitable<void> AgentHub::send_pending(std::string host) {
  auto pending_work = [host, key = options_.journal_key](store::Database& db) {
    return pending_commands(db, key, host, now_micros() - kQueryRelayLimit);
  };
  const std::shared_ptr<bool> live = alive_;
  auto pending = co_await store_.read(std::move(pending_work));
  if (!*live || !pending) co_return;
  auto link = links_.find(host);
  if (link == links_.end()) co_return;
  // What is no longer pending leaves the set; what is pending and new goes out now.
  std::set<std::string> still;
  auto& sent = sent_on_link_[host];
  for (const auto& command : *pending) {
    still.insert(command.id);
    if (!sent.contains(command.id)) link->second->send(envelope("command", agent::to_json(command)));
  }
  sent = std::move(still);
}

asio::awaitable<void> AgentHub::run_pending_local(std::string host) {
  auto pending_work = [host, key = options_.journal_key](store::Database& db) {
    return pending_commands(db, key, host, now_micros() - kQueryRelayLimit);
  };
  const std::shared_ptr<bool> live = alive_;
  auto pending = co_await store_.read(std::move(pending_work));
  if (!*live || !pending || !serve_local_) co_return;
  for (auto& command : *pending)
    if (running_local_.insert(command.id).second) asio::co_spawn(loop_, run_local(std::move(command)), asio::detached);
}

asio::awaitable<void> AgentHub::run_local(agent::Command command) {
  const std::shared_ptr<bool> live = alive_;
  const std::string id = command.id, host = command.host_name;
  auto ran = co_await local_->execute(command);
  if (!*live) co_return;
  agent::CommandOutcome outcome = ran ? std::move(*ran) : agent::failed_outcome(id, ran.error());
  outcome.command_id = id;
  auto record_work = [host, outcome, key = options_.journal_key](store::Database& db) -> Status {
    auto done = complete_command(db, host, outcome, now_micros());
    if (!done) return fail(done.error());
    return record_command_result(db, key, outcome);
  };
  auto recorded = co_await store_.write(std::move(record_work));
  if (!*live) co_return;
  running_local_.erase(id);
  if (!recorded)
    spdlog::warn(R"({{"event":"agent_outcome_unrecorded","host":"{}","command":"{}"}})", host, id);
}

}  // namespace gpucloud::agentlink
