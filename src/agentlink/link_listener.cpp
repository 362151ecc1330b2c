#include "agentlink/link_listener.h"

#include "agentlink/link_messages.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/resource.h>

#include <deque>
#include <set>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "core/time_format.h"
#include "pki/host_certificates.h"
#include "pki/join_tokens.h"

namespace gpucloud::agentlink {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ssl = asio::ssl;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using Ws = websocket::stream<TlsStream>;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kCertificateRecheck = std::chrono::seconds(5);

}  // namespace

// One agent's link: a WebSocket over the TLS connection whose certificate named the host.
class LinkSession : public AgentConnection, public std::enable_shared_from_this<LinkSession> {
 public:
  LinkSession(Ws ws, std::string host, std::string address, AgentHub& hub, std::shared_ptr<bool> serving)
      : ws_(std::move(ws)), host_(std::move(host)), address_(std::move(address)), hub_(hub),
        serving_(std::move(serving)) {}

  void send(std::string text) override {
    if (closed_) return;
    queue_.push_back(std::move(text));
    if (writing_) return;
    writing_ = true;
    asio::co_spawn(ws_.get_executor(), write_all(shared_from_this()), asio::detached);
  }

  void close(std::string why) override {
    if (closed_) return;
    spdlog::info(R"({{"event":"agent_link_closing","host":"{}","why":{}}})", host_,
                 json::serialize(json::value(json::string(why))));
    queue_.push_back(envelope("refused", json::object{{"detail", why}}));
    closing_ = true;
    if (!writing_) {
      writing_ = true;
      asio::co_spawn(ws_.get_executor(), write_all(shared_from_this()), asio::detached);
    }
  }

  std::string address() const override { return address_; }
  bool is_closed() const { return closed_ || closing_; }

  asio::awaitable<void> run() {
    auto self = shared_from_this();
    beast::flat_buffer buffer;
    boost::system::error_code ec;
    // The hello first: it names the host's inventory, which must be this certificate's host.
    co_await ws_.async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    auto first = read_envelope(beast::buffers_to_string(buffer.data()));
    buffer.consume(buffer.size());
    Result<Hello> hello = first && first->type == "hello" ? hello_from_json(first->body)
                                                          : Result<Hello>(fail(ErrorCode::invalid_argument,
                                                                               "the first message must be a hello"));
    if (!hello) {
      close(hello.error().detail);
      co_return;
    }
    if (!*serving_) co_return;
    auto accepted = co_await hub_.hello(host_, self, std::move(*hello));
    if (!*serving_) co_return;
    if (!accepted) {
      spdlog::warn(R"({{"event":"agent_refused","host":"{}","address":"{}","why":{}}})", host_, address_,
                   json::serialize(json::value(json::string(accepted.error().detail))));
      close(accepted.error().detail);
      co_return;
    }
    while (!closed_) {
      co_await ws_.async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !*serving_) break;
      auto message = read_envelope(beast::buffers_to_string(buffer.data()));
      buffer.consume(buffer.size());
      if (!message) {
        spdlog::warn(R"({{"event":"agent_message_unreadable","host":"{}"}})", host_);
        continue;
      }
      hub_.receive(host_, this, std::move(*message));
    }
    closed_ = true;
    if (*serving_) hub_.closed(host_, this);
  }

 private:
  static asio::awaitable<void> write_all(std::shared_ptr<LinkSession> self) {
    boost::system::error_code ec;
    while (!self->queue_.empty() && !self->closed_) {
      std::string text = std::move(self->queue_.front());
      self->queue_.pop_front();
      self->ws_.text(true);
      co_await self->ws_.async_write(asio::buffer(text), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        self->closed_ = true;
        break;
      }
    }
    self->writing_ = false;
    if (self->closing_ && !self->closed_) {
      self->closed_ = true;
      co_await self->ws_.async_close(websocket::close_code::policy_error, asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  Ws ws_;
  std::string host_, address_;
  AgentHub& hub_;
  std::shared_ptr<bool> serving_;  // false once the listener stopped: the hub may be gone
  std::deque<std::string> queue_;
  bool writing_ = false, closing_ = false, closed_ = false;
};

struct LinkListener::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::any_io_executor loop, const config::Config& config, store::Store& store, const pki::CertificateAuthority& ca,
       AgentHub& hub)
      : loop(loop), config(config), store(store), ca(ca), hub(hub), acceptor(loop) {}

  asio::any_io_executor loop;
  const config::Config& config;
  store::Store& store;
  const pki::CertificateAuthority& ca;
  AgentHub& hub;
  ssl::context tls{ssl::context::tls_server};
  tcp::acceptor acceptor;
  std::shared_ptr<bool> serving = std::make_shared<bool>(true);
  std::chrono::milliseconds accept_pause{10};  // after a failed accept (no descriptors): doubles to 1 s
  std::set<std::weak_ptr<LinkSession>, std::owner_less<std::weak_ptr<LinkSession>>> sessions;

  asio::awaitable<void> accept_loop(std::shared_ptr<Impl> self) {
    while (*serving) {
      boost::system::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!*serving || ec == asio::error::operation_aborted) co_return;
        // Out of descriptors (or memory): the pending connection stays queued and every accept
        // fails at once, so retrying at once spins a core (88 % of one measured with 1,100
        // agents under a 1,024-descriptor limit). Wait, longer each time, as the API's server.
        const bool resource = ec == asio::error::no_descriptors ||
                              ec == boost::system::errc::too_many_files_open_in_system ||
                              ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
        if (!resource) continue;  // e.g. the peer reset before the accept: the next one is fine
        spdlog::warn(R"({{"event":"agent_accept_failed","error":"{}","retry_in_ms":{}}})", ec.message(),
                     accept_pause.count());
        asio::steady_timer pause(loop);
        pause.expires_after(accept_pause);
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        accept_pause = std::min<std::chrono::milliseconds>(accept_pause * 2, std::chrono::seconds(1));
        continue;
      }
      accept_pause = std::chrono::milliseconds(10);
      asio::co_spawn(loop, serve(self, std::move(socket)), asio::detached);
    }
  }

  template <class Body>
  static http::response<http::string_body> answer(const http::request<Body>& req, http::status status,
                                                  const json::object& body, bool problem = false) {
    http::response<http::string_body> res{status, req.version()};
    res.set(http::field::content_type, problem ? "application/problem+json" : "application/json");
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(false);
    res.body() = json::serialize(body);
    res.prepare_payload();
    return res;
  }
  template <class Body>
  static http::response<http::string_body> problem(const http::request<Body>& req, http::status status,
                                                   const std::string& detail) {
    return answer(req, status,
                  json::object{{"type", "about:blank"},
                               {"title", std::string(http::obsolete_reason(status))},
                               {"status", static_cast<int>(status)},
                               {"detail", detail}},
                  true);
  }
  static http::status status_of(const Error& e) {
    switch (e.code) {
      case ErrorCode::invalid_argument: return http::status::bad_request;
      case ErrorCode::unauthorized: return http::status::unauthorized;
      case ErrorCode::forbidden: return http::status::forbidden;
      case ErrorCode::conflict: return http::status::conflict;
      case ErrorCode::not_found: return http::status::not_found;
      default: return http::status::service_unavailable;
    }
  }

  // POST /v1/join: the token is redeemed, the request signed and the certificate recorded in
  // one transaction (a refused request leaves the token unused).
  asio::awaitable<http::response<http::string_body>> join(const http::request<http::string_body>& req) {
    auto body = agent::parse_message(req.body());
    const json::object* o = body ? body->if_object() : nullptr;
    const json::value* token = o ? o->if_contains("token") : nullptr;
    const json::value* csr = o ? o->if_contains("csr") : nullptr;
    if (!token || !token->is_string() || !csr || !csr->is_string())
      co_return problem(req, http::status::bad_request, "a join is {\"token\": string, \"csr\": PEM string}");
    // The in-process hosts as registered (the config's, or the one named after this machine).
    std::set<std::string> in_process = hub.in_process_hosts();
    // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
    auto joined_work = [token = std::string(token->as_string()), csr = std::string(csr->as_string()),
                                        in_process, this](store::Database& db) -> Result<pki::IssuedCertificate> {
      const std::int64_t now = unix_seconds();
      auto host = pki::redeem_join_token(db, token, now);
      if (!host) return fail(host.error());
      if (in_process.contains(*host))
        return fail(ErrorCode::conflict, "host " + *host + " is an in-process host of this control plane");
      auto issued = ca.sign_host_csr(csr, *host, config.agents.certificate_validity(), unix_seconds());
      if (!issued) return fail(issued.error());
      if (auto s = pki::record_host_certificate(db, *host, issued->serial, issued->not_after, now); !s)
        return fail(s.error());
      return issued;
    };
    auto joined = co_await store.write(std::move(joined_work));
    if (!joined) {
      spdlog::warn(R"({{"event":"agent_join_refused","why":{}}})",
                   json::serialize(json::value(json::string(joined.error().detail))));
      co_return problem(req, status_of(joined.error()), joined.error().detail);
    }
    auto who = pki::identity_of_pem(joined->certificate_pem);
    spdlog::info(R"({{"event":"agent_joined","host":"{}","serial":"{}"}})", who ? who->common_name : "?", joined->serial);
    co_return answer(req, http::status::created,
                     json::object{{"host", who ? who->common_name : ""},
                                  {"certificate", joined->certificate_pem},
                                  {"ca_certificate", ca.certificate_pem()},
                                  {"not_after", joined->not_after}});
  }

  // POST /v1/renew: a new certificate for the host the valid one names.
  asio::awaitable<http::response<http::string_body>> renew(const http::request<http::string_body>& req,
                                                           const pki::PeerIdentity& peer) {
    auto body = agent::parse_message(req.body());
    const json::object* o = body ? body->if_object() : nullptr;
    const json::value* csr = o ? o->if_contains("csr") : nullptr;
    if (!csr || !csr->is_string()) co_return problem(req, http::status::bad_request, "a renewal is {\"csr\": PEM string}");
    // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
    auto renewed_work = [peer, csr = std::string(csr->as_string()),
                                         this](store::Database& db) -> Result<pki::IssuedCertificate> {
      const std::int64_t now = unix_seconds();
      auto valid = pki::certificate_valid(db, peer.common_name, peer.serial, now);
      if (!valid) return fail(valid.error());
      if (!*valid) return fail(ErrorCode::forbidden, "this certificate is revoked or expired");
      auto issued = ca.sign_host_csr(csr, peer.common_name, config.agents.certificate_validity(), unix_seconds());
      if (!issued) return fail(issued.error());
      if (auto s = pki::record_host_certificate(db, peer.common_name, issued->serial, issued->not_after, now); !s)
        return fail(s.error());
      return issued;
    };
    auto renewed = co_await store.write(std::move(renewed_work));
    if (!renewed) co_return problem(req, status_of(renewed.error()), renewed.error().detail);
    spdlog::info(R"({{"event":"agent_certificate_renewed","host":"{}","serial":"{}"}})", peer.common_name,
                 renewed->serial);
    co_return answer(req, http::status::ok,
                     json::object{{"host", peer.common_name},
                                  {"certificate", renewed->certificate_pem},
                                  {"ca_certificate", ca.certificate_pem()},
                                  {"not_after", renewed->not_after}});
  }

  // A link lives only as long as its certificate: revoked (or expired) while connected, the
  // link is closed within kCertificateRecheck and the agent's next dial is refused.
  static asio::awaitable<void> watch_certificate(std::shared_ptr<Impl> self, std::weak_ptr<LinkSession> weak,
                                                 pki::PeerIdentity peer) {
    asio::steady_timer tick(self->loop);
    while (*self->serving) {
      tick.expires_after(kCertificateRecheck);
      boost::system::error_code ec;
      co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      auto session = weak.lock();
      if (!session || session->is_closed() || !*self->serving) co_return;
      session.reset();  // not held across the read
      auto check = [peer](store::Database& db) {
        return pki::certificate_valid(db, peer.common_name, peer.serial, unix_seconds());
      };
      auto valid = co_await self->store.read(std::move(check));
      if (!valid || *valid) continue;  // a failed read is no verdict
      if (auto s = weak.lock()) s->close("this host's certificate is revoked or expired");
      co_return;
    }
  }

  static asio::awaitable<void> serve(std::shared_ptr<Impl> self, tcp::socket socket) {
    boost::system::error_code ec;
    std::string address;
    if (auto remote = socket.remote_endpoint(ec); !ec) address = remote.address().to_string() + ":" + std::to_string(remote.port());
    // The link carries small messages (a heartbeat's ack, a command): each goes out at once
    // rather than waiting for the peer's delayed ACK of the one before (Nagle). Without this,
    // about 1 in 150 heartbeat acks took 40-90 ms (bench/agent_link.sh).
    socket.set_option(tcp::no_delay(true), ec);
    TlsStream stream(beast::tcp_stream(std::move(socket)), self->tls);
    stream.next_layer().expires_after(kHandshakeTimeout);
    co_await stream.async_handshake(ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    http::request<http::string_body> req = parser.release();
    // The certificate OpenSSL verified against the CA (none on a join).
    std::optional<pki::PeerIdentity> peer;
    if (X509* cert = SSL_get0_peer_certificate(stream.native_handle());
        cert && SSL_get_verify_result(stream.native_handle()) == X509_V_OK)
      if (auto id = pki::identity_of(cert)) peer = std::move(*id);
    const std::string target(req.target());
    http::response<http::string_body> res;
    if (target == "/v1/agent" && websocket::is_upgrade(req)) {
      if (!peer) {
        res = problem(req, http::status::unauthorized, "the link needs the host's certificate");
      } else {
        // Named: g++ 12 destroys a lambda temporary inside a co_await expression too early.
        auto valid_work = [peer = *peer](store::Database& db) {
          return pki::certificate_valid(db, peer.common_name, peer.serial, unix_seconds());
        };
        auto valid = co_await self->store.read(std::move(valid_work));
        if (!*self->serving) co_return;
        if (!valid || !*valid) {
          spdlog::warn(R"({{"event":"agent_link_refused","host":"{}","address":"{}","why":"certificate revoked or expired"}})",
                       peer->common_name, address);
          res = problem(req, http::status::forbidden, "this certificate is revoked or expired");
        } else {
          stream.next_layer().expires_never();
          Ws ws(std::move(stream));
          websocket::stream_base::timeout timeouts{};
          timeouts.handshake_timeout = kHandshakeTimeout;
          timeouts.idle_timeout = kLinkIdleTimeout;
          timeouts.keep_alive_pings = true;
          ws.set_option(timeouts);
          ws.read_message_max(16 << 20);
          co_await ws.async_accept(req, asio::redirect_error(asio::use_awaitable, ec));
          if (ec || !*self->serving) co_return;
          auto session = std::make_shared<LinkSession>(std::move(ws), peer->common_name, address, self->hub, self->serving);
          self->sessions.insert(session);
          asio::co_spawn(self->loop, watch_certificate(self, session, *peer), asio::detached);
          co_await session->run();
          self->sessions.erase(session);
          co_return;
        }
      }
    } else if (target == "/v1/join" && req.method() == http::verb::post) {
      res = co_await self->join(req);
    } else if (target == "/v1/renew" && req.method() == http::verb::post) {
      if (!peer) res = problem(req, http::status::unauthorized, "a renewal needs the host's certificate");
      else res = co_await self->renew(req, *peer);
    } else {
      res = problem(req, http::status::not_found, "no such agent endpoint");
    }
    if (!*self->serving) co_return;
    stream.next_layer().expires_after(kHandshakeTimeout);
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    co_await stream.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
  }
};

LinkListener::LinkListener(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                           const pki::CertificateAuthority& ca, AgentHub& hub)
    : impl_(std::make_shared<Impl>(loop, config, store, ca, hub)) {}

LinkListener::~LinkListener() { stop(); }

Result<tcp::endpoint> LinkListener::listen() {
  auto& i = *impl_;
  auto cert = i.ca.issue_server_certificate(i.config.agents.server_names, i.config.agents.certificate_validity(),
                                            unix_seconds());
  if (!cert) return fail(cert.error());
  boost::system::error_code ec;
  i.tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                    ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  // The chain ends with the CA itself, so a joining agent finds the certificate it pinned.
  const std::string chain = cert->certificate_pem + i.ca.certificate_pem();
  i.tls.use_certificate_chain(asio::buffer(chain), ec);
  if (!ec) i.tls.use_private_key(asio::buffer(cert->key_pem), ssl::context::pem, ec);
  if (!ec) i.tls.add_certificate_authority(asio::buffer(i.ca.certificate_pem()), ec);
  if (ec) return fail(ErrorCode::internal, "agents listener TLS: " + ec.message());
  // Client certificates are asked for and verified against the CA when sent; a join sends none.
  i.tls.set_verify_mode(ssl::verify_peer);
  SSL_CTX_set_verify_depth(i.tls.native_handle(), 1);
  // A socket per agent: the usual soft limit of 1,024 descriptors would stop near 1,000 agents
  // (less the API's clients, the store and the engine's connections). The hard limit is the
  // operator's; the soft one is lifted to it.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    const auto before = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) == 0)
      spdlog::info(R"({{"event":"open_files_limit_raised","from":{},"to":{}}})", static_cast<unsigned long long>(before),
                   static_cast<unsigned long long>(files.rlim_cur));
  }
  const std::string& listen = i.config.agents.listen;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return fail(ErrorCode::invalid_argument, "[agents] listen is not HOST:PORT");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto address = asio::ip::make_address(host, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "[agents] listen: " + host + " is not an IP address");
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    return fail(ErrorCode::invalid_argument, "[agents] listen: the port is not a number");
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  i.acceptor.open(endpoint.protocol(), ec);
  if (!ec) i.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) i.acceptor.bind(endpoint, ec);
  if (!ec) i.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(ErrorCode::unavailable, "[agents] listen " + listen + ": " + ec.message());
  return i.acceptor.local_endpoint();
}

void LinkListener::start() { asio::co_spawn(impl_->loop, impl_->accept_loop(impl_), asio::detached); }

void LinkListener::stop() {
  if (!*impl_->serving) return;
  *impl_->serving = false;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  for (const auto& weak : impl_->sessions)
    if (auto s = weak.lock()) s->close("the control plane is stopping");
}

std::size_t LinkListener::links() const { return impl_->sessions.size(); }

}  // namespace gpucloud::agentlink
