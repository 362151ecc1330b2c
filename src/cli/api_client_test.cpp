#include "cli/api_client.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace gpucloud::cli {
namespace {

namespace json = boost::json;

HttpResponse answer(int status, std::string body,
                    std::string content_type = "application/problem+json") {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

TEST(CliProblem, DetailBecomesTheStderrMessage) {
  Error e = problem_to_error(answer(
      409, R"({"type":"about:blank","title":"Conflict","status":409,)"
           R"("detail":"instance train-1 is stopping","code":"conflict"})"));
  EXPECT_EQ(e.code, ErrorCode::conflict);
  EXPECT_EQ(e.detail, "instance train-1 is stopping");
  EXPECT_EQ(error_message(e), "error: instance train-1 is stopping");
}

TEST(CliProblem, CodeWinsOverStatusAndNumbersAreKept) {
  Error e = problem_to_error(answer(
      409, R"({"title":"Conflict","status":409,"detail":"only 2 RTX 4090 free on node-1",)"
           R"("code":"no_capacity","gpus_free":2})"));
  EXPECT_EQ(e.code, ErrorCode::no_capacity);
  ASSERT_EQ(e.numbers.size(), 1u);
  EXPECT_EQ(e.numbers[0].first, "gpus_free");
  EXPECT_EQ(e.numbers[0].second, 2);
}

TEST(CliProblem, FallsBackToTitleThenStatus) {
  EXPECT_EQ(problem_to_error(answer(403, R"({"title":"Forbidden","status":403})")).detail,
            "Forbidden");
  Error e = problem_to_error(answer(500, R"({"status":500})"));
  EXPECT_EQ(e.detail, "the server answered HTTP 500");
  EXPECT_EQ(e.code, ErrorCode::internal);
}

TEST(CliProblem, NonJsonBodiesAreQuotedBriefly) {
  Error e = problem_to_error(answer(502, "<html>Bad Gateway</html>\nmore", "text/html"));
  EXPECT_EQ(e.detail, "the server answered HTTP 502: <html>Bad Gateway</html>");
  EXPECT_EQ(problem_to_error(answer(404, "", "")).code, ErrorCode::not_found);
  EXPECT_EQ(problem_to_error(answer(404, "", "")).detail, "the server answered HTTP 404");
}

TEST(CliProblem, RateLimitMentionsRetryAfter) {
  HttpResponse r = answer(429, R"({"status":429,"detail":"too many failed logins","code":"rate_limited"})");
  r.retry_after = "120";
  Error e = problem_to_error(r);
  EXPECT_EQ(e.code, ErrorCode::rate_limited);
  EXPECT_EQ(e.retry_after_seconds, 120);
  EXPECT_EQ(error_message(e), "error: too many failed logins (retry after 120 s)");
}

TEST(CliEndpoint, ParsesHttpUrls) {
  auto ep = parse_endpoint("http://127.0.0.1:8080");
  ASSERT_TRUE(ep.has_value());
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, "8080");
  EXPECT_EQ(ep->base_path, "");
  EXPECT_EQ(ep->host_header, "127.0.0.1:8080");
  EXPECT_EQ(ep->url, "http://127.0.0.1:8080");

  ep = parse_endpoint("http://gpu.example.org/cloud/");
  ASSERT_TRUE(ep.has_value());
  EXPECT_EQ(ep->port, "80");
  EXPECT_EQ(ep->base_path, "/cloud");
  EXPECT_EQ(ep->host_header, "gpu.example.org");

  ep = parse_endpoint("http://[::1]:9000");
  ASSERT_TRUE(ep.has_value());
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->host_header, "[::1]:9000");
}

TEST(CliEndpoint, RefusesWhatItCannotSpeak) {
  for (const char* bad : {"https://x:443", "127.0.0.1:8080", "ftp://x", "http://", "http://:80",
                          "http://x:0", "http://x:70000", "http://x:8o", "http://u@x",
                          "http://x/?q", "http://[::1"}) {
    auto ep = parse_endpoint(bad);
    EXPECT_FALSE(ep.has_value()) << bad;
  }
  EXPECT_NE(parse_endpoint("https://x").error().detail.find("only http://"), std::string::npos);
}

TEST(CliEscape, EscapesPathSegments) {
  EXPECT_EQ(url_escape("train-1"), "train-1");
  EXPECT_EQ(url_escape("a b/c?d"), "a%20b%2Fc%3Fd");
}

class ScriptedTransport : public HttpTransport {
 public:
  std::vector<HttpRequest> seen;
  std::vector<HttpResponse> answers;
  Result<HttpResponse> send(const HttpRequest& request) override {
    seen.push_back(request);
    if (answers.empty()) return fail(ErrorCode::unavailable, "no more answers");
    HttpResponse r = answers.front();
    answers.erase(answers.begin());
    return r;
  }
};

TEST(CliApiClient, SendsBearerTokenJsonAndBasePath) {
  ScriptedTransport t;
  t.answers.push_back(answer(201, R"({"id":"key-1"})", "application/json"));
  ApiClient api(t, "/prefix", "tok");
  auto r = api.post("/ssh-keys", json::object{{"name", "k"}}, {{"Idempotency-Key", "abc"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("id").as_string(), "key-1");
  ASSERT_EQ(t.seen.size(), 1u);
  EXPECT_EQ(t.seen[0].method, "POST");
  EXPECT_EQ(t.seen[0].target, "/prefix/api/v1/ssh-keys");
  EXPECT_EQ(t.seen[0].header("authorization"), "Bearer tok");
  EXPECT_EQ(t.seen[0].header("Idempotency-Key"), "abc");
  EXPECT_EQ(t.seen[0].header("Content-Type"), "application/json");
  EXPECT_EQ(json::parse(t.seen[0].body), (json::object{{"name", "k"}}));
}

TEST(CliApiClient, NoTokenNoAuthorizationAndEmptyBodyIsNull) {
  ScriptedTransport t;
  t.answers.push_back(answer(204, "", ""));
  ApiClient api(t, "", "");
  auto r = api.del("/ssh-keys/k");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->is_null());
  EXPECT_EQ(t.seen[0].header("Authorization"), "");
  EXPECT_EQ(t.seen[0].body, "");
}

TEST(CliApiClient, ErrorsComeBackAsProblems) {
  ScriptedTransport t;
  t.answers.push_back(answer(402, R"j({"detail":"balance ¥0.50 is below one hour (¥1.98)","code":"insufficient_balance"})j"));
  ApiClient api(t, "", "tok");
  auto r = api.get("/me");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::insufficient_balance);
  EXPECT_EQ(r.error().detail, "balance ¥0.50 is below one hour (¥1.98)");
}

TEST(CliApiClient, GetAllFollowsCursors) {
  ScriptedTransport t;
  t.answers.push_back(answer(200, R"({"items":[{"n":1},{"n":2}],"next_cursor":"c 2"})", "application/json"));
  t.answers.push_back(answer(200, R"({"items":[{"n":3}],"next_cursor":null})", "application/json"));
  ApiClient api(t, "", "tok");
  auto r = api.get_all("/instances?all=true");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("items").as_array().size(), 3u);
  EXPECT_TRUE(r->at("next_cursor").is_null());
  ASSERT_EQ(t.seen.size(), 2u);
  EXPECT_EQ(t.seen[0].target, "/api/v1/instances?all=true");
  EXPECT_EQ(t.seen[1].target, "/api/v1/instances?all=true&cursor=c%202");
}

}  // namespace
}  // namespace gpucloud::cli
