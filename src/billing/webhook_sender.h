#pragma once
// Webhook targets for balance alerts. A webhook URL is chosen by a user but fetched by the
// daemon, so targets inside the operator's network (loopback, link-local, private, CGNAT,
// multicast) are refused unless `[alerts] allow_private_webhook_targets` is set: here when
// the URL is a literal address.
//
// Only http:// for now; https:// is refused with a message saying so.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/ip/address.hpp>

#include "core/result.h"

namespace gpucloud::billing {

struct WebhookUrl {
  std::string host;         // lower-cased name, or a literal address (IPv6 without brackets)
  std::uint16_t port = 80;  // the URL's, else the scheme's default
  std::string target;       // path and query as written ("/" when empty); no fragment
  bool literal_address = false;  // host is an IP literal, not a name to resolve
};

inline constexpr std::size_t kMaxWebhookUrlLength = 2048;

// Checks a webhook URL as `PUT /billing/alert` receives it and as the sender uses it.
// Errors: invalid_argument, detail starting "webhook_url: ".
Result<WebhookUrl> parse_webhook_url(std::string_view url, bool allow_private);

// Why `address` may not be a webhook target without allow_private ("loopback", "private",
// "link-local", "unspecified", "shared (CGNAT)", "multicast", "broadcast", "reserved"), or
// empty when it may. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
std::string_view refused_address_kind(const boost::asio::ip::address& address);

}  // namespace gpucloud::billing
