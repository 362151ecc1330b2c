#include "cli/money.h"

#include <limits>

#include <fmt/format.h>

namespace gpucloud::cli {

Result<std::int64_t> parse_money(std::string_view text) {
  const std::string shown(text);
  auto bad = [&] {
    return fail(ErrorCode::invalid_argument,
                fmt::format("invalid amount \"{}\": expected a number with at most two "
                            "decimals, e.g. 100, 12.34 or -5",
                            shown));
  };
  bool negative = false;
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  if (whole.empty() && frac.empty()) return bad();
  if (dot != std::string_view::npos && frac.empty()) return bad();  // "12."
  if (frac.size() > 2) return bad();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t units = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return bad();
    if (units > (kMax - (c - '0')) / 10) return bad();
    units = units * 10 + (c - '0');
  }
  std::int64_t cents = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    char c = i < frac.size() ? frac[i] : '0';
    if (c < '0' || c > '9') return bad();
    cents = cents * 10 + (c - '0');
  }
  if (units > (kMax - cents) / 100) return bad();
  std::int64_t total = units * 100 + cents;
  return negative ? -total : total;
}

std::string format_money(std::int64_t minor_units, std::string_view currency) {
  const bool negative = minor_units < 0;
  // Work on the unsigned magnitude so INT64_MIN does not overflow.
  std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(minor_units)
                                     : static_cast<std::uint64_t>(minor_units);
  std::string number = fmt::format("{}.{:02}", magnitude / 100, magnitude % 100);
  if (currency.empty() || currency == "CNY") {
    return (negative ? "-¥" : "¥") + number;
  }
  return fmt::format("{} {}{}", currency, negative ? "-" : "", number);
}

std::string format_money_micros(std::int64_t micro_minor_units, std::string_view currency) {
  const bool negative = micro_minor_units < 0;
  std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(micro_minor_units)
                                     : static_cast<std::uint64_t>(micro_minor_units);
  constexpr std::uint64_t kPerMain = 100'000'000;  // 100 minor units × 1,000,000
  std::string decimals = fmt::format("{:08}", magnitude % kPerMain);
  while (decimals.size() > 2 && decimals.back() == '0') decimals.pop_back();
  std::string number = fmt::format("{}.{}", magnitude / kPerMain, decimals);
  if (currency.empty() || currency == "CNY") return (negative ? "-¥" : "¥") + number;
  return fmt::format("{} {}{}", currency, negative ? "-" : "", number);
}

}  // namespace gpucloud::cli
