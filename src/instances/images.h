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
inline constexpr const char* kBaseEngineImage = "gpucloud/base:bookworm-1";

struct Image {
  std::string id, name, engine_image, description, os, python, cuda;
  std::map<std::string, std::string> frameworks;
  std::int64_t size_bytes = 0;
  std::string visibility;  // public | private
  std::optional<std::string> owner;
  std::string state;
  std::string state_reason;  // why it is in `error`
  bool ssh = true;
  SysTime created_at;
};

// Lists the base image and the config's images as public images (kept in step with the config).
Status seed_public_images(store::Database& db, const config::Config& config, SysTime now);
Result<std::vector<Image>> list_images(store::Database& db, const std::string& viewer);
Result<Image> find_image_by_id(store::Database& db, const std::string& id);
// Public images and the viewer's own; others' private images are "not found".
Result<Image> find_image(store::Database& db, const std::string& viewer, const std::string& id_or_name);
boost::json::object image_json(const Image& image);

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

namespace gpucloud::instances {
// Custom images counting against the owner's `images` quota (those in the recycle bin too).
Result<std::int64_t> private_image_count(store::Database& db, const std::string& owner);
}  // namespace gpucloud::instances
