// POST /admin/clock: moves the platform clock under --test-clock (like Stripe's test clocks).
#include "api/json_input.h"
#include "server/app.h"
#include "store/meta.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

asio::awaitable<Result<Response>> advance_clock(RequestContext& ctx) {
  App& app = ctx.app;
  if (!app.clock().test_mode()) co_return fail(ErrorCode::forbidden, "the platform clock moves only under --test-clock");
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto seconds = api::required_int(*body, "advance_seconds");
  if (!seconds) co_return tl::unexpected(seconds.error());
  if (*seconds < 0 || *seconds > 10LL * 365 * 86400)
    co_return fail(ErrorCode::invalid_argument, "advance_seconds: must be from 0 to 10 years");
  co_await app.billing().quiesce();  // timers asked for by earlier commits are in place
  auto now = co_await app.clock().advance(std::chrono::seconds(*seconds));
  if (!now) co_return tl::unexpected(now.error());
  // Persist the test time so a restart under --test-clock resumes from it.
  auto persist = [micros = to_unix_micros(*now)](store::Database& db) {
    return store::set_meta(db, "test_clock_now", std::to_string(micros));
  };
  if (auto s = co_await app.store().write(std::move(persist)); !s) co_return tl::unexpected(s.error());
  json::object o;
  o["now"] = format_rfc3339(*now);
  co_return json_response(200, o);
}

}  // namespace

void register_admin_clock_routes(App& app) {
  app.router().add("POST", "/api/v1/admin/clock", Access::admin, "admin",
                   "Advance the platform clock (only under --test-clock)", advance_clock);
}

}  // namespace gpucloud::server
