#include "security_groups/security_group_actions.h"

#include "core/ids.h"
#include "instances/instance_record.h"

namespace gpucloud::security_groups {

Result<SecurityGroup> create_group(store::Database& db, const instances::Actor& actor, const CreateGroupRequest& request,
                                   SysTime now) {
  if (request.name == kDefaultGroupName) {
    return fail(ErrorCode::conflict, "every user has a group named default already; pick another name");
  }
  // The default group first, so a user's own groups never take its place in name order.
  if (auto d = ensure_default_group(db, actor.user_id, now); !d) return fail(d.error());
  auto taken = live_group_name_taken(db, actor.user_id, request.name);
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you already have a security group named " + request.name);
  SecurityGroup g{new_id("sg"), actor.user_id, request.name, request.description, request.rules, false, 1, now, now, {}};
  if (auto s = insert_group(db, g, now); !s) return fail(s.error());
  return g;
}

Result<std::vector<SecurityGroup>> groups_of(store::Database& db, const instances::Actor& actor, SysTime now) {
  if (auto d = ensure_default_group(db, actor.user_id, now); !d) return fail(d.error());
  return list_groups(db, actor.user_id);
}

Result<SecurityGroup> group_of(store::Database& db, const instances::Actor& actor, const std::string& id_or_name,
                               SysTime now) {
  if (id_or_name == kDefaultGroupName || id_or_name == default_group_id(actor.user_id)) {
    return ensure_default_group(db, actor.user_id, now);
  }
  return find_owned_group(db, actor.user_id, id_or_name);
}

Result<GroupChange> replace_rules(store::Database& db, const instances::Actor& actor, const std::string& id_or_name,
                                  const ReplaceRulesRequest& request, SysTime now) {
  auto loaded = group_of(db, actor, id_or_name, now);
  if (!loaded) return fail(loaded.error());
  SecurityGroup next = *loaded;
  next.rules = request.rules;
  if (request.description) next.description = *request.description;
  if (auto s = update_group(db, *loaded, next, now); !s) return fail(s.error());
  // Every live instance of the group gets a new generation: converge re-sends its ports with
  // the new sources, and the agent's fence takes the newer command.
  GroupChange change{next, {}};
  for (const auto& id : loaded->instances) {
    auto instance = instances::load_instance(db, id);
    if (!instance) return fail(instance.error());
    if (!*instance) continue;
    instances::Instance bumped = **instance;
    if (auto s = instances::update_desired(db, **instance, bumped); !s) return fail(s.error());
    change.instances_to_refresh.push_back(id);
  }
  return change;
}

Status delete_group(store::Database& db, const instances::Actor& actor, const std::string& id_or_name, SysTime now) {
  auto loaded = group_of(db, actor, id_or_name, now);
  if (!loaded) return fail(loaded.error());
  return delete_group(db, *loaded, now);
}

Result<SecurityGroup> use_group(store::Database& db, const std::string& owner,
                                const std::optional<std::string>& id_or_name, SysTime now) {
  auto group = id_or_name ? group_of(db, instances::Actor{owner, false}, *id_or_name, now)
                          : ensure_default_group(db, owner, now);
  // Another user's group is not found, as it is everywhere else.
  if (!group) return fail(group.error().code, "security_group: " + group.error().detail);
  auto s = db.run("UPDATE security_groups SET generation = generation + 1 WHERE id = ? AND generation = ? AND deleted_at IS NULL",
                  {group->id, group->generation});
  if (!s) return fail(s.error());
  if (db.changes() == 0) return fail(ErrorCode::conflict, "security group " + group->name + " changed meanwhile; try again");
  group->generation += 1;
  return group;
}

}  // namespace gpucloud::security_groups
