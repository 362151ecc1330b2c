#include "market/watches.h"

#include <boost/json/serialize.hpp>

#include "core/ids.h"
#include "events/events.h"

namespace gpucloud::market {
namespace json = boost::json;

namespace {

constexpr const char* kColumns = "SELECT id, user_id, zone, gpu_model, created_at, fired_at FROM market_watches ";

Watch watch_from(const store::Row& r) {
  Watch w;
  w.id = r.text(0);
  w.user_id = r.text(1);
  w.zone = r.text(2);
  w.gpu_model = r.text(3);
  w.created_at = from_unix_micros(r.int64(4));
  if (auto t = r.opt_int64(5)) w.fired_at = from_unix_micros(*t);
  return w;
}

Result<std::vector<Watch>> watches(store::Database& db, const std::string& sql, std::initializer_list<store::Arg> args) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<Watch> out;
  for (const auto& r : *rows) out.push_back(watch_from(r));
  return out;
}

// One watch fires: compare-and-set on fired_at (a second writer finds it fired), its event,
// and the webhook of the watcher's balance alert when one is set.
Status fire(store::Database& db, const Watch& w, SysTime now) {
  if (auto s = db.run("UPDATE market_watches SET fired_at = ? WHERE id = ? AND fired_at IS NULL", {to_unix_micros(now), w.id});
      !s)
    return s;
  if (db.changes() != 1) return ok();
  const std::string message = "a " + w.gpu_model + " in " + w.zone + " is free now (you asked to be told)";
  if (auto s = events::record(db, now, "market.gpu_available", w.id, w.user_id, message,
                              {{"zone", w.zone}, {"gpu_model", w.gpu_model}});
      !s)
    return s;
  auto hook = db.one("SELECT a.id, a.alert_webhook_url FROM users u JOIN billing_accounts a ON a.id = u.billing_account "
                     "WHERE u.id = ? AND a.alert_webhook_url IS NOT NULL AND a.alert_webhook_url != ''",
                     {w.user_id});
  if (!hook) return fail(hook.error());
  if (!*hook) return ok();
  json::object body{{"event", "gpu_available"},        {"user", w.user_id},
                    {"zone", w.zone},                  {"gpu_model", w.gpu_model},
                    {"time", format_rfc3339(now)}};
  return db.run("INSERT INTO webhook_outbox (id, account_id, url, body, created_at) VALUES (?, ?, ?, ?, ?)",
                {new_id("wh"), (*hook)->text(0), (*hook)->text(1), json::serialize(body), to_unix_micros(now)});
}

}  // namespace

Result<Watch> watch_model(store::Database& db, const std::string& user_id, const std::string& zone,
                          const std::string& gpu_model, SysTime now) {
  auto sold = db.one("SELECT 1 FROM gpus g JOIN hosts h ON h.id = g.host_id WHERE h.zone = ? AND g.model = ? LIMIT 1",
                     {zone, gpu_model});
  if (!sold) return fail(sold.error());
  if (!*sold) return fail(ErrorCode::invalid_argument, "gpu_model: no " + gpu_model + " is sold in zone " + zone);
  auto open = watches(db, std::string(kColumns) + "WHERE user_id = ? AND zone = ? AND gpu_model = ? AND fired_at IS NULL",
                      {user_id, zone, gpu_model});
  if (!open) return fail(open.error());
  if (!open->empty()) return open->front();  // asked again: the same watch
  Watch w{new_id("watch"), user_id, zone, gpu_model, now, std::nullopt};
  if (auto s = db.run("INSERT INTO market_watches (id, user_id, zone, gpu_model, created_at) VALUES (?, ?, ?, ?, ?)",
                      {w.id, user_id, zone, gpu_model, to_unix_micros(now)});
      !s)
    return fail(s.error());
  return w;
}

Result<std::vector<Watch>> list_watches(store::Database& db, const std::string& user_id) {
  return watches(db, std::string(kColumns) + "WHERE user_id = ? ORDER BY created_at DESC, id DESC", {user_id});
}

Status delete_watch(store::Database& db, const std::string& user_id, const std::string& id) {
  if (auto s = db.run("DELETE FROM market_watches WHERE id = ? AND user_id = ?", {id, user_id}); !s) return s;
  if (db.changes() != 1) return fail(ErrorCode::not_found, "watch " + id + " not found");
  return ok();
}

Status fire_watches_for_reservation(store::Database& db, const std::string& reservation_id, SysTime now) {
  auto freed = db.all("SELECT DISTINCT h.zone, g.model FROM gpu_reservations gr JOIN gpus g ON g.uuid = gr.gpu_uuid "
                      "JOIN hosts h ON h.id = g.host_id WHERE gr.reservation_id = ?",
                      {reservation_id});
  if (!freed) return fail(freed.error());
  for (const auto& f : *freed) {
    auto open = watches(db, std::string(kColumns) + "WHERE zone = ? AND gpu_model = ? AND fired_at IS NULL ORDER BY created_at",
                        {f.text(0), f.text(1)});
    if (!open) return fail(open.error());
    for (const auto& w : *open)
      if (auto s = fire(db, w, now); !s) return s;
  }
  return ok();
}

json::object watch_json(const Watch& w) {
  return {{"id", w.id},
          {"zone", w.zone},
          {"gpu_model", w.gpu_model},
          {"created_at", format_rfc3339(w.created_at)},
          {"fired_at", w.fired_at ? json::value(format_rfc3339(*w.fired_at)) : json::value(nullptr)}};
}

}  // namespace gpucloud::market
