#include "server/instance_proxy.h"

#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {

TEST(InstanceProxy, StripsThePrefixAndKeepsTheQuery) {
  const std::string prefix = "/api/v1/instances/i-1/proxy/8000";
  EXPECT_EQ(upstream_target(prefix, prefix, ""), "/");
  EXPECT_EQ(upstream_target(prefix + "/", prefix, ""), "/");
  EXPECT_EQ(upstream_target(prefix + "/a/b.txt", prefix, "x=1&y=%20"), "/a/b.txt?x=1&y=%20");
  EXPECT_EQ(upstream_target(prefix + "/a b/ü", prefix, ""), "/a%20b/%C3%BC");
  EXPECT_FALSE(upstream_target("/api/v1/instances/i-1/proxy/80001", prefix, ""));
  EXPECT_FALSE(upstream_target("/api/v1/instances/i-2/proxy/8000/", prefix, ""));
}

TEST(InstanceProxy, NeverForwardsGpucloudCredentials) {
  EXPECT_FALSE(forwards_request_header("authorization"));
  EXPECT_FALSE(forwards_request_header("cookie"));  // re-added without the session cookie
  EXPECT_FALSE(forwards_request_header("x-csrf-token"));
  EXPECT_FALSE(forwards_request_header("origin"));
  EXPECT_FALSE(forwards_request_header("connection"));
  EXPECT_FALSE(forwards_request_header("sec-websocket-key"));
  EXPECT_TRUE(forwards_request_header("accept"));
  EXPECT_TRUE(forwards_request_header("content-type"));
  EXPECT_EQ(without_session_cookie("gpucloud_session=secret"), "");
  EXPECT_EQ(without_session_cookie("a=1; gpucloud_session=secret; _xsrf=2|x"), "a=1; _xsrf=2|x");
  EXPECT_EQ(without_session_cookie("a=1"), "a=1");
}

TEST(InstanceProxy, KeepsTheInstanceFromSettingTheSessionCookie) {
  EXPECT_FALSE(forwards_response_header("set-cookie", "gpucloud_session=attacker; Path=/"));
  EXPECT_TRUE(forwards_response_header("set-cookie", "_xsrf=abc; Path=/"));
  EXPECT_FALSE(forwards_response_header("transfer-encoding", "chunked"));
  EXPECT_FALSE(forwards_response_header("content-length", "5"));
  EXPECT_TRUE(forwards_response_header("content-type", "text/html"));
}

TEST(InstanceProxy, ScrubsTheTokenEvenAcrossChunks) {
  const std::string token = "f8b4220fa7bc7de20ec43156495536fe";
  EXPECT_EQ(scrub("<body data-jupyter-api-token=\"" + token + "\"><a href=\"tree?token=" + token + "\">", token),
            "<body data-jupyter-api-token=\"\"><a href=\"tree?token=\">");
  EXPECT_EQ(scrub("nothing here", token), "nothing here");
  EXPECT_EQ(scrub("x", ""), "x");
  const std::string page = "aaa" + token + "bbb" + token + token + "c";
  for (std::size_t cut = 1; cut < page.size(); cut += 3) {
    Scrubber s(token);
    std::string out;
    for (std::size_t at = 0; at < page.size(); at += cut) out += s.feed(std::string_view(page).substr(at, cut));
    out += s.finish();
    EXPECT_EQ(out, "aaabbbc") << cut;
  }
}

}  // namespace
}  // namespace gpucloud::server
