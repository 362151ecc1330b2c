#include "instances/images.h"

#include "billing/resource_meters.h"

#include <boost/json.hpp>

#include <algorithm>

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
  const bool jupyter = img.jupyter;
  auto existing = db.one("SELECT id FROM images WHERE name = ? AND visibility = 'public' AND state != 'deleted'", {img.name});
  if (!existing) return fail(existing.error());
  if (*existing)
    return db.run("UPDATE images SET engine_image = ?, description = ?, os = ?, python = ?, cuda = ?, frameworks = ?, "
                  "ssh = ?, jupyter = ? WHERE id = ?",
                  {img.engine_image, img.description, img.os, img.python, img.cuda, frameworks_text(img.frameworks), ssh,
                   jupyter, (*existing)->text(0)});
  return db.run("INSERT INTO images (id, name, engine_image, description, os, python, cuda, frameworks, visibility, state, "
                "ssh, jupyter, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'public', 'available', ?, ?, ?)",
                {new_id("img"), img.name, img.engine_image, img.description, img.os, img.python, img.cuda,
                 frameworks_text(img.frameworks), ssh, jupyter, to_unix_micros(now)});
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
  i.own_size_bytes = r.int64(15);
  i.host_id = r.opt_text(16);
  i.source_instance = r.opt_text(17);
  i.base_image_id = r.opt_text(18);
  if (auto t = r.opt_int64(19)) i.deleted_at = from_unix_micros(*t);
  i.purge_warned = r.int64(20) != 0;
  if (auto t = r.opt_int64(21)) i.purged_at = from_unix_micros(*t);
  i.engine_removed = r.int64(22) != 0;
  i.jupyter = r.int64(23) != 0;
  return i;
}
constexpr const char* kImageColumns =
    "SELECT id, name, engine_image, description, os, python, cuda, frameworks, size_bytes, visibility, owner, state, ssh, "
    "created_at, state_reason, own_size_bytes, host_id, source_instance, base_image_id, deleted_at, purge_warned, "
    "purged_at, engine_removed, jupyter FROM images ";

Result<std::vector<Image>> many(store::Database& db, std::string_view where, std::initializer_list<store::Arg> args) {
  auto rows = db.all(std::string(kImageColumns) + std::string(where), args);
  if (!rows) return fail(rows.error());
  std::vector<Image> out;
  for (const auto& r : *rows) out.push_back(image_from(r));
  return out;
}
}  // namespace

Status seed_public_images(store::Database& db, const config::Config& config, SysTime now) {
  config::Image base{kBaseImageName, kBaseEngineImage,
                     "Debian 12 (bookworm) with OpenSSH, Python 3.11, Jupyter Notebook 6.4 (opened from the console, "
                     "no port needed), tmux, procps, iproute2; built without a registry",
                     "Debian 12", "3.11", "", {{"openssh", "9.2"}, {"python", "3.11"}, {"notebook", "6.4"}}, true, true};
  if (auto s = upsert_public(db, base, true, now); !s) return s;
  config::Image jupyter{kJupyterImageName, kBaseEngineImage,
                        "The same image as debian-12-base (which has Jupyter Notebook 6.4); this name is kept for "
                        "scripts and instances made with it",
                        "Debian 12", "3.11", "", {{"openssh", "9.2"}, {"python", "3.11"}, {"notebook", "6.4"}}, true, true};
  if (auto s = upsert_public(db, jupyter, true, now); !s) return s;
  for (const auto& img : config.images)
    if (auto s = upsert_public(db, img, img.ssh, now); !s) return s;
  return ok();
}

Result<std::vector<Image>> list_images(store::Database& db, const std::string& viewer, bool deleted) {
  if (deleted)
    return many(db, "WHERE state = 'deleted' AND purged_at IS NULL AND visibility = 'private' AND owner = ? "
                    "ORDER BY created_at DESC, id DESC",
                {viewer});
  return many(db, "WHERE state != 'deleted' AND (visibility = 'public' OR owner = ?) ORDER BY created_at DESC, id DESC",
              {viewer});
}

Result<Image> find_image_for_view(store::Database& db, const std::string& viewer, const std::string& id_or_name) {
  auto live = find_image(db, viewer, id_or_name);
  if (live || live.error().code != ErrorCode::not_found) return live;
  auto row = db.one(std::string(kImageColumns) +
                        "WHERE state = 'deleted' AND purged_at IS NULL AND visibility = 'private' AND owner = ? "
                        "AND (id = ? OR name = ?) ORDER BY deleted_at DESC LIMIT 1",
                    {viewer, id_or_name, id_or_name});
  if (!row) return fail(row.error());
  if (!*row) return live;
  return image_from(**row);
}

Result<Image> find_image_by_id(store::Database& db, const std::string& id) {
  auto row = db.one(std::string(kImageColumns) + "WHERE id = ?", {id});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "image " + id + " not found");
  return image_from(**row);
}

Result<Image> find_image(store::Database& db, const std::string& viewer, const std::string& id_or_name) {
  auto row = db.one(std::string(kImageColumns) +
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
          {"jupyter", i.jupyter},
          {"engine_image", i.engine_image},
          {"own_size_bytes", i.own_size_bytes},
          {"source_instance", i.source_instance ? json::value(*i.source_instance) : json::value(nullptr)},
          {"deleted_at", i.deleted_at ? json::value(format_rfc3339(*i.deleted_at)) : json::value(nullptr)},
          {"created_at", format_rfc3339(i.created_at)}};
}

Result<std::vector<Image>> public_images(store::Database& db) {
  auto rows = db.all(std::string(kImageColumns) + "WHERE visibility = 'public' AND state != 'deleted' ORDER BY created_at, id", {});
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

// ---- custom images -------------------------------------------------------------------------

std::int64_t own_size_bytes(std::int64_t image_size_bytes, std::int64_t base_size_bytes) {
  // A flattened system disk shares no layer with its base; never bill a negative size.
  return std::max<std::int64_t>(0, image_size_bytes - std::max<std::int64_t>(0, base_size_bytes));
}

Status check_custom_image_name(store::Database& db, const std::string& owner, const std::string& name) {
  if (!is_valid_resource_name(name))
    return fail(ErrorCode::invalid_argument, "name: must match [a-z][a-z0-9-]{0,62} and not look like an id");
  auto public_one = db.one("SELECT 1 FROM images WHERE name = ? AND visibility = 'public' AND state != 'deleted'", {name});
  if (!public_one) return fail(public_one.error());
  if (*public_one) return fail(ErrorCode::conflict, "name: " + name + " is a public image's name");
  auto own = db.one("SELECT 1 FROM images WHERE owner = ? AND name = ? AND visibility = 'private' AND state != 'deleted'",
                    {owner, name});
  if (!own) return fail(own.error());
  if (*own) return fail(ErrorCode::conflict, "name: you already have an image named " + name);
  return ok();
}

Result<std::int64_t> custom_image_count(store::Database& db, const std::string& owner) {
  auto row = db.one("SELECT COUNT(*) FROM images WHERE owner = ? AND visibility = 'private' AND purged_at IS NULL", {owner});
  if (!row) return fail(row.error());
  return (*row)->int64(0);
}

Status insert_custom_image(store::Database& db, const Image& i) {
  return db.run("INSERT INTO images (id, name, engine_image, description, os, python, cuda, frameworks, size_bytes, "
                "visibility, owner, state, ssh, created_at, state_reason, own_size_bytes, host_id, source_instance, "
                "base_image_id, jupyter) VALUES (?, ?, '', ?, ?, ?, ?, ?, 0, 'private', ?, 'creating', ?, ?, '', 0, ?, ?, ?, ?)",
                {i.id, i.name, i.description, i.os, i.python, i.cuda, frameworks_text(i.frameworks), *i.owner, i.ssh,
                 to_unix_micros(i.created_at), i.host_id, i.source_instance, i.base_image_id, i.jupyter});
}

Result<bool> finish_custom_image(store::Database& db, const std::string& id, const SaveResult& r, SysTime now) {
  Status s = r.ok ? db.run("UPDATE images SET state = 'available', state_reason = '', engine_image = ?, size_bytes = ?, "
                           "own_size_bytes = ? WHERE id = ? AND state = 'creating'",
                           {r.engine_image, r.size_bytes, r.own_size_bytes, id})
                  : db.run("UPDATE images SET state = 'error', state_reason = ? WHERE id = ? AND state = 'creating'",
                           {r.reason, id});
  if (!s) return fail(s.error());
  if (db.changes() != 1) return false;
  if (r.ok) {
    // A custom image bills for its own layers from the moment it is available.
    auto image = find_image_by_id(db, id);
    if (!image) return fail(image.error());
    if (auto b = billing::follow_image(db, id, image->owner.value_or(""), r.own_size_bytes, now); !b) return fail(b.error());
  }
  return true;
}

namespace {
Result<Image> own_custom(store::Database& db, const std::string& owner, const std::string& id_or_name, bool deleted) {
  auto row = db.one(std::string(kImageColumns) + "WHERE purged_at IS NULL AND (id = ? OR name = ?) AND " +
                        (deleted ? "state = 'deleted' " : "state != 'deleted' ") +
                        "AND (visibility = 'public' OR owner = ?) ORDER BY visibility = 'private' DESC, "
                        "deleted_at DESC LIMIT 1",
                    {id_or_name, id_or_name, owner});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "image " + id_or_name + " not found");
  return image_from(**row);
}
}  // namespace

Result<Image> delete_custom_image(store::Database& db, const std::string& owner, const std::string& id_or_name, SysTime now) {
  auto image = own_custom(db, owner, id_or_name, false);
  if (!image) return image;
  if (image->visibility == "public") return fail(ErrorCode::forbidden, "image " + image->name + " is a public image");
  if (image->state == "creating")
    return fail(ErrorCode::conflict, "image " + image->name + " is being saved; delete it once it is available");
  // The recycle bin's deadline is fixed at the first deletion: a deletion after a restore keeps
  // the first one's time (the purge timers key on deleted_at).
  if (auto s = db.run("UPDATE images SET state = 'deleted', deleted_at = COALESCE(first_deleted_at, ?), "
                      "first_deleted_at = COALESCE(first_deleted_at, ?), purge_warned = 0 WHERE id = ? AND state = ?",
                      {to_unix_micros(now), to_unix_micros(now), image->id, image->state});
      !s)
    return fail(s.error());
  if (db.changes() != 1) return fail(ErrorCode::conflict, "image " + image->name + " changed meanwhile; try again");
  // Deleting hides it and stops its billing at once (spec "Custom image").
  if (auto b = billing::follow_image(db, image->id, owner, std::nullopt, now); !b) return fail(b.error());
  return find_image_by_id(db, image->id);
}

Result<Image> restore_custom_image(store::Database& db, const std::string& owner, const std::string& id_or_name,
                                   SysTime now) {
  auto image = own_custom(db, owner, id_or_name, true);
  if (!image) {
    // A live one by that id: restoring it changes nothing.
    auto live = own_custom(db, owner, id_or_name, false);
    if (live && live->visibility == "private") return live;
    return image;
  }
  if (auto s = check_custom_image_name(db, owner, image->name); !s)
    return fail(s.error().code, "cannot restore: " + s.error().detail);
  const std::string state = image->engine_image.empty() ? "error" : "available";
  if (auto s = db.run("UPDATE images SET state = ?, deleted_at = NULL, purge_warned = 0 WHERE id = ? AND state = 'deleted' "
                      "AND purged_at IS NULL",
                      {state, image->id});
      !s)
    return fail(s.error());
  if (db.changes() != 1) return fail(ErrorCode::conflict, "image " + image->name + " changed meanwhile; try again");
  if (state == "available")
    if (auto b = billing::follow_image(db, image->id, owner, image->own_size_bytes, now); !b) return fail(b.error());
  return find_image_by_id(db, image->id);
}

Result<std::vector<Image>> deleted_custom_images(store::Database& db) {
  return many(db, "WHERE visibility = 'private' AND state = 'deleted' AND purged_at IS NULL ORDER BY deleted_at, id", {});
}

Result<bool> mark_purge_warned(store::Database& db, const std::string& id, SysTime deleted_at) {
  if (auto s = db.run("UPDATE images SET purge_warned = 1 WHERE id = ? AND state = 'deleted' AND purged_at IS NULL "
                      "AND deleted_at = ? AND purge_warned = 0",
                      {id, to_unix_micros(deleted_at)});
      !s)
    return fail(s.error());
  return db.changes() == 1;
}

Result<bool> mark_purged(store::Database& db, const std::string& id, SysTime deleted_at, SysTime now) {
  if (auto s = db.run("UPDATE images SET purged_at = ? WHERE id = ? AND state = 'deleted' AND purged_at IS NULL "
                      "AND deleted_at = ?",
                      {to_unix_micros(now), id, to_unix_micros(deleted_at)});
      !s)
    return fail(s.error());
  return db.changes() == 1;
}

Result<std::vector<Image>> engine_images_to_remove(store::Database& db) {
  return many(db, "WHERE visibility = 'private' AND purged_at IS NOT NULL AND engine_removed = 0 AND engine_image != '' "
                  "AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.image_id = images.id AND i.state != 'released') "
                  "ORDER BY purged_at, id",
              {});
}

Status mark_engine_removed(store::Database& db, const std::string& id) {
  return db.run("UPDATE images SET engine_removed = 1 WHERE id = ?", {id});
}

}  // namespace gpucloud::instances
