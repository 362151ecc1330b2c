#include "instances/image_actions.h"

#include <boost/json.hpp>

#include "auth/user_quotas.h"
#include "billing/affordability.h"
#include "events/events.h"
#include "market/prices.h"
#include "instances/system_disk.h"

namespace gpucloud::instances {
namespace json = boost::json;

namespace {
json::object event_data(const Image& i) {
  return json::object{{"name", i.name}, {"state", i.state}, {"size_bytes", i.size_bytes}, {"own_size_bytes", i.own_size_bytes}};
}
}  // namespace

Result<Image> begin_save_image(store::Database& db, const config::Config& config, const Actor& actor,
                               const std::string& instance_id_or_name, const SaveImageRequest& request,
                               const std::string& image_id, SysTime now) {
  auto instance = find_for(db, actor, instance_id_or_name);
  if (!instance) return fail(instance.error());
  if (request.name.empty()) return fail(ErrorCode::invalid_argument, "name: is required");
  if (instance->state != InstanceState::running && instance->state != InstanceState::stopped)
    return fail(ErrorCode::conflict, "the instance is " + std::string(to_string(instance->state)) +
                                         "; only a running or stopped instance can be saved as an image");
  if (system_disk_overrun(instance->system_disk_used_bytes, instance->system_disk_gib))
    return fail(ErrorCode::invalid_argument,
                "the instance's system disk holds " + std::to_string(*instance->system_disk_used_bytes / (1 << 20)) +
                    " MiB, more than its " + std::to_string(instance->system_disk_gib) + " GiB; free some space first");
  auto limits = auth::effective_quotas(db, config.quotas, instance->owner);
  if (!limits) return fail(limits.error());
  auto count = custom_image_count(db, instance->owner);
  if (!count) return fail(count.error());
  if (*count + 1 > limits->images)
    return fail(ErrorCode::quota_exceeded, "quota: at most " + std::to_string(limits->images) +
                                               " custom images (deleted ones count until they are purged)");
  if (auto s = check_custom_image_name(db, instance->owner, request.name); !s) return fail(s.error());
  // Storage needs money (issue 23): refused in arrears and below a day of what the image will
  // hold, estimated by what the instance wrote over its base (at least a GiB).
  {
    auto prices = market::load_prices(db);
    if (!prices) return fail(prices.error());
    const std::int64_t written = instance->system_disk_used_bytes.value_or(0);
    const std::int64_t gib = std::max<std::int64_t>(1, (written + (std::int64_t{1} << 30) - 1) >> 30);
    if (auto s = billing::check_storage_affordable(db, instance->owner, gib, prices->image_per_gib_hour_micros,
                                                   "image " + request.name, config.currency);
        !s)
      return fail(s.error());
  }
  auto base = find_image_by_id(db, instance->image_id);
  if (!base) return fail(base.error());
  Image image;
  image.id = image_id;
  image.name = request.name;
  image.description = request.description.empty() ? "saved from instance " + instance->name + " (" + base->name + ")"
                                                  : request.description;
  image.os = base->os;
  image.python = base->python;
  image.cuda = base->cuda;
  image.frameworks = base->frameworks;
  image.ssh = base->ssh;
  image.jupyter = base->jupyter;
  image.visibility = "private";
  image.owner = instance->owner;
  image.state = "creating";
  image.created_at = now;
  image.host_id = instance->host_id;
  image.source_instance = instance->id;
  image.base_image_id = base->id;
  if (auto s = insert_custom_image(db, image); !s) return fail(s.error());
  auto stored = find_image_by_id(db, image_id);
  if (!stored) return stored;
  if (auto s = events::record(db, now, "image.created", image_id, image.owner,
                              "saving instance " + instance->name + " as image " + image.name, event_data(*stored));
      !s)
    return fail(s.error());
  return stored;
}

Status finish_save_image(store::Database& db, const std::string& image_id, const SaveResult& result, SysTime now) {
  auto changed = finish_custom_image(db, image_id, result, now);
  if (!changed) return fail(changed.error());
  if (!*changed) return ok();  // a repeat
  auto image = find_image_by_id(db, image_id);
  if (!image) return fail(image.error());
  const std::string type = result.ok ? "image.available" : "image.error";
  const std::string message = result.ok ? "image " + image->name + " is available"
                                        : "image " + image->name + " could not be saved: " + result.reason;
  return events::record(db, now, type, image_id, image->owner, message, event_data(*image));
}

Result<Image> delete_image(store::Database& db, const config::Config& config, const Actor& actor,
                           const std::string& id_or_name, SysTime now) {
  auto image = delete_custom_image(db, actor.user_id, id_or_name, now);
  if (!image) return image;
  if (auto s = events::record(db, now, "image.deleted", image->id, image->owner,
                              "image " + image->name + " deleted" +
                                  (config.policy.recycle_days > 0
                                       ? "; restorable for " + std::to_string(config.policy.recycle_days) + " days"
                                       : std::string()),
                              event_data(*image));
      !s)
    return fail(s.error());
  if (config.policy.recycle_days == 0) {
    if (auto s = purge_image(db, image->id, *image->deleted_at, now); !s) return fail(s.error());
  }
  return image;
}

Result<Image> restore_image(store::Database& db, const config::Config& config, const Actor& actor,
                            const std::string& id_or_name, SysTime now) {
  // Past its time in the bin (the purge timer has not run yet, say gpucloudd was down): gone.
  auto current = find_image_for_view(db, actor.user_id, id_or_name);
  if (current && current->deleted_at && now >= purge_due(*current->deleted_at, config.policy.recycle_days))
    return fail(ErrorCode::not_found, "image " + id_or_name + " not found (its time in the recycle bin is over)");
  auto image = restore_custom_image(db, actor.user_id, id_or_name, now);
  if (!image) return image;
  if (auto s = events::record(db, now, "image.restored", image->id, image->owner, "image " + image->name + " restored",
                              event_data(*image));
      !s)
    return fail(s.error());
  return image;
}

SysTime purge_due(SysTime deleted_at, int recycle_days) { return deleted_at + std::chrono::hours(24) * recycle_days; }

SysTime purge_warning_due(SysTime deleted_at, int recycle_days) {
  return recycle_days <= 1 ? deleted_at : purge_due(deleted_at, recycle_days) - std::chrono::hours(24);
}

Status warn_purge(store::Database& db, const std::string& image_id, SysTime deleted_at, SysTime now) {
  auto warned = mark_purge_warned(db, image_id, deleted_at);
  if (!warned) return fail(warned.error());
  if (!*warned) return ok();  // restored, purged or warned already
  auto image = find_image_by_id(db, image_id);
  if (!image) return fail(image.error());
  return events::record(db, now, "image.purge_warning", image_id, image->owner,
                        "deleted image " + image->name + " will be destroyed within a day; restore it to keep it",
                        event_data(*image));
}

Status purge_image(store::Database& db, const std::string& image_id, SysTime deleted_at, SysTime now) {
  auto purged = mark_purged(db, image_id, deleted_at, now);
  if (!purged) return fail(purged.error());
  if (!*purged) return ok();
  auto image = find_image_by_id(db, image_id);
  if (!image) return fail(image.error());
  return events::record(db, now, "image.purged", image_id, image->owner,
                        "deleted image " + image->name + " destroyed (the engine's copy goes with its last instance)",
                        event_data(*image));
}

}  // namespace gpucloud::instances
