#include "instances/images.h"

#include <boost/json.hpp>

#include "core/ids.h"

namespace gpucloud::instances {
namespace json = boost::json;

namespace {
std::string frameworks_text(const std::map<std::string, std::string>& f) {
  json::object o;
  for (const auto& [k, v] : f) o[k] = v;
  return json::serialize(o);
}

Status upsert_public(store::Database& db, const config::Image& img, bool ssh, SysTime now) {
  auto existing = db.one("SELECT id FROM images WHERE name = ? AND visibility = 'public' AND state != 'deleted'", {img.name});
  if (!existing) return fail(existing.error());
  if (*existing)
    return db.run("UPDATE images SET engine_image = ?, description = ?, os = ?, python = ?, cuda = ?, frameworks = ?, "
                  "ssh = ? WHERE id = ?",
                  {img.engine_image, img.description, img.os, img.python, img.cuda, frameworks_text(img.frameworks), ssh,
                   (*existing)->text(0)});
  return db.run("INSERT INTO images (id, name, engine_image, description, os, python, cuda, frameworks, visibility, state, "
                "ssh, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'public', 'available', ?, ?)",
                {new_id("img"), img.name, img.engine_image, img.description, img.os, img.python, img.cuda,
                 frameworks_text(img.frameworks), ssh, to_unix_micros(now)});
}

Image image_from(const store::Row& r) {
  Image i;
  i.id = r.text(0);
  i.name = r.text(1);
  i.engine_image = r.text(2);
  i.description = r.text(3);
  i.os = r.text(4);
  i.python = r.text(5);
  i.cuda = r.text(6);
  boost::system::error_code ec;
  auto f = json::parse(r.text(7), ec);
  if (!ec && f.is_object())
    for (const auto& [k, v] : f.as_object())
      if (v.is_string()) i.frameworks[std::string(k)] = std::string(v.as_string());
  i.size_bytes = r.int64(8);
  i.visibility = r.text(9);
  i.owner = r.opt_text(10);
  i.state = r.text(11);
  i.ssh = r.int64(12) != 0;
  i.created_at = from_unix_micros(r.int64(13));
  i.state_reason = r.text(14);
  return i;
}
constexpr const char* kColumns =
    "SELECT id, name, engine_image, description, os, python, cuda, frameworks, size_bytes, visibility, owner, state, ssh, "
    "created_at, state_reason FROM images ";
}  // namespace

Status seed_public_images(store::Database& db, const config::Config& config, SysTime now) {
  config::Image base{kBaseImageName, kBaseEngineImage,
                     "Debian 12 (bookworm) with OpenSSH, Python 3.11, tmux, procps, iproute2; built without a registry",
                     "Debian 12", "3.11", "", {{"openssh", "9.2"}, {"python", "3.11"}}, true};
  if (auto s = upsert_public(db, base, true, now); !s) return s;
  for (const auto& img : config.images)
    if (auto s = upsert_public(db, img, img.ssh, now); !s) return s;
  return ok();
}

Result<std::vector<Image>> list_images(store::Database& db, const std::string& viewer) {
  auto rows = db.all(std::string(kColumns) +
                         "WHERE state != 'deleted' AND (visibility = 'public' OR owner = ?) ORDER BY created_at DESC, id DESC",
                     {viewer});
  if (!rows) return fail(rows.error());
  std::vector<Image> out;
  for (const auto& r : *rows) out.push_back(image_from(r));
  return out;
}

Result<Image> find_image_by_id(store::Database& db, const std::string& id) {
  auto row = db.one(std::string(kColumns) + "WHERE id = ?", {id});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "image " + id + " not found");
  return image_from(**row);
}

Result<Image> find_image(store::Database& db, const std::string& viewer, const std::string& id_or_name) {
  auto row = db.one(std::string(kColumns) +
                        "WHERE state != 'deleted' AND (visibility = 'public' OR owner = ?) AND (id = ? OR name = ?) "
                        "ORDER BY visibility = 'private' DESC LIMIT 1",
                    {viewer, id_or_name, id_or_name});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "image " + id_or_name + " not found");
  return image_from(**row);
}

json::object image_json(const Image& i) {
  json::object frameworks;
  for (const auto& [k, v] : i.frameworks) frameworks[k] = v;
  auto or_null = [](const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); };
  return {{"id", i.id},
          {"name", i.name},
          {"description", i.description},
          {"os", or_null(i.os)},
          {"python", or_null(i.python)},
          {"cuda", or_null(i.cuda)},
          {"state_reason", or_null(i.state_reason)},
          {"frameworks", std::move(frameworks)},
          {"size_bytes", i.size_bytes},
          {"visibility", i.visibility},
          {"owner", i.owner ? json::value(*i.owner) : json::value(nullptr)},
          {"state", i.state},
          {"ssh", i.ssh},
          {"engine_image", i.engine_image},
          {"created_at", format_rfc3339(i.created_at)}};
}

Result<std::vector<Image>> public_images(store::Database& db) {
  auto rows = db.all(std::string(kColumns) + "WHERE visibility = 'public' AND state != 'deleted' ORDER BY created_at, id", {});
  if (!rows) return fail(rows.error());
  std::vector<Image> out;
  for (const auto& r : *rows) out.push_back(image_from(r));
  return out;
}

Status record_engine_image(store::Database& db, const Image& image, const EngineImage& seen, const std::string& host_name) {
  std::string state = "available", reason;
  if (!seen.present) {
    state = seen.pulling ? "creating" : "error";
    reason = seen.pulling ? "pulling " + image.engine_image + " onto " + host_name
                          : host_name + " does not hold " + image.engine_image +
                                (seen.pull_error.empty() ? "" : "; " + seen.pull_error);
  }
  return db.run("UPDATE images SET state = ?, state_reason = ?, size_bytes = ? WHERE id = ? AND state != 'deleted'",
                {state, reason, seen.present ? seen.size_bytes : image.size_bytes, image.id});
}

}  // namespace gpucloud::instances

namespace gpucloud::instances {
Result<std::int64_t> private_image_count(store::Database& db, const std::string& owner) {
  auto row = db.one("SELECT COUNT(*) FROM images WHERE owner = ? AND visibility = 'private'", {owner});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}
}  // namespace gpucloud::instances
