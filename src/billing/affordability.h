#pragma once
// Arrears rules at the door (spec "Billing", arrears): a create or start needs a balance of
// at least one hour of its price (a subscription: its whole price), and none while the
// account is in arrears; otherwise `insufficient_balance` (402) saying what is short.
#include <cstdint>
#include <string>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::billing {

// `needed`: one hour of the price, or a subscription's whole price; `what` names it.
// The balance is the live one (net of what open meters have accrued), and `needed` comes on
// top of an hour of every pay-as-you-go instance the user already runs or is starting.
Status check_affordable(store::Database& db, const std::string& user_id, std::int64_t needed, const std::string& what,
                        const std::string& currency, SysTime now);

// A day of `gib` GiB of storage at `per_gib_hour_micros` (the price table's millionths of the
// smallest unit per GiB-hour), rounded up: a priced GiB never costs 0 a day.
std::int64_t storage_per_day(std::int64_t gib, std::int64_t per_gib_hour_micros);

// Storage made or grown (a data disk, a snapshot, a custom image): refused in arrears, and when
// the balance is below a day of the `gib` it adds (402 insufficient_balance). `what` names it
// ("a 500 GiB disk").
Status check_storage_affordable(store::Database& db, const std::string& user_id, std::int64_t gib,
                                std::int64_t per_gib_hour_micros, const std::string& what, const std::string& currency);

// "¥12.34" for CNY, "12.34 USD" otherwise (messages only; the API keeps integers).
std::string format_amount(std::int64_t smallest_units, const std::string& currency);

}  // namespace gpucloud::billing
