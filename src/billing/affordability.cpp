#include "billing/affordability.h"

#include <cstdlib>

#include "billing/ledger.h"
#include "billing/meters.h"

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
                        const std::string& currency, SysTime now) {
  auto account = account_of_user(db, user_id);
  if (!account) return fail(account.error());
  // The live balance (what running meters have accrued comes off), and an hour of everything
  // the user already runs or is starting on the hour: ¥10 does not start ten ¥9/h instances.
  auto pending = unsettled_of_account(db, account->id, now);
  if (!pending) return fail(pending.error());
  const std::int64_t balance = account->balance - *pending;
  if (account->arrears_since || balance < 0)
    return fail(ErrorCode::insufficient_balance, "the account is in arrears (balance " +
                                                     format_amount(balance, currency) +
                                                     "): top up before creating or starting anything");
  auto running = db.one("SELECT COALESCE(SUM(price_per_hour), 0), COUNT(*) FROM instances WHERE owner = ? AND "
                        "billing_mode = 'hourly' AND state IN ('creating', 'starting', 'running')",
                        {user_id});
  if (!running) return fail(running.error());
  const std::int64_t committed = (*running)->int64(0), count = (*running)->int64(1);
  if (balance < needed + committed)
    return fail(ErrorCode::insufficient_balance,
                "balance " + format_amount(balance, currency) + " is below " + what + " (" +
                    format_amount(needed, currency) + ")" +
                    (committed > 0 ? " plus an hour of the " + std::to_string(count) + " instance(s) you already run (" +
                                         format_amount(committed, currency) + ")"
                                   : std::string()));
  return ok();
}

std::int64_t storage_per_day(std::int64_t gib, std::int64_t per_gib_hour_micros) {
  if (gib <= 0 || per_gib_hour_micros <= 0) return 0;
  const std::int64_t micros = gib * per_gib_hour_micros * 24;
  return (micros + 999'999) / 1'000'000;
}

Status check_storage_affordable(store::Database& db, const std::string& user_id, std::int64_t gib,
                                std::int64_t per_gib_hour_micros, const std::string& what, const std::string& currency) {
  auto account = account_of_user(db, user_id);
  if (!account) return fail(account.error());
  if (account->arrears_since || account->balance < 0)
    return fail(ErrorCode::insufficient_balance, "the account is in arrears (balance " +
                                                     format_amount(account->balance, currency) + "): top up before " +
                                                     what + " can be stored");
  const std::int64_t day = storage_per_day(gib, per_gib_hour_micros);
  if (account->balance < day)
    return fail(ErrorCode::insufficient_balance, "balance " + format_amount(account->balance, currency) +
                                                     " is below a day of the storage " + what + " adds (" +
                                                     std::to_string(gib) + " GiB: " + format_amount(day, currency) +
                                                     " a day)");
  return ok();
}

}  // namespace gpucloud::billing
