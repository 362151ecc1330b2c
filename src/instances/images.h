#pragma once
// The image market: the base image the set-up command builds, the operator's [[images]],
// and users' private custom images.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "config/config.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::instances {

inline constexpr const char* kBaseImageName = "debian-12-base";
// Built by scripts/build-base-image.sh (bump both tags together when its contents change).
// Since bookworm-2 it has Debian's Jupyter Notebook (until then a second image,
// bookworm-jupyter-1, had).
inline constexpr const char* kBaseEngineImage = "gpucloud/base:bookworm-2";
// The market's former Jupyter image: now the same engine image as the base, listed under its
// own name so that scripts and instances made with it keep working.
inline constexpr const char* kJupyterImageName = "debian-12-jupyter";

struct Image {
  std::string id, name, engine_image, description, os, python, cuda;
  std::map<std::string, std::string> frameworks;
  std::int64_t size_bytes = 0;
  std::string visibility;  // public | private
  std::optional<std::string> owner;
  std::string state;
  std::string state_reason;  // why it is in `error`
  bool ssh = true;
  bool jupyter = false;  // has Jupyter Notebook (the init starts it; GET /instances/{id}/jupyter/)
  SysTime created_at;
  // Custom images: the layers it added over its base (what it is billed for), where the
  // engine holds it, what it was saved from, and its recycle-bin times.
  std::int64_t own_size_bytes = 0;
  std::optional<std::string> host_id, source_instance, base_image_id;
  std::optional<SysTime> deleted_at, purged_at;
  bool purge_warned = false;
  bool engine_removed = false;
};

// Lists the base image and the config's images as public images (kept in step with the config).
Status seed_public_images(store::Database& db, const config::Config& config, SysTime now);
// Public images plus the viewer's own that are not deleted; with `deleted`, only the viewer's
// deleted (still restorable) ones.
Result<std::vector<Image>> list_images(store::Database& db, const std::string& viewer, bool deleted = false);
Result<Image> find_image_by_id(store::Database& db, const std::string& id);
// Public images and the viewer's own; others' private images are "not found".
Result<Image> find_image(store::Database& db, const std::string& viewer, const std::string& id_or_name);
boost::json::object image_json(const Image& image);
// GET /images/{id}: as find_image, but the viewer's own deleted (not purged) images too.
Result<Image> find_image_for_view(store::Database& db, const std::string& viewer, const std::string& id_or_name);

// ---- custom images -------------------------------------------------------------------------

// What a custom image is billed for: the bytes its layers add over its base image's.
std::int64_t own_size_bytes(std::int64_t image_size_bytes, std::int64_t base_size_bytes);
// A new custom image's name: invalid_argument when malformed, conflict when the owner has a
// (not deleted) image by that name or a public image has it.
Status check_custom_image_name(store::Database& db, const std::string& owner, const std::string& name);
// Custom images of `owner` that count against the images quota: all not purged (deleted
// ones too: they can be restored).
Result<std::int64_t> custom_image_count(store::Database& db, const std::string& owner);
Status insert_custom_image(store::Database& db, const Image& image);
// creating → available (with the engine's reference and sizes) or → error (with why);
// a compare-and-set on `creating`: false when the image had left it (deleted meanwhile).
struct SaveResult {
  bool ok = false;
  std::string engine_image, reason;
  std::int64_t size_bytes = 0, own_size_bytes = 0;
};
Result<bool> finish_custom_image(store::Database& db, const std::string& id, const SaveResult& result, SysTime now);
// Own custom image → deleted (not while it is being saved). Public ones: forbidden.
Result<Image> delete_custom_image(store::Database& db, const std::string& owner, const std::string& id_or_name, SysTime now);
// deleted → as it was before (available, or error), while not purged.
Result<Image> restore_custom_image(store::Database& db, const std::string& owner, const std::string& id_or_name,
                                   SysTime now);
// Deleted, unpurged custom images (for the recycle-bin timers).
Result<std::vector<Image>> deleted_custom_images(store::Database& db);
// The purge_warned flag and the purge itself, each a compare-and-set on a deleted, unpurged row.
Result<bool> mark_purge_warned(store::Database& db, const std::string& id, SysTime deleted_at);
Result<bool> mark_purged(store::Database& db, const std::string& id, SysTime deleted_at, SysTime now);
// Purged custom images whose engine copy is still there and no live instance uses.
Result<std::vector<Image>> engine_images_to_remove(store::Database& db);
Status mark_engine_removed(store::Database& db, const std::string& id);

// The public images and the engine references behind them (what the agent is asked about).
Result<std::vector<Image>> public_images(store::Database& db);
// What the engine says about a public image: its size, or that it is missing (being pulled:
// state creating; else error, with the pull's error).
struct EngineImage {
  bool present = false;
  std::int64_t size_bytes = 0;
  bool pulling = false;
  std::string pull_error;
};
Status record_engine_image(store::Database& db, const Image& image, const EngineImage& seen, const std::string& host_name);

}  // namespace gpucloud::instances
