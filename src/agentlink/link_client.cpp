#include "agentlink/link_client.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <optional>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include "agent/log_text.h"
#include "agentlink/agent_terminals.h"
#include "agentlink/link_messages.h"
#include "core/time_format.h"
#include "pki/certificate_authority.h"
#include "pki/join_tokens.h"

namespace gpucloud::agentlink {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ssl = asio::ssl;
namespace json = boost::json;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using Ws = websocket::stream<TlsStream>;

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
// How long a join keeps dialling a control plane it cannot reach yet.
constexpr auto kJoinDialPatience = std::chrono::seconds(30);

struct Endpoint {
  std::string host, port;
};

Result<Endpoint> endpoint_of(const std::string& url) {
  auto parsed = boost::urls::parse_absolute_uri(url);
  if (!parsed || parsed->scheme() != "https" || parsed->host().empty())
    return fail(ErrorCode::invalid_argument, "\"" + url + "\" is not https://HOST:PORT");
  std::string host(parsed->host_address());
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return Endpoint{host, parsed->has_port() ? std::string(parsed->port()) : "443"};
}

// The name checks OpenSSL makes on the control plane's certificate: an IP SAN for an IP
// literal, a DNS SAN otherwise.
void expect_name(SSL* ssl, const std::string& host) {
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (pki::is_ip_literal(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
}

std::string pem_of(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

// Verifies `leaf` against `ca` alone, for `host`, as the TLS handshake of a pinned link would.
Status verify_against(X509* leaf, X509* ca, const std::string& host) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  if (pki::is_ip_literal(host)) X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  else X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  const int ok = X509_verify_cert(ctx);
  const int err = X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  if (ok == 1) return gpucloud::ok();
  return fail(ErrorCode::unauthorized,
              std::string("the control plane's certificate does not verify against the pinned CA: ") +
                  X509_verify_cert_error_string(err));
}

asio::awaitable<Result<TlsStream>> dial(asio::any_io_executor loop, ssl::context& tls, const Endpoint& at) {
  boost::system::error_code ec;
  tcp::resolver resolver(loop);
  auto found = co_await resolver.async_resolve(at.host, at.port, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(ErrorCode::unavailable, "resolving " + at.host + ": " + ec.message());
  TlsStream stream(beast::tcp_stream(loop), tls);
  stream.next_layer().expires_after(kConnectTimeout);
  co_await stream.next_layer().async_connect(found, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(ErrorCode::unavailable, "connecting to " + at.host + ":" + at.port + ": " + ec.message());
  // Small messages (heartbeats, outcomes) go out at once, not after the control plane's
  // delayed ACK of the previous one (Nagle): as the listener's side.
  stream.next_layer().socket().set_option(tcp::no_delay(true), ec);
  expect_name(stream.native_handle(), at.host);
  co_await stream.async_handshake(ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(ErrorCode::unavailable, "TLS with " + at.host + ":" + at.port + ": " + ec.message());
  co_return stream;
}

asio::awaitable<Result<json::object>> post_json(TlsStream& stream, const Endpoint& at, std::string target,
                                                json::object body) {
  boost::system::error_code ec;
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, at.host);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::user_agent, "gpucloud-agent/" GPUCLOUD_VERSION);
  req.body() = json::serialize(body);
  req.prepare_payload();
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(ErrorCode::unavailable, "sending " + target + ": " + ec.message());
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(stream, buffer, res, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(ErrorCode::unavailable, "reading the answer to " + target + ": " + ec.message());
  auto parsed = agent::parse_message(res.body());
  const json::object* o = parsed ? parsed->if_object() : nullptr;
  if (res.result_int() >= 300) {
    const json::value* detail = o ? o->if_contains("detail") : nullptr;
    co_return fail(res.result_int() == 401 || res.result_int() == 403 ? ErrorCode::unauthorized
                                                                       : ErrorCode::invalid_argument,
                   "the control plane refused " + target + " (" + std::to_string(res.result_int()) + "): " +
                       (detail && detail->is_string() ? std::string(detail->as_string()) : res.body()));
  }
  if (!o) co_return fail(ErrorCode::internal, "the answer to " + target + " is not a JSON object");
  co_return *o;
}

Result<AgentIdentity> identity_from_answer(const json::object& o, AgentIdentity base) {
  const json::value* cert = o.if_contains("certificate");
  const json::value* ca = o.if_contains("ca_certificate");
  const json::value* not_after = o.if_contains("not_after");
  if (!cert || !cert->is_string() || !ca || !ca->is_string() || !not_after || !not_after->is_int64())
    return fail(ErrorCode::internal, "the control plane's answer lacks certificate, ca_certificate or not_after");
  base.certificate_pem = std::string(cert->as_string());
  base.ca_pem = std::string(ca->as_string());
  base.not_after = not_after->as_int64();
  base.issued_at = unix_seconds();
  return base;
}

Status write_file(const fs::path& path, const std::string& content, mode_t mode) {
  const fs::path tmp = path.string() + ".tmp";
  {
    const mode_t old = ::umask(077);
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ::umask(old);
    out << content;
    if (!out.flush()) return fail(ErrorCode::internal, "cannot write " + tmp.string());
  }
  ::chmod(tmp.c_str(), mode);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return fail(ErrorCode::internal, "cannot write " + path.string() + ": " + ec.message());
  return ok();
}

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::not_found, "cannot read " + path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

Result<AgentIdentity> load_identity(const fs::path& dir) {
  AgentIdentity id;
  auto key = read_file(dir / "key.pem");
  auto cert = read_file(dir / "certificate.pem");
  auto ca = read_file(dir / "ca.pem");
  auto link = read_file(dir / "link.json");
  if (!key || !cert || !ca || !link)
    return fail(ErrorCode::not_found, "this agent has not joined a control plane (no identity in " + dir.string() +
                                          "): run it once with --join URL --token TOKEN");
  auto parsed = agent::parse_message(*link);
  const json::object* o = parsed ? parsed->if_object() : nullptr;
  const json::value* url = o ? o->if_contains("url") : nullptr;
  const json::value* host = o ? o->if_contains("host") : nullptr;
  const json::value* issued = o ? o->if_contains("issued_at") : nullptr;
  const json::value* not_after = o ? o->if_contains("not_after") : nullptr;
  if (!url || !url->is_string() || !host || !host->is_string() || !issued || !issued->is_int64() || !not_after ||
      !not_after->is_int64())
    return fail(ErrorCode::invalid_argument, (dir / "link.json").string() + " is not {url, host, issued_at, not_after}");
  id.url = std::string(url->as_string());
  id.host = std::string(host->as_string());
  id.issued_at = issued->as_int64();
  id.not_after = not_after->as_int64();
  id.key_pem = std::move(*key);
  id.certificate_pem = std::move(*cert);
  id.ca_pem = std::move(*ca);
  return id;
}

Status save_identity(const fs::path& dir, const AgentIdentity& id) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::permissions(dir, fs::perms::owner_all, ec);
  if (auto s = write_file(dir / "key.pem", id.key_pem, 0600); !s) return s;
  if (auto s = write_file(dir / "certificate.pem", id.certificate_pem, 0644); !s) return s;
  if (auto s = write_file(dir / "ca.pem", id.ca_pem, 0644); !s) return s;
  return write_file(dir / "link.json",
                    json::serialize(json::object{{"url", id.url},
                                                 {"host", id.host},
                                                 {"issued_at", id.issued_at},
                                                 {"not_after", id.not_after}}),
                    0644);
}

asio::awaitable<Result<AgentIdentity>> join_control_plane(asio::any_io_executor loop, std::string url,
                                                          std::string token, std::string host_name) {
  auto at = endpoint_of(url);
  if (!at) co_return fail(at.error());
  auto parsed = pki::parse_join_token(token);
  if (!parsed) co_return fail(parsed.error());
  auto keys = pki::make_key_and_request(host_name);
  if (!keys) co_return fail(keys.error());
  // Nothing is trusted yet: the handshake takes any certificate, and the chain is checked
  // against the token's fingerprint before a byte of the token goes out.
  ssl::context tls(ssl::context::tls_client);
  tls.set_verify_mode(ssl::verify_none);
  // An agent started with its host (its network, or the control plane, not up yet) keeps
  // dialling for a while: nothing has been sent, so a retry cannot spend the token twice.
  auto stream = co_await dial(loop, tls, *at);
  const auto give_up = std::chrono::steady_clock::now() + kJoinDialPatience;
  while (!stream && std::chrono::steady_clock::now() < give_up) {
    spdlog::info(R"({{"event":"agent_join_retry","error":{}}})", agent::q(stream.error().detail));
    asio::steady_timer pause(loop, std::chrono::seconds(1));
    boost::system::error_code waited;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, waited));
    stream = co_await dial(loop, tls, *at);
  }
  if (!stream) co_return fail(stream.error());
  SSL* ssl_handle = stream->native_handle();
  STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl_handle);
  X509* leaf = SSL_get0_peer_certificate(ssl_handle);
  X509* pinned = nullptr;
  for (int i = 0; chain && i < sk_X509_num(chain); ++i) {
    X509* c = sk_X509_value(chain, i);
    auto fp = pki::fingerprint_of_pem(pem_of(c));
    if (fp && *fp == parsed->ca_fingerprint) pinned = c;
  }
  if (!leaf || !pinned)
    co_return fail(ErrorCode::unauthorized,
                   "the server at " + url + " did not present the CA this token pins (fingerprint " +
                       parsed->ca_fingerprint.substr(0, 16) + "...): not sending the token");
  if (auto s = verify_against(leaf, pinned, at->host); !s) co_return fail(s.error());
  AgentIdentity id;
  id.url = url;
  id.host = host_name;
  id.key_pem = keys->key_pem;
  // Named locals: g++ 12 mishandles string literals inside co_await expressions.
  const std::string target = "/v1/join", version = GPUCLOUD_VERSION;
  json::object request{{"token", token}, {"csr", keys->csr_pem}, {"agent_version", version}};
  auto answer = co_await post_json(*stream, *at, target, std::move(request));
  if (!answer) co_return fail(answer.error());
  auto joined = identity_from_answer(*answer, std::move(id));
  if (!joined) co_return joined;
  if (auto fp = pki::fingerprint_of_pem(joined->ca_pem); !fp || *fp != parsed->ca_fingerprint)
    co_return fail(ErrorCode::unauthorized, "the control plane answered with another CA than the token pins");
  co_return joined;
}

struct LinkClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::any_io_executor loop, AgentIdentity identity, fs::path dir, agent::HostAgent& agent, Options options)
      : loop(loop), identity(std::move(identity)), dir(std::move(dir)), agent(agent), options(options), backoff(loop) {}

  asio::any_io_executor loop;
  AgentIdentity identity;
  fs::path dir;
  agent::HostAgent& agent;
  Options options;
  asio::steady_timer backoff;
  agent::HostInventory inventory;
  std::shared_ptr<Ws> ws;  // the live link, when there is one
  std::deque<std::string> queue;
  std::size_t unsent = 0;  // bytes in `queue` (terminal output waits while it is large)
  bool writing = false, stopped = false;

  Result<std::unique_ptr<ssl::context>> client_tls() const {
    auto tls = std::make_unique<ssl::context>(ssl::context::tls_client);
    boost::system::error_code ec;
    tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    tls->use_certificate(asio::buffer(identity.certificate_pem), ssl::context::pem, ec);
    if (!ec) tls->use_private_key(asio::buffer(identity.key_pem), ssl::context::pem, ec);
    if (!ec) tls->add_certificate_authority(asio::buffer(identity.ca_pem), ec);
    if (ec) return fail(ErrorCode::internal, "the agent's TLS identity: " + ec.message());
    tls->set_verify_mode(ssl::verify_peer);
    return tls;
  }

  void send(std::string type, json::object body) {
    if (!ws) return;  // nothing is kept while the link is down: the hello says the present
    queue.push_back(envelope(type, std::move(body)));
    unsent += queue.back().size();
    if (writing) return;
    writing = true;
    asio::co_spawn(loop, write_all(shared_from_this(), ws), asio::detached);
  }

  static asio::awaitable<void> write_all(std::shared_ptr<Impl> self, std::shared_ptr<Ws> link) {
    boost::system::error_code ec;
    while (!self->queue.empty() && self->ws == link) {
      std::string text = std::move(self->queue.front());
      self->queue.pop_front();
      self->unsent -= std::min(self->unsent, text.size());
      link->text(true);
      co_await link->async_write(asio::buffer(text), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    self->writing = false;
  }

  // At two-thirds of the certificate's life: a new key and certificate over the current one.
  asio::awaitable<void> renew_if_due() {
    const std::int64_t life = identity.not_after - identity.issued_at;
    if (life <= 0 || unix_seconds() < identity.issued_at + life * 2 / 3) co_return;
    auto at = endpoint_of(identity.url);
    auto tls = client_tls();
    auto keys = pki::make_key_and_request(identity.host);
    if (!at || !tls || !keys) co_return;
    auto stream = co_await dial(loop, **tls, *at);
    if (!stream) {
      spdlog::warn(R"({{"event":"certificate_renewal_failed","why":{}}})",
                   json::serialize(json::value(json::string(stream.error().detail))));
      co_return;
    }
    const std::string target = "/v1/renew";
    json::object request{{"csr", keys->csr_pem}};
    auto answer = co_await post_json(*stream, *at, target, std::move(request));
    if (!answer) {
      spdlog::warn(R"({{"event":"certificate_renewal_failed","why":{}}})",
                   json::serialize(json::value(json::string(answer.error().detail))));
      co_return;
    }
    AgentIdentity next = identity;
    next.key_pem = keys->key_pem;
    auto renewed = identity_from_answer(*answer, std::move(next));
    if (!renewed) co_return;
    if (auto s = save_identity(dir, *renewed); !s) {
      spdlog::warn(R"({{"event":"certificate_renewal_unsaved","why":{}}})",
                   json::serialize(json::value(json::string(s.error().detail))));
      co_return;
    }
    identity = std::move(*renewed);
    spdlog::info(R"({{"event":"certificate_renewed","not_after":{}}})", identity.not_after);
  }

  // One link, from dial to drop. An error says why it ended.
  asio::awaitable<Status> link_once() {
    auto at = endpoint_of(identity.url);
    if (!at) co_return fail(at.error());
    auto tls = client_tls();
    if (!tls) co_return fail(tls.error());
    auto stream = co_await dial(loop, **tls, *at);
    if (!stream) co_return fail(stream.error());
    stream->next_layer().expires_never();
    auto link = std::make_shared<Ws>(std::move(*stream));
    websocket::stream_base::timeout timeouts{};
    timeouts.handshake_timeout = kConnectTimeout;
    timeouts.idle_timeout = kLinkIdleTimeout;
    timeouts.keep_alive_pings = true;
    link->set_option(timeouts);
    link->read_message_max(64 << 20);
    boost::system::error_code ec;
    const std::string authority = at->host + ":" + at->port, path = "/v1/agent";
    websocket::response_type answer;
    co_await link->async_handshake(answer, authority, path, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      // A refusal (401/403: a revoked or expired certificate) says why in its problem's detail.
      auto problem = agent::parse_message(answer.body());
      const json::object* o = problem ? problem->if_object() : nullptr;
      const json::value* detail = o ? o->if_contains("detail") : nullptr;
      co_return fail(ErrorCode::unavailable, "the link's handshake: " + ec.message() +
                                                 (detail && detail->is_string() ? ": " + std::string(detail->as_string()) : ""));
    }
    link->text(true);
    const std::string version = GPUCLOUD_VERSION;
    const std::string hello = envelope("hello", to_json(Hello{kLinkVersion, version, inventory}));
    co_await link->async_write(asio::buffer(hello), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return fail(ErrorCode::unavailable, "sending the hello: " + ec.message());
    beast::flat_buffer buffer;
    co_await link->async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return fail(ErrorCode::unavailable, "waiting for the welcome: " + ec.message());
    auto first = read_envelope(beast::buffers_to_string(buffer.data()));
    buffer.consume(buffer.size());
    if (!first) co_return fail(first.error());
    if (first->type == "refused") {
      const json::value* detail = first->body.if_contains("detail");
      co_return fail(ErrorCode::forbidden, "the control plane refused the link: " +
                                               (detail && detail->is_string() ? std::string(detail->as_string()) : ""));
    }
    if (first->type != "welcome") co_return fail(ErrorCode::internal, "the control plane's first message is not a welcome");
    if (auto welcome = welcome_from_json(first->body); welcome && welcome->heartbeat_interval_ms > 0)
      agent.set_heartbeat_interval(std::chrono::milliseconds(welcome->heartbeat_interval_ms));
    ws = link;
    spdlog::info(R"({{"event":"link_up","control_plane":"{}","host":"{}"}})", identity.url, identity.host);
    // The web terminals this link carries (agent_terminals.h): they end with it.
    std::weak_ptr<Impl> weak = weak_from_this();
    auto terminals = std::make_shared<AgentTerminals>(
        loop, agent, identity.host,
        [weak, link](std::string type, json::object body) {
          if (auto self = weak.lock(); self && self->ws == link) self->send(std::move(type), std::move(body));
        },
        [weak]() -> std::size_t {
          auto self = weak.lock();
          return self ? self->unsent : 0;
        });
    std::string refusal;
    while (!stopped) {
      co_await link->async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      auto message = read_envelope(beast::buffers_to_string(buffer.data()));
      buffer.consume(buffer.size());
      if (!message) continue;
      if (message->type == "command") {
        auto command = agent::command_from_json(message->body);
        if (!command) continue;
        if (command->host_name != identity.host) {
          send("outcome", agent::to_json(agent::failed_outcome(
                              command->id, Error{ErrorCode::forbidden, "this agent serves " + identity.host, {}, 0})));
          continue;
        }
        asio::co_spawn(loop, run_command(shared_from_this(), std::move(*command)), asio::detached);
      } else if (message->type.starts_with("terminal_") || message->type == "connection_open") {
        terminals->handle(*message);
      } else if (message->type == "refused") {
        const json::value* detail = message->body.if_contains("detail");
        refusal = detail && detail->is_string() ? std::string(detail->as_string()) : "refused";
        break;
      }
    }
    terminals->close_all();
    if (ws == link) ws.reset();
    queue.clear();
    unsent = 0;
    if (!refusal.empty()) co_return fail(ErrorCode::unavailable, "the control plane closed the link: " + refusal);
    co_return fail(ErrorCode::unavailable, ec ? "the link dropped: " + ec.message() : "the link closed");
  }

  static asio::awaitable<void> run_command(std::shared_ptr<Impl> self, agent::Command command) {
    auto outcome = co_await self->agent.execute(command);
    agent::CommandOutcome out = outcome ? std::move(*outcome) : agent::failed_outcome(command.id, outcome.error());
    out.command_id = command.id;
    self->send("outcome", agent::to_json(out));
  }

  static asio::awaitable<void> dial_forever(std::shared_ptr<Impl> self) {
    auto wait = std::chrono::milliseconds(500);
    while (!self->stopped) {
      co_await self->renew_if_due();
      const auto began = std::chrono::steady_clock::now();
      auto ended = co_await self->link_once();
      if (self->stopped) co_return;
      if (std::chrono::steady_clock::now() - began > std::chrono::seconds(60)) wait = std::chrono::milliseconds(500);
      spdlog::warn(R"({{"event":"link_down","retry_in_ms":{},"why":{}}})", wait.count(),
                   json::serialize(json::value(json::string(ended ? "" : ended.error().detail))));
      self->backoff.expires_after(wait);
      boost::system::error_code ec;
      co_await self->backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      wait = std::min<std::chrono::milliseconds>(wait * 2, self->options.max_backoff);
    }
  }
};

LinkClient::LinkClient(asio::any_io_executor loop, AgentIdentity identity, fs::path identity_dir,
                       agent::HostAgent& agent, Options options)
    : impl_(std::make_shared<Impl>(loop, std::move(identity), std::move(identity_dir), agent, options)) {
  std::weak_ptr<Impl> weak = impl_;
  agent.on_heartbeat([weak](agent::Heartbeat beat) {
    auto self = weak.lock();
    if (!self) return;
    // The next hello says the present: the GPUs and the pool as the last beat had them.
    if (beat.host_name == self->inventory.name) {
      if (!beat.gpus.empty()) self->inventory.gpus = beat.gpus;
      if (beat.disk_pool) self->inventory.disk_pool = beat.disk_pool;
    }
    self->send("heartbeat", agent::to_json(beat));
  });
  agent.on_samples([weak](agent::SampleReport report) {
    if (auto self = weak.lock()) self->send("samples", agent::to_json(report));
  });
  agent.on_changes([weak](agent::ChangeReport report) {
    if (auto self = weak.lock()) self->send("changes", agent::to_json(report));
  });
}

LinkClient::~LinkClient() { stop(); }

asio::awaitable<Status> LinkClient::start() {
  auto hosts = co_await impl_->agent.register_hosts();
  if (!hosts) co_return fail(hosts.error());
  if (hosts->size() != 1 || hosts->front().name != impl_->identity.host)
    co_return fail(ErrorCode::invalid_argument, "the agent's config must serve exactly host " + impl_->identity.host +
                                                    " (its certificate's)");
  impl_->inventory = hosts->front();
  asio::co_spawn(impl_->loop, Impl::dial_forever(impl_), asio::detached);
  co_return ok();
}

void LinkClient::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->backoff.cancel();
  if (auto link = impl_->ws) {
    boost::system::error_code ec;
    beast::get_lowest_layer(*link).socket().close(ec);
  }
}

bool LinkClient::connected() const { return impl_->ws != nullptr; }

}  // namespace gpucloud::agentlink
