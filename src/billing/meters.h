#pragma once
// Meters (spec "Billing"): one per (resource, kind), accruing exact integers on the platform
// clock. A meter accrues `rate` per hour while open: accrued = Σ rate × whole seconds open,
// and a settlement charges floor(accrued ÷ divisor) − charged, so T seconds at P per hour
// cost exactly floor(P·T/3600) however the time is split into runs and settlements, and
// rounding never favours the platform. Compute rates are fen per hour (divisor 3600);
// storage rates are millionths of a fen per hour for the whole resource (GiB × price;
// divisor 3600 × 10⁶). A settlement moves the meter's `charged` and `settled_until` in the
// transaction that writes its ledger entry, compare-and-set on its generation, so a crash
// or a second writer neither skips nor repeats a charge.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::billing {

enum class MeterKind { compute, compute_no_gpu, system_disk, data_disk, snapshot, image };
std::string_view to_string(MeterKind kind);
std::optional<MeterKind> parse_meter_kind(std::string_view text);
bool is_compute(MeterKind kind);

constexpr std::int64_t kComputeDivisor = 3600;
constexpr std::int64_t kStorageDivisor = 3600LL * 1000000LL;

struct Meter {
  std::string id, account_id, user_id, resource;
  MeterKind kind = MeterKind::compute;
  std::int64_t divisor = kComputeDivisor;
  std::int64_t rate = 0;  // per hour while open
  std::int64_t gib = 0;   // storage: the whole GiB billed now
  std::optional<SysTime> open_since;
  // Held (its host unreachable): nothing accrues past this for a settlement until released;
  // a close at the container's real end counts to that end.
  std::optional<SysTime> held_since;
  std::int64_t accrued = 0;   // of the closed intervals
  std::int64_t quantity = 0;  // of the closed intervals: seconds, or GiB-seconds
  std::int64_t charged = 0;
  std::int64_t settled_quantity = 0;
  SysTime settled_until;
  std::int64_t generation = 1;
  SysTime created_at;
};

// What the meter has accrued by `t` (its open interval counted in whole seconds).
std::int64_t accrued_at(const Meter& m, SysTime t);
std::int64_t quantity_at(const Meter& m, SysTime t);
// What a settlement at `t` would charge: floor(accrued ÷ divisor) − charged (never negative).
std::int64_t due_at(const Meter& m, SysTime t);

Result<std::optional<Meter>> load_meter(store::Database& db, const std::string& resource, MeterKind kind);
Result<std::vector<Meter>> meters_of_resource(store::Database& db, const std::string& resource);
Result<std::vector<Meter>> open_meters(store::Database& db);
Result<std::vector<Meter>> open_meters_of_account(store::Database& db, const std::string& account_id);

// Starts accruing `rate` per hour from `since` (a closed or new meter; an open one at
// another rate is closed at `since` first). `gib` is informative for storage.
Status open_meter(store::Database& db, const std::string& user_id, const std::string& resource, MeterKind kind,
                  std::int64_t rate, std::int64_t gib, SysTime since);
// Stops accruing at `until` (whole seconds since it opened) and settles it at once, so a
// state change always writes its ledger entry. No meter, or a closed one: nothing to do.
Status close_meter(store::Database& db, const std::string& resource, MeterKind kind, SysTime until, SysTime now);
// The resource bills nothing at all (an instance whose create failed: its system disk, also
// across a re-rating): the meter closes and forgets what it accrued; what was charged of it
// goes back as a refund on the same resource. No meter: nothing to do.
Status void_meter(store::Database& db, const std::string& resource, MeterKind kind, SysTime now);
// A storage resource's meter follows its billable size: open at `gib` × `micros_per_gib_hour`,
// re-rated when the size changes, closed when `gib` is nullopt (deleted, not billable).
Status follow_storage(store::Database& db, const std::string& user_id, const std::string& resource, MeterKind kind,
                      std::optional<std::int64_t> gib, std::int64_t micros_per_gib_hour, SysTime now);

// An unreachable host's instances: their open compute meters are held from `since` (the
// host's last sign of life): settlements charge them up to `since` only. Released when the
// host's agent answers again: the next settlement charges the time in between if the
// instance ran on (a run that ended meanwhile closes at the container's own end instead).
Status hold_compute_meters(store::Database& db, const std::vector<std::string>& instance_ids, SysTime since);
Status release_compute_meters(store::Database& db, const std::vector<std::string>& instance_ids);

// Charges what the meter owes at `t` as one ledger entry (none when nothing is due).
Status settle_meter(store::Database& db, const Meter& m, SysTime t);
struct SettlementSummary {
  std::size_t meters = 0, entries = 0;
  std::int64_t charged = 0;
};
// Every open meter (of one account, when given) up to `t`, in the caller's transaction.
Result<SettlementSummary> settle_open_meters(store::Database& db, SysTime t,
                                             const std::optional<std::string>& account_id = std::nullopt);

// The accounts whose ids lie in [first, last]: a slice of one settlement pass.
struct AccountSpan {
  std::string first, last;
};
// Every open meter of the accounts in `span` up to `t`, in the caller's transaction.
Result<SettlementSummary> settle_open_meters(store::Database& db, SysTime t, const AccountSpan& span);
// The accounts with open meters at `t`, cut into spans of about `max_meters` open meters each
// (an account is never split), in id order. A pass settles one span per transaction, so the
// writer is held for a bounded time however many instances there are; each meter's settled
// mark moves with its ledger entry, so a crash between spans neither skips nor repeats a
// charge (the next pass takes what is left).
Result<std::vector<AccountSpan>> settlement_spans(store::Database& db, SysTime t, std::size_t max_meters);

// Compute charged so far for an instance (both of its compute meters).
Result<std::int64_t> compute_charged(store::Database& db, const std::string& instance_id);
// An instance's compute cost at `now`: what was charged plus what its open run has accrued
// and no settlement has charged yet (whole units, as a settlement at `now` would charge).
Result<std::int64_t> compute_cost_at(store::Database& db, const std::string& instance_id, SysTime now);
// What the account's open meters have accrued by `now` and no settlement has charged yet: the
// account's live balance is its ledger balance less this.
Result<std::int64_t> unsettled_of_account(store::Database& db, const std::string& account_id, SysTime now);

}  // namespace gpucloud::billing
