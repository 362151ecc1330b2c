#pragma once
// Money on the command line and in tables: the currency's main unit with two decimals,
// always computed on integer smallest units (fen for CNY), never floating point.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::cli {

// "100" → 10000, "12.34" → 1234, "12.3" → 1230, "-5" → -500, "+0.05" → 5.
// Refuses more than two decimals, exponents, separators, empty text and overflow.
Result<std::int64_t> parse_money(std::string_view text);

// 1234 CNY → "¥12.34", -500 CNY → "-¥5.00", 1234 USD → "USD 12.34", -5 USD → "USD -0.05".
std::string format_money(std::int64_t minor_units, std::string_view currency = "CNY");

// Storage prices are millionths of the smallest unit: 13889 CNY → "¥0.00013889" (at least
// two decimals, trailing zeros dropped).
std::string format_money_micros(std::int64_t micro_minor_units, std::string_view currency = "CNY");

}  // namespace gpucloud::cli
