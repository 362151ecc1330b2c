#pragma once
// A system disk's size on overlay2, where the engine cannot hold one (that needs XFS project
// quotas): the container's layer directory — the parent of its upper dir, which holds `diff`
// (every file the container writes), `work`, `link` and `lower` — becomes a sized ext4
// filesystem of its own, a sparse image file mounted over that directory before the container
// first starts. Overlay then writes the container's changes into it: a write past the size
// fails with ENOSPC inside the instance, and `df /` there shows the size (overlay answers
// statfs from its upper filesystem). Making one costs a mkfs and two mounts (about 15 ms);
// releasing one costs nothing the kernel must clean up later: the engine's own removal of the
// layer directory unmounts it (the loop device is autocleared) and the agent deletes the file.
// Compare btrfs, where every create and release is two subvolume snapshots, a qgroup limit and
// two deletions the cleaner works through afterwards (docs/benchmarks.md, "btrfs churn").
//
// The images live in one directory, named by container id: ID.img (complete), ID.img.tmp
// and ID.staging (a make under way; a crash leaves them to sweep()). All blocking: called on
// a pool, never on the event loop. Root only (mount).
#include <cstdint>
#include <set>
#include <string>

#include "core/result.h"

namespace gpucloud::agent {

class LayerFilesystems {
 public:
  explicit LayerFilesystems(std::string images_dir);

  // Whether this host can: root, mkfs.ext4 and mount found, the directory made. The answer
  // names what is missing.
  Status check();

  // Right after the engine created the container (its layer directory holds only what the
  // engine put there): the image of `gib` GiB is made, the layer directory copied into it,
  // and it is mounted over the layer directory. `upper_dir` is the engine's UpperDir
  // (.../overlay2/LAYER/diff). Made already: only mounted when it is not.
  Status make(const std::string& container_id, const std::string& upper_dir, std::int64_t gib);

  // Before a start: the container's image mounted over its layer directory when it is not
  // (after a reboot). A container without an image (made before this existed) is left as it is.
  Status mount(const std::string& container_id, const std::string& upper_dir);

  bool has(const std::string& container_id) const;

  // After the engine removed the container (which unmounted the image with the layer
  // directory): the image goes. Still mounted somewhere (the engine failed): lazily unmounted.
  Status forget(const std::string& container_id);

  // Every image (or make left half-done) whose container is not among `containers`.
  Status sweep(const std::set<std::string>& containers);

  const std::string& dir() const { return dir_; }

  // The layer directory of an overlay2 upper dir (".../overlay2/LAYER/diff" -> ".../overlay2/LAYER");
  // invalid for anything else. Pure, for tests.
  static Result<std::string> layer_dir_of(const std::string& upper_dir);

 private:
  std::string image_path(const std::string& container_id) const;
  Status mount_image(const std::string& image, const std::string& layer_dir);

  std::string dir_;
};

}  // namespace gpucloud::agent
