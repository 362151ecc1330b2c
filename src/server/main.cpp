// gpucloudd: the control plane (and, all-in-one, the in-process agent).
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <sodium.h>
#include <spdlog/spdlog.h>

#include "agent/agent_assembly.h"
#include "agent/loopback_transport.h"
#include "agentlink/agent_hub.h"
#include "agentlink/command_journal.h"
#include "agentlink/link_listener.h"
#include "pki/certificate_authority.h"
#include "config/config.h"
#include "core/fault_points.h"
#include "server/app.h"
#include "server/http_server.h"
#include "store/meta.h"
#include "server/replica_terminal.h"
#include "store/background_notes.h"
#include "store/pg_listener.h"
#include "store/store_copy.h"

namespace asio = boost::asio;
using namespace gpucloud;

namespace {

struct Flags {
  std::string config_path;
  std::string listen;
  std::string data_dir;
  bool test_clock = false;
};

Result<config::Config> load(const Flags& flags) {
  Result<config::Config> cfg = flags.config_path.empty() ? config::parse_config("", "defaults")
                                                         : config::load_config_file(flags.config_path);
  if (!cfg) return cfg;
  if (!flags.listen.empty()) cfg->listen = flags.listen;
  if (!flags.data_dir.empty()) cfg->data_dir = flags.data_dir;
  // Absolute from here on: paths under it are handed to the engine (bind mounts), which
  // knows nothing of our working directory.
  std::error_code ec;
  auto absolute = std::filesystem::absolute(cfg->data_dir, ec);
  if (!ec) cfg->data_dir = absolute.lexically_normal().string();
  if (auto s = config::validate(*cfg); !s) return fail(s.error());
  return cfg;
}

SysTime restored_test_time(store::Store& store) {
  auto value = store.read_now([](store::Database& db) { return store::get_meta(db, "test_clock_now"); });
  if (value && *value) {
    std::int64_t micros = 0;
    auto [end, ec] = std::from_chars((*value)->data(), (*value)->data() + (*value)->size(), micros);
    if (ec == std::errc() && end == (*value)->data() + (*value)->size()) return from_unix_micros(micros);
  }
  return system_now();
}

// A named coroutine, not a lambda: a coroutine lambda's captures die with the lambda.
// A replica that became the leader (issue 27): its in-process agent starts (re-attach, the
// disks' recovery), then the hub runs the in-process hosts' commands, journaled ones first.
asio::awaitable<void> serve_in_process_hosts(agent::AgentStack* stack, agentlink::AgentHub* hub,
                                             agent::InstanceRuntime* runtime, agent::LocalAgent* local) {
  co_await agent::start_agent_stack(stack);
  agent::report_runtime_changes(*runtime, *local);
  hub->serve_in_process(true);
}

asio::awaitable<void> stop_serving(server::HttpServer& http, server::App& app, asio::io_context& io) {
  app.instances().stop_background();
  app.disks().stop_background();
  app.images().stop();
  app.billing().stop();
  co_await http.shutdown(std::chrono::seconds(10));  // in-flight requests finish first
  // Engine work under way finishes too (a step is short; a crash mid-step is recovered at
  // the next start anyway): destroying its coroutines under it would free what it still uses.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  asio::steady_timer tick(io);
  while ((app.instances().busy() || app.disks().busy()) && std::chrono::steady_clock::now() < deadline) {
    tick.expires_after(std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (app.instances().busy() || app.disks().busy()) spdlog::warn("{}", R"({"event":"stopping_with_engine_work_in_flight"})");
  io.stop();
}

// `gpucloudd migrate-store`: the copy and its check (store/store_copy.h), said table by table.
int migrate_store(const std::string& from, const std::string& to, const std::string& password_file) {
  if (from.rfind("sqlite://", 0) != 0 || from.size() <= 9) {
    std::fprintf(stderr, "gpucloudd migrate-store: --from must be sqlite://PATH\n");
    return 2;
  }
  if (!store::is_postgres_url(to)) {
    std::fprintf(stderr, "gpucloudd migrate-store: --to must be postgresql://USER@HOST:PORT/DB\n");
    return 2;
  }
  const std::string path = from.substr(9);
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "gpucloudd migrate-store: %s does not exist\n", path.c_str());
    return 1;
  }
  store::PgConnectOptions pg{to, {}, "gpucloudd-migrate-store"};
  if (const char* env = std::getenv("GPUCLOUD_STORE_PASSWORD"); env && *env) {
    pg.password = env;
  } else if (!password_file.empty()) {
    std::ifstream in(password_file);
    if (!in || !std::getline(in, pg.password)) {
      std::fprintf(stderr, "gpucloudd migrate-store: --password-file %s: cannot read it\n", password_file.c_str());
      return 1;
    }
  }
  auto source = store::Database::open(path, false);
  if (!source) {
    std::fprintf(stderr, "gpucloudd migrate-store: %s\n", source.error().detail.c_str());
    return 1;
  }
  auto target = store::connect_postgres(pg);
  if (!target) {
    std::fprintf(stderr, "gpucloudd migrate-store: %s\n", target.error().detail.c_str());
    return 1;
  }
  auto report = store::copy_store(**source, **target);
  if (!report) {
    std::fprintf(stderr, "gpucloudd migrate-store: %s (nothing was written to the target)\n", report.error().detail.c_str());
    return 1;
  }
  for (const auto& t : report->tables) std::printf("%-28s %lld rows\n", t.name.c_str(), static_cast<long long>(t.rows));
  std::printf("migrate-store: copied %lld rows of %zu tables (schema %d) into %s; verified every table's count and %lld "
              "ledgers (%lld entries, each account's sum)\n",
              static_cast<long long>(report->rows), report->tables.size(), report->schema_version,
              store::redacted_url(to).c_str(), static_cast<long long>(report->ledger_accounts),
              static_cast<long long>(report->ledger_entries));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"gpucloudd: the gpucloud control plane"};
  Flags flags;
  cli.add_option("--config", flags.config_path, "TOML configuration file")->check(CLI::ExistingFile);
  cli.add_option("--listen", flags.listen, "HOST:PORT to serve on (port 0: any free port)");
  cli.add_option("--data-dir", flags.data_dir, "directory for the store and state");
  cli.add_flag("--test-clock", flags.test_clock, "platform clock moves only through POST /api/v1/admin/clock");
  cli.set_version_flag("--version", GPUCLOUD_VERSION);
  // gpucloudd migrate-store --from sqlite://PATH --to postgresql://USER@HOST:PORT/DB
  std::string migrate_from, migrate_to, migrate_password_file;
  auto* migrate = cli.add_subcommand("migrate-store", "copy a SQLite store into an empty PostgreSQL database, then verify it");
  migrate->add_option("--from", migrate_from, "sqlite://PATH of the installation (gpucloudd stopped)")->required();
  migrate->add_option("--to", migrate_to, "postgresql://USER@HOST:PORT/DB (its password: GPUCLOUD_STORE_PASSWORD or --password-file)")
      ->required();
  migrate->add_option("--password-file", migrate_password_file, "a file holding the PostgreSQL password");
  CLI11_PARSE(cli, argc, argv);
  if (migrate->parsed()) return migrate_store(migrate_from, migrate_to, migrate_password_file);

  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
  if (auto s = check_armed_fault_point(); !s) {
    std::fprintf(stderr, "gpucloudd: %s\n", s.error().detail.c_str());
    return 2;
  }
  if (sodium_init() < 0) {
    std::fprintf(stderr, "gpucloudd: libsodium failed to initialise\n");
    return 1;
  }
  auto cfg = load(flags);
  if (!cfg) {
    std::fprintf(stderr, "gpucloudd: configuration: %s\n", cfg.error().detail.c_str());
    return 2;
  }
  std::error_code fs_error;
  std::filesystem::create_directories(cfg->data_dir, fs_error);
  if (fs_error) {
    std::fprintf(stderr, "gpucloudd: data dir %s: %s\n", cfg->data_dir.c_str(), fs_error.message().c_str());
    return 1;
  }
  // An empty path would make SQLite open a private temporary database, i.e. a daemon that
  // forgets everything: refuse anything we cannot open.
  Result<std::unique_ptr<store::Store>> store = fail(ErrorCode::invalid_argument, "store: no database");
  std::optional<store::PgConnectOptions> lease_connection;  // replicas on PostgreSQL: who leads
  if (cfg->store_is_postgres()) {
    store::PgConnectOptions pg{cfg->store_url, {}, "gpucloudd"};
    if (const char* env = std::getenv("GPUCLOUD_STORE_PASSWORD"); env && *env) {
      pg.password = env;
    } else if (!cfg->store_password_file.empty()) {
      std::ifstream in(cfg->store_password_file);
      if (!in || !std::getline(in, pg.password)) {
        std::fprintf(stderr, "gpucloudd: store.password_file %s: cannot read it\n", cfg->store_password_file.c_str());
        return 1;
      }
    }
    store = store::Store::open_postgres(pg, cfg->server.worker_threads);
    lease_connection = pg;
  } else {
    const std::string store_path = cfg->store_path();
    if (store_path.empty()) {
      std::fprintf(stderr, "gpucloudd: configuration: store.url: \"%s\" is not sqlite://PATH\n", cfg->store_url.c_str());
      return 2;
    }
    store = store::Store::open(store_path, cfg->server.worker_threads);
  }
  if (!store) {
    std::fprintf(stderr, "gpucloudd: store.url: %s\n", store.error().detail.c_str());
    return 1;
  }

  asio::io_context io(1);  // one event loop thread; blocking work goes to the store's pools
  SysTime start = flags.test_clock ? restored_test_time(**store) : system_now();
  auto clock = std::make_unique<PlatformClock>(io.get_executor(), flags.test_clock, start);
  std::string listen = cfg->listen;
  server::App app(io.get_executor(), std::move(*cfg), std::move(*store), std::move(clock));
  if (lease_connection) app.use_leader_lease(*lease_connection);
  if (auto s = app.bootstrap_admin(); !s) {
    std::fprintf(stderr, "gpucloudd: admin bootstrap: %s\n", s.error().detail.c_str());
    return 1;
  }

  // All-in-one: the agent runs in-process. GPUCLOUD_AGENT_TRANSPORT=loopback-json puts every
  // agent message through JSON text, as a wire would (tests use it).
  // Replicas: a standby starts the in-process agent (which recovers and cleans its directory)
  // only once it leads.
  auto stack = agent::build_agent_stack(io, app.config(), app.installation_id(), !lease_connection.has_value());
  if (!stack) {
    std::fprintf(stderr, "gpucloudd: agent: %s\n", stack.error().detail.c_str());
    return 1;
  }
  agent::InstanceRuntime* runtime_ptr = stack->runtime.get();
  agent::LocalAgent* local_agent_ptr = stack->agent.get();
  std::unique_ptr<agent::HostAgent> host_agent = std::move(stack->agent);
  if (const char* transport = std::getenv("GPUCLOUD_AGENT_TRANSPORT"); transport && std::string(transport) == "loopback-json")
    host_agent = std::make_unique<agent::LoopbackJsonAgent>(std::move(host_agent));
  // Remote agents ([agents] listen): the hub sends the in-process hosts' commands to the
  // local agent and every other host's over its agent's link.
  // Replicas on PostgreSQL (issue 27) always have the hub: the leader alone serves the
  // in-process hosts, and commands reach them (and links other replicas hold) by the journal.
  std::optional<pki::CertificateAuthority> agents_ca;
  agentlink::AgentHub* hub = nullptr;
  const bool replicas = lease_connection.has_value();
  if (app.config().agents.enabled() || replicas) {
    std::string key_path = app.config().agents.journal_key_file;
    if (key_path.empty()) key_path = (std::filesystem::path(app.config().data_dir) / "agent-link" / "journal.key").string();
    auto key = agentlink::load_or_create_journal_key(key_path);
    if (!key) {
      std::fprintf(stderr, "gpucloudd: agents: %s\n", key.error().detail.c_str());
      return 1;
    }
    if (app.config().agents.enabled()) {
      auto ca = pki::CertificateAuthority::load_or_create(std::filesystem::path(app.config().data_dir) / "pki");
      if (!ca) {
        std::fprintf(stderr, "gpucloudd: agents: %s\n", ca.error().detail.c_str());
        return 1;
      }
      agents_ca.emplace(std::move(*ca));
      app.set_agents_ca(&*agents_ca);  // the join-token route reads its fingerprint
    }
    auto made = std::make_unique<agentlink::AgentHub>(io.get_executor(), app.store(), std::move(host_agent),
                                                      agentlink::AgentHub::Options{
                                                          .journal_key = std::move(*key),
                                                          .heartbeat_interval = std::chrono::duration_cast<std::chrono::milliseconds>(
                                                              app.config().agents.heartbeat_interval),
                                                          .relay = replicas});
    hub = made.get();
    host_agent = std::move(made);
  }
  std::unique_ptr<store::PgListener> listener;
  if (replicas) {
    hub->serve_in_process(false);  // until this replica leads
    app.on_elected([&stack, hub, runtime_ptr, local_agent_ptr] {
      return serve_in_process_hosts(&*stack, hub, runtime_ptr, local_agent_ptr);
    });
    listener = std::make_unique<store::PgListener>(
        io.get_executor(), *lease_connection,
        std::vector<std::string>{store::kEventsChannel, store::kAgentCommandsChannel, store::kAgentOutcomesChannel,
                                 store::kBillingChannel, store::kSchedulesChannel, store::kImageBinChannel},
        [&app, hub](const std::string& channel, const std::string& payload) {
          if (channel == store::kEventsChannel) app.wake_event_streams();
          else if (channel == store::kAgentCommandsChannel) hub->commands_queued(payload);
          else if (channel == store::kAgentOutcomesChannel) hub->outcome_recorded(payload);
          else app.background_note_heard(channel, payload);
        },
        [&app, hub] {
          app.wake_event_streams();
          hub->catch_up();
          app.background_notes_missed();
        });
    listener->start();
  }
  std::optional<Status> agent_started;
  asio::co_spawn(io, app.start_agent(std::move(host_agent)), [&](std::exception_ptr e, Status s) {
    agent_started = e ? Status(fail(ErrorCode::internal, "agent start threw")) : std::move(s);
  });
  while (!agent_started && io.run_one() > 0) {
  }
  io.restart();
  if (!agent_started || !*agent_started) {
    std::fprintf(stderr, "gpucloudd: agent: %s\n", agent_started ? agent_started->error().detail.c_str() : "did not start");
    return 1;
  }
  // From here a container that dies or starts behind the platform's back is reconciled at once
  // (replicas: once this one leads, serve_in_process_hosts).
  if (!replicas) agent::report_runtime_changes(*runtime_ptr, *local_agent_ptr);
  std::unique_ptr<agentlink::LinkListener> agents_listener;
  if (hub && app.config().agents.enabled()) {
    agents_listener = std::make_unique<agentlink::LinkListener>(io.get_executor(), app.config(), app.store(), *agents_ca, *hub);
    auto bound = agents_listener->listen();
    if (!bound) {
      std::fprintf(stderr, "gpucloudd: %s\n", bound.error().detail.c_str());
      return 1;
    }
    agents_listener->start();
    std::printf("gpucloudd agents listening on %s:%u\n", bound->address().to_string().c_str(), bound->port());
    spdlog::info(R"({{"event":"agents_listening","listen":"{}:{}","ca_fingerprint":"{}"}})",
                 bound->address().to_string(), bound->port(), agents_ca->fingerprint());
  }

  server::HttpServer http(io, app, app.config().server);
  auto bound = http.listen(listen);
  if (!bound) {
    std::fprintf(stderr, "gpucloudd: %s\n", bound.error().detail.c_str());
    return 1;
  }
  http.start();
  // Tests and scripts read the bound address from this line (port 0 picks a free port).
  std::printf("gpucloudd listening on %s:%u\n", bound->address().to_string().c_str(), bound->port());
  app.announce_replica(server::replica_api_url(bound->address().to_string(), bound->port()));
  std::fflush(stdout);
  spdlog::info(R"({{"event":"started","listen":"{}:{}","test_clock":{}}})", bound->address().to_string(),
               bound->port(), flags.test_clock);

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code ec, int signal) {
    if (ec) return;
    spdlog::info(R"({{"event":"stopping","signal":{}}})", signal);
    app.begin_shutdown();  // event streams end; in-flight requests finish
    if (agents_listener) agents_listener->stop();
    if (listener) listener->stop();
    if (hub) hub->stop();
    runtime_ptr->stop_watching();
    asio::co_spawn(io, stop_serving(http, app, io), asio::detached);
  });
  std::signal(SIGPIPE, SIG_IGN);
  io.run();
  spdlog::info("{}", R"({"event":"stopped"})");
  return 0;
}
