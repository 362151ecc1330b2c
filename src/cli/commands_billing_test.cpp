// The billing commands (balance, ledger, usage, statement, idle, alert) and create's billing
// line end to end on a fake server, like app_test.cpp: requests sent, output, exit codes.
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "cli/app.h"
#include "cli/commands.h"

// Named (not only anonymous) so the unity build does not mix these with app_test.cpp's.
namespace gpucloud::cli::billing_test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Canned {
  std::string method;
  std::string target;
  HttpResponse response;
};

// Answers the scripted requests in order of the script, by exact method and target.
struct FakeServer {
  std::deque<Canned> script;
  std::vector<HttpRequest> requests;

  void on(std::string method, std::string target, int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = status >= 400 ? "application/problem+json" : "application/json";
    script.push_back({std::move(method), std::move(target), std::move(r)});
  }
  void problem(std::string method, std::string target, int status, const std::string& code,
               const std::string& detail) {
    json::object p{{"type", "about:blank"}, {"title", "x"}, {"status", status}, {"detail", detail}, {"code", code}};
    on(std::move(method), std::move(target), status, json::serialize(p));
  }
};

class FakeTransport : public HttpTransport {
 public:
  explicit FakeTransport(FakeServer& server) : server_(server) {}
  Result<HttpResponse> send(const HttpRequest& request) override {
    server_.requests.push_back(request);
    for (auto it = server_.script.begin(); it != server_.script.end(); ++it) {
      if (it->method == request.method && it->target == request.target) {
        HttpResponse r = it->response;
        server_.script.erase(it);
        return r;
      }
    }
    HttpResponse r;
    r.status = 404;
    r.content_type = "application/problem+json";
    r.body = R"({"status":404,"code":"not_found","detail":"no canned answer for )" + request.method + " " +
             request.target + "\"}";
    return r;
  }

 private:
  FakeServer& server_;
};

class CliBillingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-billing-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["XDG_CONFIG_HOME"] = (dir_ / "config").string();
    env_["HOME"] = (dir_ / "home").string();
    env_["GPUCLOUD_TOKEN"] = "t";
  }
  void TearDown() override { fs::remove_all(dir_); }

  int run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    Deps deps;
    deps.in = &in_;
    deps.out = &out_;
    deps.err = &err_;
    deps.env = [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    deps.connect = [this](const Endpoint&) { return std::make_unique<FakeTransport>(server_); };
    deps.stdin_is_tty = [] { return false; };
    deps.stderr_is_tty = [] { return false; };
    deps.prompt = [](const std::string&, bool) -> std::optional<std::string> { return std::nullopt; };
    deps.sleep = [this](std::chrono::milliseconds d) { clock_ += d; };
    deps.now = [this] { return std::chrono::steady_clock::time_point(clock_); };
    deps.random_key = [] { return std::string("key-1"); };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }
  const HttpRequest& last() const { return server_.requests.back(); }
  std::vector<std::string> targets() const {
    std::vector<std::string> t;
    for (const auto& r : server_.requests) t.push_back(r.method + " " + r.target);
    return t;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  FakeServer server_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  std::chrono::steady_clock::duration clock_{};
};

// --- balance -------------------------------------------------------------------------------

TEST_F(CliBillingTest, BalanceShowsMoneyStateAlertAndArrears) {
  server_.on("GET", "/api/v1/billing/account", 200,
             R"({"balance":-1234,"currency":"CNY","state":"arrears",
                 "alert":{"threshold":5000,"webhook_url":"https://hooks.example.com/gpucloud"},
                 "arrears_since":"2025-01-02T03:04:05Z"})");
  ASSERT_EQ(run({"balance"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "balance:       -¥12.34\n"
            "state:         arrears\n"
            "alert:         below ¥50.00, webhook https://hooks.example.com/gpucloud\n"
            "arrears since: 2025-01-02T03:04:05Z\n");
  EXPECT_EQ(last().method, "GET");
  EXPECT_EQ(last().header("Authorization"), "Bearer t");
}

TEST_F(CliBillingTest, BalanceWithoutAlertOrArrearsSaysNoneAndJsonKeepsIntegers) {
  const char* account = R"({"balance":123456789012345,"currency":"CNY","state":"ok","alert":null,"arrears_since":null})";
  server_.on("GET", "/api/v1/billing/account", 200, account);
  ASSERT_EQ(run({"balance"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "balance: ¥1234567890123.45\n"
            "state:   ok\n"
            "alert:   none\n");

  server_.on("GET", "/api/v1/billing/account", 200, account);
  ASSERT_EQ(run({"balance", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(account));
  EXPECT_NE(out_.str().find("123456789012345"), std::string::npos) << out_.str();
}

TEST_F(CliBillingTest, BalanceInAnotherCurrencyUsesIt) {
  server_.on("GET", "/api/v1/billing/account", 200, R"({"balance":250,"currency":"USD","state":"low","alert":null})");
  ASSERT_EQ(run({"balance"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("balance: USD 2.50\n"), std::string::npos) << out_.str();
}

TEST_F(CliBillingTest, RefusalsPrintTheDetailAndExitOne) {
  server_.problem("GET", "/api/v1/billing/account", 401, "unauthorized", "token revoked");
  EXPECT_EQ(run({"balance"}), 1);
  EXPECT_EQ(err_.str(), "error: token revoked\n");
  EXPECT_EQ(out_.str(), "");
  server_.problem("GET", "/api/v1/billing/idle", 503, "unavailable", "database is restarting");
  EXPECT_EQ(run({"idle"}), 1);
  EXPECT_EQ(err_.str(), "error: database is restarting\n");
}

// --- ledger --------------------------------------------------------------------------------

const char* kLedgerPage1 = R"({"items":[
  {"id":"le-3","time":"2025-01-03T00:00:00Z","amount":-198,"balance_after":9604,"kind":"charge",
   "resource":"i-1","description":"compute train-1, 1 h"},
  {"id":"le-2","time":"2025-01-02T00:00:00Z","amount":-198,"balance_after":9802,"kind":"charge",
   "resource":"i-1","description":"compute train-1, 1 h"}],
  "next_cursor":"c2"})";
const char* kLedgerPage2 = R"({"items":[
  {"id":"le-1","time":"2025-01-01T00:00:00Z","amount":10000,"balance_after":10000,"kind":"credit",
   "resource":null,"description":"welcome credit"}],
  "next_cursor":null})";

TEST_F(CliBillingTest, LedgerFollowsTheCursorAndPrintsSignedAmounts) {
  server_.on("GET", "/api/v1/billing/ledger?limit=100", 200, kLedgerPage1);
  server_.on("GET", "/api/v1/billing/ledger?limit=98&cursor=c2", 200, kLedgerPage2);
  ASSERT_EQ(run({"ledger"}), 0) << err_.str();
  std::istringstream lines(out_.str());
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l);
  ASSERT_EQ(got.size(), 4u) << out_.str();
  EXPECT_EQ(got[0], "TIME                  KIND    AMOUNT    BALANCE AFTER  RESOURCE  DESCRIPTION");
  EXPECT_EQ(got[1], "2025-01-03T00:00:00Z  charge  -¥1.98    ¥96.04         i-1       compute train-1, 1 h");
  EXPECT_EQ(got[2], "2025-01-02T00:00:00Z  charge  -¥1.98    ¥98.02         i-1       compute train-1, 1 h");
  EXPECT_EQ(got[3], "2025-01-01T00:00:00Z  credit  +¥100.00  ¥100.00        -         welcome credit");
  EXPECT_EQ(server_.requests.size(), 2u);
}

TEST_F(CliBillingTest, LedgerStopsAtTheLimitAndSaysThereIsMore) {
  server_.on("GET", "/api/v1/billing/ledger?since=2025-01-01T00%3A00%3A00Z&until=2025-02-01T08%3A00%3A00Z&limit=2",
             200, kLedgerPage1);
  ASSERT_EQ(run({"ledger", "--since", "2025-01-01", "--until", "2025-02-01T10:00:00+02:00", "--limit", "2"}), 0)
      << err_.str();
  EXPECT_EQ(server_.requests.size(), 1u);
  EXPECT_NE(out_.str().find("(the newest 2 entries; there are more: use --limit or --since)\n"), std::string::npos)
      << out_.str();

  // --json: the entries as the API gave them, and the cursor where the next one is.
  server_.on("GET", "/api/v1/billing/ledger?limit=2", 200, kLedgerPage1);
  ASSERT_EQ(run({"--json", "ledger", "--limit", "2"}), 0) << err_.str();
  json::value printed = json::parse(out_.str());
  EXPECT_EQ(printed.at("items"), json::parse(kLedgerPage1).at("items"));
  EXPECT_EQ(printed.at("next_cursor"), "c2");
  EXPECT_EQ(printed.at("items").at(0).at("amount"), -198);
}

TEST_F(CliBillingTest, LedgerAsksForNoMoreThanAPageOrTheRest) {
  server_.on("GET", "/api/v1/billing/ledger?limit=1000", 200, kLedgerPage1);
  server_.on("GET", "/api/v1/billing/ledger?limit=1000&cursor=c2", 200, kLedgerPage2);  // 1498 still wanted
  ASSERT_EQ(run({"ledger", "--limit", "1500"}), 0) << err_.str();
  EXPECT_EQ(server_.requests.size(), 2u) << targets().back();
  EXPECT_EQ(out_.str().find("there are more"), std::string::npos) << out_.str();
}

TEST_F(CliBillingTest, EmptyLedgerSaysSo) {
  server_.on("GET", "/api/v1/billing/ledger?limit=100", 200, R"({"items":[],"next_cursor":null})");
  ASSERT_EQ(run({"ledger"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "No ledger entries.\n");
}

TEST_F(CliBillingTest, BadPeriodsAndLimitsAreUsageErrorsSendingNothing) {
  EXPECT_EQ(run({"ledger", "--since", "yesterday"}), 2);
  EXPECT_NE(err_.str().find("--since yesterday: expected an RFC 3339 time"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"ledger", "--until", "2025-02-30"}), 2);
  EXPECT_EQ(run({"ledger", "--since", "2025-1-01"}), 2);
  EXPECT_EQ(run({"ledger", "--since", "2025-01-01T00:00:00"}), 2);  // no offset
  EXPECT_EQ(run({"ledger", "--since", "2025-02-01", "--until", "2025-01-01"}), 2);
  EXPECT_NE(err_.str().find("is after --until"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"ledger", "--limit", "0"}), 2);
  EXPECT_EQ(run({"ledger", "--limit", "ten"}), 2);
  EXPECT_EQ(run({"usage", "--by", "hour"}), 2);
  EXPECT_NE(err_.str().find("--by hour: expected day or resource"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"usage", "--since", "soon"}), 2);
  EXPECT_TRUE(server_.requests.empty()) << targets().front();
}

// --- usage ---------------------------------------------------------------------------------

TEST_F(CliBillingTest, UsageByResourceShowsHoursGibHoursAndATotal) {
  server_.on("GET", "/api/v1/billing/usage?group_by=resource", 200, R"({"items":[
      {"resource":"i-1","kind":"compute","quantity":5400,"unit":"second","amount":297},
      {"resource":"i-1","kind":"system_disk","quantity":20,"unit":"gib_hour","amount":3},
      {"resource":"d-1","kind":"data_disk","quantity":2400,"unit":"gib_hour","amount":333}],
      "next_cursor":null})");
  ASSERT_EQ(run({"usage"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "RESOURCE  KIND         QUANTITY    AMOUNT\n"
            "i-1       compute      1.50 h      ¥2.97\n"
            "i-1       system_disk  20 GiB·h    ¥0.03\n"
            "d-1       data_disk    2400 GiB·h  ¥3.33\n"
            "Total: ¥6.33\n");
}

TEST_F(CliBillingTest, UsageByDayHasADayColumnAndSendsThePeriod) {
  const char* usage = R"({"items":[
      {"resource":"i-1","kind":"compute","quantity":86400,"unit":"second","amount":4752,"day":"2025-01-01"},
      {"resource":"i-1","kind":"compute","quantity":3599,"unit":"second","amount":197,"day":"2025-01-02"}],
      "next_cursor":null})";
  server_.on("GET", "/api/v1/billing/usage?since=2025-01-01T00%3A00%3A00Z&group_by=day", 200, usage);
  ASSERT_EQ(run({"usage", "--by", "day", "--since", "2025-01-01"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "DAY         RESOURCE  KIND     QUANTITY  AMOUNT\n"
            "2025-01-01  i-1       compute  24.00 h   ¥47.52\n"
            "2025-01-02  i-1       compute  1.00 h    ¥1.97\n"
            "Total: ¥49.49\n");

  server_.on("GET", "/api/v1/billing/usage?group_by=day", 200, usage);
  ASSERT_EQ(run({"usage", "--by", "day", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(usage));
}

TEST_F(CliBillingTest, UsageFollowsTheCursor) {
  server_.on("GET", "/api/v1/billing/usage?group_by=resource", 200,
             R"({"items":[{"resource":"i-1","kind":"compute","quantity":3600,"unit":"second","amount":198}],
                 "next_cursor":"n1"})");
  server_.on("GET", "/api/v1/billing/usage?group_by=resource&cursor=n1", 200,
             R"({"items":[{"resource":"i-2","kind":"compute_no_gpu","quantity":3600,"unit":"second","amount":20}],
                 "next_cursor":null})");
  ASSERT_EQ(run({"usage"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("i-2       compute_no_gpu  1.00 h"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("Total: ¥2.18\n"), std::string::npos) << out_.str();
}

TEST_F(CliBillingTest, NoUsageSaysSo) {
  server_.on("GET", "/api/v1/billing/usage?group_by=resource", 200, R"({"items":[],"next_cursor":null})");
  ASSERT_EQ(run({"usage"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "No usage in this period.\n");
}

TEST(CliUsageQuantity, HoursWithTwoDecimalsAndGibHours) {
  auto q = [](const char* doc) { return format_usage_quantity(json::parse(doc)); };
  EXPECT_EQ(q(R"({"quantity":5400,"unit":"second"})"), "1.50 h");
  EXPECT_EQ(q(R"({"quantity":0,"unit":"second"})"), "0.00 h");
  EXPECT_EQ(q(R"({"quantity":17,"unit":"second"})"), "0.00 h");
  EXPECT_EQ(q(R"({"quantity":18,"unit":"second"})"), "0.01 h");  // 0.005 h rounds up
  EXPECT_EQ(q(R"({"quantity":3599,"unit":"second"})"), "1.00 h");
  EXPECT_EQ(q(R"({"quantity":2592000,"unit":"second"})"), "720.00 h");
  EXPECT_EQ(q(R"({"quantity":100,"unit":"gib_hour"})"), "100 GiB·h");
  EXPECT_EQ(q(R"({"quantity":2.5,"unit":"gib_hour"})"), "2.50 GiB·h");
  EXPECT_EQ(q(R"({"quantity":7,"unit":"request"})"), "7 request");
  EXPECT_EQ(q(R"({"unit":"second"})"), "-");
}

// --- statement -----------------------------------------------------------------------------

TEST_F(CliBillingTest, StatementPrintsBalancesChargesByKindAndLines) {
  const char* statement = R"({"month":"2025-01","opening_balance":10000,"credits":5000,
      "charges":{"compute":-1200,"data_disk":-100},"closing_balance":13700,
      "lines":[{"time":"2025-01-01T00:00:00Z","kind":"credit","description":"top-up","amount":5000},
               {"time":"2025-01-31T23:00:00Z","kind":"charge","resource":"i-1","description":"compute train-1","amount":-1200},
               {"kind":"charge","resource":"d-1","description":"data disk data-1","amount":-100}]})";
  server_.on("GET", "/api/v1/billing/statements/2025-01", 200, statement);
  ASSERT_EQ(run({"statement", "2025-01"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "month:           2025-01\n"
            "opening balance: ¥100.00\n"
            "credits:         ¥50.00\n"
            "charges:         -¥13.00\n"
            "  compute:       -¥12.00\n"
            "  data_disk:     -¥1.00\n"
            "closing balance: ¥137.00\n"
            "\n"
            "TIME                  KIND    AMOUNT   RESOURCE  DESCRIPTION\n"
            "2025-01-01T00:00:00Z  credit  +¥50.00  -         top-up\n"
            "2025-01-31T23:00:00Z  charge  -¥12.00  i-1       compute train-1\n"
            "-                     charge  -¥1.00   d-1       data disk data-1\n");

  server_.on("GET", "/api/v1/billing/statements/2025-01", 200, statement);
  ASSERT_EQ(run({"statement", "2025-01", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(statement));
}

TEST_F(CliBillingTest, StatementOfAQuietMonth) {
  server_.on("GET", "/api/v1/billing/statements/2024-12", 200,
             R"({"month":"2024-12","opening_balance":0,"credits":0,"charges":{},"closing_balance":0,"lines":[]})");
  ASSERT_EQ(run({"statement", "2024-12"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("charges:         ¥0.00\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("\nNo entries this month.\n"), std::string::npos) << out_.str();
}

TEST_F(CliBillingTest, StatementMonthIsCheckedLocally) {
  for (const char* bad : {"2025-13", "2025-00", "2025-1", "25-01", "2025/01", "2025-01-01", "january", "2025-0a"}) {
    EXPECT_EQ(run({"statement", bad}), 2) << bad;
    EXPECT_NE(err_.str().find("expected a month as YYYY-MM"), std::string::npos) << err_.str();
  }
  EXPECT_EQ(run({"statement"}), 2);
  EXPECT_TRUE(server_.requests.empty());
  EXPECT_TRUE(is_statement_month("1999-12"));
  EXPECT_TRUE(is_statement_month("2025-01"));

  server_.problem("GET", "/api/v1/billing/statements/2030-01", 404, "not_found", "no statement for 2030-01 yet");
  EXPECT_EQ(run({"statement", "2030-01"}), 1);
  EXPECT_EQ(err_.str(), "error: no statement for 2030-01 yet\n");
}

// --- idle ----------------------------------------------------------------------------------

TEST_F(CliBillingTest, IdleListsWhatBillsAndTheDailyTotal) {
  server_.on("GET", "/api/v1/billing/idle", 200, R"({"items":[
      {"resource":"d-1","kind":"data_disk","since":"2025-01-01T00:00:00Z","cost_per_day":333},
      {"resource":"snap-1","kind":"snapshot","since":"2024-11-01T00:00:00Z","cost_per_day":12}],
      "next_cursor":null})");
  ASSERT_EQ(run({"idle"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "RESOURCE  KIND       SINCE                 COST PER DAY\n"
            "d-1       data_disk  2025-01-01T00:00:00Z  ¥3.33\n"
            "snap-1    snapshot   2024-11-01T00:00:00Z  ¥0.12\n"
            "Total per day: ¥3.45\n");

  server_.on("GET", "/api/v1/billing/idle", 200, R"({"items":[],"next_cursor":null})");
  ASSERT_EQ(run({"idle"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Nothing bills you while idle.\n");
}

// --- alert ---------------------------------------------------------------------------------

TEST_F(CliBillingTest, AlertSetSendsTheThresholdInFen) {
  server_.on("PUT", "/api/v1/billing/alert", 200,
             R"({"threshold":1234,"webhook_url":"https://hooks.example.com/x"})");
  ASSERT_EQ(run({"alert", "set", "--below", "12.34", "--webhook", "https://hooks.example.com/x"}), 0) << err_.str();
  EXPECT_EQ(json::parse(last().body), json::parse(R"({"threshold":1234,"webhook_url":"https://hooks.example.com/x"})"));
  EXPECT_EQ(last().header("Content-Type"), "application/json");
  EXPECT_EQ(out_.str(), "Balance alert set: below ¥12.34, webhook https://hooks.example.com/x.\n");

  // An answer without the alert in it (204): what was sent is what is set.
  server_.on("PUT", "/api/v1/billing/alert", 204, "");
  ASSERT_EQ(run({"alert", "set", "--below", "50", "--webhook", "https://h.example.com/"}), 0) << err_.str();
  EXPECT_EQ(json::parse(last().body).at("threshold"), 5000);
  EXPECT_EQ(out_.str(), "Balance alert set: below ¥50.00, webhook https://h.example.com/.\n");
}

TEST_F(CliBillingTest, AlertSetRefusals) {
  EXPECT_EQ(run({"alert", "set", "--below", "12.345", "--webhook", "https://h.example.com/"}), 2);
  EXPECT_NE(err_.str().find("at most two decimals"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"alert", "set", "--below", "-5", "--webhook", "https://h.example.com/"}), 2);
  EXPECT_NE(err_.str().find("must not be negative"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"alert", "set", "--below", "5"}), 2);
  EXPECT_EQ(run({"alert", "set", "--webhook", "https://h.example.com/"}), 2);
  EXPECT_EQ(run({"alert", "set", "--below", "5", "--webhook", ""}), 2);
  EXPECT_EQ(run({"alert"}), 2);
  EXPECT_TRUE(server_.requests.empty());

  server_.problem("PUT", "/api/v1/billing/alert", 400, "invalid_argument",
                  "webhook_url: loopback, link-local and private addresses are not allowed");
  EXPECT_EQ(run({"alert", "set", "--below", "5", "--webhook", "http://127.0.0.1/"}), 1);
  EXPECT_EQ(err_.str(), "error: webhook_url: loopback, link-local and private addresses are not allowed\n");
}

TEST_F(CliBillingTest, AlertShowAndClear) {
  server_.on("GET", "/api/v1/billing/account", 200,
             R"({"balance":100,"currency":"CNY","state":"low","alert":{"threshold":500,"webhook_url":"https://h.example.com/a"},"arrears_since":null})");
  ASSERT_EQ(run({"alert", "show"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Balance alert: below ¥5.00, webhook https://h.example.com/a.\n");

  server_.on("GET", "/api/v1/billing/account", 200,
             R"({"balance":100,"currency":"CNY","state":"low","alert":{"threshold":500,"webhook_url":"https://h.example.com/a"},"arrears_since":null})");
  ASSERT_EQ(run({"alert", "show", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(R"({"threshold":500,"webhook_url":"https://h.example.com/a"})"));

  server_.on("DELETE", "/api/v1/billing/alert", 204, "");
  ASSERT_EQ(run({"alert", "clear"}), 0) << err_.str();
  EXPECT_EQ(last().method, "DELETE");
  EXPECT_EQ(out_.str(), "Balance alert cleared.\n");

  const char* none = R"({"balance":100,"currency":"CNY","state":"ok","alert":null,"arrears_since":null})";
  server_.on("GET", "/api/v1/billing/account", 200, none);
  ASSERT_EQ(run({"alert", "show"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "No balance alert is set.\n");
  server_.on("GET", "/api/v1/billing/account", 200, none);
  ASSERT_EQ(run({"alert", "show", "--json"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "null\n");
}

// --- create's billing line -----------------------------------------------------------------

const char* kCreated = R"({"id":"i-1","name":"train-1","state":"creating",
  "ssh":{"command":"ssh -p 30022 root@10.0.0.1"},
  "billing":{"mode":"hourly","auto_renew":false,"expires_at":null,"price_per_hour":198,"currency":"CNY"},
  "currency":"CNY"})";

std::string in_state(const char* base, const char* state) {
  json::value v = json::parse(base);
  v.as_object()["state"] = state;
  return json::serialize(v);
}

TEST_F(CliBillingTest, CreatePrintsWhatItBillsPerHourAndDay) {
  server_.on("POST", "/api/v1/instances", 202, kCreated);
  server_.on("GET", "/api/v1/instances/i-1", 200, in_state(kCreated, "running"));
  ASSERT_EQ(run({"create", "train-1", "--gpu", "RTX 4090:1", "--image", "base"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "Instance train-1 is running.\n"
            "ssh -p 30022 root@10.0.0.1\n"
            "Billing ¥1.98 per hour (¥47.52 per day).\n");

  server_.on("POST", "/api/v1/instances", 202, kCreated);
  ASSERT_EQ(run({"create", "train-1", "--no-gpu", "--image", "base", "--no-wait"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "Instance train-1 (i-1) is creating.\n"
            "Billing ¥1.98 per hour (¥47.52 per day).\n");

  server_.on("POST", "/api/v1/instances", 202, kCreated);
  ASSERT_EQ(run({"create", "train-1", "--no-gpu", "--image", "base", "--no-wait", "--json"}), 0) << err_.str();
  EXPECT_EQ(json::parse(out_.str()), json::parse(kCreated));
  EXPECT_EQ(out_.str().find("Billing"), std::string::npos);
}

TEST_F(CliBillingTest, CreateWithoutAPriceSaysNothingAboutBilling) {
  json::value created = json::parse(kCreated);
  created.as_object()["billing"].as_object()["price_per_hour"] = nullptr;
  server_.on("POST", "/api/v1/instances", 202, json::serialize(created));
  ASSERT_EQ(run({"create", "train-1", "--no-gpu", "--image", "base", "--no-wait"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Instance train-1 (i-1) is creating.\n");
}

TEST_F(CliBillingTest, CreateRefusedForBalanceShowsTheDetailAsIs) {
  server_.problem("POST", "/api/v1/instances", 402, "insufficient_balance",
                  "balance ¥0.50 is below one hour of the price (¥1.98)");
  EXPECT_EQ(run({"create", "train-1", "--gpu", "RTX 4090:1", "--image", "base"}), 1);
  EXPECT_EQ(err_.str(), "error: balance ¥0.50 is below one hour of the price (¥1.98)\n");
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(server_.requests.size(), 1u);
}

// --- times ---------------------------------------------------------------------------------

TEST(CliBillingTime, DatesAreMidnightUtcAndTimesAreNormalisedToUtc) {
  EXPECT_EQ(*parse_billing_time("2025-01-02", "--since"), "2025-01-02T00:00:00Z");
  EXPECT_EQ(*parse_billing_time("2024-02-29", "--since"), "2024-02-29T00:00:00Z");
  EXPECT_EQ(*parse_billing_time("2025-01-02T15:04:05Z", "--since"), "2025-01-02T15:04:05Z");
  EXPECT_EQ(*parse_billing_time("2025-01-02T15:04:05+08:00", "--since"), "2025-01-02T07:04:05Z");
  EXPECT_EQ(*parse_billing_time("2025-01-02T15:04:05.5Z", "--since"), "2025-01-02T15:04:05.500000Z");
  for (const char* bad : {"", "2025-02-29", "2025-13-01", "2025-1-2", "20250102", "+025-01-02", "2025-01-02T15:04",
                          "2025-01-02 15:04:05Z", "today"}) {
    auto r = parse_billing_time(bad, "--until");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().exit_code, kExitUsage);
    EXPECT_NE(r.error().message.find("--until"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace gpucloud::cli::billing_test
