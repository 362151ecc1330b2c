#include "security_groups/security_group_record.h"

#include <boost/json.hpp>

#include "events/events.h"

namespace gpucloud::security_groups {
namespace json = boost::json;

namespace {

constexpr const char* kGroupColumns =
    "SELECT id, owner, name, description, rules, is_default, generation, created_at, updated_at FROM security_groups ";

Result<SecurityGroup> group_from(store::Database& db, const store::Row& r) {
  SecurityGroup g;
  g.id = r.text(0);
  g.owner = r.text(1);
  g.name = r.text(2);
  g.description = r.text(3);
  auto rules = rules_from_text(r.text(4));
  if (!rules) return fail(rules.error());
  g.rules = std::move(*rules);
  g.is_default = r.int64(5) != 0;
  g.generation = r.int64(6);
  g.created_at = from_unix_micros(r.int64(7));
  g.updated_at = from_unix_micros(r.int64(8));
  auto users = db.all("SELECT id FROM instances WHERE security_group = ? AND state != 'released' ORDER BY created_at, id",
                      {g.id});
  if (!users) return fail(users.error());
  for (const auto& u : *users) g.instances.push_back(u.text(0));
  return g;
}

Result<std::vector<SecurityGroup>> load_groups(store::Database& db, const std::string& sql,
                                               std::initializer_list<store::Arg> args) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<SecurityGroup> out;
  for (const auto& r : *rows) {
    auto g = group_from(db, r);
    if (!g) return fail(g.error());
    out.push_back(std::move(*g));
  }
  return out;
}

std::string rules_text(const std::vector<Rule>& rules) { return json::serialize(rules_json(rules)); }

}  // namespace

std::vector<Rule> default_rules() { return {Rule{Protocol::tcp, 22, 22, "0.0.0.0/0", "SSH"}}; }

std::string default_group_id(const std::string& owner) {
  // "u-XXXXXXXXXXXX" → "sg-XXXXXXXXXXXX" (migration 10 derives it the same way).
  return "sg-" + (owner.size() > 2 ? owner.substr(2) : owner);
}

Result<SecurityGroup> ensure_default_group(store::Database& db, const std::string& owner, SysTime now) {
  const std::string id = default_group_id(owner);
  auto existing = load_group(db, id);
  if (!existing) return fail(existing.error());
  if (*existing) return std::move(**existing);
  SecurityGroup g{id, owner, std::string(kDefaultGroupName), "SSH from anywhere", default_rules(), true, 1, now, now, {}};
  // ON CONFLICT: another writer made it first; both then read the same row.
  auto s = db.run(
      "INSERT INTO security_groups (id, owner, name, description, rules, is_default, generation, created_at, updated_at) "
      "VALUES (?, ?, ?, ?, ?, 1, 1, ?, ?) ON CONFLICT (id) DO NOTHING",
      {g.id, owner, g.name, g.description, rules_text(g.rules), to_unix_micros(now), to_unix_micros(now)});
  if (!s) return fail(s.error());
  auto made = load_group(db, id);
  if (!made) return fail(made.error());
  if (!*made) return fail(ErrorCode::internal, "the default security group of " + owner + " was not made");
  return std::move(**made);
}

Status insert_group(store::Database& db, const SecurityGroup& g, SysTime now) {
  auto s = db.run(
      "INSERT INTO security_groups (id, owner, name, description, rules, is_default, generation, created_at, updated_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {g.id, g.owner, g.name, g.description, rules_text(g.rules), g.is_default, g.generation,
       to_unix_micros(g.created_at), to_unix_micros(g.updated_at)});
  if (!s) {
    // The unique index is the last word on names, also between writers.
    if (s.error().detail.find("UNIQUE") != std::string::npos)
      return fail(ErrorCode::conflict, "you already have a security group named " + g.name);
    return s;
  }
  return events::record(db, now, "security_group.created", g.id, g.owner, "security group " + g.name + " created",
                        {{"name", g.name}, {"rules", g.rules.size()}});
}

Result<SecurityGroup> find_owned_group(store::Database& db, const std::string& owner, const std::string& id_or_name) {
  auto many = load_groups(db, std::string(kGroupColumns) +
                                  "WHERE owner = ? AND (id = ? OR name = ?) AND deleted_at IS NULL ORDER BY id = ? DESC",
                          {owner, id_or_name, id_or_name, id_or_name});
  if (!many) return fail(many.error());
  if (many->empty()) return fail(ErrorCode::not_found, "security group " + id_or_name + " not found");
  return std::move(many->front());
}

Result<std::optional<SecurityGroup>> load_group(store::Database& db, const std::string& id) {
  auto many = load_groups(db, std::string(kGroupColumns) + "WHERE id = ?", {id});
  if (!many) return fail(many.error());
  if (many->empty()) return std::optional<SecurityGroup>{};
  return std::optional<SecurityGroup>{std::move(many->front())};
}

Result<std::vector<SecurityGroup>> list_groups(store::Database& db, const std::string& owner) {
  return load_groups(db, std::string(kGroupColumns) + "WHERE owner = ? AND deleted_at IS NULL ORDER BY created_at DESC, id DESC",
                     {owner});
}

Result<bool> live_group_name_taken(store::Database& db, const std::string& owner, const std::string& name) {
  auto row = db.one("SELECT 1 FROM security_groups WHERE owner = ? AND name = ? AND deleted_at IS NULL", {owner, name});
  if (!row) return fail(row.error());
  return row->has_value();
}

Status update_group(store::Database& db, const SecurityGroup& loaded, SecurityGroup& next, SysTime now) {
  next.generation = loaded.generation + 1;
  next.updated_at = now;
  auto s = db.run(
      "UPDATE security_groups SET description = ?, rules = ?, generation = ?, updated_at = ? "
      "WHERE id = ? AND generation = ? AND deleted_at IS NULL",
      {next.description, rules_text(next.rules), next.generation, to_unix_micros(now), loaded.id, loaded.generation});
  if (!s) return s;
  if (db.changes() == 0) return fail(ErrorCode::conflict, "security group " + loaded.name + " changed meanwhile; try again");
  return events::record(db, now, "security_group.updated", loaded.id, loaded.owner,
                        "security group " + loaded.name + " now has " + std::to_string(next.rules.size()) + " rules",
                        {{"name", loaded.name}, {"rules", next.rules.size()}, {"instances", next.instances.size()}});
}

Status delete_group(store::Database& db, const SecurityGroup& loaded, SysTime now) {
  if (loaded.is_default) return fail(ErrorCode::conflict, "the default security group cannot be deleted");
  if (!loaded.instances.empty()) {
    return fail(ErrorCode::conflict, "security group " + loaded.name + " is used by instance " + loaded.instances.front() +
                                         (loaded.instances.size() > 1 ? " and " + std::to_string(loaded.instances.size() - 1) + " more" : ""));
  }
  // The NOT EXISTS holds the rule against an instance made meanwhile by another writer; an
  // instance that names the group also bumps its generation (see use_group).
  auto s = db.run(
      "UPDATE security_groups SET deleted_at = ?, generation = generation + 1 WHERE id = ? AND generation = ? "
      "AND deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM instances WHERE security_group = ? AND state != 'released')",
      {to_unix_micros(now), loaded.id, loaded.generation, loaded.id});
  if (!s) return s;
  if (db.changes() == 0) return fail(ErrorCode::conflict, "security group " + loaded.name + " changed or came into use meanwhile");
  return events::record(db, now, "security_group.deleted", loaded.id, loaded.owner, "security group " + loaded.name + " deleted",
                        {{"name", loaded.name}});
}

json::object group_json(const SecurityGroup& g) {
  json::array instances;
  for (const auto& i : g.instances) instances.push_back(json::value(i));
  return {{"id", g.id},
          {"name", g.name},
          {"owner", g.owner},
          {"description", g.description},
          {"rules", rules_json(g.rules)},
          {"instances", std::move(instances)},
          {"is_default", g.is_default},
          {"created_at", format_rfc3339(g.created_at)},
          {"updated_at", format_rfc3339(g.updated_at)}};
}

}  // namespace gpucloud::security_groups
