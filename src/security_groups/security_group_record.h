#pragma once
// Security groups as the store keeps them (the repository), and their API view. A group's
// rules change only by compare-and-set on its generation, with its event in the same
// transaction; a deleted group keeps its row (released instances still name it), hidden.
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "security_groups/rules.h"
#include "store/database.h"

namespace gpucloud::security_groups {

inline constexpr std::string_view kDefaultGroupName = "default";

struct SecurityGroup {
  std::string id, owner, name, description;
  std::vector<Rule> rules;
  bool is_default = false;
  std::int64_t generation = 1;
  SysTime created_at, updated_at;
  std::vector<std::string> instances;  // read only: the ids of live instances that use it
};

// The rules every user's `default` group starts with: SSH from anywhere.
std::vector<Rule> default_rules();
// The id of a user's default group: derived from the user's id, so making it twice (two
// requests at once, or the migration and a request) makes one row.
std::string default_group_id(const std::string& owner);
// Makes the user's default group if it does not exist yet; its current row either way.
Result<SecurityGroup> ensure_default_group(store::Database& db, const std::string& owner, SysTime now);

Status insert_group(store::Database& db, const SecurityGroup& group, SysTime now);
// The owner's live group by id or name; deleted and other users' groups are not_found.
Result<SecurityGroup> find_owned_group(store::Database& db, const std::string& owner, const std::string& id_or_name);
// A group by id whatever its owner or state (for instances that name it); nullopt if none.
Result<std::optional<SecurityGroup>> load_group(store::Database& db, const std::string& id);
// Newest first.
Result<std::vector<SecurityGroup>> list_groups(store::Database& db, const std::string& owner);
Result<bool> live_group_name_taken(store::Database& db, const std::string& owner, const std::string& name);
// Writes `next`'s description and rules if the row is still at `loaded.generation`
// (`conflict` otherwise); records `security_group.updated`.
Status update_group(store::Database& db, const SecurityGroup& loaded, SecurityGroup& next, SysTime now);
// Hides the group if it is still at `loaded.generation` and no live instance uses it
// (`conflict` naming one otherwise); records `security_group.deleted`.
Status delete_group(store::Database& db, const SecurityGroup& loaded, SysTime now);

boost::json::object group_json(const SecurityGroup& group);

}  // namespace gpucloud::security_groups
