#include "billing/webhook_sender.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

namespace gpucloud::billing {

namespace net = boost::asio;

// Everything file-local sits in its own namespace: in a unity build this file shares a
// translation unit with the rest of billing/.
namespace webhook_detail {

namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

tl::unexpected<Error> url_error(std::string what) { return invalid("webhook_url: " + what); }

// "a loopback address (...)", for "127.0.0.1 is ..." and "localhost resolves to 127.0.0.1, ...".
std::string refused_kind_phrase(std::string_view kind) {
  return std::string(kind == "unspecified" ? "an " : "a ") + std::string(kind) +
         " address (webhook targets inside the operator's network are not allowed)";
}

// A label that is all digits (or 0x-hex) makes the resolver read the host as an IPv4 number
// ("127.1", "2130706433", "0x7f.1" all reach 127.0.0.1), which a name check would miss.
bool looks_numeric(std::string_view label) {
  if (label.size() >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X')) {
    return std::all_of(label.begin() + 2, label.end(),
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  }
  return !label.empty() && std::all_of(label.begin(), label.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

Result<std::string> check_host_name(std::string_view encoded) {
  std::string host;
  host.reserve(encoded.size());
  for (const char ch : encoded) {
    const auto c = static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(ch)));
    if (!(std::isalnum(c) || c == '-' || c == '.' || c == '_')) {
      return url_error("the host is not a valid host name");
    }
    host.push_back(static_cast<char>(c));
  }
  std::string_view name = host;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);  // the root, "example.com."
  if (name.empty() || name.size() > 253) return url_error("the host is not a valid host name");
  std::string_view last;
  for (std::string_view rest = name;;) {
    const auto dot = rest.find('.');
    const std::string_view label = rest.substr(0, dot);
    if (label.empty() || label.size() > 63) return url_error("the host is not a valid host name");
    last = label;
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  if (looks_numeric(last)) {
    return url_error("write an IPv4 address as four decimal numbers (a.b.c.d)");
  }
  return host;
}

}  // namespace

}  // namespace webhook_detail

std::string_view refused_address_kind(const net::ip::address& address) {
  if (address.is_v6()) {
    const auto v6 = address.to_v6();
    if (v6.is_v4_mapped()) return refused_address_kind(net::ip::make_address_v4(net::ip::v4_mapped, v6));
    const auto b = v6.to_bytes();
    // NAT64's well-known prefix, 64:ff9b::/96, carries an IPv4 address the gateway reaches.
    static constexpr std::array<unsigned char, 12> nat64{0, 0x64, 0xff, 0x9b};
    if (std::equal(nat64.begin(), nat64.end(), b.begin())) {
      return refused_address_kind(net::ip::address_v4({b[12], b[13], b[14], b[15]}));
    }
    if (v6.is_unspecified()) return "unspecified";
    if (v6.is_loopback()) return "loopback";
    if (v6.is_link_local()) return "link-local";
    if (v6.is_multicast()) return "multicast";
    if ((b[0] & 0xfe) == 0xfc || v6.is_site_local()) return "private";  // fc00::/7, fec0::/10
    // ::a.b.c.d (IPv4-compatible, deprecated): nothing public is reached that way.
    if (std::all_of(b.begin(), b.begin() + 12, [](unsigned char x) { return x == 0; })) {
      return "reserved";
    }
    return {};
  }
  const auto b = address.to_v4().to_bytes();
  if (b[0] == 0) return "unspecified";  // 0.0.0.0/8: Linux connects 0.0.0.0 to the host itself
  if (b[0] == 127) return "loopback";
  if (b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168)) {
    return "private";
  }
  if (b[0] == 169 && b[1] == 254) return "link-local";
  if (b[0] == 100 && (b[1] & 0xc0) == 64) return "shared (CGNAT)";
  if ((b[0] & 0xf0) == 224) return "multicast";
  if (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255) return "broadcast";
  if ((b[0] & 0xf0) == 240) return "reserved";
  if (b[0] == 198 && (b[1] & 0xfe) == 18) return "reserved";  // 198.18/15, benchmarking
  return {};
}

Result<WebhookUrl> parse_webhook_url(std::string_view url, bool allow_private) {
  // The scheme and authority are split here rather than by Boost.URL: 1.81's parse_uri ends
  // the authority at the first character it rejects and takes the rest as a path
  // ("http://h:80x/" is port 80, path "x/"; "http://1.2.3.4.example/" is 1.2.3.4).
  using webhook_detail::url_error;
  if (url.empty()) return url_error("is empty");
  if (url.size() > kMaxWebhookUrlLength) {
    return url_error("longer than " + std::to_string(kMaxWebhookUrlLength) + " characters");
  }
  if (std::any_of(url.begin(), url.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u >= 0x7f;
      })) {
    return url_error("has spaces, control or non-ASCII characters (percent-encode them)");
  }

  const auto colon = url.find(':');
  const std::string_view scheme = url.substr(0, colon);
  const bool scheme_ok =
      colon != std::string_view::npos && !scheme.empty() &&
      std::isalpha(static_cast<unsigned char>(scheme[0])) &&
      std::all_of(scheme.begin(), scheme.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
      });
  if (!scheme_ok) return url_error("not an absolute URL (http://host[:port]/path)");
  const auto scheme_is = [&](std::string_view name) {
    return scheme.size() == name.size() &&
           std::equal(scheme.begin(), scheme.end(), name.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  };
  const bool tls = scheme_is("https");
  if (!tls && !scheme_is("http")) return url_error("the scheme must be http or https");
  std::string_view rest = url.substr(colon + 1);
  if (rest.substr(0, 2) != "//") return url_error("has no host");
  rest.remove_prefix(2);
  std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  const std::string_view remainder = rest.substr(authority.size());
  // Credentials in a URL end up in logs and proxies; a webhook secret belongs in the path.
  if (authority.find('@') != std::string_view::npos) {
    return url_error("must not contain a user name or password");
  }

  std::string_view host = authority;
  std::string_view port;
  bool bracketed = false;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return url_error("an IPv6 address needs its closing ]");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') return url_error("not a valid URL");
    if (!after.empty()) port = after.substr(1);
    bracketed = true;
  } else if (const auto last = authority.rfind(':'); last != std::string_view::npos) {
    host = authority.substr(0, last);
    port = authority.substr(last + 1);
  }
  if (host.empty()) return url_error("has no host");

  WebhookUrl out;
  out.tls = tls;
  out.port = tls ? 443 : 80;
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return url_error("the port must be between 1 and 65535");
    }
    const unsigned long number = std::stoul(std::string(port));
    if (number == 0 || number > 65535) return url_error("the port must be between 1 and 65535");
    out.port = static_cast<std::uint16_t>(number);
  }

  boost::system::error_code ec;
  net::ip::address address;
  if (bracketed) {
    // asio would take a zone ("fe80::1%eth0"); a URL's zone is not ours to pick.
    if (host.find('%') == std::string_view::npos) address = net::ip::make_address_v6(host, ec);
    if (host.find('%') != std::string_view::npos || ec) {
      return url_error("the host is not a valid IPv6 address");
    }
  } else {
    address = net::ip::make_address_v4(host, ec);  // inet_pton: four decimal numbers only
  }
  if (bracketed || !ec) {
    if (!allow_private) {
      if (const auto kind = refused_address_kind(address); !kind.empty()) {
        return url_error(address.to_string() + " is " + webhook_detail::refused_kind_phrase(kind));
      }
    }
    out.host = address.to_string();
    out.literal_address = true;
  } else {
    if (host.find(':') != std::string_view::npos) return url_error("not a valid URL");
    auto name = webhook_detail::check_host_name(host);
    if (!name) return fail(std::move(name.error()));
    out.host = std::move(*name);
  }

  // Path and query as sent (a fragment never is), checked as a request target.
  std::string_view target = remainder.substr(0, remainder.find('#'));
  out.target = target.empty() || target[0] != '/' ? "/" + std::string(target) : std::string(target);
  if (!boost::urls::parse_origin_form(out.target)) {
    return url_error("the path or query has characters that must be percent-encoded");
  }
  return out;
}

namespace webhook_detail {

// One accepted delivery, from deliver() to its last attempt.
struct Delivery {
  std::uint64_t id = 0;
  WebhookUrl url;
  std::string body;
  WebhookSender::Done done;
  int attempts = 0;                           // started so far
  std::unique_ptr<net::steady_timer> retry;   // while waiting to be retried
};

// The I/O objects of one attempt, shared by its coroutine and the deadline that cuts it off.
struct Attempt {
  explicit Attempt(const net::any_io_executor& executor)
      : resolver(executor), plain(executor), deadline(executor) {}
  tcp::socket& socket() { return tls ? tls->next_layer() : plain; }
  void abort_io() {
    boost::system::error_code ignored;
    resolver.cancel();
    socket().close(ignored);
  }
  tcp::resolver resolver;
  tcp::socket plain;                                  // http
  std::optional<net::ssl::stream<tcp::socket>> tls;  // https: the socket is its next layer
  net::steady_timer deadline;
  bool timed_out = false;
};

struct Outcome {
  enum class Kind { delivered, retry, final, stopped };
  Kind kind = Kind::final;
  std::string why;
  std::chrono::milliseconds retry_after{0};  // the receiver's Retry-After, if it gave one
};

struct InFlight {
  std::shared_ptr<Delivery> delivery;
  std::shared_ptr<Attempt> attempt;
};

struct SenderState {
  net::any_io_executor executor;
  bool allow_private = false;
  WebhookSender::Options options;
  std::unique_ptr<net::ssl::context> tls_context;  // null if it could not be made
  std::string tls_error;                           // why not
  bool stopped = false;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, std::shared_ptr<Delivery>> waiting;  // by id: oldest first
  std::set<std::uint64_t> ready;                               // waiting ones free to start
  std::map<std::uint64_t, InFlight> in_flight;
};

namespace {

using State = SenderState;

std::string target_name(const WebhookUrl& url) {
  // Only host and port in logs: the path and query may carry the receiver's secret.
  const bool v6 = url.literal_address && url.host.find(':') != std::string::npos;
  return (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

std::string host_header(const WebhookUrl& url) {
  const bool v6 = url.literal_address && url.host.find(':') != std::string::npos;
  std::string host = v6 ? "[" + url.host + "]" : url.host;
  if (url.port != (url.tls ? 443 : 80)) host += ":" + std::to_string(url.port);
  return host;
}

// One client context for every https attempt: the system's CA store plus extra_ca_pem,
// TLS 1.2 at least, peers verified (the name is checked per connection).
std::unique_ptr<net::ssl::context> make_tls_context(const std::string& extra_ca_pem,
                                                    std::string& error) {
  std::unique_ptr<net::ssl::context> context;
  try {
    context = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(net::ssl::verify_peer);
  boost::system::error_code ec;
  context->set_default_verify_paths(ec);
  if (ec) spdlog::warn(R"({{"event":"webhook_tls_no_system_cas","why":"{}"}})", ec.message());
  if (!extra_ca_pem.empty()) {
    context->add_certificate_authority(net::buffer(extra_ca_pem), ec);
    if (ec) {
      error = "extra_ca_pem: " + ec.message();
      return nullptr;
    }
  }
  return context;
}

void call_done(WebhookSender::Done& done, bool delivered, std::string why) {
  if (!done) return;
  try {
    done(delivered, std::move(why));
  } catch (const std::exception& e) {
    // The caller's callback must not take the event loop down with it.
    spdlog::error(R"({{"event":"webhook_done_threw","what":"{}"}})", e.what());
  }
}

// `done` for a delivery that never got an attempt: later on the loop, not inside deliver(),
// and not at all once the sender has stopped.
void post_done(const std::shared_ptr<State>& state, WebhookSender::Done done, std::string why) {
  if (!done) return;
  net::post(state->executor, [weak = std::weak_ptr<State>(state), done = std::move(done),
                              why = std::move(why)]() mutable {
    const auto alive = weak.lock();
    if (alive && !alive->stopped) call_done(done, false, std::move(why));
  });
}

void pump(const std::shared_ptr<State>& state);

// Puts a delivery (new, or back for a retry) among the waiting ones, dropping the oldest
// waiting delivery when there are more than max_queued.
void admit(const std::shared_ptr<State>& state, std::shared_ptr<Delivery> delivery) {
  state->waiting.emplace(delivery->id, std::move(delivery));
  while (state->waiting.size() > state->options.max_queued) {
    auto oldest = state->waiting.begin();
    auto dropped = std::move(oldest->second);
    state->waiting.erase(oldest);
    state->ready.erase(dropped->id);
    if (dropped->retry) dropped->retry->cancel();
    spdlog::warn(R"({{"event":"webhook_dropped","target":"{}","queued":{}}})",
                 target_name(dropped->url), state->options.max_queued);
    post_done(state, std::move(dropped->done),
              "dropped: more than " + std::to_string(state->options.max_queued) +
                  " webhook deliveries were waiting");
  }
}

std::chrono::milliseconds backoff(const WebhookSender::Options& options, int failed_attempts,
                                  std::chrono::milliseconds retry_after) {
  auto delay = options.first_backoff;
  for (int i = 1; i < failed_attempts && delay < options.max_backoff; ++i) delay *= 2;
  delay = std::max(delay, retry_after);
  return std::min(delay, options.max_backoff);
}

std::chrono::milliseconds parse_retry_after(std::string_view value) {
  // Only delta-seconds; an HTTP date is ignored (the exponential backoff applies).
  if (value.empty() || value.size() > 9 ||
      !std::all_of(value.begin(), value.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return std::chrono::milliseconds{0};
  }
  return std::chrono::seconds(std::stol(std::string(value)));
}

Outcome transport_failure(const Attempt& attempt, std::string_view step,
                          const boost::system::error_code& ec) {
  if (attempt.timed_out) return {Outcome::Kind::retry, "timed out " + std::string(step), {}};
  return {Outcome::Kind::retry, std::string(step) + ": " + ec.message(), {}};
}

template <class Stream>
net::awaitable<Outcome> exchange(Stream& stream, std::shared_ptr<State> state,
                                 std::shared_ptr<Delivery> delivery,
                                 std::shared_ptr<Attempt> attempt);

// One attempt: resolve, check every address, connect to a checked one, POST, read the
// status line. Cut off as a whole by attempt->deadline.
net::awaitable<Outcome> run_attempt(std::shared_ptr<State> state,
                                    std::shared_ptr<Delivery> delivery,
                                    std::shared_ptr<Attempt> attempt) {
  const WebhookUrl& url = delivery->url;
  attempt->deadline.expires_after(state->options.timeout);
  attempt->deadline.async_wait([weak = std::weak_ptr<Attempt>(attempt)](boost::system::error_code ec) {
    if (ec) return;
    if (auto alive = weak.lock()) {
      alive->timed_out = true;
      alive->abort_io();
    }
  });

  boost::system::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  if (url.literal_address) {
    endpoints.emplace_back(net::ip::make_address(url.host, ec), url.port);
    if (ec) co_return Outcome{Outcome::Kind::final, "webhook_url: the host is not a valid IP address", {}};
  } else {
    const std::string service = std::to_string(url.port);
    const auto flags = tcp::resolver::numeric_service;
    auto results = co_await attempt->resolver.async_resolve(url.host, service, flags,
                                                            net::redirect_error(net::use_awaitable, ec));
    if (state->stopped) co_return Outcome{Outcome::Kind::stopped, {}, {}};
    if (ec || results.empty()) co_return transport_failure(*attempt, "resolving " + url.host, ec);
    for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  }
  if (!state->allow_private) {
    // Any refused address refuses the host: which one a connect would use is not ours to pick.
    for (const auto& endpoint : endpoints) {
      if (const auto kind = refused_address_kind(endpoint.address()); !kind.empty()) {
        co_return Outcome{Outcome::Kind::final,
                          "webhook_url: " + url.host + " resolves to " +
                              endpoint.address().to_string() + ", " + refused_kind_phrase(kind),
                          {}};
      }
    }
  }

  if (url.tls) {
    if (!state->tls_context) {
      co_return Outcome{Outcome::Kind::final, "https is unavailable: " + state->tls_error, {}};
    }
    attempt->tls.emplace(state->executor, *state->tls_context);
  }
  bool connected = false;
  for (const auto& endpoint : endpoints) {
    boost::system::error_code ignored;
    attempt->socket().close(ignored);
    co_await attempt->socket().async_connect(endpoint, net::redirect_error(net::use_awaitable, ec));
    if (state->stopped) co_return Outcome{Outcome::Kind::stopped, {}, {}};
    if (!ec) {
      connected = true;
      break;
    }
    if (attempt->timed_out) break;
  }
  if (!connected) co_return transport_failure(*attempt, "connecting", ec);
  if (!url.tls) co_return co_await exchange(attempt->plain, state, delivery, attempt);

  auto& stream = *attempt->tls;
  std::string name = url.host;  // the name the certificate must carry, without a root dot
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (!url.literal_address) SSL_set_tlsext_host_name(stream.native_handle(), name.c_str());
  stream.set_verify_callback(net::ssl::host_name_verification(name));
  const auto role = net::ssl::stream_base::client;
  co_await stream.async_handshake(role, net::redirect_error(net::use_awaitable, ec));
  if (state->stopped) co_return Outcome{Outcome::Kind::stopped, {}, {}};
  if (ec) co_return transport_failure(*attempt, "TLS handshake", ec);
  co_return co_await exchange(stream, state, delivery, attempt);
}

// The request and the answer's status line, on a connected (and for https, handshaken)
// stream; no TLS close_notify: the status is all that is wanted, and the socket closes.
template <class Stream>
net::awaitable<Outcome> exchange(Stream& stream, std::shared_ptr<State> state,
                                 std::shared_ptr<Delivery> delivery,
                                 std::shared_ptr<Attempt> attempt) {
  const WebhookUrl& url = delivery->url;
  boost::system::error_code ec;
  http::request<http::string_body> request{http::verb::post, url.target, 11};
  request.set(http::field::host, host_header(url));
  request.set(http::field::user_agent, "gpucloud-webhook/1");
  request.set(http::field::content_type, "application/json");
  request.set(http::field::connection, "close");
  request.body() = delivery->body;
  request.prepare_payload();
  co_await http::async_write(stream, request, net::redirect_error(net::use_awaitable, ec));
  if (state->stopped) co_return Outcome{Outcome::Kind::stopped, {}, {}};
  if (ec) co_return transport_failure(*attempt, "sending", ec);

  // The status line decides; the answer's body is never read.
  boost::beast::flat_buffer buffer;
  http::response_parser<http::empty_body> parser;
  co_await http::async_read_header(stream, buffer, parser,
                                   net::redirect_error(net::use_awaitable, ec));
  if (state->stopped) co_return Outcome{Outcome::Kind::stopped, {}, {}};
  attempt->deadline.cancel();
  if (ec) co_return transport_failure(*attempt, "reading the answer", ec);
  boost::system::error_code ignored;
  attempt->socket().shutdown(tcp::socket::shutdown_both, ignored);
  attempt->socket().close(ignored);

  const unsigned status = parser.get().result_int();
  std::string why = "HTTP " + std::to_string(status);
  if (status >= 200 && status < 300) co_return Outcome{Outcome::Kind::delivered, why, {}};
  if (status >= 300 && status < 400) {
    co_return Outcome{Outcome::Kind::final, why + " (redirects are not followed)", {}};
  }
  if (status == 429 || (status >= 500 && status < 600)) {
    co_return Outcome{Outcome::Kind::retry, why,
                      parse_retry_after(parser.get()[http::field::retry_after])};
  }
  co_return Outcome{Outcome::Kind::final, why, {}};
}

void schedule_retry(const std::shared_ptr<State>& state, std::shared_ptr<Delivery> delivery,
                    std::chrono::milliseconds delay) {
  delivery->retry = std::make_unique<net::steady_timer>(state->executor, delay);
  delivery->retry->async_wait(
      [weak = std::weak_ptr<State>(state), id = delivery->id](boost::system::error_code ec) {
        if (ec) return;
        const auto alive = weak.lock();
        if (!alive || alive->stopped) return;
        const auto it = alive->waiting.find(id);
        if (it == alive->waiting.end()) return;  // dropped meanwhile
        it->second->retry.reset();
        alive->ready.insert(id);
        pump(alive);
      });
  admit(state, std::move(delivery));
}

void finish_attempt(const std::shared_ptr<State>& state, const std::shared_ptr<Delivery>& delivery,
                    Outcome outcome) {
  if (state->stopped || outcome.kind == Outcome::Kind::stopped) return;
  state->in_flight.erase(delivery->id);
  const auto& options = state->options;
  const std::string target = target_name(delivery->url);
  if (outcome.kind == Outcome::Kind::delivered) {
    spdlog::info(R"({{"event":"webhook_delivered","target":"{}","attempts":{},"status":"{}"}})",
                 target, delivery->attempts, outcome.why);
    call_done(delivery->done, true, std::move(outcome.why));
  } else if (outcome.kind == Outcome::Kind::retry && delivery->attempts < options.max_attempts) {
    const auto delay = backoff(options, delivery->attempts, outcome.retry_after);
    spdlog::warn(R"({{"event":"webhook_retry","target":"{}","attempts":{},"why":"{}","retry_in_ms":{}}})",
                 target, delivery->attempts, outcome.why, delay.count());
    schedule_retry(state, delivery, delay);
  } else {
    std::string why = std::move(outcome.why);
    if (delivery->attempts > 1) why += " (after " + std::to_string(delivery->attempts) + " attempts)";
    spdlog::warn(R"({{"event":"webhook_failed","target":"{}","attempts":{},"why":"{}"}})", target,
                 delivery->attempts, why);
    call_done(delivery->done, false, std::move(why));
  }
  pump(state);
}

// Starts attempts for ready deliveries, oldest first, while slots are free.
void pump(const std::shared_ptr<State>& state) {
  while (!state->stopped && !state->ready.empty() &&
         state->in_flight.size() < state->options.max_in_flight) {
    const std::uint64_t id = *state->ready.begin();
    state->ready.erase(state->ready.begin());
    const auto it = state->waiting.find(id);
    if (it == state->waiting.end()) continue;
    auto delivery = std::move(it->second);
    state->waiting.erase(it);
    auto attempt = std::make_shared<Attempt>(state->executor);
    state->in_flight.emplace(id, InFlight{delivery, attempt});
    ++delivery->attempts;
    net::co_spawn(state->executor, run_attempt(state, delivery, attempt),
                  [state, delivery](std::exception_ptr error, Outcome outcome) {
                    if (error) {
                      // Nothing in run_attempt throws by design (errors are values); if
                      // something does (bad_alloc), fail this delivery, keep the loop.
                      outcome = Outcome{Outcome::Kind::final, "internal error", {}};
                    }
                    finish_attempt(state, delivery, std::move(outcome));
                  });
  }
}

}  // namespace

}  // namespace webhook_detail

WebhookSender::WebhookSender(net::any_io_executor executor, bool allow_private)
    : WebhookSender(std::move(executor), allow_private, Options{}) {}

WebhookSender::WebhookSender(net::any_io_executor executor, bool allow_private, Options options)
    : state_(std::make_shared<webhook_detail::SenderState>()) {
  state_->executor = std::move(executor);
  state_->allow_private = allow_private;
  state_->options = options;
  state_->options.max_attempts = std::max(state_->options.max_attempts, 1);
  state_->options.max_in_flight = std::max<std::size_t>(state_->options.max_in_flight, 1);
  state_->tls_context =
      webhook_detail::make_tls_context(state_->options.extra_ca_pem, state_->tls_error);
  if (!state_->tls_context) {
    spdlog::error(R"({{"event":"webhook_tls_unavailable","why":"{}"}})", state_->tls_error);
  }
}

WebhookSender::~WebhookSender() { stop(); }

void WebhookSender::deliver(std::string url, std::string json_body, Done done) {
  if (state_->stopped) return;
  auto parsed = parse_webhook_url(url, state_->allow_private);
  if (!parsed) {
    spdlog::warn(R"({{"event":"webhook_refused","why":"{}"}})", parsed.error().detail);
    webhook_detail::post_done(state_, std::move(done), std::move(parsed.error().detail));
    return;
  }
  auto delivery = std::make_shared<webhook_detail::Delivery>();
  delivery->id = state_->next_id++;
  delivery->url = std::move(*parsed);
  delivery->body = std::move(json_body);
  delivery->done = std::move(done);
  const std::uint64_t id = delivery->id;
  webhook_detail::admit(state_, std::move(delivery));
  if (state_->waiting.count(id) != 0) state_->ready.insert(id);
  webhook_detail::pump(state_);
}

std::size_t WebhookSender::pending() const {
  return state_->waiting.size() + state_->in_flight.size();
}

std::size_t WebhookSender::in_flight() const { return state_->in_flight.size(); }

void WebhookSender::stop() {
  auto& state = *state_;
  if (state.stopped) return;
  state.stopped = true;
  for (auto& [id, delivery] : state.waiting) {
    if (delivery->retry) delivery->retry->cancel();
  }
  for (auto& [id, flight] : state.in_flight) {
    flight.delivery->done = nullptr;
    flight.attempt->deadline.cancel();
    flight.attempt->abort_io();
  }
  // The callbacks (and whatever they hold) go now; attempts still unwinding keep only their
  // own objects and the state, which says stopped.
  state.waiting.clear();
  state.ready.clear();
  state.in_flight.clear();
}

}  // namespace gpucloud::billing
