#pragma once
// LISTEN/NOTIFY between replicas sharing a PostgreSQL store (issue 27): a commit through one
// replica that recorded an event, journaled an agent command or recorded its outcome notifies
// the others at once (the payload is a host name or a command id, never a secret). Each
// replica keeps one connection LISTENing; the loop waits on its socket, so nothing blocks. A
// dropped connection is opened again after a second and `reconnected` runs: what was notified
// meanwhile is caught up by the caller (events by sequence, commands from the journal).
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/result.h"
#include "store/database.h"
#include "store/pg_database.h"

namespace gpucloud::store {

inline constexpr const char* kEventsChannel = "gpucloud_events";
inline constexpr const char* kAgentCommandsChannel = "gpucloud_agent_commands";
inline constexpr const char* kAgentOutcomesChannel = "gpucloud_agent_outcomes";

// Inside a write transaction: the other replicas hear `payload` on `channel` when it commits
// (PostgreSQL delivers it then, once per distinct payload). Nothing on SQLite (one process).
Status notify_replicas(Database& db, std::string_view channel, std::string_view payload);
// The statement itself, for a script that ends a transaction.
std::string notify_sql(std::string_view channel, std::string_view payload);

class PgListener {
 public:
  using Handler = std::function<void(const std::string& channel, const std::string& payload)>;
  PgListener(boost::asio::any_io_executor loop, PgConnectOptions options, std::vector<std::string> channels,
             Handler handler, std::function<void()> reconnected);
  ~PgListener();
  PgListener(const PgListener&) = delete;
  void start();
  void stop();
  bool listening() const { return conn_ != nullptr; }

 private:
  boost::asio::awaitable<void> run();
  void close_connection();

  boost::asio::any_io_executor loop_;
  PgConnectOptions options_;
  std::vector<std::string> channels_;
  Handler handler_;
  std::function<void()> reconnected_;
  pg_conn* conn_ = nullptr;  // loop thread, once connected
  std::unique_ptr<boost::asio::posix::stream_descriptor> socket_;
  boost::asio::steady_timer retry_;
  bool stopped_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  boost::asio::thread_pool pool_{1};  // connecting blocks
};

}  // namespace gpucloud::store
