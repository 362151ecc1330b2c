// agent_link_load: N simulated remote agents against one control plane (issue 26, "Measure").
//
//   agent_link_load --api http://127.0.0.1:PORT --agents-url https://127.0.0.1:APORT
//                   (--admin-token T | --admin-password P) --agents 1000 --duration 60
//                   [--pid GPUCLOUDD_PID] [--interval 10] [--warmup 10] [--zone zone-a]
//
// It speaks the real protocol over real TLS, the way gpucloud-agent does:
//   1. N join tokens through the API (POST /api/v1/admin/hosts/join-token, as the operator);
//   2. N joins (POST /v1/join on the agents' listener) through join_control_plane(): a key and
//      CSR per host, the control plane's CA pinned by the fingerprint each token carries;
//   3. N WebSockets over mutual TLS (GET /v1/agent with each host's own certificate), each
//      saying hello (0 GPUs, cpu 8, memory 16 GiB, its own port range) and awaiting welcome;
//   4. a heartbeat per agent every --interval seconds, the agents' beats spread evenly over the
//      interval, each timed from just before its write to its heartbeat_ack {sequence}.
// After --warmup seconds of beating (the joins' and hellos' writes settle), it measures for
// --duration seconds: heartbeats sent/acked, latency p50/p99/max, and the control plane's CPU
// (utime+stime of /proc/PID/stat, all its threads) over the window as % of one core.
// One io_context thread serves every socket. Exit status: 0 when it measured, 1 otherwise.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "agent/agent_protocol.h"
#include "agentlink/link_client.h"
#include "agentlink/link_messages.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ssl = asio::ssl;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using namespace gpucloud;
using LoadClock = std::chrono::steady_clock;
using LoadWs = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;

namespace {

struct LoadOptions {
  std::string api = "http://127.0.0.1:8080", agents_url, admin_token, admin_password, zone = "zone-a";
  std::string prefix = "load-";
  int agents = 1000, pid = 0, port_base = 20000, join_concurrency = 16, connect_concurrency = 64;
  double duration_s = 60, interval_s = 10, warmup_s = 10, slow_ms = 20;
  bool disk_pool = true, no_delay = true;
};

struct LoadEndpoint {
  std::string host, port;
};

LoadEndpoint load_endpoint_of(const std::string& url) {
  auto parsed = boost::urls::parse_absolute_uri(url);
  if (!parsed) throw std::runtime_error("not a URL: " + url);
  std::string host(parsed->host_address());
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, parsed->has_port() ? std::string(parsed->port()) : (parsed->scheme() == "https" ? "443" : "80")};
}

// Blocking HTTP/1.1 over plain TCP (the API), before the loop runs.
class LoadApi {
 public:
  LoadApi(asio::io_context& io, std::string url) : io_(io), at_(load_endpoint_of(url)) {}
  std::pair<int, json::value> call(http::verb verb, const std::string& target, const json::object* body,
                                   const std::string& token) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        if (!stream_) {
          tcp::resolver resolver(io_);
          stream_.emplace(io_);
          stream_->connect(resolver.resolve(at_.host, at_.port));
        }
        http::request<http::string_body> req{verb, target, 11};
        req.set(http::field::host, at_.host);
        req.keep_alive(true);
        if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
        if (body) {
          req.set(http::field::content_type, "application/json");
          req.body() = json::serialize(*body);
        }
        req.prepare_payload();
        http::write(*stream_, req);
        http::response<http::string_body> res;
        http::read(*stream_, buffer_, res);
        if (!res.keep_alive()) stream_.reset();
        boost::system::error_code ec;
        json::value v = res.body().empty() ? json::value() : json::parse(res.body(), ec);
        return {res.result_int(), v};
      } catch (const boost::system::system_error&) {
        stream_.reset();
        if (attempt) throw;
      }
    }
    return {0, {}};
  }

 private:
  asio::io_context& io_;
  LoadEndpoint at_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

struct LoadAgent {
  int index = 0;
  std::string name, token;
  std::optional<agentlink::AgentIdentity> identity;
  std::unique_ptr<ssl::context> tls;
  std::shared_ptr<LoadWs> ws;
  std::map<std::uint64_t, LoadClock::time_point> in_flight;  // sequence -> sent at
  std::uint64_t sequence = 0;
  bool connected = false, lost = false;
};

struct LoadStats {
  bool measuring = false;
  std::uint64_t sent = 0, acked = 0, late_acks = 0, unknown_acks = 0, other_messages = 0, write_errors = 0;
  std::vector<double> latency_ms;
  std::vector<std::pair<double, double>> slow;  // (sent, seconds into the window; latency ms)
  std::map<std::string, int> errors;  // first words of each failure -> count
  void error(const std::string& what) { ++errors[what.substr(0, 140)]; }
};

double load_percentile(std::vector<double> xs, double p) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const double k = (xs.size() - 1) * p / 100.0;
  const auto lo = static_cast<std::size_t>(k);
  const auto hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (k - static_cast<double>(lo));
}

// utime + stime of a process (all its threads), in seconds.
std::optional<double> process_cpu_seconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

agent::DiskPool load_disk_pool() {
  const std::int64_t gib = std::int64_t{1} << 30;
  return agent::DiskPool{"/var/lib/gpucloud/agent", 500 * gib, 100 * gib, 10 * gib, 490 * gib};
}

class LoadRun {
 public:
  LoadRun(asio::io_context& io, LoadOptions o) : io_(io), o_(std::move(o)) {}

  asio::awaitable<void> join_all(std::vector<LoadAgent>& agents) {
    std::size_t next = 0;
    int done = 0;
    auto worker = [&]() -> asio::awaitable<void> {
      while (next < agents.size()) {
        LoadAgent& a = agents[next++];
        auto joined = co_await agentlink::join_control_plane(io_.get_executor(), o_.agents_url, a.token, a.name);
        if (!joined) stats_.error("join: " + joined.error().detail);
        else a.identity = std::move(*joined);
        ++done;
      }
    };
    int running = 0;
    for (int w = 0; w < o_.join_concurrency; ++w) {
      ++running;
      asio::co_spawn(io_, worker(), [&](std::exception_ptr) { --running; });
    }
    asio::steady_timer tick(io_);
    while (running > 0) {
      tick.expires_after(std::chrono::milliseconds(20));
      co_await tick.async_wait(asio::use_awaitable);
    }
    (void)done;
  }

  asio::awaitable<void> connect_one(LoadAgent& a) {
    try {
      a.tls = std::make_unique<ssl::context>(ssl::context::tls_client);
      a.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                         ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      a.tls->use_certificate(asio::buffer(a.identity->certificate_pem), ssl::context::pem);
      a.tls->use_private_key(asio::buffer(a.identity->key_pem), ssl::context::pem);
      a.tls->add_certificate_authority(asio::buffer(a.identity->ca_pem));
      a.tls->set_verify_mode(ssl::verify_peer);
      const LoadEndpoint at = load_endpoint_of(o_.agents_url);
      tcp::resolver resolver(io_);
      auto found = co_await resolver.async_resolve(at.host, at.port, asio::use_awaitable);
      auto ws = std::make_shared<LoadWs>(io_, *a.tls);
      beast::get_lowest_layer(*ws).expires_after(std::chrono::seconds(30));
      co_await beast::get_lowest_layer(*ws).async_connect(found, asio::use_awaitable);
      // As gpucloud-agent's link (link_client.cpp): small messages go out at once, not after
      // the peer's delayed ACK of the previous one (Nagle).
      if (o_.no_delay) beast::get_lowest_layer(*ws).socket().set_option(tcp::no_delay(true));
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ws->next_layer().native_handle()), at.host.c_str());
      co_await ws->next_layer().async_handshake(ssl::stream_base::client, asio::use_awaitable);
      beast::get_lowest_layer(*ws).expires_never();
      websocket::stream_base::timeout timeouts{};
      timeouts.handshake_timeout = std::chrono::seconds(30);
      timeouts.idle_timeout = std::chrono::seconds(20);
      timeouts.keep_alive_pings = true;
      ws->set_option(timeouts);
      const std::string authority = at.host + ":" + at.port, path = "/v1/agent";
      co_await ws->async_handshake(authority, path, asio::use_awaitable);
      agent::HostInventory inv;
      inv.name = a.name;
      inv.zone = o_.zone;
      inv.cpu = 8;
      inv.memory_gib = 16;
      inv.port_min = o_.port_base + a.index * 10;
      inv.port_max = inv.port_min + 9;
      inv.engine = "unix:///var/run/docker.sock";
      inv.simulated = true;
      inv.inventory_source = "simulated";
      if (o_.disk_pool) inv.disk_pool = load_disk_pool();
      const std::string version = "load-0";
      const std::string hello = agentlink::envelope("hello", agentlink::to_json(agentlink::Hello{agentlink::kLinkVersion, version, inv}));
      ws->text(true);
      co_await ws->async_write(asio::buffer(hello), asio::use_awaitable);
      beast::flat_buffer buffer;
      co_await ws->async_read(buffer, asio::use_awaitable);
      auto first = agentlink::read_envelope(beast::buffers_to_string(buffer.data()));
      if (!first || first->type != "welcome") {
        stats_.error("hello: " + (first ? first->type + " " + json::serialize(first->body) : first.error().detail));
        co_return;
      }
      a.ws = ws;
      a.connected = true;
      ++connected_;
      asio::co_spawn(io_, read_loop(a), asio::detached);
    } catch (const std::exception& e) {
      stats_.error(std::string("connect: ") + e.what());
    }
  }

  asio::awaitable<void> connect_all(std::vector<LoadAgent>& agents) {
    std::size_t next = 0;
    int running = 0;
    auto worker = [&]() -> asio::awaitable<void> {
      while (next < agents.size()) {
        LoadAgent& a = agents[next++];
        if (a.identity) co_await connect_one(a);
      }
    };
    for (int w = 0; w < o_.connect_concurrency; ++w) {
      ++running;
      asio::co_spawn(io_, worker(), [&](std::exception_ptr) { --running; });
    }
    asio::steady_timer tick(io_);
    while (running > 0) {
      tick.expires_after(std::chrono::milliseconds(20));
      co_await tick.async_wait(asio::use_awaitable);
    }
  }

  asio::awaitable<void> read_loop(LoadAgent& a) {
    auto ws = a.ws;
    beast::flat_buffer buffer;
    boost::system::error_code ec;
    while (!stopping_) {
      co_await ws->async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      const auto at = LoadClock::now();
      auto message = agentlink::read_envelope(beast::buffers_to_string(buffer.data()));
      buffer.consume(buffer.size());
      if (!message) continue;
      if (message->type != "heartbeat_ack") {
        ++stats_.other_messages;
        continue;
      }
      const json::value* seq = message->body.if_contains("sequence");
      std::uint64_t sequence = 0;
      if (seq && seq->is_uint64()) sequence = seq->as_uint64();
      else if (seq && seq->is_int64()) sequence = static_cast<std::uint64_t>(seq->as_int64());
      auto it = a.in_flight.find(sequence);
      if (it == a.in_flight.end()) {
        ++stats_.unknown_acks;
        continue;
      }
      const auto it_sent = it->second;
      const double ms = std::chrono::duration<double, std::milli>(at - it_sent).count();
      const bool counted = it->second >= window_start_ && window_start_ != LoadClock::time_point{};
      a.in_flight.erase(it);
      if (counted && stats_.measuring) {
        ++stats_.acked;
        stats_.latency_ms.push_back(ms);
        if (ms >= o_.slow_ms)
          stats_.slow.emplace_back(std::chrono::duration<double>(it_sent - window_start_).count(), ms);
      } else if (counted) {
        ++stats_.late_acks;  // sent in the window, answered after it closed
      }
    }
    if (!stopping_ && a.connected) {
      a.connected = false;
      a.lost = true;
      --connected_;
      stats_.error("link lost: " + ec.message());
    }
  }

  asio::awaitable<void> beat_loop(LoadAgent& a, LoadClock::time_point first) {
    asio::steady_timer timer(io_);
    const auto every = std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(o_.interval_s));
    auto due = first;
    boost::system::error_code ec;
    while (!stopping_ && a.connected) {
      timer.expires_at(due);
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (stopping_ || !a.connected) break;
      agent::Heartbeat beat;
      beat.host_name = a.name;
      beat.sequence = ++a.sequence;
      if (o_.disk_pool) beat.disk_pool = load_disk_pool();
      const std::string text = agentlink::envelope("heartbeat", agent::to_json(beat));
      const auto sent = LoadClock::now();
      a.in_flight[beat.sequence] = sent;
      if (stats_.measuring && sent >= window_start_) ++stats_.sent;
      a.ws->text(true);
      co_await a.ws->async_write(asio::buffer(text), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        ++stats_.write_errors;
        break;
      }
      due += every;
    }
  }

  asio::awaitable<int> run(std::vector<LoadAgent>& agents) {
    const auto t_join = LoadClock::now();
    co_await join_all(agents);
    const double join_s = std::chrono::duration<double>(LoadClock::now() - t_join).count();
    int joined = 0;
    for (const auto& a : agents) joined += a.identity ? 1 : 0;
    std::printf("joined %d/%zu hosts in %.1f s\n", joined, agents.size(), join_s);
    std::fflush(stdout);
    const auto t_connect = LoadClock::now();
    co_await connect_all(agents);
    const double connect_s = std::chrono::duration<double>(LoadClock::now() - t_connect).count();
    std::printf("connected %d/%zu links (hello -> welcome) in %.1f s\n", connected_, agents.size(), connect_s);
    std::fflush(stdout);
    // Beats spread evenly over the interval, starting now.
    const auto start = LoadClock::now();
    const auto every = std::chrono::duration<double>(o_.interval_s);
    for (auto& a : agents) {
      if (!a.connected) continue;
      const auto offset = std::chrono::duration_cast<LoadClock::duration>(every * a.index / static_cast<double>(agents.size()));
      asio::co_spawn(io_, beat_loop(a, start + offset), asio::detached);
    }
    asio::steady_timer timer(io_);
    timer.expires_after(std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(o_.warmup_s)));
    co_await timer.async_wait(asio::use_awaitable);
    // The steady window.
    const auto cpu0 = o_.pid ? process_cpu_seconds(o_.pid) : std::nullopt;
    const double own0 = own_cpu_seconds();
    window_start_ = LoadClock::now();
    stats_.measuring = true;
    const int connected_at_start = connected_;
    timer.expires_after(std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(o_.duration_s)));
    co_await timer.async_wait(asio::use_awaitable);
    const auto window_end = LoadClock::now();
    const auto cpu1 = o_.pid ? process_cpu_seconds(o_.pid) : std::nullopt;
    const double own1 = own_cpu_seconds();
    stats_.measuring = false;
    const double window_s = std::chrono::duration<double>(window_end - window_start_).count();
    // Beats still unanswered from the window (anything sent then and not acked by now).
    std::uint64_t unanswered = 0;
    for (const auto& a : agents)
      for (const auto& [seq, at] : a.in_flight)
        if (at >= window_start_ && at < window_end) ++unanswered;
    std::printf("agents: %d, connected at window start %d, at end %d\n", o_.agents, connected_at_start, connected_);
    std::printf("window: %.1f s (after %.0f s of warm-up), interval %.1f s per agent\n", window_s, o_.warmup_s,
                o_.interval_s);
    std::printf("heartbeats: sent %llu, acked %llu (%.1f/s), unanswered at window end %llu, acked after the window %llu\n",
                static_cast<unsigned long long>(stats_.sent), static_cast<unsigned long long>(stats_.acked),
                static_cast<double>(stats_.acked) / window_s, static_cast<unsigned long long>(unanswered),
                static_cast<unsigned long long>(stats_.late_acks));
    const auto& l = stats_.latency_ms;
    std::printf("heartbeat -> ack latency (ms): p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", load_percentile(l, 50),
                load_percentile(l, 90), load_percentile(l, 99), l.empty() ? 0.0 : *std::max_element(l.begin(), l.end()));
    if (cpu0 && cpu1)
      std::printf("control plane (pid %d) CPU over the window: %.2f s = %.1f %% of one core\n", o_.pid, *cpu1 - *cpu0,
                  100.0 * (*cpu1 - *cpu0) / window_s);
    else if (o_.pid)
      std::printf("control plane (pid %d): /proc/%d/stat unreadable\n", o_.pid, o_.pid);
    std::printf("load tool CPU over the window: %.1f %% of one core\n", 100.0 * (own1 - own0) / window_s);
    std::printf("other messages from the control plane: %llu; unknown acks %llu; write errors %llu\n",
                static_cast<unsigned long long>(stats_.other_messages), static_cast<unsigned long long>(stats_.unknown_acks),
                static_cast<unsigned long long>(stats_.write_errors));
    // Slow beats grouped into stalls (sent within 250 ms of each other): when, how many, how slow.
    if (!stats_.slow.empty()) {
      auto slow = stats_.slow;
      std::sort(slow.begin(), slow.end());
      std::printf("stalls (beats >= %.0f ms, grouped by send time): %zu beats\n", o_.slow_ms, slow.size());
      std::size_t begin = 0;
      int shown = 0;
      for (std::size_t i = 1; i <= slow.size(); ++i) {
        if (i < slow.size() && slow[i].first - slow[i - 1].first < 0.25) continue;
        double worst = 0;
        for (std::size_t k = begin; k < i; ++k) worst = std::max(worst, slow[k].second);
        if (shown++ < 40)
          std::printf("  at %6.2f s: %zu beats, worst %.1f ms\n", slow[begin].first, i - begin, worst);
        begin = i;
      }
    }
    for (const auto& [what, n] : stats_.errors) std::printf("error x%d: %s\n", n, what.c_str());
    std::fflush(stdout);
    stopping_ = true;
    for (auto& a : agents)
      if (a.ws) {
        boost::system::error_code ec;
        beast::get_lowest_layer(*a.ws).socket().shutdown(tcp::socket::shutdown_both, ec);
        beast::get_lowest_layer(*a.ws).socket().close(ec);
      }
    co_return connected_at_start == o_.agents && !l.empty() ? 0 : 1;
  }

 private:
  asio::io_context& io_;
  LoadOptions o_;
  LoadStats stats_;
  int connected_ = 0;
  bool stopping_ = false;
  LoadClock::time_point window_start_{};
};

}  // namespace

int main(int argc, char** argv) {
  LoadOptions o;
  CLI::App cli{"agent_link_load: N simulated remote agents heartbeating against one control plane"};
  cli.add_option("--api", o.api, "the control plane's API, http://HOST:PORT");
  cli.add_option("--agents-url", o.agents_url, "the agents' listener, https://HOST:PORT")->required();
  cli.add_option("--admin-token", o.admin_token, "an operator's bearer token");
  cli.add_option("--admin-password", o.admin_password, "or the admin account's password");
  cli.add_option("--agents", o.agents, "how many agents (hosts)");
  cli.add_option("--duration", o.duration_s, "seconds of measured steady state");
  cli.add_option("--warmup", o.warmup_s, "seconds of heartbeats before the window");
  cli.add_option("--interval", o.interval_s, "seconds between one agent's heartbeats");
  cli.add_option("--slow-ms", o.slow_ms, "beats at least this slow are listed as stalls");
  cli.add_option("--pid", o.pid, "the control plane's pid (its CPU is read from /proc)");
  cli.add_option("--zone", o.zone, "the hosts' zone (one the control plane has)");
  cli.add_option("--prefix", o.prefix, "host names: PREFIX0001...");
  cli.add_option("--port-base", o.port_base, "host i's port range: BASE+10i .. BASE+10i+9");
  cli.add_option("--join-concurrency", o.join_concurrency, "joins in flight");
  cli.add_option("--connect-concurrency", o.connect_concurrency, "links being opened at once");
  cli.add_flag("!--nagle", o.no_delay, "leave Nagle's algorithm on the agents' sockets (as before TCP_NODELAY)");
  cli.add_flag("!--no-disk-pool", o.disk_pool, "heartbeats without a disk pool (real agents send one)");
  CLI11_PARSE(cli, argc, argv);
  if (o.admin_token.empty() == o.admin_password.empty()) {
    std::fprintf(stderr, "agent_link_load: give --admin-token or --admin-password\n");
    return 2;
  }
  // Every link is a socket: lift the soft limit to the hard one.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < static_cast<rlim_t>(o.agents) + 64)
    std::fprintf(stderr, "agent_link_load: warning: only %llu file descriptors for %d links\n",
                 static_cast<unsigned long long>(files.rlim_cur), o.agents);
  asio::io_context io(1);
  std::vector<LoadAgent> agents(static_cast<std::size_t>(o.agents));
  try {
    LoadApi api(io, o.api);
    if (o.admin_token.empty()) {
      json::object login{{"username", "admin"}, {"password", o.admin_password}};
      auto [status, body] = api.call(http::verb::post, "/api/v1/auth/login", &login, "");
      if (status != 200 || !body.is_object() || !body.as_object().contains("token")) {
        std::fprintf(stderr, "agent_link_load: login failed (HTTP %d): %s\n", status, json::serialize(body).c_str());
        return 1;
      }
      o.admin_token = std::string(body.at("token").as_string());
    }
    const auto t0 = LoadClock::now();
    for (int i = 0; i < o.agents; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "%s%04d", o.prefix.c_str(), i);
      agents[i].index = i;
      agents[i].name = name;
      json::object body{{"host", agents[i].name}};
      auto [status, made] = api.call(http::verb::post, "/api/v1/admin/hosts/join-token", &body, o.admin_token);
      if (status != 201 || !made.is_object() || !made.as_object().contains("token")) {
        std::fprintf(stderr, "agent_link_load: join-token for %s: HTTP %d: %s\n", name, status, json::serialize(made).c_str());
        return 1;
      }
      agents[i].token = std::string(made.at("token").as_string());
    }
    std::printf("made %d join tokens in %.1f s\n", o.agents, std::chrono::duration<double>(LoadClock::now() - t0).count());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agent_link_load: API: %s\n", e.what());
    return 1;
  }
  LoadRun load(io, o);
  int rc = 1;
  asio::co_spawn(io, load.run(agents), [&](std::exception_ptr e, int r) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "agent_link_load: %s\n", ex.what());
      }
    } else {
      rc = r;
    }
    io.stop();
  });
  io.run();
  return rc;
}
