#pragma once
// Arrears rules at the door (spec "Billing", arrears): a create or start needs a balance of
// at least one hour of its price (a subscription: its whole price), and none while the
// account is in arrears; otherwise `insufficient_balance` (402) saying what is short.
#include <cstdint>
#include <string>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::billing {

// `needed`: one hour of the price, or a subscription's whole price; `what` names it.
Status check_affordable(store::Database& db, const std::string& user_id, std::int64_t needed, const std::string& what,
                        const std::string& currency);

// "¥12.34" for CNY, "12.34 USD" otherwise (messages only; the API keeps integers).
std::string format_amount(std::int64_t smallest_units, const std::string& currency);

}  // namespace gpucloud::billing
