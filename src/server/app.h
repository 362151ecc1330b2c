#pragma once
// gpucloudd's request pipeline: routing, authentication, problem errors, idempotency,
// metrics and the request log. Handler files (handlers/*.cpp) add their routes here.
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include <boost/asio/thread_pool.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include "auth/accounts.h"
#include "auth/login_throttle.h"
#include "config/config.h"
#include "core/platform_clock.h"
#include "instances/actor.h"
#include "billing/billing_service.h"
#include "disks/disk_service.h"
#include "instances/image_service.h"
#include "instances/lifecycle.h"
#include "monitoring/monitoring_service.h"
#include "server/auth_cache.h"
#include "server/console.h"
#include "server/host_registry.h"
#include "server/http_types.h"
#include "server/leadership.h"
#include "server/metrics.h"
#include "server/password_pool.h"
#include "server/request_log.h"
#include "server/router.h"
#include "store/idempotency.h"
#include "store/store.h"

namespace gpucloud::pki {
class CertificateAuthority;
}

namespace gpucloud::server {

class App;

// While a request holds its Idempotency-Key, another request with that key is `conflict`.
struct IdempotencyHold;

struct RequestContext {
  App& app;
  Request& request;
  std::optional<auth::Principal> principal;  // set on every route that is not public
  std::shared_ptr<IdempotencyHold> idempotency_hold;
  bool via_cookie = false;  // authenticated by the browser's session cookie, not a bearer token
  // What an Idempotency-Key is scoped to, when the path names a resource that a name or an id
  // can both reach (`/admin/users/bob/credit` and `/admin/users/u-1/credit` are one resource):
  // the handler sets it to the path with the resolved id. Empty: the request's path.
  std::string idempotency_resource;

  const auth::Principal& caller() const { return *principal; }
  // The caller as the domain modules take it: a user on their own resources, or the operator.
  instances::Actor actor() const { return instances::Actor{caller().user.id, caller().user.is_admin()}; }
  const std::string& param(const std::string& name) const { return request.params.at(name); }
};

class App {
 public:
  App(boost::asio::any_io_executor loop, config::Config config, std::unique_ptr<store::Store> store,
      std::unique_ptr<PlatformClock> clock);
  ~App();

  // Answers one request; never throws.
  boost::asio::awaitable<Response> handle(Request& request);

  boost::asio::any_io_executor loop() const { return loop_; }
  const config::Config& config() const { return config_; }
  store::Store& store() { return *store_; }
  PlatformClock& clock() { return *clock_; }
  Router& router() { return router_; }
  Metrics& metrics() { return metrics_; }
  auth::LoginThrottle& login_throttle() { return login_throttle_; }
  // Argon2id and crypt(3) run here, apart from the store's readers, so a burst of logins
  // never delays token lookups.
  // run() is bounded: past 64 queued or running jobs it answers `unavailable`.
  PasswordPool& password_pool() { return password_pool_; }
  // Forgets every cached token and outdates lookups under way; called by whatever revokes
  // tokens, disables users or changes roles, before it answers, so the change holds from the
  // very next request. Open streams and terminals re-check their token when it moves.
  void invalidate_auth_cache() {
    auth_cache_.invalidate();
    wake_event_streams();  // parked streams and terminals re-check their token now
  }
  std::uint64_t auth_generation() const { return auth_cache_.generation(); }
  // The principal for a bearer token (cached on the loop), or unauthorized.
  boost::asio::awaitable<Result<auth::Principal>> authenticate_token(std::string token);
  // Whether a request whose header alone has come may send a body up to [server]
  // proxy_max_body_bytes: one for an instance's web-service proxy by a caller whose token or
  // session is valid (who may see that instance is judged later, as for any request).
  boost::asio::awaitable<bool> admits_proxy_body(const Request& header_only);
  // The token a request authenticates with: its bearer token, else its session cookie's
  // (server/browser_session.h); "" when it has none.
  static std::string bearer_token(const Request& request);
  // The CSRF token of a browser session (bound to the session token's id).
  std::string csrf_token(const std::string& session_token_id) const;
  // The web console's files, or null when none were found.
  const Console* console() const { return console_.get(); }
  // The newest event seq in the store, refreshed every 200 ms by one poller for all streams.
  std::int64_t latest_event_seq() const { return latest_event_seq_; }
  // Event streams park their timer here while they wait; a local commit that recorded an
  // event cancels them all (loop only).
  using Waiters = std::set<boost::asio::steady_timer*>;
  Waiters& event_waiters() { return *event_waiters_; }
  // For guards in coroutine frames that io_context's destructor may destroy after the App:
  // they unpark only while the set is still alive.
  std::weak_ptr<Waiters> event_waiters_handle() { return event_waiters_; }
  void wake_event_streams();
  // Another replica's commit changed billing accounts or a cost-control deadline
  // (store/background_notes.h): the leader plans them (loop only; nothing on a standby).
  void background_note_heard(const std::string& channel, const std::string& payload);
  // The notes' connection was lost and opened again: the leader plans everything watched.
  void background_notes_missed();
  // A standby's note to the leader outside any transaction of its own (an image deletion).
  boost::asio::awaitable<void> tell_leader(std::string channel, std::string payload);
  void begin_shutdown() { shutting_down_ = true; }
  bool shutting_down() const { return shutting_down_; }
  HostRegistry& hosts() { return *hosts_; }
  instances::InstanceService& instances() { return *instances_; }
  disks::DiskService& disks() { return *disks_; }
  instances::ImageService& images() { return *images_; }
  billing::BillingService& billing() { return *billing_; }
  monitoring::MonitoringService& monitoring() { return *monitoring_; }
  // This installation's id, made at first start; it labels everything on the engine.
  const std::string& installation_id() const { return installation_id_; }
  // The remote agents' CA ([agents] listen set: loaded by main before serving; null otherwise).
  // Not owned: main keeps it for as long as it serves.
  const pki::CertificateAuthority* agents_ca() const { return agents_ca_; }
  void set_agents_ca(const pki::CertificateAuthority* ca) { agents_ca_ = ca; }

  // Connects the host agent (in-process, or behind the loopback JSON transport) and
  // registers its hosts; call once before serving.
  boost::asio::awaitable<Status> start_agent(std::unique_ptr<agent::HostAgent> agent);
  // Replicas on PostgreSQL (issue 27): background work runs only while this replica holds the
  // lease, claimed on a connection of its own with these options. Call before start_agent.
  void use_leader_lease(store::PgConnectOptions options) { lease_options_ = std::move(options); }
  // Replicas: records where this replica's API answers (after it is bound), so that the others
  // can hand it the web terminals of the hosts it serves. Nothing without a lease.
  void announce_replica(std::string api_url);
  // The API of the other replica serving `host` now (the leader for in-process hosts, the link's
  // holder for remote ones); nullopt without replicas, when none is known, or when it is this one.
  boost::asio::awaitable<std::optional<std::string>> other_replica_serving(std::string host);
  // Awaited on the loop when this replica becomes the leader, before its background work
  // starts (main: the in-process agent starts and the hub serves its hosts).
  void on_elected(std::function<boost::asio::awaitable<void>()> step) { on_elected_ = std::move(step); }
  // Whether this replica runs the background work now (always, on SQLite).
  bool leading() const { return !lease_options_ || (leadership_ && leadership_->epoch().has_value()); }

  // Runs `effect(Database&) -> Result<Response>` in one write transaction, honouring the
  // request's Idempotency-Key: the answer is stored in that same transaction. What is stored
  // (and replayed) is `stored_body(response)`: an answer that carries a secret stores it
  // without (the database and its backups hold no working token).
  struct KeepBody {
    std::string operator()(const Response& r) const { return r.body; }
  };
  template <class Effect, class StoredBody = KeepBody>
  boost::asio::awaitable<Result<Response>> run_idempotent(RequestContext& ctx, Effect effect,
                                                          StoredBody stored_body = {});
  // Holds the request's Idempotency-Key (if any) in this process until the request ends, so
  // a repeat that arrives meanwhile is `conflict`; call before slow work done ahead of
  // run_idempotent (password hashing). run_idempotent calls it too.
  Status hold_idempotency_key(RequestContext& ctx);

  // Creates the admin user on first start (GPUCLOUD_ADMIN_PASSWORD or DATA_DIR/admin-password).
  Status bootstrap_admin();

 private:
  static Result<Response> replay_or_refuse(const store::Claim& claim);
  Result<store::IdempotencyScope> idempotency_scope(RequestContext& ctx, std::string key) const;

  boost::asio::any_io_executor loop_;
  config::Config config_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<PlatformClock> clock_;
  Router router_;
  Metrics metrics_;
  RequestLog request_log_{loop_};
  auth::LoginThrottle login_throttle_;
  AuthCache auth_cache_;  // loop only
  PasswordPool password_pool_{2};
  std::set<std::string> idempotency_held_;  // scopes of requests under way (loop only)
  std::string body_hash_key_;               // DATA_DIR/idempotency.key: bodies may hold passwords
  std::string csrf_key_;                    // DATA_DIR/csrf.key: browser sessions' CSRF tokens
  std::unique_ptr<Console> console_;
  friend struct IdempotencyHold;
  std::int64_t latest_event_seq_ = 0;
  std::shared_ptr<Waiters> event_waiters_ = std::make_shared<Waiters>();
  bool shutting_down_ = false;
  boost::asio::awaitable<void> poll_event_seq();
  // Settlement, reconcile, the services' timers: on the leader only.
  boost::asio::awaitable<void> start_background();
  boost::asio::awaitable<void> become_leader(std::int64_t epoch);
  boost::asio::awaitable<void> lead(std::int64_t epoch);  // a standby elected later
  boost::asio::awaitable<void> exit_deposed();
  std::optional<store::PgConnectOptions> lease_options_;
  std::unique_ptr<Leadership> leadership_;
  std::optional<std::string> replica_holder_;  // with a lease: this process's name in it
  std::function<boost::asio::awaitable<void>()> on_elected_;
  std::unique_ptr<HostRegistry> hosts_;
  std::unique_ptr<disks::DiskService> disks_;
  std::unique_ptr<instances::InstanceService> instances_;
  std::unique_ptr<instances::ImageService> images_;
  std::unique_ptr<billing::BillingService> billing_;
  std::atomic<billing::BillingService*> billing_for_commits_{nullptr};  // read on the writer thread
  std::unique_ptr<monitoring::MonitoringService> monitoring_;
  std::atomic<monitoring::MonitoringService*> monitoring_for_commits_{nullptr};
  std::string installation_id_;
  const pki::CertificateAuthority* agents_ca_ = nullptr;
};

template <class Effect, class StoredBody>
boost::asio::awaitable<Result<Response>> App::run_idempotent(RequestContext& ctx, Effect effect, StoredBody stored_body) {
  std::string key(ctx.request.header("idempotency-key"));
  if (key.empty()) {
    auto job = [effect = std::move(effect)](store::Database& db) mutable -> Result<Response> { return effect(db); };
    co_return co_await store_->write(std::move(job));
  }
  if (auto held = hold_idempotency_key(ctx); !held) co_return tl::unexpected(held.error());
  auto scope = idempotency_scope(ctx, std::move(key));
  if (!scope) co_return tl::unexpected(scope.error());
  auto job = [scope = std::move(*scope), effect = std::move(effect),
              stored_body = std::move(stored_body)](store::Database& db) mutable -> Result<Response> {
    auto now = system_now();
    auto claim = store::claim_idempotency_key(db, scope, now, false);
    if (!claim) return tl::unexpected(claim.error());
    if (claim->outcome != store::ClaimOutcome::proceed) return replay_or_refuse(*claim);
    auto response = effect(db);
    if (!response) return response;
    if (auto s = store::complete_idempotency_key(db, scope, {response->status, stored_body(*response)}, now); !s)
      return tl::unexpected(s.error());
    return response;
  };
  co_return co_await store_->write(std::move(job));
}

// For a stream or terminal that outlives its request: whether its token still grants what it
// granted at the start. Re-reads only when the auth generation moved (something was revoked,
// disabled or demoted) or every 30 s (expiry; changes by another process). Loop only.
class AccessWatch {
 public:
  AccessWatch(App& app, std::string token, auth::Principal principal)
      : app_(app), token_(std::move(token)), principal_(std::move(principal)), generation_(app.auth_generation()),
        checked_at_(std::chrono::steady_clock::now()) {}
  // False once the token is revoked or expired, the user disabled, or their role changed.
  boost::asio::awaitable<bool> still_valid();

 private:
  App& app_;
  std::string token_;
  auth::Principal principal_;
  std::uint64_t generation_;
  std::chrono::steady_clock::time_point checked_at_;
};

// Handler files register their routes through these.
void register_system_routes(App& app);
void register_auth_routes(App& app);
void register_token_routes(App& app);
void register_admin_user_routes(App& app);
void register_admin_clock_routes(App& app);
void register_market_routes(App& app);
void register_admin_host_routes(App& app);  // drain, undrain, remove (issue 26)
void register_instance_routes(App& app);
void register_ssh_key_routes(App& app);
void register_security_group_routes(App& app);
void register_image_routes(App& app);
void register_disk_routes(App& app);
void register_snapshot_routes(App& app);
void register_quota_routes(App& app);
void register_event_routes(App& app);
void register_terminal_routes(App& app);
void register_billing_routes(App& app);
void register_monitoring_routes(App& app);
void register_agent_pki_routes(App& app);  // join tokens, certificate revocation (issue 26)
void register_proxy_routes(App& app);

}  // namespace gpucloud::server
