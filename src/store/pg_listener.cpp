#include "store/pg_listener.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "core/offload.h"

namespace gpucloud::store {
namespace asio = boost::asio;

namespace {
// A SQL string literal: payloads are host names and ids, quoted anyway.
std::string literal(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}
}  // namespace

std::string notify_sql(std::string_view channel, std::string_view payload) {
  return "NOTIFY " + std::string(channel) + ", " + literal(payload);
}

Status notify_replicas(Database& db, std::string_view channel, std::string_view payload) {
  if (db.dialect() != Dialect::postgres) return ok();
  return db.exec_script(notify_sql(channel, payload));
}

PgListener::PgListener(asio::any_io_executor loop, PgConnectOptions options, std::vector<std::string> channels,
                       Handler handler, std::function<void()> reconnected)
    : loop_(loop),
      options_(std::move(options)),
      channels_(std::move(channels)),
      handler_(std::move(handler)),
      reconnected_(std::move(reconnected)),
      retry_(loop) {
  options_.application_name = "gpucloudd-listen";
}

PgListener::~PgListener() {
  *alive_ = false;
  stop();
  pool_.join();
  close_connection();
}

void PgListener::start() { asio::co_spawn(loop_, run(), asio::detached); }

void PgListener::stop() {
  stopped_ = true;
  retry_.cancel();
  if (socket_) {
    boost::system::error_code ignored;
    socket_->cancel(ignored);
  }
}

void PgListener::close_connection() {
  if (socket_) {
    boost::system::error_code ignored;
    socket_->close(ignored);  // a dup of libpq's socket: libpq closes its own
    socket_.reset();
  }
  if (conn_) {
    PQfinish(conn_);
    conn_ = nullptr;
  }
}

asio::awaitable<void> PgListener::run() {
  const std::shared_ptr<bool> live = alive_;
  while (!stopped_) {
    auto connect = [options = options_, channels = channels_]() -> Result<PGconn*> {
      auto opened = open_pg_connection(options);
      if (!opened) return opened;
      for (const auto& channel : channels) {
        PGresult* r = PQexec(*opened, ("LISTEN " + channel).c_str());
        const bool done = r && PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!done) {
          std::string why = PQerrorMessage(*opened);
          PQfinish(*opened);
          return fail(ErrorCode::unavailable, "LISTEN " + channel + ": " + why);
        }
      }
      PQsetnonblocking(*opened, 1);
      return opened;
    };
    auto opened = co_await offload<Result<PGconn*>>(pool_.get_executor(), std::move(connect));
    if (!*live) {
      if (opened) PQfinish(*opened);
      co_return;
    }
    if (opened && !stopped_) {
      conn_ = *opened;
      const int fd = ::dup(PQsocket(conn_));
      socket_ = std::make_unique<asio::posix::stream_descriptor>(loop_, fd);
      spdlog::info(R"({{"event":"store_listening","channels":{}}})", channels_.size());
      if (reconnected_) reconnected_();
      for (;;) {
        boost::system::error_code ec;
        co_await socket_->async_wait(asio::posix::stream_descriptor::wait_read, asio::redirect_error(asio::use_awaitable, ec));
        if (!*live) co_return;
        if (ec || stopped_) break;
        if (PQconsumeInput(conn_) == 0) {
          spdlog::warn(R"({{"event":"store_listen_lost","detail":{}}})",
                       boost::json::serialize(boost::json::value(boost::json::string(PQerrorMessage(conn_)))));
          break;
        }
        while (PGnotify* n = PQnotifies(conn_)) {
          std::string channel = n->relname ? n->relname : "", payload = n->extra ? n->extra : "";
          PQfreemem(n);
          handler_(channel, payload);
          if (!*live) co_return;
        }
      }
      close_connection();
    } else if (opened) {
      PQfinish(*opened);
    } else {
      spdlog::warn(R"({{"event":"store_listen_failed","detail":{}}})",
                   boost::json::serialize(boost::json::value(boost::json::string(opened.error().detail))));
    }
    if (stopped_) co_return;
    retry_.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await retry_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*live) co_return;
  }
}

}  // namespace gpucloud::store
