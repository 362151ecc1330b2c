// Request::query: what handlers read from the query string.
#include <gtest/gtest.h>

#include "server/http_types.h"

namespace gpucloud::server {
namespace {

Request with_query(std::string q) {
  Request r;
  r.query_string = std::move(q);
  return r;
}

TEST(RequestQueryTest, ValuesArePercentDecoded) {
  // What a client's URL encoder sends for an RFC 3339 time (it was handed over encoded, so
  // `since=2026-11-26T07%3A44%3A00Z` was refused as no time at all).
  auto q = with_query("since=2026-11-26T07%3A44%3A00Z&step=60&na%6De=a%20b").query();
  EXPECT_EQ(q["since"], "2026-11-26T07:44:00Z");
  EXPECT_EQ(q["step"], "60");
  EXPECT_EQ(q["name"], "a b");
}

TEST(RequestQueryTest, APlusStaysAPlusAndTheLastValueWins) {
  auto q = with_query("since=2026-11-26T07:44:00+08:00&state=running&state=stopped&flag").query();
  EXPECT_EQ(q["since"], "2026-11-26T07:44:00+08:00");
  EXPECT_EQ(q["state"], "stopped");
  ASSERT_TRUE(q.count("flag"));
  EXPECT_EQ(q["flag"], "");
}

TEST(RequestQueryTest, ABadEscapeGivesNoParameters) {
  EXPECT_TRUE(with_query("since=%zz").query().empty());
  EXPECT_TRUE(with_query("").query().empty());
}

}  // namespace
}  // namespace gpucloud::server
