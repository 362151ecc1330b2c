// Webhook URLs: every refused range, literals, ports, schemes.
#include "billing/webhook_sender.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/address.hpp>

namespace gpucloud::billing {
namespace webhook_test {
namespace {

namespace net = boost::asio;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- parse_webhook_url ----

void expect_refused(std::string_view url, bool allow_private, std::string_view says) {
  auto parsed = parse_webhook_url(url, allow_private);
  ASSERT_FALSE(parsed) << url << " was accepted";
  EXPECT_EQ(parsed.error().code, ErrorCode::invalid_argument) << url;
  EXPECT_THAT(parsed.error().detail, StartsWith("webhook_url: ")) << url;
  EXPECT_THAT(parsed.error().detail, HasSubstr(std::string(says))) << url;
}

TEST(WebhookUrlTest, TakesHostPortAndPathWithQuery) {
  auto url = parse_webhook_url("http://Hooks.Example.COM:8080/alerts/x?token=a%20b&y=1#frag", false);
  ASSERT_TRUE(url) << url.error().detail;
  EXPECT_EQ(url->host, "hooks.example.com");
  EXPECT_EQ(url->port, 8080);
  EXPECT_EQ(url->target, "/alerts/x?token=a%20b&y=1");
  EXPECT_FALSE(url->literal_address);

  auto bare = parse_webhook_url("HTTP://example.com", false);
  ASSERT_TRUE(bare) << bare.error().detail;
  EXPECT_EQ(bare->port, 80);
  EXPECT_EQ(bare->target, "/");

  auto query_only = parse_webhook_url("http://example.com?a=1", false);
  ASSERT_TRUE(query_only);
  EXPECT_EQ(query_only->target, "/?a=1");

  auto public_v4 = parse_webhook_url("http://93.184.216.34/h", false);
  ASSERT_TRUE(public_v4);
  EXPECT_TRUE(public_v4->literal_address);
  EXPECT_EQ(public_v4->host, "93.184.216.34");
}

TEST(WebhookUrlTest, TakesIpv6LiteralsInBrackets) {
  auto url = parse_webhook_url("http://[2001:DB8::1]:8443/p", false);
  ASSERT_TRUE(url) << url.error().detail;
  EXPECT_EQ(url->host, "2001:db8::1");
  EXPECT_EQ(url->port, 8443);
  EXPECT_TRUE(url->literal_address);
  EXPECT_EQ(url->target, "/p");

  auto loopback = parse_webhook_url("http://[::1]:9/", true);
  ASSERT_TRUE(loopback) << loopback.error().detail;
  EXPECT_EQ(loopback->host, "::1");

  expect_refused("http://2001:db8::1/", false, "");  // unbracketed
  expect_refused("http://[fe80::1%25eth0]/", true, "");  // zone ids are not supported
  expect_refused("http://[v1.abc]/", true, "");
}

TEST(WebhookUrlTest, Ports) {
  EXPECT_EQ(parse_webhook_url("http://example.com:1/", false)->port, 1);
  EXPECT_EQ(parse_webhook_url("http://example.com:65535/", false)->port, 65535);
  EXPECT_EQ(parse_webhook_url("http://example.com:0080/", false)->port, 80);
  EXPECT_EQ(parse_webhook_url("http://example.com:/", false)->port, 80);
  expect_refused("http://example.com:0/", false, "port");
  expect_refused("http://example.com:65536/", false, "port");
  expect_refused("http://example.com:99999999999/", false, "port");
  expect_refused("http://example.com:8a/", false, "");
  expect_refused("http://example.com:80x/path", false, "port");
  expect_refused("http://example.com:1:2/", false, "not a valid URL");
}

TEST(WebhookUrlTest, RefusesOtherSchemesAndUserinfo) {
  expect_refused("https://example.com/", false, "only http:// URLs");
  expect_refused("ftp://example.com/", false, "scheme must be http");
  expect_refused("file:///etc/passwd", false, "");
  expect_refused("gopher://example.com/", true, "scheme must be http");
  expect_refused("mailto:a@example.com", false, "");
  expect_refused("http://user@example.com/", false, "user name or password");
  expect_refused("http://user:secret@example.com/", false, "user name or password");
  expect_refused("http://@example.com/", false, "user name or password");
}

TEST(WebhookUrlTest, RefusesMalformedUrls) {
  expect_refused("", false, "empty");
  expect_refused("example.com/hook", false, "");
  expect_refused("//example.com/hook", false, "");
  expect_refused("http:/example.com", false, "no host");
  expect_refused("http://", false, "");
  expect_refused("http:///hook", false, "no host");
  expect_refused("http://exa mple.com/", false, "");
  expect_refused("http://example.com/a b", false, "spaces");
  expect_refused("http://example.com/\r\nX-Injected: 1", false, "control");
  expect_refused("http://example.com/caf\xc3\xa9", false, "non-ASCII");
  expect_refused("http://example.com/a|b", false, "percent-encoded");
  expect_refused("http://example.com/%zz", false, "percent-encoded");
  expect_refused("http://[::1/", true, "closing ]");
  expect_refused("http://[::1]x/", true, "not a valid URL");
  expect_refused("http://ex%41mple.com/", false, "host name");
  expect_refused("http://a..b/", false, "host name");
  expect_refused("http://exa!mple.com/", false, "host name");
  expect_refused("http://" + std::string(64, 'a') + ".com/", false, "host name");
  EXPECT_TRUE(parse_webhook_url("http://" + std::string(63, 'a') + ".com./", false));
}

TEST(WebhookUrlTest, LengthLimitIs2048) {
  const std::string prefix = "http://example.com/";
  const std::string longest = prefix + std::string(kMaxWebhookUrlLength - prefix.size(), 'a');
  ASSERT_EQ(longest.size(), 2048u);
  EXPECT_TRUE(parse_webhook_url(longest, false));
  expect_refused(longest + "a", false, "longer than 2048");
}

TEST(WebhookUrlTest, RefusesEveryPrivateRangeUnlessAllowed) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"127.0.0.1", "loopback"},        {"127.255.255.254", "loopback"},
      {"0.0.0.0", "unspecified"},       {"0.1.2.3", "unspecified"},
      {"10.0.0.1", "private"},          {"10.255.255.255", "private"},
      {"172.16.0.1", "private"},        {"172.31.255.255", "private"},
      {"192.168.0.1", "private"},       {"192.168.255.255", "private"},
      {"169.254.169.254", "link-local"}, {"169.254.0.1", "link-local"},
      {"100.64.0.1", "CGNAT"},          {"100.127.255.255", "CGNAT"},
      {"224.0.0.1", "multicast"},       {"239.255.255.255", "multicast"},
      {"255.255.255.255", "broadcast"}, {"240.0.0.1", "reserved"},
      {"198.18.0.1", "reserved"},
      {"[::1]", "loopback"},            {"[::]", "unspecified"},
      {"[fe80::1]", "link-local"},      {"[febf:ffff::1]", "link-local"},
      {"[fc00::1]", "private"},         {"[fd12:3456:789a::1]", "private"},
      {"[fec0::1]", "private"},         {"[ff02::1]", "multicast"},
      {"[ff0e::1]", "multicast"},
      {"[::ffff:127.0.0.1]", "loopback"}, {"[::ffff:10.1.2.3]", "private"},
      {"[::ffff:169.254.169.254]", "link-local"}, {"[64:ff9b::192.168.1.1]", "private"},
      {"[::127.0.0.1]", "reserved"},
  };
  for (const auto& [host, kind] : refused) {
    const std::string url = "http://" + host + ":8080/hook";
    expect_refused(url, false, kind);
    EXPECT_TRUE(parse_webhook_url(url, true)) << url << " with allow_private";
  }
  // Just outside each range.
  for (const std::string host : {"126.255.255.255", "128.0.0.1", "1.0.0.1", "11.0.0.1",
                                 "172.15.255.255", "172.32.0.1", "192.167.255.255", "192.169.0.1",
                                 "169.253.255.255", "169.255.0.1", "100.63.255.255", "100.128.0.1",
                                 "223.255.255.255", "198.17.255.255", "198.20.0.1", "8.8.8.8",
                                 "[2001:db8::1]", "[2606:4700::1111]", "[fbff::1]", "[fe00::1]",
                                 "[::ffff:8.8.8.8]", "[64:ff9b::8.8.8.8]"}) {
    auto url = parse_webhook_url("http://" + host + "/", false);
    EXPECT_TRUE(url) << host << ": " << (url ? "" : url.error().detail);
  }
}

TEST(WebhookUrlTest, RefusesIpv4InOtherNotations) {
  // The resolver reads each of these as an IPv4 number: 127.0.0.1, 10.0.0.1, 8.0.0.1...
  for (const std::string host : {"127.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "0177.0.0.1",
                                 "010.0.0.1", "10.1", "example.123", "1.2.3.4.", "1.2.3.4.5"}) {
    for (const bool allow_private : {false, true}) {
      expect_refused("http://" + host + "/", allow_private, "four decimal numbers");
    }
  }
  expect_refused("http://127.0.0.1:80:81/", true, "not a valid URL");
  EXPECT_TRUE(parse_webhook_url("http://1.2.3.4x/", false)) << "a name, not a number";
  EXPECT_TRUE(parse_webhook_url("http://123.example/", false));
  EXPECT_TRUE(parse_webhook_url("http://0x.example/", false));
}

TEST(WebhookUrlTest, RefusedAddressKind) {
  EXPECT_EQ(refused_address_kind(net::ip::make_address("127.0.0.1")), "loopback");
  EXPECT_EQ(refused_address_kind(net::ip::make_address("::ffff:192.168.1.1")), "private");
  EXPECT_EQ(refused_address_kind(net::ip::make_address("100.100.100.100")), "shared (CGNAT)");
  EXPECT_EQ(refused_address_kind(net::ip::make_address("1.1.1.1")), "");
  EXPECT_EQ(refused_address_kind(net::ip::make_address("2a00:1450::1")), "");
}

}  // namespace
}  // namespace webhook_test
}  // namespace gpucloud::billing
