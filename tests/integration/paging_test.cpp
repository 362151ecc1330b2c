// Every collection pages newest first by (created_at, id) with keyset cursors (api.md,
// "Lists"): walking it with limit=1 gives exactly the full list, in order, with no repeats.
#include <set>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

// A daemon per test: the suite has one test, so there is nothing to share.
class PagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.start();
    user_ = daemon_.register_and_login("pager");
  }
  // Follows next_cursor with `limit` until it is null.
  std::vector<json::value> walk(const std::string& path, const std::string& token, int limit) {
    std::vector<json::value> out;
    std::string cursor;
    for (int guard = 0; guard < 100; ++guard) {
      std::string sep = path.find('?') == std::string::npos ? "?" : "&";
      auto page = daemon_.get(path + sep + "limit=" + std::to_string(limit) + (cursor.empty() ? "" : "&cursor=" + cursor), token);
      EXPECT_EQ(page.status, 200) << path << ": " << page.body;
      if (page.status != 200) break;
      const json::value body = page.json();
      const auto& items = body.at("items").as_array();
      EXPECT_LE(items.size(), static_cast<std::size_t>(limit));
      for (const auto& i : items) out.push_back(i);
      if (body.at("next_cursor").is_null()) break;
      cursor = std::string(body.at("next_cursor").as_string());
    }
    return out;
  }
  void expect_pages_match(const std::string& path, const std::string& token, std::size_t at_least) {
    SCOPED_TRACE(path);
    auto all = walk(path, token, 1000);
    ASSERT_GE(all.size(), at_least);
    auto paged = walk(path, token, 1);
    ASSERT_EQ(paged.size(), all.size());
    std::set<std::string> seen;
    for (std::size_t n = 0; n < all.size(); ++n) {
      EXPECT_EQ(paged[n].at("id"), all[n].at("id")) << "page " << n;
      EXPECT_TRUE(seen.insert(std::string(paged[n].at("id").as_string())).second) << "repeated " << paged[n].at("id");
      if (n > 0) {  // newest first: (created_at, id) never increases
        auto prev = std::make_pair(std::string(all[n - 1].at("created_at").as_string()), std::string(all[n - 1].at("id").as_string()));
        auto cur = std::make_pair(std::string(all[n].at("created_at").as_string()), std::string(all[n].at("id").as_string()));
        EXPECT_GE(prev, cur) << "item " << n << " is newer than the one before it";
      }
    }
    auto two = walk(path, token, 2);
    EXPECT_EQ(two.size(), all.size());
  }
  TestDaemon daemon_;
  std::string user_;
};

TEST_F(PagingTest, EveryListPagesNewestFirstWithoutGapsOrRepeats) {
  for (int n = 0; n < 3; ++n) {
    ASSERT_EQ(daemon_.post("/api/v1/tokens", {{"name", "t" + std::to_string(n)}}, user_).status, 201);
    // The default host has this machine's cores: two no-GPU instances fit everywhere.
    if (n < 2) {
      ASSERT_EQ(daemon_.post("/api/v1/instances", {{"name", "p" + std::to_string(n)}, {"gpu_count", 0}}, user_).status, 202);
    }
    std::string dir = "/tmp/gpucloud-it-page-" + random_suffix();
    std::string key = shell("mkdir -p " + dir + " && ssh-keygen -q -t ed25519 -N '' -f " + dir + "/id && cat " + dir +
                            "/id.pub && rm -rf " + dir);
    while (!key.empty() && key.back() == '\n') key.pop_back();
    auto added = daemon_.post("/api/v1/ssh-keys", {{"name", "k" + std::to_string(n)}, {"public_key", key}}, user_);
    ASSERT_EQ(added.status, 201) << added.body;
    daemon_.register_and_login("other" + std::to_string(n));
  }
  expect_pages_match("/api/v1/tokens", user_, 3);
  expect_pages_match("/api/v1/instances", user_, 2);
  expect_pages_match("/api/v1/ssh-keys", user_, 3);
  expect_pages_match("/api/v1/images", user_, 1);
  const std::string admin = daemon_.admin_token();
  expect_pages_match("/api/v1/admin/users", admin, 5);
  expect_pages_match("/api/v1/admin/instances", admin, 2);
  expect_pages_match("/api/v1/instances?all=true", admin, 2);
}

}  // namespace
}  // namespace gpucloud::testing
