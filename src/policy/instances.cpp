#include "policy/instances.h"

#include "instances/instance_record.h"
#include "market/hosts.h"
#include "security_groups/security_group_actions.h"

namespace gpucloud::policy {

Result<instances::Instance> create_instance(store::Database& db, const config::Config& config,
                                            const instances::Actor& actor, const std::string& id,
                                            const CreateInstanceRequest& request, SysTime now) {
  auto made = instances::check_create(db, config, actor, id, request, now);
  if (!made) return fail(made.error());
  auto group = security_groups::use_group(db, actor.user_id, request.security_group, now);
  if (!group) return fail(group.error());
  made->instance.security_group_id = group->id;
  // Existing data disks pin the instance to their host (a disk attaches only on its own host).
  auto disk_host = disks::check_instance_disks(db, config, actor, request.data_disks);
  if (!disk_host) return fail(disk_host.error());
  auto created = instances::record_create(db, std::move(*made), request, *disk_host, now);
  if (!created) return created;
  if (request.data_disks.empty()) return created;
  const std::string host_id = created->host_id.value_or("");
  auto host = market::find_host(db, host_id);
  if (!host) return fail(host.error());
  const std::string disk_zone = *host ? (*host)->zone : created->zone;
  if (auto s = disks::attach_instance_disks(db, actor.user_id, id, host_id, disk_zone, request.data_disks,
                                            request.new_disk_ids, now);
      !s)
    return fail(s.error());
  // Read again: the instance's answer lists its disks.
  auto stored = instances::load_instance(db, id);
  if (!stored) return fail(stored.error());
  if (!*stored) return fail(ErrorCode::internal, "instance " + id + " not recorded");
  return std::move(**stored);
}

Result<instances::PatchOutcome> patch_instance(store::Database& db, const instances::Actor& actor,
                                               const std::string& id_or_name, const PatchInstanceRequest& request,
                                               SysTime now) {
  instances::PatchRequest own = request;
  if (request.security_group) {
    auto i = instances::find_for(db, actor, id_or_name);
    if (!i) return fail(i.error());
    // A releasing instance is refused by the patch itself, before any group is touched.
    if (i->state != instances::InstanceState::releasing && i->state != instances::InstanceState::released) {
      auto group = security_groups::use_group(db, i->owner, request.security_group, now);
      if (!group) return fail(group.error());
      own.security_group_id = group->id;
    }
  }
  return instances::patch_instance(db, actor, id_or_name, own, now);
}

}  // namespace gpucloud::policy
