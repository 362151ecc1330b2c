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
// How a save stays clean: the container is committed with the engine's pause (consistent,
// also while running) as REF-raw; a short-lived container from that image (no network, our
// label only) deletes the host keys, the managed authorized_keys block, root's password hash
// and the per-boot files the init writes (sanitize_script()); that container's filesystem is
// exported and imported as REF, one layer with REF-raw's config (RuntimeDriver::flatten), and
// REF-raw is removed with its layer. Not a commit on top of REF-raw: the deleted files would
// stay in REF-raw's layer under whiteouts, in every `docker save` of REF. The price: REF
// shares no layer with its base (own_size_bytes still bills only size - base). Data disks are
// bind mounts: never part of a commit. The init's inputs (/.gpucloud/config: keys, hash, host
// key) are a bind mount too.
// A repeat of a save that completed (same ref present) only reports the sizes.
// Intermediates (REF-raw and the cleaner) carry kImageSaveLabel = the installation, and no
// image or intermediate carries an instance's labels (the commit overrides them): a save
// killed at any step leaves nothing that sweep() does not find and remove, at the agent's
// next start or at the save's retry.
#include <cstdint>
#include <map>
#include <string>

#include <boost/asio/awaitable.hpp>
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

struct SaveImageRequest {
  std::string instance_id, image_id;
  std::string ref;   // "gpucloud-image/<installation>:<image id>" unless given
  std::string base;  // the engine image the instance was made from (own size = size - base's)
  std::int64_t max_used_bytes = 0;  // > 0: refuse when the system disk holds more
};
// Parses and checks image.save's desired (ids, a gpucloud-image/ reference).
Result<SaveImageRequest> save_request_from_json(const boost::json::object& desired, const std::string& installation_id);

// The shell the cleaning container runs (POSIX sh; usermod when there, else /etc/shadow edit).
const std::string& sanitize_script();

class ImageSaver {
 public:
  ImageSaver(RuntimeDriver& driver, std::string installation_id)
      : driver_(driver), installation_id_(std::move(installation_id)) {}

  boost::asio::awaitable<Result<boost::json::object>> save(std::string container_id, SaveImageRequest request);
  // Removes the intermediates of this installation's saves (cleaner containers, raw copies,
  // tagged or not: everything carrying kImageSaveLabel = the installation), of `image_id`'s
  // save only when given. Every save sweeps its own before it starts and after it ends; the
  // runtime sweeps all at its first command (a save killed at any step leaves nothing).
  boost::asio::awaitable<Status> sweep(std::string image_id = "");
  boost::asio::awaitable<Result<boost::json::object>> remove(boost::json::object desired);

 private:
  boost::asio::awaitable<Result<boost::json::object>> sizes(std::string ref, std::string base);
  RuntimeDriver& driver_;
  std::string installation_id_;
};

}  // namespace gpucloud::agent
