#include "store/background_notes.h"

#include <charconv>
#include <set>
#include <utility>

#include "store/pg_listener.h"

namespace gpucloud::store {

namespace {
// PostgreSQL takes a payload under 8,000 bytes.
constexpr std::size_t kPayloadBytes = 7000;
}  // namespace

std::vector<std::string> billing_note_payloads(const std::vector<std::string>& accounts) {
  std::vector<std::string> out;
  std::string payload;
  std::set<std::string_view> seen;  // an account noted twice by one transaction is sent once
  for (const auto& id : accounts) {
    if (id.empty() || !seen.insert(id).second) continue;
    if (!payload.empty() && payload.size() + 1 + id.size() > kPayloadBytes) out.push_back(std::exchange(payload, {}));
    if (!payload.empty()) payload += ',';
    payload += id;
  }
  if (!payload.empty()) out.push_back(std::move(payload));
  return out;
}

std::string background_notes_sql(const Database& db) {
  std::string sql;
  for (const auto& payload : billing_note_payloads(db.billing_changes())) sql += notify_sql(kBillingChannel, payload) + ";\n";
  if (auto at = db.schedule_noted()) sql += notify_sql(kSchedulesChannel, std::to_string(to_unix_micros(*at))) + ";\n";
  return sql;
}

std::vector<std::string> billing_note_accounts(std::string_view payload) {
  std::vector<std::string> out;
  while (!payload.empty()) {
    const auto comma = payload.find(',');
    const auto id = payload.substr(0, comma);
    if (!id.empty()) out.emplace_back(id);
    if (comma == std::string_view::npos) break;
    payload.remove_prefix(comma + 1);
  }
  return out;
}

std::optional<SysTime> schedule_note_time(std::string_view payload) {
  std::int64_t micros = 0;
  const auto [end, ec] = std::from_chars(payload.data(), payload.data() + payload.size(), micros);
  if (ec != std::errc() || end != payload.data() + payload.size()) return std::nullopt;
  return from_unix_micros(micros);
}

}  // namespace gpucloud::store
