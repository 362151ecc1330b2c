#include "billing/webhook_sender.h"

#include <algorithm>
#include <cctype>
#include <array>
#include <utility>

#include <boost/url/parse.hpp>

namespace gpucloud::billing {

namespace net = boost::asio;

// Everything file-local sits in its own namespace: in a unity build this file shares a
// translation unit with the rest of billing/.
namespace webhook_detail {

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
  if (scheme_is("https")) return url_error("https is not supported yet; only http:// URLs are");
  if (!scheme_is("http")) return url_error("the scheme must be http");
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

}  // namespace gpucloud::billing
