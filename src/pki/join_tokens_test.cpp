// Join tokens and host certificates in a real SQLite store (migration 22).
#include "pki/join_tokens.h"

#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "pki/host_certificates.h"
#include "store/migrations.h"

namespace gpucloud::pki {
namespace {
namespace fs = std::filesystem;

const std::string kTestFingerprint(64, 'a');
constexpr std::int64_t kT0 = 1'800'000'000;

class JoinTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-join");
    db_ = open();
  }
  void TearDown() override {
    db_.reset();
    fs::remove_all(dir_);
  }
  std::unique_ptr<store::Database> open() {
    auto db = store::Database::open((dir_ / "t.db").string(), false);
    EXPECT_TRUE(db) << db.error().detail;
    auto v = store::apply_migrations(**db, store::schema_migrations());
    EXPECT_TRUE(v) << v.error().detail;
    return std::move(*db);
  }
  JoinToken make(const std::string& host = "gpu-node-1", std::chrono::seconds ttl = std::chrono::hours(1)) {
    auto t = create_join_token(*db_, host, kTestFingerprint, ttl, "u-admin", kT0);
    EXPECT_TRUE(t) << t.error().detail;
    return *t;
  }
  static void expect_refused(const Result<std::string>& r, const std::string& why) {
    ASSERT_FALSE(r) << "redeemed for " << *r;
    EXPECT_EQ(r.error().code, ErrorCode::unauthorized);
    EXPECT_EQ(r.error().detail, "join token: " + why);
  }
  fs::path dir_;
  std::unique_ptr<store::Database> db_;
};

TEST_F(JoinTokenTest, TokenHasItsShapeAndOnlyItsHashIsStored) {
  JoinToken t = make();
  EXPECT_EQ(t.host_name, "gpu-node-1");
  EXPECT_EQ(t.expires_at, kT0 + 3600);
  EXPECT_EQ(t.ca_fingerprint, kTestFingerprint);
  auto parsed = parse_join_token(t.token);
  ASSERT_TRUE(parsed) << parsed.error().detail;
  EXPECT_EQ(parsed->ca_fingerprint, kTestFingerprint);
  EXPECT_EQ(parsed->id.size(), 16u);
  EXPECT_EQ(parsed->secret.size(), 43u);
  EXPECT_EQ(t.token, "gcjoin1." + kTestFingerprint + "." + parsed->id + "." + parsed->secret);

  auto rows = db_->all("SELECT id, host_name, secret_hash, created_by FROM join_tokens");
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].text(0), parsed->id);
  EXPECT_EQ((*rows)[0].text(3), "u-admin");
  EXPECT_EQ((*rows)[0].text(2).size(), 64u);
  EXPECT_EQ((*rows)[0].text(2).find(parsed->secret), std::string::npos);
  EXPECT_NE((*rows)[0].text(2), parsed->secret);

  // Two tokens never share an id or a secret.
  auto other = parse_join_token(make().token);
  ASSERT_TRUE(other);
  EXPECT_NE(other->id, parsed->id);
  EXPECT_NE(other->secret, parsed->secret);
}

TEST_F(JoinTokenTest, RedeemedOnceThenRefusedAsUsed) {
  JoinToken t = make("node-x");
  auto host = redeem_join_token(*db_, t.token, kT0 + 10);
  ASSERT_TRUE(host) << host.error().detail;
  EXPECT_EQ(*host, "node-x");
  expect_refused(redeem_join_token(*db_, t.token, kT0 + 11), "used");
}

TEST_F(JoinTokenTest, ExpiredForgedUnknownAndMalformedAreRefused) {
  JoinToken t = make("node-e", std::chrono::seconds(60));
  expect_refused(redeem_join_token(*db_, t.token, kT0 + 60), "expired");
  expect_refused(redeem_join_token(*db_, t.token, kT0 + 3600), "expired");

  JoinToken f = make("node-f");
  std::string forged = f.token;
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  auto r = redeem_join_token(*db_, forged, kT0 + 1);
  expect_refused(r, "forged");
  auto parsed = parse_join_token(f.token);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(r.error().detail.find(parsed->secret.substr(0, 20)), std::string::npos) << "the detail never has the secret";
  // The forgery did not use it up.
  auto good = redeem_join_token(*db_, f.token, kT0 + 2);
  ASSERT_TRUE(good) << good.error().detail;

  std::string unknown = "gcjoin1." + kTestFingerprint + ".0123456789abcdef." + parsed->secret;
  expect_refused(redeem_join_token(*db_, unknown, kT0 + 1), "unknown");

  for (std::string bad : {std::string(""), std::string("gcjoin1"), f.token + "x", f.token.substr(1),
                          "gcjoin2" + f.token.substr(7), std::string(f.token).replace(8, 1, "G"),
                          std::string(f.token).replace(f.token.size() - 5, 1, "=")}) {
    expect_refused(redeem_join_token(*db_, bad, kT0 + 1), "malformed");
    EXPECT_FALSE(parse_join_token(bad));
  }
}

TEST_F(JoinTokenTest, CreateRefusesBadInput) {
  EXPECT_FALSE(create_join_token(*db_, "bad name", kTestFingerprint, std::chrono::hours(1), "u", kT0));
  EXPECT_FALSE(create_join_token(*db_, "", kTestFingerprint, std::chrono::hours(1), "u", kT0));
  EXPECT_FALSE(create_join_token(*db_, "ok", "ABC", std::chrono::hours(1), "u", kT0));
  EXPECT_FALSE(create_join_token(*db_, "ok", kTestFingerprint, std::chrono::seconds(0), "u", kT0));
  EXPECT_FALSE(create_join_token(*db_, "ok", kTestFingerprint, std::chrono::hours(24 * 8), "u", kT0));
  auto rows = db_->one("SELECT COUNT(*) FROM join_tokens");
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)->int64(0), 0);
}

// Two control-plane replicas on one store, each with its own connection, redeem the same
// tokens at the same time: exactly one wins each.
TEST_F(JoinTokenTest, TwoConnectionsRacingExactlyOneWins) {
  constexpr int kTokens = 40;
  std::vector<std::string> tokens;
  for (int i = 0; i < kTokens; ++i) tokens.push_back(make("node-" + std::to_string(i)).token);
  auto a = open();
  auto b = open();
  std::atomic<int> wins{0}, used{0}, other{0};
  auto run = [&](store::Database& db) {
    for (const auto& t : tokens) {
      auto r = redeem_join_token(db, t, kT0 + 5);
      if (r) {
        ++wins;
      } else if (r.error().detail == "join token: used") {
        ++used;
      } else {
        ++other;
        ADD_FAILURE() << r.error().detail;
      }
    }
  };
  std::thread ta([&] { run(*a); });
  std::thread tb([&] { run(*b); });
  ta.join();
  tb.join();
  EXPECT_EQ(wins.load(), kTokens);
  EXPECT_EQ(used.load(), kTokens);
  EXPECT_EQ(other.load(), 0);
}

// The step that decides the race: both replicas have checked the token (unused, secret
// right); the conditional UPDATE lets only the first mark it, and the other is told "used".
TEST_F(JoinTokenTest, AfterBothCheckedOnlyOneClaimWins) {
  JoinToken t = make("node-r");
  auto parsed = parse_join_token(t.token);
  ASSERT_TRUE(parsed);
  auto a = open();
  auto b = open();
  auto first = claim_join_token(*a, parsed->id, kT0 + 1);
  auto second = claim_join_token(*b, parsed->id, kT0 + 1);
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  expect_refused(redeem_join_token(*b, t.token, kT0 + 1), "used");
  // An expired token is never claimed.
  JoinToken late = make("node-late", std::chrono::seconds(10));
  auto late_id = parse_join_token(late.token);
  ASSERT_TRUE(late_id);
  auto expired = claim_join_token(*a, late_id->id, kT0 + 10);
  ASSERT_TRUE(expired);
  EXPECT_FALSE(*expired);
}

class HostCertificateTest : public JoinTokenTest {};

TEST_F(HostCertificateTest, ValidRevokedExpiredAndOtherHosts) {
  ASSERT_TRUE(record_host_certificate(*db_, "node-1", "4a01", kT0 + 1000, kT0));
  ASSERT_TRUE(record_host_certificate(*db_, "node-2", "4b02", kT0 + 1000, kT0));

  EXPECT_TRUE(*certificate_valid(*db_, "node-1", "4a01", kT0 + 1));
  EXPECT_FALSE(*certificate_valid(*db_, "node-2", "4a01", kT0 + 1)) << "another host's serial";
  EXPECT_FALSE(*certificate_valid(*db_, "node-1", "ffff", kT0 + 1)) << "unknown serial";
  EXPECT_FALSE(*certificate_valid(*db_, "node-1", "4a01", kT0 + 1000)) << "expired";

  auto current = current_host_certificate(*db_, "node-1");
  ASSERT_TRUE(current);
  ASSERT_TRUE(current->has_value());
  EXPECT_EQ((*current)->serial, "4a01");
  EXPECT_EQ((*current)->not_after, kT0 + 1000);
  EXPECT_EQ((*current)->issued_at, kT0);
  EXPECT_FALSE((*current)->revoked_at);

  // A renewal: the newest is current, both valid until revoked.
  ASSERT_TRUE(record_host_certificate(*db_, "node-1", "4a03", kT0 + 2000, kT0 + 500));
  current = current_host_certificate(*db_, "node-1");
  ASSERT_TRUE(current && current->has_value());
  EXPECT_EQ((*current)->serial, "4a03");

  auto revoked = revoke_host_certificates(*db_, "node-1", kT0 + 600);
  ASSERT_TRUE(revoked);
  EXPECT_EQ(*revoked, 2);
  EXPECT_FALSE(*certificate_valid(*db_, "node-1", "4a01", kT0 + 601));
  EXPECT_FALSE(*certificate_valid(*db_, "node-1", "4a03", kT0 + 601));
  EXPECT_TRUE(*certificate_valid(*db_, "node-2", "4b02", kT0 + 601)) << "other hosts untouched";
  current = current_host_certificate(*db_, "node-1");
  ASSERT_TRUE(current && current->has_value());
  EXPECT_EQ((*current)->revoked_at, kT0 + 600);
  EXPECT_EQ(*revoke_host_certificates(*db_, "node-1", kT0 + 700), 0);

  auto none = current_host_certificate(*db_, "node-9");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(record_host_certificate(*db_, "node-1", "4a03", kT0 + 2000, kT0)) << "a serial is recorded once";
}

}  // namespace
}  // namespace gpucloud::pki
