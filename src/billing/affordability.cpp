#include "billing/affordability.h"

#include <cstdlib>

#include "billing/ledger.h"

namespace gpucloud::billing {

std::string format_amount(std::int64_t v, const std::string& currency) {
  const std::int64_t a = v < 0 ? -v : v;
  std::string cents = std::to_string(a % 100);
  if (cents.size() < 2) cents = "0" + cents;
  const std::string number = std::to_string(a / 100) + "." + cents;
  if (currency == "CNY") return (v < 0 ? "-¥" : "¥") + number;
  return (v < 0 ? "-" : "") + number + " " + currency;
}

Status check_affordable(store::Database& db, const std::string& user_id, std::int64_t needed, const std::string& what,
                        const std::string& currency) {
  auto account = account_of_user(db, user_id);
  if (!account) return fail(account.error());
  if (account->arrears_since || account->balance < 0)
    return fail(ErrorCode::insufficient_balance, "the account is in arrears (balance " +
                                                     format_amount(account->balance, currency) +
                                                     "): top up before creating or starting anything");
  if (account->balance < needed)
    return fail(ErrorCode::insufficient_balance, "balance " + format_amount(account->balance, currency) +
                                                     " is below " + what + " (" + format_amount(needed, currency) + ")");
  return ok();
}

}  // namespace gpucloud::billing
