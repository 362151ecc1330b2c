// GET /events (own; the operator sees all) and GET /events/stream (Server-Sent Events that
// resume after Last-Event-ID, with heartbeat comments so proxies keep the stream open).
#include <charconv>

#include <boost/asio.hpp>
#include <boost/json.hpp>

#include "core/ids.h"
#include "events/events.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

Result<std::string> resolve_resource(store::Database& db, const std::optional<std::string>& user, const std::string& resource) {
  if (!is_valid_resource_name(resource)) return resource;  // an id (or nothing we name)
  return events::resolve_resource_name(db, user, resource);
}

// Names in `resource` become ids, in a store read (off the loop).
asio::awaitable<Result<events::Query>> resolve_names(App& app, events::Query q) {
  if (!q.resource) co_return q;
  auto read = [user = q.user, resource = *q.resource](store::Database& db) { return resolve_resource(db, user, resource); };
  auto id = co_await app.store().read(std::move(read));
  if (!id) co_return tl::unexpected(id.error());
  q.resource = *id;
  co_return q;
}

Result<events::Query> parse_query(RequestContext& ctx, std::string_view last_event_id) {
  events::Query q;
  if (!ctx.caller().user.is_admin()) q.user = ctx.caller().user.id;
  auto params = ctx.request.query();
  auto parse_seq = [](std::string_view text, std::int64_t& out) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && p == text.data() + text.size() && out >= 0;
  };
  if (!params["since_seq"].empty() && !parse_seq(params["since_seq"], q.since_seq))
    return fail(ErrorCode::invalid_argument, "since_seq: must be a non-negative integer");
  // The list's next_cursor is the seq to resume after: `cursor` and `since_seq` are one thing.
  if (!params["cursor"].empty() && !parse_seq(params["cursor"], q.since_seq))
    return fail(ErrorCode::invalid_argument, "cursor: not a cursor this server returned");
  if (!last_event_id.empty() && !parse_seq(last_event_id, q.since_seq))
    return fail(ErrorCode::invalid_argument, "Last-Event-ID: must be an event seq");
  if (!params["resource"].empty()) q.resource = params["resource"];
  if (!params["limit"].empty()) {
    std::int64_t limit = 0;
    if (!parse_seq(params["limit"], limit) || limit < 1 || limit > 1000)
      return fail(ErrorCode::invalid_argument, "limit: must be an integer from 1 to 1000");
    q.limit = static_cast<std::size_t>(limit);
  }
  return q;
}

asio::awaitable<Result<Response>> list_events(RequestContext& ctx) {
  auto parsed = parse_query(ctx, "");
  if (!parsed) co_return tl::unexpected(parsed.error());
  auto q = co_await resolve_names(ctx.app, *parsed);
  if (!q) co_return tl::unexpected(q.error());
  auto read = [q = *q](store::Database& db) { return events::list(db, q); };
  auto found = co_await ctx.app.store().read(std::move(read));
  if (!found) co_return tl::unexpected(found.error());
  json::array items;
  for (const auto& e : *found) items.push_back(events::to_json(e));
  json::object doc{{"items", std::move(items)}};
  // Oldest first; the cursor is the seq to resume after.
  doc["next_cursor"] = found->size() == q->limit ? json::value(std::to_string(found->back().seq)) : json::value(nullptr);
  co_return json_response(200, doc);
}

std::string sse_frame(const events::Event& e) {
  return "id: " + std::to_string(e.seq) + "\nevent: " + e.type + "\ndata: " + json::serialize(events::to_json(e)) + "\n\n";
}

// Parks a stream's timer with the app while it waits, whatever ends the wait.
struct ParkedTimer {
  ParkedTimer(App* app, asio::steady_timer* timer) : app(app), waiters(app->event_waiters_handle()), timer(timer) {
    app->event_waiters().insert(timer);
  }
  // A frame destroyed by io_context's destructor outlives the App: unpark only if it is alive.
  ~ParkedTimer() {
    if (auto w = waiters.lock()) w->erase(timer);
  }
  ParkedTimer(const ParkedTimer&) = delete;
  ParkedTimer& operator=(const ParkedTimer&) = delete;
  App* app;
  std::weak_ptr<App::Waiters> waiters;
  asio::steady_timer* timer;
};

// One stream: sends what is new when a local commit records an event (woken at once) or the
// store's latest seq moves past what it sent, and a comment every 15 s. A named coroutine
// taking everything by value.
asio::awaitable<void> sse_loop(App* app, events::Query query, StreamSink* sink, std::string token,
                               auth::Principal principal) {
  asio::steady_timer tick(co_await asio::this_coro::executor);
  auto last_heartbeat = std::chrono::steady_clock::now();
  AccessWatch access(*app, std::move(token), std::move(principal));
  if (!co_await sink->write(": connected\n\n")) co_return;
  bool woken = true;  // look once at the start: events may be waiting since Last-Event-ID
  while (!app->shutting_down()) {
    // A revoked token, a disabled or demoted user: the stream ends (a revoke wakes it).
    if (!co_await access.still_valid()) {
      (void)co_await sink->write(": access revoked\n\n");
      co_return;
    }
    if (woken || app->latest_event_seq() > query.since_seq) {
      auto read = [query](store::Database& db) { return events::list(db, query); };
      auto batch = co_await app->store().read(std::move(read));
      if (!batch) co_return;
      std::string out;
      for (const auto& e : *batch) {
        out += sse_frame(e);
        query.since_seq = e.seq;
      }
      if (!out.empty() && !co_await sink->write(std::move(out))) co_return;
      if (batch->size() == query.limit) continue;  // more waiting
      // Someone else's events moved the latest seq: remember it so we do not re-query.
      if (batch->empty()) query.since_seq = std::max(query.since_seq, app->latest_event_seq());
    }
    if (std::chrono::steady_clock::now() - last_heartbeat > std::chrono::seconds(15)) {
      if (!co_await sink->write(": heartbeat\n\n")) co_return;
      last_heartbeat = std::chrono::steady_clock::now();
    }
    // Local commits wake the stream at once; this tick only notices events that another
    // process wrote to a shared store (the seq poller's view), and paces heartbeats.
    tick.expires_after(std::chrono::seconds(1));
    ParkedTimer parked(app, &tick);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    woken = ec == asio::error::operation_aborted;
  }
}

asio::awaitable<Result<Response>> stream_events(RequestContext& ctx) {
  auto parsed = parse_query(ctx, ctx.request.header("last-event-id"));
  if (!parsed) co_return tl::unexpected(parsed.error());
  auto q = co_await resolve_names(ctx.app, *parsed);
  if (!q) co_return tl::unexpected(q.error());
  q->limit = 500;
  Response r{200, "text/event-stream", "", {{"X-Accel-Buffering", "no"}}, {}, {}};
  App* app = &ctx.app;
  r.stream = [app, query = *q, token = App::bearer_token(ctx.request), principal = ctx.caller()](StreamSink& sink) {
    return sse_loop(app, query, &sink, token, principal);
  };
  co_return r;
}

}  // namespace

void register_event_routes(App& app) {
  auto& r = app.router();
  r.add("GET", "/api/v1/events/stream", Access::user, "events", "Server-Sent Events (resume with Last-Event-ID)", stream_events);
  r.add("GET", "/api/v1/events", Access::user, "events", "Events after since_seq (own; the operator sees all)", list_events);
}

}  // namespace gpucloud::server
