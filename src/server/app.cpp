#include "server/app.h"

#include "store/background_notes.h"
#include "store/pg_listener.h"

#include "auth/shared_login_failures.h"

#include "policy/account_enforcement.h"
#include "policy/cost_control.h"

#include "instances/schedules.h"

#include "billing/ledger.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "auth/credentials.h"
#include "core/ids.h"
#include "server/browser_session.h"
#include "store/replicas.h"
#include "store/meta.h"
#include "events/events.h"
#include "instances/images.h"
#include "instances/schedules.h"

namespace gpucloud::server {
namespace asio = boost::asio;

App::App(asio::any_io_executor loop, config::Config config, std::unique_ptr<store::Store> store,
         std::unique_ptr<PlatformClock> clock)
    : loop_(loop),
      config_(std::move(config)),
      store_(std::move(store)),
      clock_(std::move(clock)),
      login_throttle_(config_.server.login_failures_allowed, config_.server.login_window),
      auth_cache_(store_->dialect() == store::Dialect::postgres ? AuthCache::kSharedStoreMaxAge : AuthCache::kMaxAge),
      body_hash_key_(auth::load_or_create_key((std::filesystem::path(config_.data_dir) / "idempotency.key").string())),
      csrf_key_(auth::load_or_create_key((std::filesystem::path(config_.data_dir) / "csrf.key").string())) {
  {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string dir = find_console_dir(config_.server.console_dir, ec ? "" : exe.string(), default_console_source_dir());
    if (!dir.empty()) {
      console_ = std::make_unique<Console>(loop_, dir);
      console_->start();
    }
  }
  // A commit that recorded an event wakes the streams now (the 200 ms poll remains for
  // events written by another process sharing the store).
  store_->on_event_commit([this] { asio::post(loop_, [this] { wake_event_streams(); }); });
  register_system_routes(*this);
  register_auth_routes(*this);
  register_token_routes(*this);
  register_admin_user_routes(*this);
  register_admin_clock_routes(*this);
  register_market_routes(*this);
  register_admin_host_routes(*this);
  register_instance_routes(*this);
  register_ssh_key_routes(*this);
  register_security_group_routes(*this);
  register_image_routes(*this);
  register_disk_routes(*this);
  register_snapshot_routes(*this);
  register_quota_routes(*this);
  register_event_routes(*this);
  register_terminal_routes(*this);
  register_billing_routes(*this);
  register_monitoring_routes(*this);
  register_agent_pki_routes(*this);
  register_proxy_routes(*this);  // prefix routes: after every fixed route
  // Short and lower-case: it goes into container, network and nftables names.
  auto id = store_->write_now([made = new_id("x").substr(2, 10)](store::Database& db) {
    return store::get_or_set_meta(db, "installation_id", made);
  });
  installation_id_ = id ? *id : "unknown";
  // Subscription months are counted in billing_timezone inside the store's transactions.
  (void)store_->write_now([tz = config_.billing_timezone](store::Database& db) {
    return store::set_meta(db, "billing_timezone", tz);
  });
  // Every writer of an instance row plans its release with the same default.
  (void)store_->write_now([days = config_.policy.release_stopped_after_days](store::Database& db) {
    return store::set_meta(db, instances::kReleaseDaysMetaKey, std::to_string(days));
  });
}

asio::awaitable<Status> App::start_agent(std::unique_ptr<agent::HostAgent> agent) {
  // Sampling rounds arrive on the loop; before the service exists they are dropped.
  agent->on_samples([this](agent::SampleReport report) {
    if (monitoring_) monitoring_->ingest(std::move(report));
  });
  // Containers that started, died or went away: reconcile now (dropped before the service exists).
  agent->on_changes([this](agent::ChangeReport report) {
    if (instances_) instances_->nudge(report.instance_ids);
  });
  hosts_ = std::make_unique<HostRegistry>(loop_, config_, *store_, *clock_, std::move(agent),
                                          std::chrono::duration_cast<std::chrono::milliseconds>(config_.agents.unreachable_after));
  if (lease_options_) {
    // Named after where it runs, unique per process: the lease row says who leads.
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    replica_holder_ = std::string(host) + "/" + std::to_string(::getpid()) + "/" + new_id("r").substr(2, 6);
    hosts_->follow_leadership([this] { return leading(); });
    hosts_->set_replica(*replica_holder_);
  }
  if (auto s = co_await hosts_->start(); !s) co_return s;
  auto seed = [this](store::Database& db) { return instances::seed_public_images(db, config_, system_now()); };
  if (auto s = co_await store_->write(std::move(seed)); !s) co_return s;
  disks_ = std::make_unique<disks::DiskService>(loop_, config_, *store_, *clock_, hosts_->agent());
  instances_ = std::make_unique<instances::InstanceService>(loop_, config_, *store_, *clock_, hosts_->agent());
  instances_->use_disks(*disks_);
  images_ = std::make_unique<instances::ImageService>(loop_, config_, *store_, *clock_, hosts_->agent());
  billing::BillingService::Hooks hooks{[this](const std::string& id) { instances_->kick(id); },
                                       [this](const std::string& id) { disks_->kick_disk(id); },
                                       [this](store::Database& db, const std::string& account, SysTime now) {
                                         return policy::enforce_account(db, config_, account, now);
                                       }};
  billing_ = std::make_unique<billing::BillingService>(loop_, config_, *store_, *clock_, std::move(hooks));
  billing_for_commits_.store(billing_.get());
  store_->on_billing_commit([this](std::vector<std::string> ids) {
    if (auto* billing = billing_for_commits_.load()) billing->accounts_changed(std::move(ids));
  });
  // Cost control's stops and releases are the instances' actions, reached through the policy floor.
  monitoring::MonitoringService::Hooks monitoring_hooks{[this](const std::string& id) { instances_->kick(id); },
                                                        policy::cost_control_actions()};
  monitoring_ = std::make_unique<monitoring::MonitoringService>(loop_, config_, *store_, *clock_,
                                                               std::move(monitoring_hooks));
  monitoring_for_commits_.store(monitoring_.get());
  store_->on_schedule_commit([this](SysTime at) {
    if (auto* m = monitoring_for_commits_.load()) m->schedule_noted(at);
  });
  bool leads = true;
  if (lease_options_) {
    leadership_ = std::make_unique<Leadership>(loop_, *lease_options_, *replica_holder_, Leadership::Options{});
    // Until it leads, this replica's commits tell the leader what it must plan.
    store_->forward_background_notes(true);
    leads = co_await leadership_->try_lead();
    if (leads) {
      co_await become_leader(*leadership_->epoch());
    } else {
      billing_->defer_background();
      monitoring_->defer_background();
      disks_->defer_background();
      images_->defer_background([this](std::string image_id) {
        asio::co_spawn(loop_, tell_leader(store::kImageBinChannel, std::move(image_id)), asio::detached);
      });
    }
  }
  if (leads) co_await start_background();
  if (leadership_) {
    leadership_->run(
        [this](std::int64_t epoch) { asio::co_spawn(loop_, lead(epoch), asio::detached); },
        [this](std::string why) {
          spdlog::error(R"({{"event":"leader_deposed","detail":{}}})",
                        boost::json::serialize(boost::json::value(boost::json::string(why))));
          asio::co_spawn(loop_, exit_deposed(), asio::detached);
        });
  }
  asio::co_spawn(loop_, poll_event_seq(), asio::detached);
  co_return ok();
}

void App::background_note_heard(const std::string& channel, const std::string& payload) {
  if (!leading() || shutting_down_) return;
  if (channel == store::kBillingChannel) {
    if (auto* billing = billing_for_commits_.load()) billing->accounts_changed(store::billing_note_accounts(payload));
  } else if (channel == store::kSchedulesChannel) {
    auto at = store::schedule_note_time(payload);
    auto* monitoring = monitoring_for_commits_.load();
    if (at && monitoring) monitoring->schedule_noted(*at);
  } else if (channel == store::kImageBinChannel && images_ && !payload.empty()) {
    asio::co_spawn(loop_, images_->arm_deleted(payload), asio::detached);
  }
}

asio::awaitable<void> App::tell_leader(std::string channel, std::string payload) {
  auto notify = [channel, payload](store::Database& db) { return store::notify_replicas(db, channel, payload); };
  if (auto s = co_await store_->write(std::move(notify)); !s)
    spdlog::warn(R"({{"event":"leader_note_failed","channel":"{}","detail":{}}})", channel,
                 boost::json::serialize(boost::json::value(boost::json::string(s.error().detail))));
}

void App::background_notes_missed() {
  if (!leading() || shutting_down_ || !billing_ || !monitoring_) return;
  asio::co_spawn(loop_, billing_->plan_watched(), asio::detached);
  asio::co_spawn(loop_, monitoring_->arm_earliest(), asio::detached);
  if (images_) asio::co_spawn(loop_, images_->arm_deleted(""), asio::detached);
}

asio::awaitable<void> App::exit_deposed() {
  // Like a Kubernetes controller that lost its lease: the writes already queued end first
  // (each refused by the fence), then the process stops, and its supervisor starts it again
  // as a standby. Nothing of the background work can be trusted to stop cleanly otherwise.
  co_await store_->drain_writes();
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(75);  // EX_TEMPFAIL
}

asio::awaitable<void> App::become_leader(std::int64_t epoch) {
  // From now on every commit of this process checks that the lease is still this epoch.
  store_->set_commit_fence(leadership_->fence(epoch));
  store_->forward_background_notes(false);  // its own commits plan in-process from now on
  if (on_elected_) co_await on_elected_();
}

asio::awaitable<void> App::lead(std::int64_t epoch) {
  co_await become_leader(epoch);
  hosts_->begin_leading();  // the old leader's agents get their grace to redial
  spdlog::info(R"({{"event":"leader_background_started","epoch":{}}})", epoch);
  co_await start_background();
}

asio::awaitable<void> App::start_background() {
  disks_->start_background();  // disks and snapshots left half-made, usage, the recycle bin's timer
  instances_->start_background();  // reconcile now (re-attach after a restart), then periodically
  co_await images_->start();  // resumes saves, arms the recycle bin's timers
  co_await billing_->start();  // the settlement timer, and every account's projected zero and graces
  co_await monitoring_->start();  // cost control's timer at the earliest deadline
}

asio::awaitable<void> App::poll_event_seq() {
  asio::steady_timer tick(loop_);
  auto last_purge = std::chrono::steady_clock::time_point{};
  while (!shutting_down_) {
    // Expired Idempotency-Keys go (claims purge too); their answers are kept no longer than 24 h.
    if (leading() && std::chrono::steady_clock::now() - last_purge > std::chrono::hours(1)) {
      auto purge = [window = config_.server.login_window](store::Database& db) -> Status {
        if (auto s = auth::purge_shared_login_failures(db, window, system_now()); !s) return s;
        return store::purge_idempotency_keys(db, system_now());
      };
      (void)co_await store_->write(std::move(purge));
      last_purge = std::chrono::steady_clock::now();
    }
    auto read = [](store::Database& db) { return events::latest_seq(db); };
    if (auto seq = co_await store_->read(std::move(read)); seq) {
      // Another process sharing the store (a replica on PostgreSQL) wrote events: its streams
      // here are woken now, not at their next tick (within 1 s end to end, issue 27).
      const bool moved = *seq > latest_event_seq_;
      latest_event_seq_ = *seq;
      if (moved) wake_event_streams();
    }
    tick.expires_after(std::chrono::milliseconds(200));
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
}

App::~App() {
  // The writer thread may still commit while members go: it must not reach a gone service.
  billing_for_commits_.store(nullptr);
  monitoring_for_commits_.store(nullptr);
}

void App::wake_event_streams() {
  for (auto* timer : *event_waiters_) timer->cancel();
}

std::string App::bearer_token(const Request& request) { return request_credential(request).token; }

std::string App::csrf_token(const std::string& session_token_id) const { return csrf_token_for(csrf_key_, session_token_id); }

asio::awaitable<Result<auth::Principal>> App::authenticate_token(std::string token) {
  if (token.empty()) co_return fail(ErrorCode::unauthorized, "missing bearer token (Authorization: Bearer TOKEN)");
  std::string hash = auth::token_hash(token);
  auto now = system_now();
  // Tokens are looked up once and then served from memory: every change that could revoke
  // one invalidates the cache first, and a lookup that began before that is not cached.
  if (auto cached = auth_cache_.find(hash, now, std::chrono::steady_clock::now())) co_return *cached;
  auto generation = auth_cache_.generation();
  auto lookup = [token, now](store::Database& db) -> Result<std::pair<auth::Principal, std::optional<SysTime>>> {
    auto principal = auth::authenticate(db, token, now);
    if (!principal) return tl::unexpected(principal.error());
    auto expires = auth::token_expiry(db, principal->token_id);
    if (!expires) return tl::unexpected(expires.error());
    return std::make_pair(std::move(*principal), *expires);
  };
  auto found = co_await store_->read(std::move(lookup));
  if (!found) co_return tl::unexpected(found.error());
  auth_cache_.insert(hash, found->first, found->second, generation, std::chrono::steady_clock::now());
  co_return found->first;
}

void App::announce_replica(std::string api_url) {
  if (!replica_holder_) return;
  spdlog::info(R"({{"event":"replica_announced","holder":"{}","api_url":"{}"}})", *replica_holder_, api_url);
  auto record = [holder = *replica_holder_, api_url](store::Database& db) {
    return store::record_replica(db, holder, api_url, system_now());
  };
  asio::co_spawn(
      loop_,
      [](store::Store& store, decltype(record) r) -> asio::awaitable<void> {
        if (auto s = co_await store.write(std::move(r)); !s)
          spdlog::warn(R"({{"event":"replica_not_announced","detail":{}}})",
                       boost::json::serialize(boost::json::value(boost::json::string(s.error().detail))));
      }(*store_, std::move(record)),
      asio::detached);
}

asio::awaitable<std::optional<std::string>> App::other_replica_serving(std::string host) {
  if (!replica_holder_) co_return std::nullopt;
  auto read = [host](store::Database& db) { return store::replica_serving_host(db, host); };
  auto found = co_await store_->read(std::move(read));
  if (!found || !*found || (*found)->holder == *replica_holder_) co_return std::nullopt;
  co_return (*found)->api_url;
}

asio::awaitable<bool> App::admits_proxy_body(const Request& header_only) {
  std::map<std::string, std::string> params;
  RouteMatch match = router_.match(header_only.method, header_only.path, params);
  if (!match.route || !match.route->prefix) co_return false;
  auto principal = co_await authenticate_token(request_credential(header_only).token);
  co_return principal.has_value();
}

asio::awaitable<bool> AccessWatch::still_valid() {
  auto now = std::chrono::steady_clock::now();
  if (app_.auth_generation() == generation_ && now - checked_at_ < std::chrono::seconds(30)) co_return true;
  generation_ = app_.auth_generation();
  checked_at_ = now;
  auto current = co_await app_.authenticate_token(token_);
  co_return current && current->user.id == principal_.user.id && current->user.role == principal_.user.role;
}

struct IdempotencyHold {
  IdempotencyHold(App& app, std::string scope) : app(app), scope(std::move(scope)) {}
  ~IdempotencyHold() { app.idempotency_held_.erase(scope); }
  IdempotencyHold(const IdempotencyHold&) = delete;
  IdempotencyHold& operator=(const IdempotencyHold&) = delete;
  App& app;
  std::string scope;
};

Status App::hold_idempotency_key(RequestContext& ctx) {
  std::string key(ctx.request.header("idempotency-key"));
  if (key.empty() || ctx.idempotency_hold) return ok();
  std::string user = ctx.principal ? ctx.principal->user.id : "";
  std::string scope = user + '\n' + ctx.request.method + '\n' + ctx.request.path + '\n' + key;
  if (!idempotency_held_.insert(scope).second)
    return fail(ErrorCode::conflict, "a request with this Idempotency-Key is still in progress");
  ctx.idempotency_hold = std::make_shared<IdempotencyHold>(*this, std::move(scope));
  return ok();
}

asio::awaitable<Response> App::handle(Request& request) {
  static const std::string kUnmatched = "unmatched";
  auto started = std::chrono::steady_clock::now();
  const std::string* route_name = &kUnmatched;  // a route's pattern: bounded labels, no raw path
  RequestContext ctx{*this, request, std::nullopt, nullptr, {}};
  Response response;
  try {
    // HEAD is answered by the GET route (the server sends its head only).
    std::string_view method = request.method == "HEAD" ? std::string_view("GET") : std::string_view(request.method);
    RouteMatch match = router_.match(method, request.path, request.params);
    Result<Response> result = fail(ErrorCode::internal, "no answer");
    static const std::string kConsole = "console";
    if (!match.route && !match.path_known && method == "GET" && !request.path.starts_with("/api/")) {
      // The web console: its files, and index.html for its client routes.
      route_name = &kConsole;
      result = console_response(console_ ? console_->files() : nullptr, request.path, request.header("accept-encoding"));
    } else if (!match.route) {
      if (match.path_known) {
        std::string allowed;
        for (const auto& m : match.allowed) allowed += (allowed.empty() ? "" : ", ") + m;
        result = fail(ErrorCode::method_not_allowed, request.method + " is not allowed on " + request.path +
                                                         " (allowed: " + allowed + ")");
      } else {
        result = fail(ErrorCode::not_found, "no such endpoint: " + request.path);
      }
    } else {
      const Route& route = *match.route;
      route_name = &route.pattern;
      bool refused = false;
      if (route.access != Access::public_route) {
        auto credential = request_credential(request);
        auto principal = co_await authenticate_token(credential.token);
        if (!principal) {
          result = tl::unexpected(principal.error());
          refused = true;
        } else {
          ctx.principal = std::move(*principal);
          ctx.via_cookie = credential.via_cookie;
          // The cookie rides along on cross-site requests: those it authenticates show the
          // session's CSRF token (unsafe methods) and this server's Origin.
          std::string refusal =
              credential.via_cookie ? cookie_request_refusal(request, csrf_key_, ctx.principal->token_id, route.prefix) : "";
          if (!refusal.empty()) {
            result = fail(ErrorCode::forbidden, std::move(refusal));
            refused = true;
          } else if (route.access == Access::admin && !ctx.principal->user.is_admin()) {
            result = fail(ErrorCode::forbidden, "this endpoint is for the operator only");
            refused = true;
          }
        }
      }
      if (!refused && !request.body.empty() && !route.prefix) {  // a proxy passes any body on
        std::string_view type = request.header("content-type");
        if (type.substr(0, type.find(';')) != "application/json") {
          result = fail(ErrorCode::unsupported_media_type, "request bodies must be application/json");
          refused = true;
        }
      }
      if (!refused) result = co_await route.handler(ctx);
    }
    if (result) {
      response = std::move(*result);
    } else {
      if (result.error().code == ErrorCode::internal) spdlog::error("internal error on {}: {}", *route_name, result.error().detail);
      response = problem_response(result.error());
    }
  } catch (const std::exception& e) {
    // Nothing escapes a handler: an unexpected exception is an internal error, logged.
    spdlog::error("unhandled exception on {}: {}", *route_name, e.what());
    response = problem_response(Error{ErrorCode::internal, "internal error", {}, 0});
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  metrics_.record_request(request.method, *route_name, response.status, seconds);
  // The user as authenticated before the handler ran (a handler may not change who called).
  std::string_view user = ctx.principal ? std::string_view(ctx.principal->user.id) : std::string_view();
  request_log_.record(request.method, *route_name, response.status, seconds * 1000, user, request.client_address);
  co_return response;
}

Result<Response> App::replay_or_refuse(const store::Claim& claim) {
  switch (claim.outcome) {
    case store::ClaimOutcome::replay: {
      Response r{claim.answer->status, "application/json", claim.answer->body, {}, {}, {}};
      r.headers.emplace_back("Idempotent-Replayed", "true");
      return r;
    }
    case store::ClaimOutcome::conflict_other_body:
      return fail(ErrorCode::conflict, "Idempotency-Key was already used with a different request body");
    case store::ClaimOutcome::conflict_in_flight:
      return fail(ErrorCode::conflict, "a request with this Idempotency-Key is still in progress");
    case store::ClaimOutcome::proceed: break;
  }
  return fail(ErrorCode::internal, "idempotency claim without outcome");
}

Result<store::IdempotencyScope> App::idempotency_scope(RequestContext& ctx, std::string key) const {
  if (!store::is_valid_idempotency_key(key))
    return fail(ErrorCode::invalid_argument, "Idempotency-Key: must be 1-255 printable ASCII characters");
  std::string user = ctx.principal ? ctx.principal->user.id : "";
  const std::string& path = ctx.idempotency_resource.empty() ? ctx.request.path : ctx.idempotency_resource;
  return store::IdempotencyScope{user, ctx.request.method, path, std::move(key),
                                 auth::keyed_hash(body_hash_key_, ctx.request.body)};
}

Status App::bootstrap_admin() {
  auto existing = store_->write_now([](store::Database& db) { return auth::find_user(db, "admin"); });
  if (!existing) return fail(existing.error());
  if (*existing) return ok();
  std::string password;
  if (const char* env = std::getenv("GPUCLOUD_ADMIN_PASSWORD"); env && *env) {
    password = env;
  } else {
    password = auth::new_token_secret().substr(4, 24);
    auto path = std::filesystem::path(config_.data_dir) / "admin-password";
    // Created 0600 from the start: the secret is never readable by others, even briefly.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return fail(ErrorCode::internal, "cannot write " + path.string());
    std::string line = password + "\n";
    bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::fchmod(fd, 0600);
    ::close(fd);
    if (!written) return fail(ErrorCode::internal, "cannot write " + path.string());
    spdlog::info("created the operator account \"admin\"; its password is in {}", path.string());
  }
  auto hash = auth::hash_password(password);
  if (!hash) return fail(hash.error());
  auto created = store_->write_now([&](store::Database& db) {
    auto user = auth::create_user(db, "admin", std::nullopt, *hash, "admin", clock_->now());
    if (!user) return Status(fail(user.error()));
    return billing::open_account(db, user->id, user->username, config_.billing.signup_credit, clock_->now());
  });
  if (!created) return fail(created.error());
  return ok();
}

}  // namespace gpucloud::server
