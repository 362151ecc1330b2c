// The store on PostgreSQL (issue 27): the same migrations and statements as on SQLite, the
// spellings that differ translated, serialization failures retried whole, and a gpucloudd that
// runs on it. Needs the tests' PostgreSQL (scripts/start-postgres.sh); each test has a
// database of its own.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "core/time_format.h"
#include "core/unique_temp_dir.h"
#include "store/leader_lease.h"
#include "store/migrations.h"
#include "store/store.h"
#include "support/billing_config.h"
#include "support/capabilities.h"
#include "support/postgres_test_db.h"
#include "support/test_daemon.h"
#include "support/test_resources.h"
#include "support/wait.h"
#include "support/web_terminal_client.h"

namespace gpucloud {
namespace {
namespace json = boost::json;
using store::Database;
using store::Store;
using testing::PostgresTestDatabase;

TEST(PostgresStoreTest, POSTGRES_MigrationsReachTheLatestVersionOnceEvenWithTwoStartingAtOnce) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  // Two control planes starting together on an empty database: one migrates, the other waits
  // and finds it done.
  std::atomic<int> opened{0};
  std::vector<std::string> errors(2);
  std::vector<std::thread> starts;
  for (int i = 0; i < 2; ++i)
    starts.emplace_back([&, i] {
      auto s = Store::open_postgres(pg.options(), 1);
      if (s) ++opened;
      else errors[static_cast<std::size_t>(i)] = s.error().detail;
    });
  for (auto& t : starts) t.join();
  EXPECT_EQ(opened, 2) << errors[0] << " | " << errors[1];
  auto db = store::connect_postgres(pg.options());
  ASSERT_TRUE(db) << db.error().detail;
  auto version = store::current_schema_version(**db);
  ASSERT_TRUE(version);
  EXPECT_EQ(*version, store::schema_migrations().back().version);
  auto count = (*db)->one("SELECT COUNT(*) FROM schema_version");
  ASSERT_TRUE(count && *count);
  EXPECT_EQ((*count)->int64(0), static_cast<std::int64_t>(store::schema_migrations().size()));
  // Money and times are 64-bit in every table: no INTEGER (32-bit) column survived.
  auto narrow = (*db)->all(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
      "AND data_type IN ('integer', 'smallint', 'real')");
  ASSERT_TRUE(narrow);
  for (const auto& row : *narrow) ADD_FAILURE() << row.text(0) << "." << row.text(1) << " is narrower than 64 bits";
  // PostgreSQL's own storage settings (migration 30): room on each page for a settlement's
  // rewrite of every open meter (HOT updates).
  auto options = (*db)->one("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'meters'");
  ASSERT_TRUE(options && *options);
  EXPECT_EQ((*options)->text(0), "fillfactor=50");
}

// What a statement answers on SQLite it answers on PostgreSQL.
void expect_same_answers(Database& db) {
  SCOPED_TRACE(db.dialect() == store::Dialect::sqlite ? "sqlite" : "postgres");
  ASSERT_TRUE(db.exec_script("CREATE TABLE probe (k TEXT PRIMARY KEY, n INTEGER, x REAL, note TEXT)"));
  const std::int64_t big = 9'000'000'000'000'000'000;
  ASSERT_TRUE(db.run("INSERT INTO probe (k, n, x, note) VALUES (?, ?, ?, ?)", {"a", big, 0.1, "it's ? \"quoted\" 中文"}));
  ASSERT_TRUE(db.run("INSERT INTO probe (k, n, x, note) VALUES (?, ?, ?, ?)", {"b", -7, 2.5, nullptr}));
  ASSERT_TRUE(db.run("INSERT INTO probe (k, n, x, note) VALUES (?, ?, ?, ?)", {"c", 3'000'000'000'000'000, 1e-9, "?"}));
  auto a = db.one("SELECT n, x, note, note IS NULL FROM probe WHERE k = ?", {"a"});
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->int64(0), big);
  EXPECT_DOUBLE_EQ(*(*a)->opt_double(1), 0.1);
  EXPECT_EQ((*a)->text(2), "it's ? \"quoted\" 中文");
  EXPECT_EQ((*a)->int64(3), 0);
  auto b = db.one("SELECT note FROM probe WHERE k = 'b' AND note IS NULL");
  ASSERT_TRUE(b && *b);
  EXPECT_TRUE((*b)->is_null(0));
  // A '?' inside quotes is text, not a placeholder.
  auto q = db.one("SELECT COUNT(*) FROM probe WHERE note = '?' AND k = ?", {"c"});
  ASSERT_TRUE(q && *q);
  EXPECT_EQ((*q)->int64(0), 1);
  // A parameter tested only for NULL, as the list filters do.
  auto filtered = db.all("SELECT k FROM probe WHERE (? IS NULL OR k = ?) ORDER BY k", {nullptr, nullptr});
  ASSERT_TRUE(filtered) << filtered.error().detail;
  EXPECT_EQ(filtered->size(), 3u);
  auto one_key = db.all("SELECT k FROM probe WHERE (? IS NULL OR k = ?) ORDER BY k", {"b", "b"});
  ASSERT_TRUE(one_key) << one_key.error().detail;
  ASSERT_EQ(one_key->size(), 1u);
  // Scalar MAX/MIN of two values next to the aggregates.
  auto m = db.one("SELECT MAX(?, n), MIN(n, ?), (SELECT MAX(n) FROM probe), (SELECT MIN(n) FROM probe) FROM probe "
                  "WHERE k = 'b'",
                  {5, -100});
  ASSERT_TRUE(m && *m) << (m ? "" : m.error().detail);
  EXPECT_EQ((*m)->int64(0), 5);
  EXPECT_EQ((*m)->int64(1), -100);
  EXPECT_EQ((*m)->int64(2), big);
  EXPECT_EQ((*m)->int64(3), -7);
  // A sum past 2^53 stays exact (PostgreSQL's SUM over BIGINT is NUMERIC).
  auto sum = db.one("SELECT SUM(n) FROM probe WHERE n > 0");
  ASSERT_TRUE(sum && *sum);
  EXPECT_EQ((*sum)->int64(0), big + 3'000'000'000'000'000);
  // changes() counts the rows a statement touched; each() reads in place.
  ASSERT_TRUE(db.run("UPDATE probe SET n = n + ? WHERE n < ?", {1, 4'000'000'000'000'000'000}));
  EXPECT_EQ(db.changes(), 2);
  std::vector<std::string> seen;
  ASSERT_TRUE(db.each("SELECT k, n FROM probe ORDER BY k", {}, [&](const store::RowView& row) {
    seen.push_back(std::string(row.text(0)) + "=" + std::to_string(row.int64(1)));
    return true;
  }));
  EXPECT_EQ(seen, (std::vector<std::string>{"a=" + std::to_string(big), "b=-6", "c=3000000000000001"}));
  // A unique key breaks as a conflict.
  auto dup = db.run("INSERT INTO probe (k, n) VALUES (?, ?)", {"a", 1});
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::conflict);
}

TEST(PostgresStoreTest, POSTGRES_StatementsAnswerAsTheyDoOnSqlite) {
  GPUCLOUD_NEED_POSTGRES();
  auto dir = testing::unique_temp_dir("gpucloud-pg");
  auto lite = Database::open((dir / "probe.db").string(), false);
  ASSERT_TRUE(lite);
  expect_same_answers(**lite);
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  auto db = store::connect_postgres(pg.options());
  ASSERT_TRUE(db) << db.error().detail;
  expect_same_answers(**db);
}

TEST(PostgresStoreTest, POSTGRES_AFailedTransactionRollsBackWholeAndReadsSeeOnlyCommits) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  auto s = Store::open_postgres(pg.options(), 2);
  ASSERT_TRUE(s) << s.error().detail;
  Store& store = **s;
  auto failed = store.write_now([](Database& db) -> Status {
    if (auto r = db.run("INSERT INTO meta (key, value) VALUES ('a', '1')"); !r) return r;
    return fail(ErrorCode::conflict, "changed my mind");
  });
  EXPECT_FALSE(failed);
  auto written = store.write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('b', '2')"); });
  ASSERT_TRUE(written) << written.error().detail;
  auto rows = store.read_now([](Database& db) { return db.all("SELECT key FROM meta WHERE key IN ('a', 'b')"); });
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].text(0), "b");
}

// Two stores on one database are two control-plane replicas. Each adds to one counter by
// reading it and writing it back: under SERIALIZABLE one of two racing transactions fails, and
// the store runs it again, so no increment is lost and none is made twice.
TEST(PostgresStoreTest, POSTGRES_TwoReplicasRacingReadModifyWriteLoseNoUpdate) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  auto first = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(first) << first.error().detail;
  auto second = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(second) << second.error().detail;
  ASSERT_TRUE((*first)->write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('n', '0')"); }));
  constexpr int kEach = 150;
  std::atomic<int> failures{0}, attempts{0};
  auto add = [&](Store& store) {
    for (int i = 0; i < kEach; ++i) {
      auto r = store.write_now([&](Database& db) -> Status {
        ++attempts;
        auto row = db.one("SELECT value FROM meta WHERE key = 'n'");
        if (!row) return fail(row.error());
        const std::int64_t n = std::stoll((*row)->text(0));
        return db.run("UPDATE meta SET value = ? WHERE key = 'n'", {std::to_string(n + 1)});
      });
      if (!r) ++failures;
    }
  };
  std::thread a([&] { add(**first); });
  std::thread b([&] { add(**second); });
  a.join();
  b.join();
  EXPECT_EQ(failures, 0);
  auto n = (*first)->read_now([](Database& db) { return db.one("SELECT value FROM meta WHERE key = 'n'"); });
  ASSERT_TRUE(n && *n);
  EXPECT_EQ((*n)->text(0), std::to_string(2 * kEach));
  // The race happened: some transactions ran more than once.
  EXPECT_GT(attempts.load(), 2 * kEach) << "no transaction was retried: the two replicas never raced";
}

// The leader's commit fence travels with the COMMIT (one round trip): while the lease is its
// own the write commits; once another replica took the lease, the same script is refused as
// a conflict naming both epochs, the store hears of it once, and nothing of it is written.
TEST(PostgresStoreTest, POSTGRES_ALeadersCommitIsRefusedOnceAnotherReplicaTookTheLease) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  auto leader = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(leader) << leader.error().detail;
  auto other = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(other) << other.error().detail;
  // Taken with a term already over, so that the other may take it at once.
  auto mine = (*leader)->write_now([](Database& db) { return store::take_lease(db, store::kBackgroundLease, "a", false, -1); });
  ASSERT_TRUE(mine) << mine.error().detail;
  ASSERT_EQ(mine->outcome, store::LeaseClaim::Outcome::leading);
  std::atomic<int> refusals{0};
  std::string refused_detail;
  (*leader)->set_commit_fence({store::lease_fence_sql(store::kBackgroundLease, mine->epoch), [&](const Error& e) {
                                 ++refusals;
                                 refused_detail = e.detail;
                               }});
  auto put = [&](const std::string& key) {
    return (*leader)->write_now([&](Database& db) -> Status {
      db.note_event_written();  // a NOTIFY in the same script as the fence and the COMMIT
      return db.run("INSERT INTO meta (key, value) VALUES (?, 'x')", {key});
    });
  };
  ASSERT_TRUE(put("while-leading"));
  EXPECT_EQ(refusals, 0);
  auto theirs = (*other)->write_now([](Database& db) { return store::take_lease(db, store::kBackgroundLease, "b", false, 3'000'000); });
  ASSERT_TRUE(theirs) << theirs.error().detail;
  ASSERT_EQ(theirs->outcome, store::LeaseClaim::Outcome::leading);
  ASSERT_EQ(theirs->epoch, mine->epoch + 1);
  auto late = put("after-the-lease-moved");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::conflict);
  EXPECT_NE(late.error().detail.find("its lease epoch " + std::to_string(mine->epoch) + ", now " +
                                     std::to_string(theirs->epoch)),
            std::string::npos)
      << late.error().detail;
  EXPECT_EQ(refusals, 1);
  EXPECT_EQ(refused_detail, late.error().detail);
  auto rows = (*other)->read_now([](Database& db) {
    return db.all("SELECT key FROM meta WHERE key IN ('while-leading', 'after-the-lease-moved')");
  });
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].text(0), "while-leading");
  // The connection is usable afterwards (the failed script was rolled back whole).
  (*leader)->set_commit_fence({store::lease_fence_sql(store::kBackgroundLease, theirs->epoch), {}});
  EXPECT_TRUE(put("fenced-at-the-current-epoch"));
}

// Two replicas settling the same open meters at the same moments (today each runs its own
// settlement pass): every hour of every meter is charged once, the ledger chains unbroken.
TEST(PostgresStoreTest, POSTGRES_TwoReplicasSettlingTheSameMetersChargeEachHourOnce) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  auto first = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(first) << first.error().detail;
  auto second = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(second) << second.error().detail;
  const SysTime t0 = from_unix_micros(1'800'000'000'000'000);
  constexpr int kUsers = 20, kHours = 24;
  auto seeded = (*first)->write_now([&](Database& db) -> Status {
    for (int u = 0; u < kUsers; ++u) {
      auto user = auth::create_user(db, "settle" + std::to_string(u), std::nullopt, "x", "user", t0);
      if (!user) return fail(user.error());
      if (auto a = billing::open_account(db, user->id, user->username, 1'000'000, t0); !a) return a;
      for (int k = 0; k < 3; ++k)
        if (auto m = billing::open_run(db, "i-" + std::to_string(u) + "-" + std::to_string(k), user->id, false, 198, t0); !m)
          return m;
    }
    return ok();
  });
  ASSERT_TRUE(seeded) << seeded.error().detail;
  std::atomic<int> failures{0};
  auto settle = [&](Store& store) {
    for (int h = 1; h <= kHours; ++h) {
      auto pass = store.write_now([&](Database& db) { return billing::settle_open_meters(db, t0 + std::chrono::hours(h)); });
      if (!pass && failures++ == 0) ADD_FAILURE() << "a pass failed: " << pass.error().detail;
    }
  };
  std::thread a([&] { settle(**first); });
  std::thread b([&] { settle(**second); });
  a.join();
  b.join();
  EXPECT_EQ(failures, 0);
  auto totals = (*first)->read_now([](Database& db) {
    return db.one("SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM ledger_entries WHERE kind = 'charge'");
  });
  ASSERT_TRUE(totals && *totals);
  EXPECT_EQ((*totals)->int64(1), -std::int64_t{kUsers} * 3 * 198 * kHours) << "every meter-hour charged exactly once";
  // Each account's chain: seq 1, 2, 3, ... with balance_after the running sum.
  auto broken = (*first)->read_now([](Database& db) {
    return db.all(
        "SELECT e.account_id FROM ledger_entries e WHERE e.seq > 1 AND NOT EXISTS (SELECT 1 FROM ledger_entries p "
        "WHERE p.account_id = e.account_id AND p.seq = e.seq - 1 AND p.balance_after + e.amount = e.balance_after)");
  });
  ASSERT_TRUE(broken);
  EXPECT_TRUE(broken->empty()) << broken->size() << " entries do not follow their predecessor";
}

// The server closes the store's connections (a restart, an operator's pg_terminate_backend):
// the next statements open new ones; at most the transaction that was under way fails.
TEST(PostgresStoreTest, POSTGRES_ConnectionsTheServerClosedAreOpenedAgain) {
  GPUCLOUD_NEED_POSTGRES();
  PostgresTestDatabase pg;
  auto s = Store::open_postgres(pg.options(), 1);
  ASSERT_TRUE(s) << s.error().detail;
  Store& store = **s;
  ASSERT_TRUE(store.write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('x', '1')"); }));
  auto admin = store::connect_postgres({testing::test_postgres()->url, testing::test_postgres()->password, "t"});
  ASSERT_TRUE(admin);
  auto killed = (*admin)->one("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = ?", {pg.name()});
  ASSERT_TRUE(killed && *killed) << (killed ? "" : killed.error().detail);
  ASSERT_GE((*killed)->int64(0), 1);
  int failed = 0;
  bool written = false;
  for (int attempt = 0; attempt < 3 && !written; ++attempt) {
    auto w = store.write_now([](Database& db) { return db.run("UPDATE meta SET value = '2' WHERE key = 'x'"); });
    if (w) written = true;
    else ++failed;
  }
  EXPECT_TRUE(written);
  EXPECT_LE(failed, 1) << "only the statement that met the closed connection fails";
  auto value = store.read_now([](Database& db) { return db.one("SELECT value FROM meta WHERE key = 'x'"); });
  ASSERT_TRUE(value && *value) << (value ? "" : value.error().detail);
  EXPECT_EQ((*value)->text(0), "2");
}

TEST(PostgresStoreTest, POSTGRES_APasswordInTheUrlIsRefusedWithoutPrintingIt) {
  GPUCLOUD_NEED_POSTGRES();
  testing::TestDaemon d({.config_toml = "[store]\nurl = \"postgresql://gpucloud:sekrit-pw@127.0.0.1:1/x\"\n"});
  try {
    d.start();
    FAIL() << "a password in store.url must stop the daemon";
  } catch (const std::exception& e) {
    const std::string said = e.what() + d.log();
    EXPECT_NE(said.find("holds a password"), std::string::npos) << said;
    EXPECT_EQ(said.find("sekrit-pw"), std::string::npos) << said;
  }
}

// A whole gpucloudd on PostgreSQL: sign-up credit, an operator's credit, an instance run,
// stopped and released, its compute charged once, the ledger adding up.
TEST(PostgresStoreTest, DOCKER_POSTGRES_AGpucloudOnPostgresRunsAnInstanceAndBillsIt) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  testing::DaemonOptions o;
  o.config_toml = "[store]\nurl = \"" + pg.url() + "\"\npassword_file = \"" + testing::test_postgres()->password_file +
                  "\"\n[billing]\nsignup_credit = 10000\n";
  o.test_clock = true;
  testing::TestDaemon d(o);
  d.start();
  const std::string alice = d.register_and_login("pg-alice");
  auto credit = d.request("POST", "/api/v1/admin/users/pg-alice/credit", R"({"amount": 5000, "note": "pg"})",
                          d.admin_token(), {{"Idempotency-Key", "pg-credit-1"}});
  ASSERT_EQ(credit.status, 201) << credit.body;
  auto again = d.request("POST", "/api/v1/admin/users/pg-alice/credit", R"({"amount": 5000, "note": "pg"})",
                         d.admin_token(), {{"Idempotency-Key", "pg-credit-1"}});
  EXPECT_EQ(again.status, 201) << again.body;
  auto r = d.post("/api/v1/instances", json::object{{"name", "pg-one"}, {"gpu_count", 0}}, alice);
  ASSERT_EQ(r.status, 202) << r.body;
  d.wait_for_state("pg-one", "running", alice);
  ASSERT_EQ(d.post("/api/v1/admin/clock", json::object{{"advance_seconds", 600}}, d.admin_token()).status, 200);
  ASSERT_EQ(d.post("/api/v1/instances/pg-one/stop", json::object{}, alice).status, 202);
  auto stopped = d.wait_for_state("pg-one", "stopped", alice);
  const std::int64_t charged = stopped.at("charged").as_int64();
  EXPECT_GE(stopped.at("run_seconds").as_int64(), 600);
  EXPECT_GT(charged, 0);
  auto account = d.get("/api/v1/billing/account", alice).json().as_object();
  EXPECT_EQ(account.at("settled_balance").as_int64(), 15000 - charged) << json::serialize(account);
  auto ledger = d.get("/api/v1/billing/ledger?limit=50", alice).json();
  std::int64_t sum = 0;
  for (const auto& e : ledger.at("items").as_array()) sum += e.at("amount").as_int64();
  EXPECT_EQ(sum, 15000 - charged) << json::serialize(ledger);
  auto events = d.get("/api/v1/events?limit=100", alice);
  EXPECT_EQ(events.status, 200) << events.body;
  EXPECT_NE(events.body.find("instance.running"), std::string::npos);
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/pg-one", "", alice).status, 202);
  d.wait_for_state("pg-one", "released", alice);
  // A restart reads everything back from PostgreSQL.
  d.stop();
  d.start();
  auto after = d.get("/api/v1/billing/account", d.login("pg-alice", "password-123")).json().as_object();
  EXPECT_EQ(after.at("settled_balance").as_int64(), 15000 - charged);
}

// Two gpucloudd on one PostgreSQL database answer for the same platform: a user registered
// through one logs in through the other, and an API token revoked (or a user disabled) through
// one is refused by the other within 2 s (its token cache lives 1 s on a shared store).
TEST(PostgresStoreTest, DOCKER_POSTGRES_ARevocationThroughOneGpucloudReachesAnotherWithinTwoSeconds) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  const std::string store = "[store]\nurl = \"" + pg.url() + "\"\npassword_file = \"" +
                            testing::test_postgres()->password_file + "\"\n";
  testing::TestDaemon a({.config_toml = store});
  a.start();
  testing::TestDaemon b({.config_toml = store});
  b.start();
  const std::string session = a.register_and_login("two-erin");
  auto created = a.post("/api/v1/tokens", json::object{{"name", "ci"}}, session);
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string api_token(created.json().at("token").as_string());
  const std::string id(created.json().at("id").as_string());
  ASSERT_EQ(b.get("/api/v1/me", api_token).status, 200) << "the other replica knows the token";
  // An event written through a reaches b's event stream within 1 s.
  const std::string stream_out = testing::unique_temp_dir("gpucloud-pg-sse") / "stream.txt";
  const std::string curl = "curl -sN --max-time 6 -H 'Authorization: Bearer " + session + "' " + b.endpoint() +
                           "/api/v1/events/stream > " + stream_out + " 2>/dev/null &";
  // A first event, streamed from the past, says the stream is connected.
  ASSERT_EQ(a.post("/api/v1/security-groups", json::object{{"name", "before"}, {"rules", json::array{}}}, session).status, 201);
  testing::shell(curl);
  auto streamed = [&](const std::string& what) {
    std::ifstream in(stream_out);
    std::stringstream text;
    text << in.rdbuf();
    return text.str().find(what) != std::string::npos;
  };
  ASSERT_TRUE(testing::wait_until([&] { return streamed("security group before created"); }, std::chrono::seconds(4),
                                  "b's stream to connect"));
  auto group = a.post("/api/v1/security-groups", json::object{{"name", "across"}, {"rules", json::array{}}}, session);
  ASSERT_EQ(group.status, 201) << group.body;
  const auto written_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return streamed("security group across created"); }, std::chrono::seconds(4),
                                  "b's stream to carry the event written through a"));
  EXPECT_LE(std::chrono::steady_clock::now() - written_at, std::chrono::seconds(1));
  ASSERT_EQ(a.request("DELETE", "/api/v1/tokens/" + id, "", session).status, 204);
  const auto revoked_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return b.get("/api/v1/me", api_token).status == 401; }, std::chrono::seconds(5),
                                  "the other replica to refuse the revoked token"));
  EXPECT_LE(std::chrono::steady_clock::now() - revoked_at, std::chrono::seconds(2));
  // Disabled through b: a's sessions stop within 2 s too.
  const std::string other = b.login("two-erin", "password-123");
  ASSERT_EQ(a.get("/api/v1/me", other).status, 200);
  auto users = b.get("/api/v1/admin/users?limit=200", b.admin_token()).json();
  std::string user_id;
  for (const auto& u : users.at("items").as_array())
    if (u.at("username") == "two-erin") user_id = std::string(u.at("id").as_string());
  ASSERT_FALSE(user_id.empty()) << json::serialize(users);
  ASSERT_EQ(b.request("PATCH", "/api/v1/admin/users/" + user_id, R"({"disabled": true})", b.admin_token()).status, 200);
  const auto disabled_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return a.get("/api/v1/me", other).status == 401; }, std::chrono::seconds(5),
                                  "the first replica to refuse a disabled user's session"));
  EXPECT_LE(std::chrono::steady_clock::now() - disabled_at, std::chrono::seconds(2));
}

// Login throttling holds across replicas: failures through either count together.
TEST(PostgresStoreTest, DOCKER_POSTGRES_FailedLoginsThroughTwoGpucloudCountTogether) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  const std::string config = "[server]\nlogin_failures_allowed = 3\nlogin_window = \"10m\"\n[store]\nurl = \"" +
                             pg.url() + "\"\npassword_file = \"" + testing::test_postgres()->password_file + "\"\n";
  testing::TestDaemon a({.config_toml = config});
  a.start();
  testing::TestDaemon b({.config_toml = config});
  b.start();
  (void)a.register_and_login("two-guess");
  auto attempt = [](const testing::TestDaemon& d, const std::string& password) {
    return d.request("POST", "/api/v1/auth/login",
                     json::serialize(json::object{{"username", "two-guess"}, {"password", password}}));
  };
  EXPECT_EQ(attempt(a, "wrong-1").status, 401);
  EXPECT_EQ(attempt(b, "wrong-2").status, 401);
  EXPECT_EQ(attempt(a, "wrong-3").status, 401);
  auto refused = attempt(b, "password-123");
  EXPECT_EQ(refused.status, 429) << "three failures through two replicas reach the limit of 3: " << refused.body;
  EXPECT_EQ(attempt(a, "password-123").status, 429);
}

// What a user sees of their money and resources, to compare before and after the move.
struct UserView {
  std::string account;  // settled_balance
  std::vector<std::string> ledger;
  std::vector<std::string> instances;
  std::vector<std::string> disks;
};

UserView view_of(const testing::TestDaemon& d, const std::string& token) {
  UserView v;
  auto account = d.get("/api/v1/billing/account", token).json().as_object();
  v.account = json::serialize(account.at("settled_balance"));
  std::string cursor;
  for (int page = 0; page < 1000; ++page) {
    auto doc = d.get("/api/v1/billing/ledger?limit=200" + (cursor.empty() ? "" : "&cursor=" + cursor), token).json();
    for (const auto& e : doc.at("items").as_array()) v.ledger.push_back(json::serialize(e));
    const auto* next = doc.as_object().if_contains("next_cursor");
    if (!next || next->is_null()) break;
    cursor = std::string(next->as_string());
  }
  const json::value instances = d.get("/api/v1/instances", token).json();
  for (const auto& i : instances.at("items").as_array())
    v.instances.push_back(std::string(i.at("name").as_string()) + ":" + std::string(i.at("state").as_string()) + ":" +
                          json::serialize(i.at("billing")));
  const json::value disks = d.get("/api/v1/disks", token).json();
  for (const auto& disk : disks.at("items").as_array())
    v.disks.push_back(std::string(disk.at("name").as_string()) + ":" + json::serialize(disk.at("size_gib")));
  return v;
}

// ---- one leader for background work (issue 27) --------------------------------------------
// Two replicas with the billing tests' installation (the no-GPU size charges one fen a second)
// settling every second, so a settlement with a charge comes soon after an instance runs.
// Replicas on one machine share one data directory (the in-process host's agent state and
// disks, the key that seals journaled agent commands): whichever leads serves that host.
std::string replica_config(const PostgresTestDatabase& pg) {
  return testing::billing_test_config(1'000'000) + "settle_interval = \"1s\"\n[store]\nurl = \"" + pg.url() +
         "\"\npassword_file = \"" + testing::test_postgres()->password_file + "\"\n";
}

// The replicas' data directory, removed after them (declared before them).
struct SharedDir {
  std::filesystem::path path = gpucloud::testing::unique_temp_dir("gpucloud-replicas");
  ~SharedDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

bool log_has(const testing::TestDaemon& d, const std::string& text) { return d.log().find(text) != std::string::npos; }

// Whether the user's ledger has a compute charge (a settlement ran).
bool has_charge(const testing::TestDaemon& d, const std::string& token) {
  auto ledger = d.get("/api/v1/billing/ledger?limit=200", token);
  if (ledger.status != 200) return false;
  auto body = ledger.json();
  for (const auto& e : body.at("items").as_array())
    if (e.at("amount").as_int64() < 0) return true;
  return false;
}

// Each second of the instance charged once: what it was charged equals its run time (one fen a
// second), its charges in the ledger add up to it, and the ledger to the balance.
void expect_each_second_charged_once(const testing::TestDaemon& d, const std::string& token, const std::string& name,
                                     std::int64_t credit) {
  auto inst = d.get("/api/v1/instances/" + name, token).json();
  const std::int64_t run = inst.at("run_seconds").as_int64(), charged = inst.at("charged").as_int64();
  EXPECT_GT(run, 0);
  EXPECT_NEAR(static_cast<double>(charged), static_cast<double>(run), 1.0) << json::serialize(inst);
  auto account = d.get("/api/v1/billing/account", token).json();
  auto ledger = d.get("/api/v1/billing/ledger?limit=200", token).json();
  std::int64_t sum = 0, charges = 0;
  for (const auto& e : ledger.at("items").as_array()) {
    sum += e.at("amount").as_int64();
    if (e.at("kind") == "charge") charges -= e.at("amount").as_int64();
  }
  EXPECT_EQ(charges, charged) << json::serialize(ledger);
  EXPECT_EQ(sum, account.at("settled_balance").as_int64()) << json::serialize(account);
  EXPECT_EQ(account.at("settled_balance").as_int64(), credit - charged) << json::serialize(account);
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Two replicas' common ground: one database, one data directory, one config.
struct ReplicaSite {
  PostgresTestDatabase pg;
  SharedDir shared;
  testing::DaemonOptions options() const {
    return {.config_toml = replica_config(pg), .data_dir = (shared.path / "data").string()};
  }
};

// `a` starts first and leads (armed with `fault_point` when given), `b` stands by; `user` creates
// a no-GPU instance `name` through `via` and it runs. Returns the user's session token.
std::string lead_stand_by_and_run(testing::TestDaemon& a, testing::TestDaemon& b, testing::TestDaemon& via,
                                  const std::string& fault_point, const std::string& user, const std::string& name) {
  a.start(fault_point);
  EXPECT_TRUE(log_has(a, R"("event":"leader_elected")")) << a.log();
  b.start();
  EXPECT_TRUE(log_has(b, R"("event":"leader_standby")")) << b.log();
  const std::string token = via.register_and_login(user);
  auto created = via.post("/api/v1/instances", json::object{{"name", name}, {"gpu_count", 0}}, token);
  EXPECT_EQ(created.status, 202) << created.body;
  b.wait_for_state(name, "running", token);
  return token;
}

// kill -9 of the leader inside a settlement (its ledger entries written, its meters not): the
// transaction dies with it, the standby takes the lease as soon as the leader's session (and
// its advisory lock) is gone, and its own settlement charges those seconds, once.
TEST(PostgresStoreTest, DOCKER_POSTGRES_SLOW_AKilledLeadersSettlementMovesToTheOtherReplicaWithinFiveSeconds) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  const ReplicaSite site;
  ASSERT_TRUE(site.pg.ok());
  testing::TestDaemon a(site.options()), b(site.options());
  // Created through the standby: every replica answers the API (its commands reach the leader).
  const std::string token = lead_stand_by_and_run(a, b, b, "billing.settle.after_ledger_insert", "lead-kim", "lead-one");
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(a.killed_at("billing.settle.after_ledger_insert"));
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return has_charge(b, token); }, std::chrono::seconds(10),
                                  "a settlement by the replica that took the lease"));
  const auto failover = std::chrono::steady_clock::now() - killed;
  std::printf("failover: kill -9 of the leader -> the other replica's first settlement in %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()));
  EXPECT_TRUE(log_has(b, R"("event":"leader_elected")")) << b.log();
  EXPECT_LE(failover, std::chrono::seconds(5));
  // The killed replica comes back as a standby. Its web terminal of the instance (an
  // in-process host's, served by the leader) is handed to the leader: any replica answers.
  a.start();
  EXPECT_TRUE(log_has(a, R"("event":"leader_standby")")) << a.log();
  {
    testing::WebTerminalClient terminal;
    terminal.connect(a.port(), "/api/v1/instances/lead-one/terminal", token);
    terminal.send("echo relay-$((6*7))\n");
    EXPECT_TRUE(terminal.wait_for("relay-42")) << terminal.seen << "\n" << a.log();
    EXPECT_TRUE(log_has(a, R"("event":"terminal_relayed")")) << a.log();
    EXPECT_TRUE(log_has(b, R"("event":"terminal_opened")")) << "the leader ran the shell";
  }
  // And it stops the instance through the API.
  ASSERT_EQ(a.post("/api/v1/instances/lead-one/stop", json::object{}, token).status, 202);
  a.wait_for_state("lead-one", "stopped", token);
  expect_each_second_charged_once(b, token, "lead-one", 1'000'000);
}

// A leader paused inside a settlement (a process stopped, or cut off from the database, is
// the same to the others) loses the lease at the end of its term; resumed, its transaction is
// refused by the epoch (never committed late), and it exits so that its supervisor starts it
// again as a standby. The new leader charges those seconds once.
TEST(PostgresStoreTest, DOCKER_POSTGRES_SLOW_APausedLeadersLateSettlementIsRefusedByTheEpoch) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  const ReplicaSite site;
  ASSERT_TRUE(site.pg.ok());
  testing::DaemonOptions paused_options = site.options();
  paused_options.env["GPUCLOUD_PAUSE_POINT"] = "billing.settle.after_ledger_insert";
  testing::TestDaemon a(paused_options), b(site.options());
  const std::string token = lead_stand_by_and_run(a, b, a, "", "lead-lee", "lead-two");
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(testing::wait_until([&] { return log_has(a, "pause point billing.settle.after_ledger_insert: stopping with SIGSTOP"); },
                                  std::chrono::seconds(30), "the leader to stop itself inside a settlement"));
  const auto paused = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return log_has(b, R"("event":"leader_elected")"); }, std::chrono::seconds(8),
                                  "the other replica to take the lease once its term ran out"));
  const auto took = std::chrono::steady_clock::now() - paused;
  std::printf("failover: leader paused -> the other replica leads in %lld ms (term 3 s)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LE(took, std::chrono::seconds(5));
  ASSERT_EQ(::kill(a.pid(), SIGCONT), 0);
  EXPECT_EQ(a.wait_for_expected_exit(std::chrono::seconds(20)), 75) << a.log();
  EXPECT_TRUE(log_has(a, R"("event":"leader_write_refused")")) << a.log();
  EXPECT_TRUE(log_has(a, "billing_settlement_failed")) << "the resumed settlement was refused, not committed: " << a.log();
  EXPECT_TRUE(log_has(a, R"("event":"leader_deposed")")) << a.log();
  ASSERT_TRUE(testing::wait_until([&] { return has_charge(b, token); }, std::chrono::seconds(10),
                                  "a settlement by the new leader"));
  ASSERT_EQ(b.post("/api/v1/instances/lead-two/stop", json::object{}, token).status, 202);
  b.wait_for_state("lead-two", "stopped", token);
  expect_each_second_charged_once(b, token, "lead-two", 1'000'000);
}

// kill -9 of the leader inside an arrears stop (the stop written, not committed). The balance
// is taken down through the standby, whose commit tells the leader to re-project the account
// (without that note the leader would learn of it at its next settlement, up to an hour in
// production). The other replica takes the lease, finds the account past zero and stops the
// instance itself; every second is charged once and the ledger adds up.
TEST(PostgresStoreTest, DOCKER_POSTGRES_SLOW_AKilledLeadersArrearsStopIsMadeByTheOtherReplica) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  const ReplicaSite site;
  ASSERT_TRUE(site.pg.ok());
  // Settling once a minute: the leader learns of the adjustment from the standby's note, not
  // from a settlement.
  testing::DaemonOptions options = site.options();
  options.config_toml = replace_once(options.config_toml, "settle_interval = \"1s\"", "settle_interval = \"60s\"");
  testing::TestDaemon a(options), b(options);
  const std::string token = lead_stand_by_and_run(a, b, b, "policy.arrears.after_stop", "lead-ann", "lead-three");
  ASSERT_FALSE(HasFailure());
  // Down to about three seconds of running, through the standby.
  const std::int64_t balance = b.get("/api/v1/billing/account", token).json().at("balance").as_int64();
  const std::int64_t adjustment = -(balance - 3);
  auto adjusted = b.request("POST", "/api/v1/admin/users/lead-ann/credit",
                            json::serialize(json::object{{"amount", adjustment}, {"note", "down to zero"}}),
                            b.admin_token());
  ASSERT_EQ(adjusted.status, 201) << adjusted.body;
  ASSERT_TRUE(a.killed_at("policy.arrears.after_stop", std::chrono::seconds(20))) << a.log();
  const auto killed = std::chrono::steady_clock::now();
  auto stopped = b.wait_for_state("lead-three", "stopped", token, std::chrono::seconds(15));
  const auto took = std::chrono::steady_clock::now() - killed;
  std::printf("failover: kill -9 inside an arrears stop -> stopped by the other replica in %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_EQ(stopped.at("state_reason"), "arrears") << json::serialize(stopped);
  EXPECT_LE(took, std::chrono::seconds(10));
  EXPECT_TRUE(log_has(b, R"("event":"leader_elected")")) << b.log();
  auto account = b.get("/api/v1/billing/account", token).json();
  EXPECT_EQ(account.at("state"), "arrears") << json::serialize(account);
  // Stopped at the zero give or take the failover: a few seconds past it at most.
  EXPECT_LE(account.at("settled_balance").as_int64(), 0) << json::serialize(account);
  EXPECT_GE(account.at("settled_balance").as_int64(), -15) << json::serialize(account);
  expect_each_second_charged_once(b, token, "lead-three", 1'000'000 + adjustment);
}

// The recycle bin's timers are the leader's: a custom image deleted through the standby is
// handed to the leader (NOTIFY gpucloud_image_bin), whose clock alone is moved past the bin's
// day; the leader purges it. (Before, the standby armed the timers on its own clock and the
// leader never did, until it restarted.)
TEST(PostgresStoreTest, DOCKER_POSTGRES_SLOW_AnImageDeletedThroughTheStandbyIsPurgedByTheLeader) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  const ReplicaSite site;
  ASSERT_TRUE(site.pg.ok());
  testing::DaemonOptions options = site.options();
  options.test_clock = true;
  // Settling hourly: a day moved on the test clock is 24 passes, not 86,400.
  options.config_toml = replace_once(options.config_toml, "settle_interval = \"1s\"", "settle_interval = \"1h\"");
  testing::TestDaemon a(options), b(options);
  const std::string token = lead_stand_by_and_run(a, b, b, "", "lead-ivy", "lead-four");
  ASSERT_FALSE(HasFailure());
  auto saved = b.post("/api/v1/instances/lead-four/images", json::object{{"name", "kept"}}, token);
  ASSERT_EQ(saved.status, 202) << saved.body;
  const std::string id(saved.json().at("id").as_string());
  auto state_of = [&] {
    auto r = b.get("/api/v1/images/" + id, token);
    return r.status == 200 ? std::string(r.json().at("state").as_string()) : std::to_string(r.status);
  };
  const auto save_began = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return state_of() != "creating"; }, std::chrono::minutes(3),
                                  "the image to be saved", std::chrono::milliseconds(250)));
  ASSERT_EQ(state_of(), "available") << b.log();
  std::printf("image saved through the standby in %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - save_began)
                                         .count()));
  ASSERT_EQ(b.request("DELETE", "/api/v1/images/" + id, "", token).status, 200);
  auto purged = [&] {
    auto r = b.get("/api/v1/events?resource=" + id, token);
    return r.status == 200 && r.body.find("\"image.purged\"") != std::string::npos;
  };
  // The bin keeps an image a day (recycle_days = 1): the leader's clock alone moves past it.
  auto advanced = a.post("/api/v1/admin/clock", json::object{{"advance_seconds", 86400 + 60}}, a.admin_token());
  ASSERT_EQ(advanced.status, 200) << advanced.body;
  EXPECT_TRUE(testing::wait_until(purged, std::chrono::seconds(15), "the leader to purge the image"))
      << "leader:\n" << a.log() << "\nstandby:\n" << b.log();
  EXPECT_EQ(b.get("/api/v1/images/" + id, token).status, 404);
  const auto stop_began = std::chrono::steady_clock::now();
  ASSERT_EQ(b.post("/api/v1/instances/lead-four/stop", json::object{}, token).status, 202);
  b.wait_for_state("lead-four", "stopped", token);
  std::printf("stopped in %lld ms\n", static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                   std::chrono::steady_clock::now() - stop_began)
                                                                   .count()));
}

// gpucloudd migrate-store: an installation with users, instances, a disk, a weekly subscription
// renewed all year and a year of hourly charges moves to PostgreSQL; a gpucloudd started on the
// copy shows every user the same balance, ledger, instances and disks; a second copy into the
// same database is refused.
TEST(PostgresStoreTest, DOCKER_POSTGRES_SLOW_MigrateStoreMovesAYearOfAnInstallationExactly) {
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED_ENGINE();
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  testing::DaemonOptions o;
  // On SQLite, whatever GPUCLOUD_TEST_STORE says: that is what is moved.
  const std::string on_sqlite = "\n[store]\nurl = \"sqlite://DATA_DIR/gpucloud.db\"\n";
  const std::string config = testing::billing_test_config(0);
  o.config_toml = config + on_sqlite;
  o.test_clock = true;
  o.signup_credit = 0;
  testing::TestDaemon d(o);
  d.start();
  const std::string alice = d.register_and_login("mv-alice");
  const std::string bob = d.register_and_login("mv-bob");
  for (const auto& [user, amount] : {std::pair{"mv-alice", 80'000'000}, std::pair{"mv-bob", 2'000'000}}) {
    auto r = d.request("POST", std::string("/api/v1/admin/users/") + user + "/credit",
                       json::serialize(json::object{{"amount", amount}, {"note", "move"}}), d.admin_token(),
                       {{"Idempotency-Key", std::string("mv-") + user}});
    ASSERT_EQ(r.status, 201) << r.body;
  }
  ASSERT_EQ(d.post("/api/v1/instances", json::object{{"name", "hourly"}, {"gpu_count", 0}}, alice).status, 202);
  auto sub = d.post("/api/v1/instances",
                    json::object{{"name", "weekly"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1},
                                 {"billing", json::object{{"mode", "weekly"}, {"auto_renew", true}}}},
                    alice);
  ASSERT_EQ(sub.status, 202) << sub.body;
  ASSERT_EQ(d.post("/api/v1/disks", json::object{{"name", "data"}, {"size_gib", 1}}, bob).status, 202);
  ASSERT_EQ(d.post("/api/v1/instances", json::object{{"name", "bobs"}, {"gpu_count", 0}}, bob).status, 202);
  d.wait_for_state("hourly", "running", alice);
  d.wait_for_state("weekly", "running", alice);
  d.wait_for_state("bobs", "running", bob);
  ASSERT_EQ(d.post("/api/v1/instances/bobs/stop", json::object{}, bob).status, 202);
  d.wait_for_state("bobs", "stopped", bob);
  // A year, a month at a time: hourly settlements and weekly renewals.
  for (int month = 0; month < 12; ++month) {
    auto r = d.post("/api/v1/admin/clock", json::object{{"advance_seconds", 30 * 86400}}, d.admin_token());
    ASSERT_EQ(r.status, 200) << r.body;
  }
  const UserView alice_before = view_of(d, alice), bob_before = view_of(d, bob);
  EXPECT_GT(alice_before.ledger.size(), 50u) << "a year of charges and renewals";
  ASSERT_EQ(d.stop(), 0);

  const std::string migrate = "GPUCLOUD_STORE_PASSWORD= " GPUCLOUD_BIN_DIR "/gpucloudd migrate-store --from sqlite://" +
                              d.data_dir() + "/gpucloud.db --to " + pg.url() + " --password-file " +
                              testing::test_postgres()->password_file + " 2>&1; echo \"exit=$?\"";
  const std::string out = testing::shell(migrate);
  ASSERT_NE(out.find("exit=0"), std::string::npos) << out;
  EXPECT_NE(out.find("verified every table's count"), std::string::npos) << out;
  EXPECT_NE(out.find("ledger_entries"), std::string::npos) << out;

  // The same installation, now on PostgreSQL.
  std::ofstream(d.dir() + "/gpucloud.toml")
      << config << "\n[store]\nurl = \"" << pg.url() << "\"\npassword_file = \""
      << testing::test_postgres()->password_file << "\"\n";
  d.start();
  const std::string alice_again = d.login("mv-alice", "password-123");
  const std::string bob_again = d.login("mv-bob", "password-123");
  const UserView alice_after = view_of(d, alice_again), bob_after = view_of(d, bob_again);
  EXPECT_EQ(alice_after.account, alice_before.account);
  EXPECT_EQ(alice_after.ledger, alice_before.ledger);
  EXPECT_EQ(alice_after.instances, alice_before.instances);
  EXPECT_EQ(bob_after.account, bob_before.account);
  EXPECT_EQ(bob_after.ledger, bob_before.ledger);
  EXPECT_EQ(bob_after.instances, bob_before.instances);
  EXPECT_EQ(bob_after.disks, bob_before.disks);
  // Life goes on there: the hourly instance stops, charged once more for nothing (no time passed).
  ASSERT_EQ(d.post("/api/v1/instances/hourly/stop", json::object{}, alice_again).status, 202);
  d.wait_for_state("hourly", "stopped", alice_again);
  for (const char* name : {"hourly", "weekly"})
    EXPECT_EQ(d.request("DELETE", std::string("/api/v1/instances/") + name, "", alice_again).status, 202);
  EXPECT_EQ(d.request("DELETE", "/api/v1/instances/bobs", "", bob_again).status, 202);
  d.wait_for_state("hourly", "released", alice_again);
  d.wait_for_state("weekly", "released", alice_again);
  d.wait_for_state("bobs", "released", bob_again);
  ASSERT_EQ(d.stop(), 0);
  // A second copy into a database that holds an installation is refused, and changes nothing.
  const std::string again = testing::shell(migrate);
  EXPECT_NE(again.find("exit=1"), std::string::npos) << again;
  EXPECT_NE(again.find("already holds an installation"), std::string::npos) << again;
}

}  // namespace
}  // namespace gpucloud
