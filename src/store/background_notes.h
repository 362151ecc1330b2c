#pragma once
// What a standby replica's commit tells the leader (issue 27): the billing accounts whose
// balance or open meters it changed (the leader re-projects when each reaches zero: a top-up,
// a create, an adjustment made through any replica) and the earliest cost-control deadline it
// wrote. Only the leader plans these; without the note a change made through a standby would
// wait for the leader's next settlement pass, up to an hour. Delivered with the commit by
// NOTIFY (pg_listener.h); payloads are account ids and a time, never a secret.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::store {

inline constexpr const char* kBillingChannel = "gpucloud_billing";
inline constexpr const char* kSchedulesChannel = "gpucloud_schedules";
// A custom image deleted through a standby (its id): the leader arms its recycle-bin timers.
inline constexpr const char* kImageBinChannel = "gpucloud_image_bin";

// For the script that ends the write transaction (Store::commit_write): one NOTIFY per ~7,000
// bytes of account ids, and one for the deadline, each ending in ";\n". Empty when the
// transaction noted neither.
std::string background_notes_sql(const Database& db);

// The billing payloads of a transaction's noted accounts: each once, in order, none over
// ~7,000 bytes (PostgreSQL refuses 8,000).
std::vector<std::string> billing_note_payloads(const std::vector<std::string>& accounts);
// The payloads back: account ids (comma-separated), a deadline (Unix microseconds).
std::vector<std::string> billing_note_accounts(std::string_view payload);
std::optional<SysTime> schedule_note_time(std::string_view payload);

}  // namespace gpucloud::store
