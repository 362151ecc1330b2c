#include "agent/runtime/layer_filesystems.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "agent/disks/disk_tools.h"

namespace gpucloud::agent {

namespace fs = std::filesystem;
using disks::find_tool;
using disks::run_tool;

namespace {

constexpr std::string_view kE2fsprogs = "e2fsprogs";
constexpr std::string_view kUtilLinux = "util-linux";
constexpr std::string_view kCoreutils = "coreutils";
constexpr std::string_view kImageSuffix = ".img";
constexpr std::string_view kTmpSuffix = ".img.tmp";
constexpr std::string_view kStagingSuffix = ".staging";

// Engine container ids (64 hex digits), or the test engines' shorter names: never a path.
bool valid_container_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

Status check_id(const std::string& id) {
  if (!valid_container_id(id)) return fail(ErrorCode::invalid_argument, "container id '" + id + "' is not an engine id");
  return ok();
}

// noinit_itable: no background zeroing of inode tables (mkfs left them lazy); the kernel would
// otherwise spend its time on every new system disk.
Status mount_loop(const std::string& image, const std::string& at) {
  auto mounted = run_tool({"mount", "-t", "ext4", "-o", "loop,noinit_itable", "--", image, at}, kUtilLinux);
  if (!mounted) return fail(std::move(mounted.error()));
  return ok();
}

// The mount at `at` when it is a loop device backed by `image`.
bool image_mounted_at(const std::string& image, const std::string& at) {
  auto table = disks::read_mount_table();
  if (!table) return false;
  auto m = disks::find_mount(*table, at);
  if (!m) return false;
  for (const auto& d : disks::list_loop_devices())
    if (d.device == m->source && d.backing_file == image) return true;
  return false;
}

}  // namespace

LayerFilesystems::LayerFilesystems(std::string images_dir)
    // weakly_canonical: the loop devices name their files by real path, and a symlink in the
    // data directory's path must not make a mounted image look unmounted.
    : dir_(fs::weakly_canonical(fs::absolute(fs::path(images_dir))).string()) {}

Status LayerFilesystems::check() {
  if (::geteuid() != 0) return fail(ErrorCode::unavailable, "system disk filesystems need root (mount)");
  for (const auto& [tool, package] : {std::pair{"mkfs.ext4", kE2fsprogs}, std::pair{"mount", kUtilLinux},
                                      std::pair{"umount", kUtilLinux}, std::pair{"cp", kCoreutils}}) {
    if (auto s = find_tool(tool, package); !s) return fail(std::move(s.error()));
  }
  return disks::make_directories(dir_);
}

Result<std::string> LayerFilesystems::layer_dir_of(const std::string& upper_dir) {
  const fs::path upper = fs::path(upper_dir).lexically_normal();
  if (!upper.is_absolute() || upper.filename() != "diff" || upper.parent_path().parent_path().filename() != "overlay2")
    return fail(ErrorCode::invalid_argument, "'" + upper_dir + "' is not an overlay2 upper dir (.../overlay2/LAYER/diff)");
  return upper.parent_path().string();
}

std::string LayerFilesystems::image_path(const std::string& container_id) const {
  return dir_ + "/" + container_id + std::string(kImageSuffix);
}

bool LayerFilesystems::has(const std::string& container_id) const {
  std::error_code ec;
  return valid_container_id(container_id) && fs::is_regular_file(image_path(container_id), ec);
}

Status LayerFilesystems::mount_image(const std::string& image, const std::string& layer_dir) {
  if (image_mounted_at(image, layer_dir)) return ok();
  return mount_loop(image, layer_dir);
}

Status LayerFilesystems::make(const std::string& container_id, const std::string& upper_dir, std::int64_t gib) {
  if (auto s = check_id(container_id); !s) return s;
  if (gib <= 0 || gib > (1 << 20)) return fail(ErrorCode::invalid_argument, "a system disk of " + std::to_string(gib) + " GiB");
  auto layer = layer_dir_of(upper_dir);
  if (!layer) return fail(std::move(layer.error()));
  const std::string image = image_path(container_id);
  if (has(container_id)) return mount_image(image, *layer);
  if (auto s = disks::make_directories(dir_); !s) return s;
  // Made under a temporary name, complete before it is renamed: a crash leaves a .tmp (swept),
  // never an image that a later start would mount half-made.
  const std::string tmp = dir_ + "/" + container_id + std::string(kTmpSuffix);
  const std::string staging = dir_ + "/" + container_id + std::string(kStagingSuffix);
  auto give_up = [&](Error e) -> Status {
    (void)run_tool({"umount", "--", staging}, kUtilLinux);
    ::rmdir(staging.c_str());
    (void)disks::remove_file(tmp);
    return fail(std::move(e));
  };
  (void)disks::remove_file(tmp);
  if (auto s = disks::set_file_size(tmp, gib << 30); !s) return give_up(std::move(s.error()));
  auto made = run_tool({"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", tmp},
                       kE2fsprogs);
  if (!made) return give_up(std::move(made.error()));
  if (auto s = disks::make_directories(staging); !s) return give_up(std::move(s.error()));
  if (auto s = mount_loop(tmp, staging); !s) return give_up(std::move(s.error()));
  // What the engine put in the layer directory (an empty diff, work/work, the link and lower
  // files overlay's mount reads), with owners, modes and xattrs.
  auto copied = run_tool({"cp", "-a", "--", *layer + "/.", staging + "/"}, kCoreutils);
  if (!copied) return give_up(std::move(copied.error()));
  auto unmounted = run_tool({"umount", "--", staging}, kUtilLinux);
  if (!unmounted) return give_up(std::move(unmounted.error()));
  ::rmdir(staging.c_str());
  if (auto s = disks::rename_durably(tmp, image); !s) return give_up(std::move(s.error()));
  return mount_image(image, *layer);
}

Status LayerFilesystems::mount(const std::string& container_id, const std::string& upper_dir) {
  if (auto s = check_id(container_id); !s) return s;
  if (!has(container_id)) return ok();
  auto layer = layer_dir_of(upper_dir);
  if (!layer) return fail(std::move(layer.error()));
  return mount_image(image_path(container_id), *layer);
}

Status LayerFilesystems::forget(const std::string& container_id) {
  if (auto s = check_id(container_id); !s) return s;
  const std::string image = image_path(container_id);
  const std::string tmp = dir_ + "/" + container_id + std::string(kTmpSuffix);
  const std::string staging = dir_ + "/" + container_id + std::string(kStagingSuffix);
  // The engine unmounts it with the layer directory; whatever still mounts it (the engine
  // failed, or a make died between its mount and its unmount) is detached lazily.
  if (auto table = disks::read_mount_table()) {
    for (const auto& d : disks::list_loop_devices()) {
      if (d.backing_file != image && d.backing_file != tmp) continue;
      for (const auto& m : *table)
        if (m.source == d.device) (void)run_tool({"umount", "-l", "--", m.mount_point}, kUtilLinux);
    }
  }
  ::rmdir(staging.c_str());
  if (auto s = disks::remove_file(tmp); !s) return s;
  return disks::remove_file(image);
}

Status LayerFilesystems::sweep(const std::set<std::string>& containers) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return ok();
  std::set<std::string> gone;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    for (std::string_view suffix : {kTmpSuffix, kImageSuffix, kStagingSuffix}) {
      if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const std::string id = name.substr(0, name.size() - suffix.size());
      if (valid_container_id(id) && containers.count(id) == 0) gone.insert(id);
      break;
    }
  }
  std::string problems;
  for (const auto& id : gone) {
    spdlog::info(R"({{"event":"system_disk_filesystem_swept","container":"{}"}})", id);
    if (auto s = forget(id); !s) problems += (problems.empty() ? "" : "; ") + s.error().detail;
  }
  if (!problems.empty()) return fail(ErrorCode::internal, problems);
  return ok();
}

}  // namespace gpucloud::agent
