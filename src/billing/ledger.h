#pragma once
// Billing accounts and their ledger (spec "Billing"). A balance changes only through
// post_entry(): it appends one immutable entry and moves the balance in the same statement
// pair, so the sum of an account's entries equals its balance, always. Entries chain per
// account by `seq` (a unique index), so two writers can never both append after the same
// balance. One account per user today; `kind = group` keeps the model open to a lab's shared
// budget that several users draw on.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::billing {

enum class EntryKind { charge, credit, subscription, refund, adjustment };
std::string_view to_string(EntryKind kind);

struct Account {
  std::string id, kind, name;
  std::int64_t balance = 0;
  std::int64_t entries = 0;  // the seq of the newest entry
  std::optional<SysTime> arrears_since;
  int arrears_warned = 0;  // bit set of the arrears warnings already sent (see arrears.h)
  std::optional<std::int64_t> alert_threshold;
  std::optional<std::string> alert_webhook_url;
  bool alert_armed = true;
  SysTime created_at;
  std::optional<SysTime> stop_warned_zero;  // the projected zero the last "runs out" warning named
};

// One resource's share of a charge that covers several (an hourly settlement's entry for an
// account's meters of one kind). Same sign as the entry's amount.
struct EntryLine {
  std::string resource, resource_kind;
  std::int64_t quantity = 0;
  std::int64_t amount = 0;
  bool operator==(const EntryLine&) const = default;
};
// Stored in the entry's `lines` column as "resource kind quantity amount" lines joined by
// '\n' (resource ids and kinds have no spaces); portable text, parsed here only.
std::string encode_lines(const std::vector<EntryLine>& lines);
Result<std::vector<EntryLine>> decode_lines(std::string_view text);

struct Entry {
  std::string id, account_id;
  std::int64_t seq = 0;
  std::optional<std::string> user_id;
  SysTime time;
  std::int64_t amount = 0, balance_after = 0;
  EntryKind kind = EntryKind::charge;
  std::optional<std::string> resource, resource_kind;
  std::int64_t quantity = 0;  // seconds (compute) or GiB-seconds (storage) a charge covers
  std::string description;
  // Several resources' shares (their sum is `amount` and `quantity`; `resource` is then
  // null). Empty when the entry is about one resource or none.
  std::vector<EntryLine> lines;
};
// What the entry charged or refunded, resource by resource: its lines, or the entry itself
// as one line when it names a resource; nothing for a credit or a subscription payment.
std::vector<EntryLine> lines_of(const Entry& entry);

// "u-XXXX" → "ba-XXXX" (migration 11 derives it the same way).
std::string account_id_for_user(const std::string& user_id);

// A new user's account, with `signup_credit` as its first entry when positive. Idempotent.
Status open_account(store::Database& db, const std::string& user_id, const std::string& username,
                    std::int64_t signup_credit, SysTime now);
Result<Account> load_account(store::Database& db, const std::string& account_id);
// The account a user draws on.
Result<Account> account_of_user(store::Database& db, const std::string& user_id);

struct NewEntry {
  EntryKind kind = EntryKind::charge;
  std::int64_t amount = 0;  // charges negative
  std::optional<std::string> user_id, resource, resource_kind;
  std::int64_t quantity = 0;
  std::string description;
};
// Appends the entry and moves the balance; the arrears mark and the alert's crossing follow
// the new balance in the same transaction (an alert crossing queues its webhook and event).
Result<Entry> post_entry(store::Database& db, const std::string& account_id, const NewEntry& entry, SysTime now);
// Several entries at once (a settlement's charges): one balance update for the batch.
Result<std::vector<Entry>> post_entries(store::Database& db, const std::string& account_id,
                                        const std::vector<NewEntry>& entries, SysTime now);

// The balance side of entries a set-based settlement inserted itself (seq after `before`'s,
// `count` of them, summing to `total`): the compare-and-set on the account's entry count,
// then the arrears mark and the alert as post_entries does.
Status apply_inserted_entries(store::Database& db, const Account& before, std::int64_t total, std::int64_t count,
                              const std::optional<std::string>& user_id, SysTime now);

// A settlement pass's side of the ledger, many accounts per statement (issue 27: on
// PostgreSQL each statement is a round trip; a pass over 10,000 accounts is a few dozen).
// The accounts with ids in [first, last] (every account when none), by id.
Result<std::map<std::string, Account>> load_accounts(store::Database& db,
                                                     const std::optional<std::pair<std::string, std::string>>& range);
// A ledger row whose place in its account's chain (seq, balance after) is known already.
struct ChainedEntry {
  std::string id, account_id;
  std::int64_t seq = 0, amount = 0, balance_after = 0;
  EntryKind kind = EntryKind::charge;
  std::optional<std::string> user_id, resource, resource_kind;
  std::int64_t quantity = 0;
  std::string description, lines;
};
Status insert_chained_entries(store::Database& db, const std::vector<ChainedEntry>& entries, SysTime now);
// The accounts' side of entries inserted that way: apply_inserted_entries for each, the
// compare-and-set on every account's entry count made by one UPDATE per chunk of accounts.
struct AccountAppend {
  Account before;
  std::int64_t total = 0, count = 0;
  std::optional<std::string> user_id;
};
Status apply_appends(store::Database& db, const std::vector<AccountAppend>& appends, SysTime now);

struct LedgerQuery {
  std::optional<SysTime> since, until;
  std::optional<std::int64_t> before_seq;  // keyset cursor: entries older than this seq
  std::size_t limit = 100;
};
// Newest first.
Result<std::vector<Entry>> list_entries(store::Database& db, const std::string& account_id, const LedgerQuery& q);
// Oldest first, every entry in [since, until).
Result<std::vector<Entry>> entries_between(store::Database& db, const std::string& account_id, SysTime since,
                                           SysTime until);
// The balance just before `t` (the balance_after of the last entry before it; 0 if none).
Result<std::int64_t> balance_before(store::Database& db, const std::string& account_id, SysTime t);

// Sets or clears the balance alert. A threshold set above the balance (net of what has
// accrued, `pending`) notifies once at once, as a crossing would; it is armed again when the
// balance is at or above it.
Status set_alert(store::Database& db, const std::string& account_id, std::optional<std::int64_t> threshold,
                 std::optional<std::string> webhook_url, std::int64_t pending, const std::optional<std::string>& owner,
                 SysTime now);

// "ok" | "low" (below the alert's threshold) | "arrears", of the balance net of `pending`
// (what the open meters have accrued and not yet settled).
std::string account_state(const Account& account, std::int64_t pending = 0);
// `balance` is net of `pending`, as the alert and the run-out forecast see it;
// `settled_balance` is the ledger's (the sum of the entries), `unsettled` the difference.
boost::json::object account_json(const Account& account, const std::string& currency, std::int64_t pending = 0);
boost::json::object entry_json(const Entry& entry);

}  // namespace gpucloud::billing
