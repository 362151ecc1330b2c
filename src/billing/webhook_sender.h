#pragma once
// Webhook delivery for balance alerts: one JSON POST per alert, retried with backoff, on the
// event loop and never blocking it. A webhook URL is chosen by a user but fetched by the
// daemon, so targets inside the operator's network (loopback, link-local, private, CGNAT,
// multicast) are refused unless `[alerts] allow_private_webhook_targets` is set: both when
// the URL is a literal address and for every address its host resolves to. The checked
// address is the one connected to (no second lookup a rebinding DNS server could answer
// differently), and redirects are never followed (a 3xx could point anywhere). https:// is
// verified against the system's CA store (and Options::extra_ca_pem) and the URL's host.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>

#include "core/result.h"

namespace gpucloud::billing {

namespace webhook_detail {
struct SenderState;
}

struct WebhookUrl {
  std::string host;         // lower-cased name, or a literal address (IPv6 without brackets)
  std::uint16_t port = 80;  // the URL's, else the scheme's default (80, 443)
  std::string target;       // path and query as written ("/" when empty); no fragment
  bool literal_address = false;  // host is an IP literal, not a name to resolve
  bool tls = false;              // https
};

inline constexpr std::size_t kMaxWebhookUrlLength = 2048;

// Checks a webhook URL as `PUT /billing/alert` receives it and as the sender uses it.
// Errors: invalid_argument, detail starting "webhook_url: ".
Result<WebhookUrl> parse_webhook_url(std::string_view url, bool allow_private);

// Why `address` may not be a webhook target without allow_private ("loopback", "private",
// "link-local", "unspecified", "shared (CGNAT)", "multicast", "broadcast", "reserved"), or
// empty when it may. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
std::string_view refused_address_kind(const boost::asio::ip::address& address);

// Delivers webhooks on one executor (the daemon's event loop). Every member function must
// be called on that executor's thread; `done` is called there too, never from inside
// deliver(). After stop() (or the destructor) nothing more is sent and no `done` is called,
// so a caller need not keep anything alive for the sender past stop(). The constructor loads
// the system's CA certificates for https (tens of milliseconds): make one sender at start-up.
class WebhookSender {
 public:
  struct Options {
    std::chrono::milliseconds timeout{5'000};  // one attempt: resolve, connect, TLS, write, read
    int max_attempts = 8;
    std::chrono::milliseconds first_backoff{2'000};  // doubled after each failed attempt
    std::chrono::milliseconds max_backoff{300'000};
    std::size_t max_queued = 1'000;  // waiting (for a slot or a retry); past it the oldest goes
    std::size_t max_in_flight = 8;
    // PEM certificates trusted for https besides the system's (a private CA; tests).
    std::string extra_ca_pem;
  };
  // delivered: a 2xx answer. why: "HTTP 204", or what went wrong ("HTTP 503 (after 8
  // attempts)", "timed out connecting", "dropped: ...", a "webhook_url: ..." refusal).
  using Done = std::function<void(bool delivered, std::string why)>;

  WebhookSender(boost::asio::any_io_executor executor, bool allow_private);
  WebhookSender(boost::asio::any_io_executor executor, bool allow_private, Options options);
  ~WebhookSender();  // stop()
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Queues one POST of `json_body` to `url` and returns at once. A URL parse_webhook_url
  // refuses, or a host that resolves to a refused address, fails without a retry; so does a
  // 3xx (not followed) or a 4xx other than 429. Connection errors, timeouts, 429 and 5xx are
  // retried with exponential backoff (steady clock) up to max_attempts.
  void deliver(std::string url, std::string json_body, Done done = {});

  // Deliveries accepted and not finished: waiting for a slot, for a retry, or in flight.
  std::size_t pending() const;
  std::size_t in_flight() const;

  // Cancels retry timers and in-flight attempts and forgets every queued delivery.
  // Idempotent; completions still queued on the loop find the shared state marked stopped.
  void stop();

 private:
  // Shared with the attempts under way, so their completions never touch a destroyed sender.
  std::shared_ptr<webhook_detail::SenderState> state_;
};

}  // namespace gpucloud::billing
