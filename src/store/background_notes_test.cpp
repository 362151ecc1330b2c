#include "store/background_notes.h"

#include <gtest/gtest.h>

namespace gpucloud::store {
namespace {

TEST(BackgroundNotesTest, AccountsGoOnceEachAndComeBackInOrder) {
  const auto payloads = billing_note_payloads({"a-1", "a-22", "a-1", "", "a-3"});
  ASSERT_EQ(payloads.size(), 1u);
  EXPECT_EQ(payloads[0], "a-1,a-22,a-3");
  EXPECT_EQ(billing_note_accounts(payloads[0]), (std::vector<std::string>{"a-1", "a-22", "a-3"}));
  EXPECT_TRUE(billing_note_payloads({}).empty());
  EXPECT_TRUE(billing_note_accounts("").empty());
}

TEST(BackgroundNotesTest, ManyAccountsSplitUnderPostgresPayloadLimit) {
  std::vector<std::string> ids;
  for (int i = 0; i < 2000; ++i) ids.push_back("acct-" + std::to_string(100000 + i));
  const auto payloads = billing_note_payloads(ids);
  ASSERT_GT(payloads.size(), 1u);
  std::vector<std::string> back;
  for (const auto& p : payloads) {
    EXPECT_LT(p.size(), 8000u);
    for (auto& id : billing_note_accounts(p)) back.push_back(std::move(id));
  }
  EXPECT_EQ(back, ids);
}

TEST(BackgroundNotesTest, ScheduleTimeRoundTripsAndGarbageIsRefused) {
  const SysTime at = from_unix_micros(1'790'000'000'123'456);
  auto back = schedule_note_time(std::to_string(to_unix_micros(at)));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, at);
  EXPECT_FALSE(schedule_note_time("").has_value());
  EXPECT_FALSE(schedule_note_time("12x").has_value());
}

}  // namespace
}  // namespace gpucloud::store
