#include "events/events.h"

#include <boost/json.hpp>

#include "core/ids.h"

namespace gpucloud::events {
namespace json = boost::json;

Status record(store::Database& db, SysTime time, const std::string& type, const std::string& resource,
              const std::optional<std::string>& user, const std::string& message, json::object data) {
  db.note_event_written();
  return db.run("INSERT INTO events (id, time, type, resource, user_id, message, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                {new_id("ev"), to_unix_micros(time), type, resource, user, message, json::serialize(data)});
}

Result<std::vector<Event>> list(store::Database& db, const Query& q) {
  auto rows = db.all("SELECT seq, id, time, type, resource, user_id, message, data FROM events "
                     "WHERE seq > ? AND (? IS NULL OR user_id = ?) AND (? IS NULL OR resource = ?) ORDER BY seq LIMIT ?",
                     {q.since_seq, q.user, q.user, q.resource, q.resource, static_cast<std::int64_t>(q.limit)});
  if (!rows) return fail(rows.error());
  std::vector<Event> out;
  for (const auto& r : *rows) {
    Event e{r.int64(0), r.text(1), from_unix_micros(r.int64(2)), r.text(3), r.text(4), r.opt_text(5), r.text(6), {}};
    boost::system::error_code ec;
    auto data = json::parse(r.text(7), ec);
    if (!ec && data.is_object()) e.data = std::move(data.as_object());
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::int64_t> latest_seq(store::Database& db) {
  auto row = db.one("SELECT COALESCE(MAX(seq), 0) FROM events");
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

json::object to_json(const Event& e) {
  return {{"id", e.id},
          {"seq", e.seq},
          {"time", format_rfc3339(e.time)},
          {"type", e.type},
          {"resource", e.resource},
          {"user", e.user ? json::value(*e.user) : json::value(nullptr)},
          {"message", e.message},
          {"data", e.data}};
}

Result<std::string> resolve_resource_name(store::Database& db, const std::optional<std::string>& user,
                                          const std::string& resource) {
  auto row = db.one(
      "SELECT id FROM ("
      " SELECT id, 0 AS rank, created_at FROM instances WHERE name = ? AND state != 'released' AND (? IS NULL OR owner = ?)"
      " UNION ALL SELECT id, 1, created_at FROM ssh_keys WHERE name = ? AND (? IS NULL OR owner = ?)"
      " UNION ALL SELECT id, 2, created_at FROM images WHERE name = ? AND (? IS NULL OR owner = ?)"
      " UNION ALL SELECT id, 3, created_at FROM instances WHERE name = ? AND state = 'released' AND (? IS NULL OR owner = ?)"
      ") AS named ORDER BY rank, created_at DESC LIMIT 1",
      {resource, user, user, resource, user, user, resource, user, user, resource, user, user});
  if (!row) return fail(row.error());
  return *row ? (*row)->text(0) : resource;
}

}  // namespace gpucloud::events
