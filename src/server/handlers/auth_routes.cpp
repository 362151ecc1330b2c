// POST /auth/register, /auth/login, /auth/logout; GET /me; PUT /me/password;
// POST/GET/DELETE /auth/session (browser sign-in with a cookie, server/browser_session.h).
#include <spdlog/spdlog.h>

#include "api/auth_views.h"
#include "api/json_input.h"
#include "auth/credentials.h"
#include "auth/shared_login_failures.h"
#include "core/ids.h"
#include "billing/ledger.h"
#include "server/app.h"
#include "server/browser_session.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::size_t kMaxUsernameBytes = 32;   // api.md: [a-z][a-z0-9_-]{2,31}
constexpr std::size_t kMaxPasswordBytes = 1024;  // as check_password_strength
constexpr std::string_view kBrowserSessionName = "browser";  // the token's name: a console sign-in

asio::awaitable<Result<std::string>> hash_off_loop(App& app, std::string password) {
  auto job = [password = std::move(password)]() { return auth::hash_password(password); };
  co_return co_await app.password_pool().run<std::string>(std::move(job));
}

asio::awaitable<Result<Response>> register_user(RequestContext& ctx) {
  App& app = ctx.app;
  if (!app.config().registration_open)
    co_return fail(ErrorCode::forbidden, "registration is closed: ask the operator for an account");
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto username = api::required_string(*body, "username");
  if (!username) co_return tl::unexpected(username.error());
  if (!is_valid_username(*username))
    co_return fail(ErrorCode::invalid_argument, "username: must match [a-z][a-z0-9_-]{2,31}");
  auto password = api::required_string(*body, "password");
  if (!password) co_return tl::unexpected(password.error());
  if (auto s = auth::check_password_strength(*password); !s) co_return tl::unexpected(s.error());
  auto email = api::optional_string(*body, "email");
  if (!email) co_return tl::unexpected(email.error());
  if (*email && ((*email)->size() > 254 || (*email)->find('@') == std::string::npos))
    co_return fail(ErrorCode::invalid_argument, "email: not an email address");
  auto hash = co_await hash_off_loop(app, *password);
  if (!hash) co_return tl::unexpected(hash.error());
  auto now = app.clock().now();
  auto create = [&, hash = *hash](store::Database& db) -> Result<Response> {
    auto user = auth::create_user(db, *username, *email, hash, "user", now);
    if (!user) return tl::unexpected(user.error());
    if (auto s = billing::open_account(db, user->id, user->username, app.config().billing.signup_credit, now); !s)
      return fail(s.error());
    return json_response(201, api::user_json(*user));
  };
  co_return co_await app.store().write(std::move(create));
}

// Checks {username, password} with the login throttle; the verified, enabled user.
asio::awaitable<Result<auth::User>> verify_credentials(RequestContext& ctx) {
  App& app = ctx.app;
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto username = api::required_string(*body, "username");
  if (!username) co_return tl::unexpected(username.error());
  auto password = api::required_string(*body, "password");
  if (!password) co_return tl::unexpected(password.error());
  // Bounded before anything is hashed or remembered (no username is longer; Argon2 time
  // grows with the password).
  if (username->empty() || username->size() > kMaxUsernameBytes)
    co_return fail(ErrorCode::invalid_argument, "username: must be 1-32 characters");
  if (password->size() > kMaxPasswordBytes)
    co_return fail(ErrorCode::invalid_argument, "password: must be at most 1024 characters");
  const std::string& address = ctx.request.client_address;
  auto& throttle = app.login_throttle();
  // Replicas on one PostgreSQL store count each other's failures (issue 27).
  const bool shared = app.store().dialect() == store::Dialect::postgres;
  const std::string shared_key = auth::login_failure_key(*username, address);
  const int limit = app.config().server.login_failures_allowed;
  const std::chrono::seconds window = app.config().server.login_window;
  if (shared) {
    auto read = [shared_key, limit, window, now = system_now()](store::Database& db) {
      return auth::shared_login_wait(db, shared_key, limit, window, now);
    };
    auto wait = co_await app.store().read(std::move(read));
    if (!wait) co_return tl::unexpected(wait.error());
    if (*wait > 0) {
      Error e{ErrorCode::rate_limited, "too many failed logins; try again in " + std::to_string(*wait) + " s", {}, *wait};
      co_return tl::unexpected(e);
    }
  }
  // The attempt is counted before it is hashed: parallel guesses see each other at once.
  if (auto wait = throttle.begin_attempt(*username, address, std::chrono::steady_clock::now()); wait > 0) {
    Error e{ErrorCode::rate_limited, "too many failed logins; try again in " + std::to_string(wait) + " s", {}, wait};
    co_return tl::unexpected(e);
  }
  using Outcome = auth::LoginThrottle::Outcome;
  struct Attempt {  // ends the reservation on every path; counted as failed unless said otherwise
    auth::LoginThrottle& throttle;
    std::string username, address;
    Outcome outcome = Outcome::failed;
    ~Attempt() { throttle.finish_attempt(username, address, outcome, std::chrono::steady_clock::now()); }
  } attempt{throttle, *username, address};
  // Look up and verify on the blocking pool (Argon2 takes tens of milliseconds).
  auto check = [&app, username = *username, password = *password]() -> Result<std::optional<auth::User>> {
    auto lookup = app.store().read_now([&](store::Database& db) { return auth::find_user_with_hash(db, username); });
    if (!lookup) return tl::unexpected(lookup.error());
    if (!*lookup) {
      // Spend the same time as a real check so timing does not reveal which usernames exist.
      static const std::string dummy = auth::hash_password("not the password of anyone").value_or("");
      (void)auth::verify_password(password, dummy);
      return std::optional<auth::User>{};
    }
    if (!auth::verify_password(password, (*lookup)->second)) return std::optional<auth::User>{};
    return std::optional<auth::User>{(*lookup)->first};
  };
  auto verified = co_await app.password_pool().run<std::optional<auth::User>>(std::move(check));
  if (!verified) {
    // Nothing was checked (pool full, store error): no failure to count.
    attempt.outcome = Outcome::not_checked;
    co_return tl::unexpected(verified.error());
  }
  if (shared) {
    auto note = [shared_key, window, failed = !*verified, now = system_now()](store::Database& db) -> Status {
      return failed ? auth::record_shared_login_failure(db, shared_key, window, now)
                    : auth::clear_shared_login_failures(db, shared_key);
    };
    if (auto s = co_await app.store().write(std::move(note)); !s)
      spdlog::warn(R"({{"event":"login_failure_not_shared","error":"{}"}})", std::string(to_string(s.error().code)));
  }
  if (!*verified) co_return fail(ErrorCode::unauthorized, "wrong username or password");
  attempt.outcome = Outcome::succeeded;
  if ((*verified)->disabled) co_return fail(ErrorCode::unauthorized, "this account is disabled");
  co_return std::move(**verified);
}

asio::awaitable<Result<Response>> login(RequestContext& ctx) {
  App& app = ctx.app;
  auto user = co_await verify_credentials(ctx);
  if (!user) co_return tl::unexpected(user.error());
  auto now = system_now();
  auto expires = now + std::chrono::duration_cast<std::chrono::microseconds>(app.config().session_ttl);
  auto issue = [user_id = user->id, now, expires](store::Database& db) -> Result<Response> {
    auto token = auth::issue_token(db, user_id, "session", "login", now, expires);
    if (!token) return tl::unexpected(token.error());
    json::object o;
    o["token"] = token->secret;
    o["expires_at"] = format_rfc3339(expires);
    return json_response(200, o);
  };
  co_return co_await app.store().write(std::move(issue));
}

// The browser session's answer: the user, the session's CSRF token and its expiry.
Response session_body(App& app, const auth::User& user, const std::string& token_id, std::optional<SysTime> expires) {
  json::object o;
  o["user"] = api::user_json(user);
  o["csrf_token"] = app.csrf_token(token_id);
  o["expires_at"] = expires ? json::value(format_rfc3339(*expires)) : json::value(nullptr);
  return json_response(200, o);
}

// POST /auth/session: a login that sets the session cookie (the token never reaches script).
asio::awaitable<Result<Response>> create_browser_session(RequestContext& ctx) {
  App& app = ctx.app;
  auto user = co_await verify_credentials(ctx);
  if (!user) co_return tl::unexpected(user.error());
  auto now = system_now();
  auto expires = now + std::chrono::duration_cast<std::chrono::microseconds>(app.config().session_ttl);
  auto issue = [user_id = user->id, now, expires](store::Database& db) {
    return auth::issue_token(db, user_id, "session", std::string(kBrowserSessionName), now, expires);
  };
  auto token = co_await app.store().write(std::move(issue));
  if (!token) co_return tl::unexpected(token.error());
  Response r = session_body(app, *user, token->info.id, expires);
  r.headers.emplace_back("Set-Cookie", session_cookie_header(token->secret, app.config().session_ttl,
                                                             request_is_https(ctx.request)));
  r.headers.emplace_back("Cache-Control", "no-store");
  co_return r;
}

// GET /auth/session: the cookie's session (401 without a valid cookie).
asio::awaitable<Result<Response>> get_browser_session(RequestContext& ctx) {
  if (!ctx.via_cookie) co_return fail(ErrorCode::unauthorized, "no browser session: sign in with POST /api/v1/auth/session");
  auto read = [id = ctx.caller().token_id](store::Database& db) { return auth::token_expiry(db, id); };
  auto expires = co_await ctx.app.store().read(std::move(read));
  if (!expires) co_return tl::unexpected(expires.error());
  Response r = session_body(ctx.app, ctx.caller().user, ctx.caller().token_id, *expires);
  r.headers.emplace_back("Cache-Control", "no-store");
  co_return r;
}

// POST /auth/logout and DELETE /auth/session: the calling session ends (and a browser's
// cookie is cleared).
asio::awaitable<Result<Response>> logout(RequestContext& ctx) {
  auto revoke = [user = ctx.caller().user.id, token = ctx.caller().token_id](store::Database& db) -> Result<Response> {
    if (auto s = auth::revoke_token(db, user, token, system_now()); !s) return tl::unexpected(s.error());
    return empty_response(204);
  };
  auto response = co_await ctx.app.store().write(std::move(revoke));
  ctx.app.invalidate_auth_cache();
  if (response && ctx.via_cookie)
    response->headers.emplace_back("Set-Cookie", cleared_session_cookie_header(request_is_https(ctx.request)));
  co_return response;
}

asio::awaitable<Result<Response>> delete_browser_session(RequestContext& ctx) {
  if (!ctx.via_cookie) co_return fail(ErrorCode::unauthorized, "no browser session: this ends the session cookie's session");
  co_return co_await logout(ctx);
}

asio::awaitable<Result<Response>> me(RequestContext& ctx) {
  co_return json_response(200, api::user_json(ctx.caller().user));
}

asio::awaitable<Result<Response>> change_password(RequestContext& ctx) {
  App& app = ctx.app;
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  auto old_password = api::required_string(*body, "old_password");
  if (!old_password) co_return tl::unexpected(old_password.error());
  auto new_password = api::required_string(*body, "new_password");
  if (!new_password) co_return tl::unexpected(new_password.error());
  auto revoke_tokens = api::optional_bool(*body, "revoke_tokens");
  if (!revoke_tokens) co_return tl::unexpected(revoke_tokens.error());
  if (old_password->size() > kMaxPasswordBytes)
    co_return fail(ErrorCode::invalid_argument, "old_password: does not match the current password");
  if (auto s = auth::check_password_strength(*new_password); !s) {
    s.error().detail = "new_" + s.error().detail;
    co_return tl::unexpected(s.error());
  }
  auto rehash = [&app, username = ctx.caller().user.username, old_password = *old_password,
                 new_password = *new_password]() -> Result<std::string> {
    auto lookup = app.store().read_now([&](store::Database& db) { return auth::find_user_with_hash(db, username); });
    if (!lookup) return tl::unexpected(lookup.error());
    if (!*lookup || !auth::verify_password(old_password, (*lookup)->second))
      return fail(ErrorCode::invalid_argument, "old_password: does not match the current password");
    return auth::hash_password(new_password);
  };
  auto hash = co_await app.password_pool().run<std::string>(std::move(rehash));
  if (!hash) co_return tl::unexpected(hash.error());
  // Every session of the user ends, browser ones too; a bearer caller keeps its own (the
  // spec's "other sessions"), a browser's ends as well (the console signs in again). With
  // revoke_tokens, the user's API tokens go too.
  std::string keep = ctx.via_cookie ? "" : ctx.caller().token_id;
  auto update = [user = ctx.caller().user.id, keep, hash = *hash,
                 tokens_too = revoke_tokens->value_or(false)](store::Database& db) -> Result<Response> {
    auto now = system_now();
    if (auto s = auth::set_password_hash(db, user, hash); !s) return tl::unexpected(s.error());
    if (auto s = auth::revoke_other_sessions(db, user, keep, now); !s) return tl::unexpected(s.error());
    if (tokens_too)
      if (auto s = auth::revoke_api_tokens(db, user, now); !s) return tl::unexpected(s.error());
    return empty_response(204);
  };
  auto response = co_await app.store().write(std::move(update));
  app.invalidate_auth_cache();
  if (response && ctx.via_cookie)
    response->headers.emplace_back("Set-Cookie", cleared_session_cookie_header(request_is_https(ctx.request)));
  co_return response;
}

}  // namespace

void register_auth_routes(App& app) {
  auto& r = app.router();
  r.add("POST", "/api/v1/auth/register", Access::public_route, "auth", "Create an account (when registration is open)", register_user);
  r.add("POST", "/api/v1/auth/login", Access::public_route, "auth", "Log in; returns a session token", login);
  r.add("POST", "/api/v1/auth/logout", Access::user, "auth", "Revoke the calling session token", logout);
  r.add("GET", "/api/v1/me", Access::user, "auth", "The calling user", me);
  r.add("PUT", "/api/v1/me/password", Access::user, "auth",
        "Change the password; ends the user's other sessions (a browser's own too); revoke_tokens: also the API tokens",
        change_password);
  r.add("POST", "/api/v1/auth/session", Access::public_route, "auth",
        "Browser sign-in: sets the HttpOnly session cookie; returns the user and the CSRF token", create_browser_session);
  r.add("GET", "/api/v1/auth/session", Access::user, "auth", "The browser session of the cookie", get_browser_session);
  r.add("DELETE", "/api/v1/auth/session", Access::user, "auth", "End the browser session and clear its cookie",
        delete_browser_session);
}

}  // namespace gpucloud::server
