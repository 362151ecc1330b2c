#pragma once
// What users do with security groups, callable by handlers and timers alike. Each runs in the
// caller's write transaction. A change to a group's rules bumps the generation of every live
// instance that uses it, so their hosts' agents get the new sources (the caller refreshes the
// instances listed in `instances_to_refresh` after the commit).
#include <optional>
#include <string>
#include <vector>

#include "core/time_format.h"
#include "instances/actor.h"
#include "security_groups/security_group_record.h"
#include "store/database.h"

namespace gpucloud::security_groups {

struct CreateGroupRequest {
  std::string name, description;
  std::vector<Rule> rules;  // already parsed (parse_rules)
};

struct ReplaceRulesRequest {
  std::vector<Rule> rules;
  std::optional<std::string> description;
};

struct GroupChange {
  SecurityGroup group;
  std::vector<std::string> instances_to_refresh;
};

Result<SecurityGroup> create_group(store::Database& db, const instances::Actor& actor, const CreateGroupRequest& request,
                                   SysTime now);
// The owner's groups, their default one made first if it does not exist yet.
Result<std::vector<SecurityGroup>> groups_of(store::Database& db, const instances::Actor& actor, SysTime now);
Result<SecurityGroup> group_of(store::Database& db, const instances::Actor& actor, const std::string& id_or_name,
                               SysTime now);
Result<GroupChange> replace_rules(store::Database& db, const instances::Actor& actor, const std::string& id_or_name,
                                  const ReplaceRulesRequest& request, SysTime now);
Status delete_group(store::Database& db, const instances::Actor& actor, const std::string& id_or_name, SysTime now);

// The group an instance of `owner` is to use: the one named (the owner's own only), or the
// owner's default group. Marks it in use for this transaction (its generation goes up), so a
// delete by another writer cannot pass it meanwhile.
Result<SecurityGroup> use_group(store::Database& db, const std::string& owner,
                                const std::optional<std::string>& id_or_name, SysTime now);

}  // namespace gpucloud::security_groups
