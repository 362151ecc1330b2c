// Events and their Server-Sent Events stream: resuming with Last-Event-ID misses nothing and
// repeats nothing; users see only their own events.
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {

std::vector<long> sse_ids(const TestDaemon& daemon, const std::string& token, const std::string& last_event_id) {
  std::string cmd = "curl -sN --max-time 2 -H 'Authorization: Bearer " + token + "' ";
  if (!last_event_id.empty()) cmd += "-H 'Last-Event-ID: " + last_event_id + "' ";
  std::string out = shell(cmd + daemon.endpoint() + "/api/v1/events/stream");
  std::vector<long> ids;
  std::stringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("id: ", 0) == 0) ids.push_back(std::stol(line.substr(4)));
  return ids;
}

// Until the instance has left `creating` (it runs with an engine, fails without one).
::testing::AssertionResult settle(const TestDaemon& daemon, const std::string& name, const std::string& token) {
  return wait_until(
      [&] {
        auto instance = daemon.get("/api/v1/instances/" + name, token).json();
        return instance.is_object() && instance.at("state").as_string() != "creating";
      },
      std::chrono::seconds(30), "instance " + name + " to leave creating");
}

// A daemon per test: the second test stops its daemon, which leaves nothing to share.
TEST(EventsTest, StreamResumesAfterLastEventIdWithNoGapAndNoRepeat) {
  TestDaemon daemon;
  daemon.start();
  std::string alice = daemon.register_and_login("alice");
  std::string bob = daemon.register_and_login("bob");
  // No-GPU instances: with an engine they run, without one they fail; both are events.
  ASSERT_EQ(daemon.post("/api/v1/instances", {{"name", "first"}, {"gpu_count", 0}}, alice).status, 202);
  ASSERT_TRUE(settle(daemon, "first", alice));
  auto before = sse_ids(daemon, alice, "");
  ASSERT_GE(before.size(), 2u);
  ASSERT_EQ(daemon.post("/api/v1/instances", {{"name", "second"}, {"gpu_count", 0}}, alice).status, 202);
  ASSERT_TRUE(settle(daemon, "second", alice));
  auto after = sse_ids(daemon, alice, std::to_string(before.back()));
  ASSERT_GE(after.size(), 2u);
  auto all = daemon.get("/api/v1/events", alice).json().at("items").as_array();
  std::vector<long> expected;
  for (const auto& e : all) expected.push_back(e.at("seq").as_int64());
  std::vector<long> seen = before;
  seen.insert(seen.end(), after.begin(), after.end());
  EXPECT_EQ(seen, expected) << "together the two streams are exactly the event list, in order";
  EXPECT_TRUE(std::set<long>(before.begin(), before.end()).count(after.front()) == 0);
  EXPECT_EQ(all.front().at("type").as_string(), "instance.created");
  EXPECT_TRUE(sse_ids(daemon, bob, "").empty()) << "bob sees none of alice's events";
  EXPECT_TRUE(daemon.get("/api/v1/events", bob).json().at("items").as_array().empty());
  auto resource = daemon.get("/api/v1/events?resource=" + std::string(all.front().at("resource").as_string()), alice);
  auto by_resource = resource.json();
  ASSERT_FALSE(by_resource.at("items").as_array().empty()) << resource.body;
  for (const auto& e : by_resource.at("items").as_array()) EXPECT_EQ(e.at("resource"), all.front().at("resource"));
  EXPECT_GE(daemon.get("/api/v1/events", daemon.admin_token()).json().at("items").as_array().size(), expected.size());
  EXPECT_EQ(daemon.get("/api/v1/events?since_seq=-1", alice).status, 400);
}

TEST(EventsTest, StreamSendsHeartbeatCommentsAndEndsAtShutdown) {
  TestDaemon daemon;
  daemon.start();
  std::string alice = daemon.register_and_login("alice");
  std::string out = shell("curl -sN --max-time 1 -H 'Authorization: Bearer " + alice + "' " + daemon.endpoint() +
                          "/api/v1/events/stream");
  EXPECT_NE(out.find(": connected"), std::string::npos) << out;
  EXPECT_EQ(daemon.stop(), 0);
}

}  // namespace
}  // namespace gpucloud::testing
