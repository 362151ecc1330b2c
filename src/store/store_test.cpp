#include <filesystem>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "store/idempotency.h"
#include "store/migrations.h"
#include "store/store.h"

namespace gpucloud::store {
namespace {
namespace fs = std::filesystem;

std::string temp_db() {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-unit");
  return (dir / "test.db").string();
}

TEST(Migrations, FreshStoreReachesLatestVersionAndRerunIsANoOp) {
  auto db = Database::open(temp_db(), false);
  ASSERT_TRUE(db);
  auto v = apply_migrations(**db, schema_migrations());
  ASSERT_TRUE(v) << v.error().detail;
  EXPECT_EQ(*v, schema_migrations().back().version);
  auto again = apply_migrations(**db, schema_migrations());
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *v);
  auto count = (*db)->one("SELECT COUNT(*) FROM schema_version");
  EXPECT_EQ((*count)->int64(0), static_cast<std::int64_t>(schema_migrations().size()));
}

TEST(Migrations, AFailingMigrationRollsBackAllPendingOnes) {
  auto db = Database::open(temp_db(), false);
  static constexpr Migration broken[] = {{1, "CREATE TABLE a (x INTEGER);"},
                                         {2, "CREATE TABLE b (y INTEGER);"},
                                         {3, "CREATE TABLE broken (;"}};
  auto v = apply_migrations(**db, broken);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().detail.find("migration 3"), std::string::npos);
  EXPECT_EQ(*current_schema_version(**db), 0);
  EXPECT_FALSE((*db)->one("SELECT * FROM a"));  // table a was never committed
}

TEST(Migrations, AStoreNewerThanTheCodeIsRefused) {
  auto db = Database::open(temp_db(), false);
  static constexpr Migration two[] = {{1, "CREATE TABLE a (x INTEGER);"}, {2, "CREATE TABLE b (x INTEGER);"}};
  ASSERT_TRUE(apply_migrations(**db, two));
  auto v = apply_migrations(**db, std::span<const Migration>(two, 1));
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().detail.find("newer"), std::string::npos);
}

TEST(StoreTest, WritesRollBackOnErrorAndReadsSeeCommits) {
  auto store = Store::open(temp_db(), 2);
  ASSERT_TRUE(store);
  auto failed = (*store)->write_now([](Database& db) -> Status {
    if (auto s = db.run("INSERT INTO meta (key, value) VALUES ('a', '1')"); !s) return s;
    return fail(ErrorCode::conflict, "changed my mind");
  });
  EXPECT_FALSE(failed);
  auto none = (*store)->read_now([](Database& db) { return db.one("SELECT value FROM meta WHERE key = 'a'"); });
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  ASSERT_TRUE((*store)->write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('a', '2')"); }));
  auto seen = (*store)->read_now([](Database& db) { return db.one("SELECT value FROM meta WHERE key = 'a'"); });
  EXPECT_EQ((*seen)->text(0), "2");
}

// Commits never checkpoint: the log is copied into the file by the Store's own thread once it
// holds 1,000 pages. Without it (SQLite's default is off here) the file would stay as small as
// the schema and the log would grow without end.
TEST(StoreTest, TheLogIsCheckpointedInTheBackgroundNotByTheCommit) {
  const std::string path = temp_db();
  auto store = Store::open(path, 1);
  ASSERT_TRUE(store);
  const auto schema_only = fs::file_size(path);
  ASSERT_TRUE((*store)->write_now([](Database& db) { return db.run("CREATE TABLE filler (v TEXT)"); }));
  // 12 MB in 24 commits of ~500 KB: well past 1,000 pages of 4 KiB.
  for (int i = 0; i < 24; ++i)
    ASSERT_TRUE((*store)->write_now([](Database& db) -> Status {
      for (int j = 0; j < 125; ++j)
        if (auto s = db.run("INSERT INTO filler (v) VALUES (?)", {std::string(4000, 'x')}); !s) return s;
      return ok();
    }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fs::file_size(path) < schema_only + 8'000'000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(fs::file_size(path), schema_only + 8'000'000) << "the log was not copied into the file";
  auto rows = (*store)->read_now([](Database& db) { return db.one("SELECT COUNT(*) FROM filler"); });
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)->int64(0), 24 * 125);
}

// A read is one snapshot: a commit that lands between two of its statements is not seen.
TEST(StoreTest, EachReadIsOneSnapshot) {
  auto store = Store::open(temp_db(), 2);
  ASSERT_TRUE(store);
  ASSERT_TRUE((*store)->write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('s', 'before')"); }));
  Store& st = **store;
  auto seen = st.read_now([&st](Database& db) -> Result<std::pair<std::string, std::string>> {
    auto first = db.one("SELECT value FROM meta WHERE key = 's'");
    if (!first || !*first) return fail(ErrorCode::internal, "no first row");
    auto changed = st.write_now([](Database& w) { return w.run("UPDATE meta SET value = 'after' WHERE key = 's'"); });
    if (!changed) return fail(changed.error());
    auto second = db.one("SELECT value FROM meta WHERE key = 's'");
    if (!second || !*second) return fail(ErrorCode::internal, "no second row");
    return std::make_pair((*first)->text(0), (*second)->text(0));
  });
  ASSERT_TRUE(seen) << seen.error().detail;
  EXPECT_EQ(seen->first, "before");
  EXPECT_EQ(seen->second, "before");
  auto later = st.read_now([](Database& db) { return db.one("SELECT value FROM meta WHERE key = 's'"); });
  EXPECT_EQ((*later)->text(0), "after");
}

TEST(StoreTest, AwaitedWritesAndReadsResumeOnTheLoopThread) {
  // The loop first: destroyed last, after the store has joined its threads (a pool thread may
  // still be inside its post to the loop when run() returns; ThreadSanitizer saw the loop
  // destroyed under it when the store was declared first).
  boost::asio::io_context io;
  auto store = Store::open(temp_db(), 2);
  ASSERT_TRUE(store);
  auto loop_thread = std::this_thread::get_id();
  bool done = false;
  auto body = [&]() -> boost::asio::awaitable<void> {
    auto insert = [](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('k', 'v')"); };
    auto w = co_await (*store)->write(insert);
    EXPECT_TRUE(w);
    EXPECT_EQ(std::this_thread::get_id(), loop_thread);
    auto select = [](Database& db) { return db.one("SELECT value FROM meta WHERE key = 'k'"); };
    auto r = co_await (*store)->read(select);
    EXPECT_EQ(std::this_thread::get_id(), loop_thread);
    EXPECT_EQ((*r)->text(0), "v");
    done = true;
  };
  boost::asio::co_spawn(io, body(), boost::asio::detached);
  io.run();
  EXPECT_TRUE(done);
}

class IdempotencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::open(temp_db(), 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
  }
  std::unique_ptr<Store> store_;
  IdempotencyScope scope_{"u-1", "POST", "/api/v1/tokens", "key-1", "hash-a"};
};

TEST_F(IdempotencyTest, FirstUseProceedsThenReplaysTheStoredAnswer) {
  auto now = system_now();
  auto first = store_->write_now([&](Database& db) -> Result<Claim> {
    auto c = claim_idempotency_key(db, scope_, now, false);
    if (c && c->outcome == ClaimOutcome::proceed)
      if (auto s = complete_idempotency_key(db, scope_, {201, "{\"id\":1}"}, now); !s) return tl::unexpected(s.error());
    return c;
  });
  ASSERT_TRUE(first);
  EXPECT_EQ(first->outcome, ClaimOutcome::proceed);
  auto second = store_->write_now([&](Database& db) { return claim_idempotency_key(db, scope_, now, false); });
  ASSERT_TRUE(second);
  EXPECT_EQ(second->outcome, ClaimOutcome::replay);
  EXPECT_EQ(second->answer->status, 201);
  EXPECT_EQ(second->answer->body, "{\"id\":1}");
}

TEST_F(IdempotencyTest, OtherBodyAndInFlightAreConflicts) {
  auto now = system_now();
  auto claim = store_->write_now([&](Database& db) { return claim_idempotency_key(db, scope_, now, true); });
  ASSERT_EQ(claim->outcome, ClaimOutcome::proceed);
  auto in_flight = store_->write_now([&](Database& db) { return claim_idempotency_key(db, scope_, now, false); });
  EXPECT_EQ(in_flight->outcome, ClaimOutcome::conflict_in_flight);
  auto other = scope_;
  other.body_hash = "hash-b";
  auto other_body = store_->write_now([&](Database& db) { return claim_idempotency_key(db, other, now, false); });
  EXPECT_EQ(other_body->outcome, ClaimOutcome::conflict_other_body);
  // Abandoning frees the key for a retry.
  ASSERT_TRUE(store_->write_now([&](Database& db) { return abandon_idempotency_key(db, scope_); }));
  auto retry = store_->write_now([&](Database& db) { return claim_idempotency_key(db, scope_, now, false); });
  EXPECT_EQ(retry->outcome, ClaimOutcome::proceed);
}

TEST_F(IdempotencyTest, KeysAreScopedAndExpireAfter24Hours) {
  auto now = system_now();
  ASSERT_TRUE(store_->write_now([&](Database& db) { return complete_idempotency_key(db, scope_, {200, "{}"}, now); }));
  auto other_user = scope_;
  other_user.user_id = "u-2";
  EXPECT_EQ(store_->write_now([&](Database& db) { return claim_idempotency_key(db, other_user, now, false); })->outcome,
            ClaimOutcome::proceed);
  auto other_path = scope_;
  other_path.path = "/api/v1/instances";
  EXPECT_EQ(store_->write_now([&](Database& db) { return claim_idempotency_key(db, other_path, now, false); })->outcome,
            ClaimOutcome::proceed);
  auto later = now + std::chrono::hours(25);
  EXPECT_EQ(store_->write_now([&](Database& db) { return claim_idempotency_key(db, scope_, later, false); })->outcome,
            ClaimOutcome::proceed);
}

TEST(IdempotencyKeyFormat, PrintableAsciiUpTo255) {
  EXPECT_TRUE(is_valid_idempotency_key("abc-123"));
  EXPECT_FALSE(is_valid_idempotency_key(""));
  EXPECT_FALSE(is_valid_idempotency_key("has space"));
  EXPECT_FALSE(is_valid_idempotency_key(std::string(256, 'a')));
}

// Event streams are woken by this callback: exactly for the commits that recorded an event,
// after the commit (so readers see the row), never for a rolled-back one.
TEST(StoreTest, OnEventCommitFiresOnlyAfterCommitsThatRecordedAnEvent) {
  auto store = Store::open(temp_db(), 1);
  ASSERT_TRUE(store);
  int calls = 0;
  std::int64_t rows_seen = -1;
  (*store)->on_event_commit([&] {
    ++calls;
    auto reader = Database::open((*store)->path(), true);
    rows_seen = (*reader)->one("SELECT COUNT(*) FROM events")->value().int64(0);
  });
  auto record = [](Database& db) -> Status {
    db.note_event_written();
    return db.run("INSERT INTO events (id, time, type, resource, message) VALUES ('ev-1', 0, 't', 'r', 'm')");
  };
  ASSERT_TRUE((*store)->write_now(record));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(rows_seen, 1) << "the row is committed before the callback runs";

  ASSERT_TRUE((*store)->write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('x', '1')"); }));
  EXPECT_EQ(calls, 1) << "no event, no wake-up";

  auto rolled_back = (*store)->write_now([](Database& db) -> Status {
    db.note_event_written();
    if (auto s = db.run("INSERT INTO events (id, time, type, resource, message) VALUES ('ev-2', 0, 't', 'r', 'm')"); !s) return s;
    return fail(ErrorCode::conflict, "changed my mind");
  });
  EXPECT_FALSE(rolled_back);
  EXPECT_EQ(calls, 1) << "a rolled-back event wakes nobody";
  ASSERT_TRUE((*store)->write_now([](Database& db) { return db.run("INSERT INTO meta (key, value) VALUES ('y', '1')"); }));
  EXPECT_EQ(calls, 1) << "the rolled-back mark does not leak into the next commit";
}

}  // namespace
}  // namespace gpucloud::store
