#pragma once
// Save-image on the agent: an instance's system disk becomes a private engine image that
// carries nothing of gpucloud's per-instance setup. InstanceRuntime serves the commands
// (under the instance's lock) and hands the work here:
//
//   image.save    desired {"instance_id", "image_id", "ref"?, "base"?, "max_used_bytes"?}
//                 → observed {"engine_image", "size_bytes", "own_size_bytes", "base_size_bytes"}
//   image.remove  desired {"ref"} → {"removed": true|false}; only gpucloud-image/ references,
//                 refused (conflict) by the engine while a container still uses it
//
// How a save stays clean and small (issue 23): the saved image is its base's layers plus ONE
// layer of what the container changed, written by the agent itself (image_layer.h):
//   1. a running container is paused (as the engine's commit pauses it);
//   2. GET /containers/{id}/changes names the changed paths; each is read from the host's copy
//      of the container's files (overlay2: its upper dir; btrfs: its subvolume), with the
//      secrets of sanitize_script() cleaned on the fly: a secret's bytes never enter the layer,
//      a secret path not emitted is whited out;
//   3. the layer streams into POST /images/load (docker save's format: the layer, a config
//      whose rootfs.diff_ids are the base's plus this layer's sha256, a manifest tagging REF);
//      the engine keeps the base's layers it has and stores the new one; the container is
//      unpaused as soon as its last byte is read (and on every error).
// Nothing intermediate exists in the engine at any step: a save killed anywhere leaves at most
// a paused container, which the next save of it, or sweep() at the agent's start, unpauses.
// The image's config is the base's (Env, Cmd, ...), with kImageLabel and
// kImageInstallationLabel and no instance's labels.
// Data disks are bind mounts and the init's inputs (/.gpucloud/config) too: neither is in the
// container's own files, so neither is in the layer.
// Where the engine's files cannot be read (another storage driver) or the base already has
// kMaxStackedLayers layers (overlay mounts ~125 at most), the save falls back to the old path:
// commit as REF-raw, clean in a short-lived container (no network, our label only), export
// and import as one flattened layer (RuntimeDriver::flatten), REF-raw removed; its
// intermediates carry kImageSaveLabel = the installation, which sweep() finds and removes.
// A repeat of a save that completed (same ref present) only reports the sizes.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "agent/runtime/runtime_driver.h"
#include "core/result.h"

namespace gpucloud::agent {

inline constexpr std::string_view kImageRepoPrefix = "gpucloud-image/";
inline constexpr std::string_view kImageSaveLabel = "gpucloud.image-save";
inline constexpr std::string_view kImageLabel = "gpucloud.image";
// On saved images: the installation that saved them (not gpucloud.installation: a container
// made from the image by anyone would then pass for one of the installation's).
inline constexpr std::string_view kImageInstallationLabel = "gpucloud.image-installation";
// A base with this many layers or more is saved flattened (one layer) instead of stacked.
inline constexpr std::size_t kMaxStackedLayers = 100;

struct SaveImageRequest {
  std::string instance_id, image_id;
  std::string ref;   // "gpucloud-image/<installation>:<image id>" unless given
  std::string base;  // the engine image the instance was made from (own size = size - base's)
  std::int64_t max_used_bytes = 0;  // > 0: refuse when the system disk holds more
};
// Parses and checks image.save's desired (ids, a gpucloud-image/ reference).
Result<SaveImageRequest> save_request_from_json(const boost::json::object& desired, const std::string& installation_id);

// The config and manifest.json of an image made of `base` plus the layer `diff_id`, tagged
// `ref` (docker save's format, what POST /images/load reads). Pure, for tests.
std::string saved_image_config(const SaveBase& base, const std::string& diff_id, const std::string& created);
std::string saved_image_manifest(const SaveBase& base, const std::string& ref);

// The shell the cleaning container runs (POSIX sh; usermod when there, else /etc/shadow edit).
const std::string& sanitize_script();

class ImageSaver {
 public:
  ImageSaver(RuntimeDriver& driver, std::string installation_id)
      : driver_(driver), installation_id_(std::move(installation_id)) {}
  ~ImageSaver();  // a layer still being read stops

  boost::asio::awaitable<Result<boost::json::object>> save(std::string container_id, SaveImageRequest request);
  // Removes the intermediates of this installation's saves (cleaner containers, raw copies,
  // tagged or not: everything carrying kImageSaveLabel = the installation), of `image_id`'s
  // save only when given; without `image_id`, also unpauses the installation's paused
  // containers (gpucloud pauses only to save: a save killed while it held one). Every save sweeps its own before it starts and after it ends; the
  // runtime sweeps all at its first command (a save killed at any step leaves nothing).
  boost::asio::awaitable<Status> sweep(std::string image_id = "");
  boost::asio::awaitable<Result<boost::json::object>> remove(boost::json::object desired);

 private:
  boost::asio::awaitable<Result<boost::json::object>> sizes(std::string ref, std::string base);
  boost::asio::awaitable<Status> unpause_leftovers(std::string image_id);
  // The base's layers plus one cleaned layer (see above).
  boost::asio::awaitable<Result<boost::json::object>> save_layered(std::string container_id, SaveImageRequest request,
                                                                   ContainerLayerDir where, SaveBase base);
  // The fallback: commit, clean in a container, flatten.
  boost::asio::awaitable<Result<boost::json::object>> save_flattened(std::string container_id, SaveImageRequest request);
  RuntimeDriver& driver_;
  std::string installation_id_;
  // The layer's file reads and hashing (a save's reader holds one thread while it streams).
  std::shared_ptr<std::atomic<bool>> stopping_ = std::make_shared<std::atomic<bool>>(false);
  boost::asio::thread_pool pool_{2};
};

}  // namespace gpucloud::agent
