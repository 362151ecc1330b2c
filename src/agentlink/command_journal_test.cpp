// The command journal (command_journal.h) against a real migrated store: sealed bodies that
// open only with the installation's key, first outcome wins, purging, and the key file.
#include "agentlink/command_journal.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "store/store.h"

namespace gpucloud::agentlink {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;

class CommandJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-cmdjournal");
    auto s = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  template <class F>
  auto db(F work) {
    return store_->write_now(std::move(work));
  }

  static agent::Command journal_test_command(const std::string& id, const std::string& host, const std::string& secret) {
    return agent::Command{id, host, "instance.ensure",
                          json::object{{"instance_id", "i-" + id}, {"password_hash", secret},
                                       {"jupyter", json::object{{"token", secret}}}}};
  }

  void journal(const agent::Command& c, std::int64_t now) {
    auto s = db([&](store::Database& d) { return journal_command(d, key_, c, now); });
    ASSERT_TRUE(s) << s.error().detail;
  }

  std::vector<std::string> ids_left() {
    auto rows = db([](store::Database& d) { return d.all("SELECT id FROM agent_commands ORDER BY id"); });
    EXPECT_TRUE(rows);
    std::vector<std::string> out;
    if (rows)
      for (const auto& r : *rows) out.push_back(r.text(0));
    return out;
  }

  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  std::string key_ = std::string(32, 'J');
};

TEST_F(CommandJournalTest, SealedCommandsComeBackWholeOldestFirstAndOnlyWithTheKey) {
  journal(journal_test_command("c-2", "r1", "SECRET-two"), 200);
  journal(journal_test_command("c-1", "r1", "SECRET-one"), 100);
  journal(journal_test_command("c-other", "r2", "SECRET-other"), 150);
  // A repeat of an id changes nothing (not even its body).
  journal(journal_test_command("c-1", "r1", "SECRET-changed"), 300);

  auto bodies = db([](store::Database& d) { return d.all("SELECT body FROM agent_commands"); });
  ASSERT_TRUE(bodies);
  ASSERT_EQ(bodies->size(), 3u);
  for (const auto& r : *bodies) {
    EXPECT_EQ(r.text(0).find("SECRET"), std::string::npos) << r.text(0);
    EXPECT_EQ(r.text(0).find("instance"), std::string::npos) << r.text(0);
  }

  auto pending = db([&](store::Database& d) { return pending_commands(d, key_, "r1"); });
  ASSERT_TRUE(pending) << pending.error().detail;
  ASSERT_EQ(pending->size(), 2u);
  EXPECT_EQ((*pending)[0].id, "c-1");
  EXPECT_EQ((*pending)[1].id, "c-2");
  EXPECT_EQ((*pending)[0].host_name, "r1");
  EXPECT_EQ((*pending)[0].kind, "instance.ensure");
  EXPECT_EQ((*pending)[0].desired, journal_test_command("c-1", "r1", "SECRET-one").desired);
  EXPECT_EQ((*pending)[1].desired, journal_test_command("c-2", "r1", "SECRET-two").desired);

  auto wrong_key = db([](store::Database& d) { return pending_commands(d, std::string(32, 'X'), "r1"); });
  ASSERT_FALSE(wrong_key) << "a sealed body opened with another key";

  auto none = db([&](store::Database& d) { return pending_commands(d, key_, "r3"); });
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(CommandJournalTest, TheFirstOutcomeCompletesACommandAndOnlyForItsHost) {
  journal(journal_test_command("c-1", "r1", "s"), 100);
  agent::CommandOutcome o;
  o.command_id = "c-1";
  o.ok = false;
  o.error_code = "internal";
  o.error_detail = "engine said no";
  o.observed = json::object{{"host_key", "ssh-ed25519 AAAA"}};

  auto forged = db([&](store::Database& d) { return complete_command(d, "r2", o, 200); });
  ASSERT_TRUE(forged);
  EXPECT_FALSE(*forged) << "another host's outcome completed the command";

  auto first = db([&](store::Database& d) { return complete_command(d, "r1", o, 300); });
  ASSERT_TRUE(first) << first.error().detail;
  EXPECT_TRUE(*first);
  o.ok = true;
  auto second = db([&](store::Database& d) { return complete_command(d, "r1", o, 400); });
  ASSERT_TRUE(second);
  EXPECT_FALSE(*second) << "a second outcome completed the command again";
  auto unknown = db([&](store::Database& d) {
    agent::CommandOutcome u;
    u.command_id = "never-sent";
    return complete_command(d, "r1", u, 500);
  });
  ASSERT_TRUE(unknown);
  EXPECT_FALSE(*unknown);

  auto row = db([](store::Database& d) { return d.one("SELECT completed_at, outcome FROM agent_commands WHERE id = 'c-1'"); });
  ASSERT_TRUE(row && *row);
  EXPECT_EQ((*row)->int64(0), 300) << "the later outcome overwrote the first";
  auto kept = json::parse((*row)->text(1)).as_object();
  EXPECT_FALSE(kept.at("ok").as_bool());
  EXPECT_EQ(json::value_to<std::string>(kept.at("error_detail")), "engine said no");
  EXPECT_EQ((*row)->text(1).find("ssh-ed25519"), std::string::npos) << "observed was journaled";

  auto pending = db([&](store::Database& d) { return pending_commands(d, key_, "r1"); });
  ASSERT_TRUE(pending);
  EXPECT_TRUE(pending->empty());
}

TEST_F(CommandJournalTest, PurgeRemovesOldCompletedAndAbandonedPendingCommandsOnly) {
  journal(journal_test_command("done-old", "r1", "s"), 10);
  journal(journal_test_command("done-new", "r1", "s"), 20);
  journal(journal_test_command("pending-old", "r1", "s"), 30);
  journal(journal_test_command("pending-new", "r1", "s"), 900);
  journal(journal_test_command("done-recent-but-created-early", "r1", "s"), 5);
  auto complete = [&](const std::string& id, std::int64_t at) {
    agent::CommandOutcome o;
    o.command_id = id;
    o.ok = true;
    auto r = db([&](store::Database& d) { return complete_command(d, "r1", o, at); });
    ASSERT_TRUE(r && *r);
  };
  complete("done-old", 100);
  complete("done-new", 5000);
  complete("done-recent-but-created-early", 4000);

  auto purged = db([](store::Database& d) { return purge_commands(d, /*before=*/1000, /*abandon_before=*/500); });
  ASSERT_TRUE(purged) << purged.error().detail;
  EXPECT_EQ(*purged, 2);
  EXPECT_EQ(ids_left(), (std::vector<std::string>{"done-new", "done-recent-but-created-early", "pending-new"}));
}

TEST_F(CommandJournalTest, TheJournalKeyIsMadeOnce32BytesOwnerOnlyAndReadBack) {
  const std::string path = (dir_ / "agent-link" / "journal.key").string();
  auto made = load_or_create_journal_key(path);
  ASSERT_TRUE(made) << made.error().detail;
  EXPECT_EQ(made->size(), 32u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto again = load_or_create_journal_key(path);
  ASSERT_TRUE(again) << again.error().detail;
  EXPECT_EQ(*again, *made);

  const std::string other = (dir_ / "agent-link" / "other.key").string();
  auto fresh = load_or_create_journal_key(other);
  ASSERT_TRUE(fresh);
  EXPECT_NE(*fresh, *made) << "two installations got the same key";

  const std::string short_key = (dir_ / "short.key").string();
  std::ofstream(short_key) << "too short";
  auto refused = load_or_create_journal_key(short_key);
  EXPECT_FALSE(refused) << "a key file of the wrong size was taken";
}

}  // namespace
}  // namespace gpucloud::agentlink
