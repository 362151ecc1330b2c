#pragma once
// What a user does with custom images: save one from an instance, delete it (into the
// recycle bin), restore it. Each runs inside the caller's write transaction and records its
// event there; the engine work (image.save, image.remove) is ImageService's, after the commit.
#include <optional>
#include <string>

#include "config/config.h"
#include "core/result.h"
#include "core/time_format.h"
#include "instances/actions.h"
#include "instances/images.h"
#include "store/database.h"

namespace gpucloud::instances {

struct SaveImageRequest {
  std::string name;
  std::string description;
};

// The caller's instance (else not_found), running or stopped (else conflict naming the
// state), its system disk within its size where that is known; the images quota; the
// name rules. Inserts the image as `creating` (image.created).
Result<Image> begin_save_image(store::Database& db, const config::Config& config, const Actor& actor,
                               const std::string& instance_id_or_name, const SaveImageRequest& request,
                               const std::string& image_id, SysTime now);
// The agent's answer: creating → available (image.available) or error (image.error).
Status finish_save_image(store::Database& db, const std::string& image_id, const SaveResult& result, SysTime now);
// Into the recycle bin (image.deleted); with recycle_days = 0 purged at once (image.purged).
Result<Image> delete_image(store::Database& db, const config::Config& config, const Actor& actor,
                           const std::string& id_or_name, SysTime now);
Result<Image> restore_image(store::Database& db, const config::Config& config, const Actor& actor,
                            const std::string& id_or_name, SysTime now);
// When the recycle bin lets go of a deleted image, and when it warns (a day before).
SysTime purge_due(SysTime deleted_at, int recycle_days);
SysTime purge_warning_due(SysTime deleted_at, int recycle_days);
// The timers' work, compare-and-set on the deletion they were armed for.
Status warn_purge(store::Database& db, const std::string& image_id, SysTime deleted_at, SysTime now);
Status purge_image(store::Database& db, const std::string& image_id, SysTime deleted_at, SysTime now);

}  // namespace gpucloud::instances
