#include "cli/money.h"

#include <limits>

#include <gtest/gtest.h>

namespace gpucloud::cli {
namespace {

TEST(CliMoney, ParsesWholeAndDecimalAmountsAsDigits) {
  EXPECT_EQ(parse_money("100").value(), 10000);
  EXPECT_EQ(parse_money("12.34").value(), 1234);
  EXPECT_EQ(parse_money("12.3").value(), 1230);
  EXPECT_EQ(parse_money("0.05").value(), 5);
  EXPECT_EQ(parse_money("-5").value(), -500);
  EXPECT_EQ(parse_money("-0.01").value(), -1);
  EXPECT_EQ(parse_money("+7.10").value(), 710);
  EXPECT_EQ(parse_money(".5").value(), 50);
  EXPECT_EQ(parse_money("0").value(), 0);
  // Values that binary floating point gets wrong stay exact.
  EXPECT_EQ(parse_money("0.29").value(), 29);
  EXPECT_EQ(parse_money("1.15").value(), 115);
  EXPECT_EQ(parse_money("92233720368547758.07").value(), std::numeric_limits<std::int64_t>::max());
}

TEST(CliMoney, RefusesWhatIsNotAnAmount) {
  for (const char* bad : {"", "-", "+", ".", "12.", "12.345", "1e3", "12,34", "1 2", "abc",
                          "¥12", "--5", "12.3.4", "0x10", "92233720368547758.08",
                          "99999999999999999999"}) {
    auto r = parse_money(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    }
  }
}

TEST(CliMoney, FormatsYuanWithTwoDecimals) {
  EXPECT_EQ(format_money(1234), "¥12.34");
  EXPECT_EQ(format_money(1234, "CNY"), "¥12.34");
  EXPECT_EQ(format_money(0), "¥0.00");
  EXPECT_EQ(format_money(5), "¥0.05");
  EXPECT_EQ(format_money(198), "¥1.98");
  EXPECT_EQ(format_money(-500), "-¥5.00");
  EXPECT_EQ(format_money(100000000), "¥1000000.00");
}

TEST(CliMoney, FormatsMillionthsOfTheSmallestUnit) {
  EXPECT_EQ(format_money_micros(13889), "¥0.00013889");
  EXPECT_EQ(format_money_micros(100'000'000), "¥1.00");
  EXPECT_EQ(format_money_micros(150'000'000), "¥1.50");
  EXPECT_EQ(format_money_micros(0), "¥0.00");
  EXPECT_EQ(format_money_micros(-1), "-¥0.00000001");
  EXPECT_EQ(format_money_micros(1'234'560, "USD"), "USD 0.0123456");
}

TEST(CliMoney, FormatsOtherCurrenciesByCode) {
  EXPECT_EQ(format_money(1234, "USD"), "USD 12.34");
  EXPECT_EQ(format_money(-5, "EUR"), "EUR -0.05");
}

TEST(CliMoney, FormatsExtremesWithoutOverflow) {
  EXPECT_EQ(format_money(std::numeric_limits<std::int64_t>::min()), "-¥92233720368547758.08");
  EXPECT_EQ(format_money(std::numeric_limits<std::int64_t>::max()), "¥92233720368547758.07");
}

TEST(CliMoney, RoundTrips) {
  for (std::int64_t v : {0LL, 1LL, 99LL, 100LL, 101LL, 123456789LL, -1LL, -250LL}) {
    std::string shown = format_money(v);
    std::string digits = shown;
    digits.erase(digits.find("¥"), std::string("¥").size());
    EXPECT_EQ(parse_money(digits).value(), v) << shown;
  }
}

}  // namespace
}  // namespace gpucloud::cli
