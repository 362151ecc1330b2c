#include "auth/user_quotas.h"

#include <boost/json.hpp>

namespace gpucloud::auth {
namespace json = boost::json;

Result<QuotaOverrides> load_quota_overrides(store::Database& db, const std::string& user_id) {
  auto row = db.one("SELECT gpus, instances, disk_gib, images, snapshots FROM user_quotas WHERE user_id = ?", {user_id});
  if (!row) return fail(row.error());
  QuotaOverrides o;
  if (*row) {
    o.gpus = (*row)->opt_int64(0);
    o.instances = (*row)->opt_int64(1);
    o.disk_gib = (*row)->opt_int64(2);
    o.images = (*row)->opt_int64(3);
    o.snapshots = (*row)->opt_int64(4);
  }
  return o;
}

Status save_quota_overrides(store::Database& db, const std::string& user_id, const QuotaOverrides& o) {
  // Portable upsert: SQLite and PostgreSQL both take ON CONFLICT ... DO UPDATE.
  return db.run(
      "INSERT INTO user_quotas (user_id, gpus, instances, disk_gib, images, snapshots) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (user_id) DO UPDATE SET gpus = excluded.gpus, instances = excluded.instances, "
      "disk_gib = excluded.disk_gib, images = excluded.images, snapshots = excluded.snapshots",
      {user_id, o.gpus, o.instances, o.disk_gib, o.images, o.snapshots});
}

Result<config::Quotas> effective_quotas(store::Database& db, const config::Quotas& defaults, const std::string& user_id) {
  auto o = load_quota_overrides(db, user_id);
  if (!o) return fail(o.error());
  config::Quotas q = defaults;
  if (o->gpus) q.gpus = *o->gpus;
  if (o->instances) q.instances = *o->instances;
  if (o->disk_gib) q.disk_gib = *o->disk_gib;
  if (o->images) q.images = *o->images;
  if (o->snapshots) q.snapshots = *o->snapshots;
  return q;
}

Result<QuotaOverrides> quota_overrides_from_json(const json::value& body) {
  if (!body.is_object()) return fail(ErrorCode::invalid_argument, "body: must be a JSON object");
  const auto& o = body.as_object();
  for (const auto& kv : o)
    if (kv.key() != "gpus" && kv.key() != "instances" && kv.key() != "disk_gib" && kv.key() != "images" &&
        kv.key() != "snapshots")
      return fail(ErrorCode::invalid_argument,
                  std::string(kv.key()) + ": unknown field (gpus, instances, disk_gib, images, snapshots)");
  QuotaOverrides out;
  auto field = [&](const char* name, std::optional<std::int64_t>& into) -> Status {
    const json::value* v = o.if_contains(name);
    if (!v || v->is_null()) return ok();
    if (!v->is_int64() && !v->is_uint64())
      return fail(ErrorCode::invalid_argument, std::string(name) + ": must be an integer >= 0 or null");
    if (v->is_uint64() && v->as_uint64() > static_cast<std::uint64_t>(1) << 40)
      return fail(ErrorCode::invalid_argument, std::string(name) + ": too large");
    std::int64_t n = v->is_int64() ? v->as_int64() : static_cast<std::int64_t>(v->as_uint64());
    if (n < 0 || n > (std::int64_t{1} << 40))
      return fail(ErrorCode::invalid_argument, std::string(name) + ": must be an integer >= 0 or null");
    into = n;
    return ok();
  };
  if (auto s = field("gpus", out.gpus); !s) return fail(s.error());
  if (auto s = field("instances", out.instances); !s) return fail(s.error());
  if (auto s = field("disk_gib", out.disk_gib); !s) return fail(s.error());
  if (auto s = field("images", out.images); !s) return fail(s.error());
  if (auto s = field("snapshots", out.snapshots); !s) return fail(s.error());
  return out;
}

json::object quotas_json(const config::Quotas& q) {
  return json::object{{"gpus", q.gpus},
                      {"instances", q.instances},
                      {"disk_gib", q.disk_gib},
                      {"images", q.images},
                      {"snapshots", q.snapshots}};
}

json::object overrides_json(const QuotaOverrides& o) {
  auto v = [](const std::optional<std::int64_t>& x) { return x ? json::value(*x) : json::value(nullptr); };
  return json::object{{"gpus", v(o.gpus)},
                      {"instances", v(o.instances)},
                      {"disk_gib", v(o.disk_gib)},
                      {"images", v(o.images)},
                      {"snapshots", v(o.snapshots)}};
}

}  // namespace gpucloud::auth
