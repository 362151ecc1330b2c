#include "agent/disks/loop_ext4_driver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/disks/disk_tools.h"
#include "agent/disks/ext4_superblock.h"
#include "agent/log_text.h"
#include "core/fault_points.h"

namespace gpucloud::agent::disks {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::string_view kE2fsprogs = "e2fsprogs";
constexpr std::string_view kUtilLinux = "util-linux";
constexpr std::string_view kCoreutils = "coreutils";
constexpr std::int64_t kMinimumSize = 16 * kMiB;
constexpr auto kCopyTimeout = std::chrono::hours(2);
constexpr auto kCheckTimeout = std::chrono::minutes(30);


Status check_id(const std::string& id, const char* what) {
  if (!is_valid_disk_id(id)) return invalid(std::string(what) + " '" + id + "' is not an id like disk-3kq9x2m7c4v8");
  return ok();
}

Status check_size(std::int64_t size_bytes) {
  if (size_bytes < kMinimumSize) return invalid("size must be at least 16 MiB");
  if (size_bytes % 4096 != 0) return invalid("size must be a multiple of 4 KiB");
  return ok();
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_size);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Status fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::internal, "open " + path + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return fail(ErrorCode::internal, "fsync " + path + ": " + std::strerror(errno));
  return ok();
}

// The ids of files named <id><suffix> in `dir`.
std::vector<std::string> ids_in(const std::string& dir, std::string_view suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::string id = name.substr(0, name.size() - suffix.size());
    if (is_valid_disk_id(id) && entry.is_regular_file(ec)) out.push_back(std::move(id));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Attached loop devices backed by `image`.
std::vector<std::string> loop_devices_of(const std::string& image) {
  std::vector<std::string> out;
  for (const auto& d : list_loop_devices()) {
    if (!d.backing_deleted && d.backing_file == image) out.push_back(d.device);
  }
  return out;
}

// A frozen filesystem thawed when the scope ends, on every path.
class Freeze {
 public:
  explicit Freeze(std::string mount_point) : mount_point_(std::move(mount_point)) {}
  Status freeze() {
    auto done = run_tool({"fsfreeze", "--freeze", mount_point_}, kUtilLinux);
    if (!done) return fail(std::move(done.error()));
    frozen_ = true;
    return ok();
  }
  Status thaw() {
    if (!frozen_) return ok();
    auto done = run_tool({"fsfreeze", "--unfreeze", mount_point_}, kUtilLinux);
    if (!done) return fail(std::move(done.error()));
    frozen_ = false;
    return ok();
  }
  ~Freeze() {
    // A thaw that failed once is tried again: a filesystem left frozen blocks every writer.
    for (int i = 0; i < 3 && frozen_; ++i) (void)thaw();
  }
  Freeze(const Freeze&) = delete;
  Freeze& operator=(const Freeze&) = delete;

 private:
  std::string mount_point_;
  bool frozen_ = false;
};

// This boot of the host (changes at every boot, not at an agent restart).
std::string current_boot_id() {
  auto text = read_small_file("/proc/sys/kernel/random/boot_id");
  if (!text) return "";
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string meta_json(const std::string& disk_id, std::int64_t size_bytes, bool durable, const std::string& boot_id) {
  return json::serialize(
      json::object{{"disk_id", disk_id}, {"size_bytes", size_bytes}, {"durable", durable}, {"boot_id", boot_id}});
}

// A snapshot's metadata file, parsed. `durable` is true where the field is missing (snapshots
// made before it existed were fsynced before they answered).
struct SnapshotMeta {
  bool present = false;
  std::string disk_id;
  std::int64_t size_bytes = 0;
  bool durable = true;
  std::string boot_id;
};

SnapshotMeta read_meta(const std::string& path) {
  SnapshotMeta m;
  auto text = read_small_file(path);
  if (!text) return m;
  boost::system::error_code ec;
  auto v = json::parse(*text, ec);
  if (ec || !v.is_object()) return m;
  const auto& o = v.as_object();
  m.present = true;
  if (const auto* d = o.if_contains("disk_id"); d && d->is_string()) m.disk_id = d->as_string();
  if (const auto* n = o.if_contains("size_bytes"); n && n->is_int64()) m.size_bytes = n->as_int64();
  if (const auto* d = o.if_contains("durable"); d && d->is_bool()) m.durable = d->as_bool();
  if (const auto* b = o.if_contains("boot_id"); b && b->is_string()) m.boot_id = b->as_string();
  return m;
}

}  // namespace

LoopExt4Driver::LoopExt4Driver(const DiskDriverOptions& options)
    : root_(fs::absolute(fs::path(options.agent_dir) / "disks" / "loop-ext4").lexically_normal().string()),
      snapshots_(root_ + "/snapshots"),
      tmp_(root_ + "/.tmp"),
      mounts_(fs::absolute(fs::path(options.agent_dir) / "mounts").lexically_normal().string()) {}

// ---- start: directories and a crash's leftovers ---------------------------------------------

Status LoopExt4Driver::start() {
  for (const auto* dir : {&root_, &snapshots_, &tmp_, &mounts_}) {
    if (auto s = make_directories(*dir); !s) return s;
  }
  if (::geteuid() != 0) return fail(ErrorCode::unavailable, "loop-ext4 disks need root (mount, losetup)");
  if (auto s = find_tool("mkfs.ext4", kE2fsprogs); !s) return fail(std::move(s.error()));
  if (auto s = find_tool("losetup", kUtilLinux); !s) return fail(std::move(s.error()));
  if (auto s = find_tool("fsfreeze", kUtilLinux); !s) return fail(std::move(s.error()));
  std::error_code ec;
  // Half-made images and snapshot metadata whose image never came.
  for (const auto& entry : fs::directory_iterator(tmp_, ec)) fs::remove(entry.path(), ec);
  for (const auto& id : ids_in(snapshots_, ".json")) {
    if (!is_file(snapshot_image_path(id))) (void)remove_file(snapshot_meta_path(id));
  }
  for (const auto& entry : fs::directory_iterator(snapshots_, ec)) {
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(entry.path(), ec);
  }
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  // A crash between fsfreeze -f and -u leaves the filesystem frozen: thaw every mount of ours.
  for (const auto& m : *table) {
    if (path_is_under(m.mount_point, mounts_) && m.mount_point != mounts_) {
      (void)run_tool({"fsfreeze", "--unfreeze", m.mount_point}, kUtilLinux);  // "not frozen" is the usual answer
    }
  }
  // Loop devices of our images that nothing here mounts (a crash between losetup and mount,
  // a lazy unmount). A device still busy (a container holds it) only gets autoclear.
  for (const auto& d : list_loop_devices()) {
    if (!path_is_under(d.backing_file, root_)) continue;
    bool mounted = false;
    for (const auto& m : *table) mounted = mounted || m.source == d.device;
    if (!mounted) (void)run_tool({"losetup", "--detach", d.device}, kUtilLinux);
  }
  sweep_snapshots_not_durable();
  return ok();
}

void LoopExt4Driver::sweep_snapshots_not_durable() {
  const std::string boot = current_boot_id();
  for (const auto& id : ids_in(snapshots_, ".json")) {
    const SnapshotMeta meta = read_meta(snapshot_meta_path(id));
    if (!meta.present || meta.durable || !is_file(snapshot_image_path(id))) continue;
    if (!boot.empty() && meta.boot_id == boot) {
      // The agent went down between the answer and the fsync: the copy is whole in the page
      // cache (or written back already). A failure is tried again at the next start.
      if (auto s = make_snapshot_durable(id); !s) {
        spdlog::warn(R"({{"event":"disk_snapshot_durable_failed","snapshot":"{}","error":{},"note":"tried again at the next start"}})",
                     id, q(s.error().detail));
      } else {
        spdlog::info(R"({{"event":"disk_snapshot_made_durable_at_start","snapshot":"{}"}})", id);
      }
      continue;
    }
    // The host went down before the copy reached the disk: it may be torn. Not deleted (an
    // operator may look at it), never listed or used: <id>.img.torn and <id>.json.torn.
    const std::string torn_image = snapshot_image_path(id) + ".torn", torn_meta = snapshot_meta_path(id) + ".torn";
    Status moved = rename_durably(snapshot_image_path(id), torn_image);
    if (moved) moved = rename_durably(snapshot_meta_path(id), torn_meta);
    spdlog::error(
        R"({{"event":"disk_snapshot_torn","snapshot":"{}","disk":{},"boot_id":{},"this_boot_id":{},"moved_to":{},"error":{},"note":"the host went down before the snapshot was durable; it is no longer offered"}})",
        id, q(meta.disk_id), q(meta.boot_id), q(boot), q(torn_image), q(moved ? std::string() : moved.error().detail));
  }
}

Status LoopExt4Driver::unmount_all_except(const std::set<std::string>& keep) {
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  std::string problems;
  for (const auto& m : *table) {
    if (!path_is_under(m.mount_point, mounts_) || m.mount_point == mounts_) continue;
    const std::string id = fs::path(m.mount_point).filename().string();
    if (keep.count(id) != 0) continue;
    if (auto s = unmount(id); !s) problems += (problems.empty() ? "" : "; ") + s.error().detail;
  }
  // Mount directories left without a mount.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(mounts_, ec)) {
    const std::string id = entry.path().filename().string();
    if (keep.count(id) == 0 && is_valid_disk_id(id) && !find_mount(*table, entry.path().string())) {
      ::rmdir(entry.path().c_str());
    }
  }
  if (!problems.empty()) return fail(ErrorCode::internal, problems);
  return ok();
}

// ---- looking ----------------------------------------------------------------------------------

Result<std::string> LoopExt4Driver::mounted_device(const std::string& disk_id) const {
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  auto m = find_mount(*table, mount_path(disk_id));
  if (!m) return std::string();
  for (const auto& d : list_loop_devices()) {
    if (d.device == m->source) {
      if (d.backing_file != image_path(disk_id)) {
        return fail(ErrorCode::conflict, mount_path(disk_id) + " holds " + d.backing_file + ", not disk " + disk_id);
      }
      return d.device;
    }
  }
  return fail(ErrorCode::conflict, mount_path(disk_id) + " is mounted from " + m->source + ", not disk " + disk_id);
}

Result<DiskInfo> LoopExt4Driver::describe(const std::string& disk_id, const std::string& device) const {
  DiskInfo info;
  info.disk_id = disk_id;
  info.size_bytes = file_size(image_path(disk_id));
  info.mounted = !device.empty();
  if (info.mounted) {
    struct statvfs st {};
    if (::statvfs(mount_path(disk_id).c_str(), &st) != 0) {
      return fail(ErrorCode::internal, "statvfs " + mount_path(disk_id) + ": " + std::strerror(errno));
    }
    info.used_bytes = static_cast<std::int64_t>((st.f_blocks - st.f_bfree) * st.f_frsize);
  } else {
    auto sb = read_ext4_superblock(image_path(disk_id));
    if (!sb) return fail(std::move(sb.error()));
    info.used_bytes = sb->used_bytes();
  }
  return info;
}

Result<std::optional<DiskInfo>> LoopExt4Driver::inspect(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  if (!is_file(image_path(disk_id))) return std::optional<DiskInfo>();
  auto device = mounted_device(disk_id);
  if (!device) return fail(std::move(device.error()));
  auto info = describe(disk_id, *device);
  if (!info) return fail(std::move(info.error()));
  return std::optional<DiskInfo>(std::move(*info));
}

Result<std::vector<DiskInfo>> LoopExt4Driver::list_disks() {
  std::vector<DiskInfo> out;
  for (const auto& id : ids_in(root_, ".img")) {
    auto info = inspect(id);
    if (!info) return fail(std::move(info.error()));
    if (*info) out.push_back(std::move(**info));
  }
  return out;
}

// ---- making -----------------------------------------------------------------------------------

Status LoopExt4Driver::create(const std::string& disk_id, std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  if (is_file(image_path(disk_id))) return fail(ErrorCode::conflict, "disk " + disk_id + " exists");
  const std::string tmp = temp_path(disk_id);
  if (auto s = remove_file(tmp); !s) return s;
  if (auto s = set_file_size(tmp, size_bytes); !s) return s;
  // Lazy init: the inode tables and the journal are not zeroed (the file is sparse and reads
  // as zeros anyway), so the size barely changes the time. No blocks reserved for root: the
  // tenant gets all of it.
  auto made = run_tool({"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                        tmp},
                       kE2fsprogs);
  if (!made) {
    (void)remove_file(tmp);
    return fail(std::move(made.error()));
  }
  fault_point("agent.disk.create.before_rename");
  return rename_durably(tmp, image_path(disk_id));
}

Status LoopExt4Driver::copy_sparse(const std::string& from, const std::string& to) const {
  auto copied = run_tool({"cp", "--sparse=always", "--", from, to}, kCoreutils, kCopyTimeout);
  if (!copied) return fail(std::move(copied.error()));
  return fsync_file(to);
}

Status LoopExt4Driver::resize_offline(const std::string& image) const {
  // resize2fs wants a freshly checked filesystem; 0-2 are "clean" or "fixed".
  std::vector<std::string> check{"e2fsck", "-f", "-p", image};
  auto checked = run_tool_exit(check, kE2fsprogs, kCheckTimeout);
  if (!checked) return fail(std::move(checked.error()));
  if (checked->exit_code < 0 || checked->exit_code > 2) return fail(ErrorCode::internal, tool_failure(check, *checked));
  auto resized = run_tool({"resize2fs", image}, kE2fsprogs, kCheckTimeout);
  if (!resized) return fail(std::move(resized.error()));
  return fsync_file(image);
}

Status LoopExt4Driver::create_from_snapshot(const std::string& disk_id, const std::string& snapshot_id,
                                            std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_id(snapshot_id, "from_snapshot"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  if (is_file(image_path(disk_id))) return fail(ErrorCode::conflict, "disk " + disk_id + " exists");
  auto snap = inspect_snapshot(snapshot_id);
  if (!snap) return fail(std::move(snap.error()));
  if (!*snap) return fail(ErrorCode::not_found, "from_snapshot: no snapshot " + snapshot_id);
  const std::int64_t snap_bytes = file_size(snapshot_image_path(snapshot_id));
  if (size_bytes < snap_bytes) {
    return invalid("size_gib: smaller than snapshot " + snapshot_id + " (" + std::to_string(snap_bytes / kGiB) + " GiB)");
  }
  const std::string tmp = temp_path(disk_id);
  if (auto s = remove_file(tmp); !s) return s;
  auto made = [&]() -> Status {
    if (auto s = copy_sparse(snapshot_image_path(snapshot_id), tmp); !s) return s;
    if (size_bytes > snap_bytes) {
      if (auto s = set_file_size(tmp, size_bytes); !s) return s;
      if (auto s = resize_offline(tmp); !s) return s;
    }
    return ok();
  }();
  if (!made) {
    (void)remove_file(tmp);
    return made;
  }
  fault_point("agent.disk.create.before_rename");
  return rename_durably(tmp, image_path(disk_id));
}

Status LoopExt4Driver::grow(const std::string& disk_id, std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  const std::string image = image_path(disk_id);
  const std::int64_t current = file_size(image);
  if (current < 0) return fail(ErrorCode::not_found, "no disk " + disk_id);
  if (size_bytes < current) return invalid("size_gib: disks only grow");
  auto device = mounted_device(disk_id);
  if (!device) return fail(std::move(device.error()));
  if (size_bytes == current) {
    // The file may have grown before a crash stopped the resize: finish it. Mounted, the
    // loop device's capacity says nothing of ext4's (a crash between losetup --set-capacity
    // and resize2fs left the first done), and both steps do nothing once done.
    if (!device->empty()) return resize_online(disk_id, *device);
    auto sb = read_ext4_superblock(image);
    if (!sb) return fail(std::move(sb.error()));
    if (sb->device_bytes() + 4 * kMiB >= current) return ok();
    return resize_offline(image);
  }
  if (auto s = set_file_size(image, size_bytes); !s) return s;
  if (device->empty()) {
    fault_point("agent.disk.grow.before_resize2fs");
    return resize_offline(image);
  }
  return resize_online(disk_id, *device);
}

Status LoopExt4Driver::resize_online(const std::string& disk_id, const std::string& device) const {
  // The loop device learns the new file size, then ext4 grows into it.
  if (auto s = run_tool({"losetup", "--set-capacity", device}, kUtilLinux); !s) return fail(std::move(s.error()));
  fault_point("agent.disk.grow.before_resize2fs");
  auto resized = run_tool({"resize2fs", device}, kE2fsprogs, kCheckTimeout);
  if (!resized) {
    // The kernel allows an online resize only with CAP_SYS_RESOURCE, which some sandboxes
    // take from root. The file has its new size: mount() grows the filesystem offline first,
    // so the disk has it from the instance's next start.
    const std::string& why = resized.error().detail;
    if (why.find("Permission denied") != std::string::npos || why.find("not permitted") != std::string::npos) {
      spdlog::warn(R"({{"event":"disk_online_resize_refused","disk":"{}","note":"grows at its next mount"}})", disk_id);
      return ok();
    }
    return fail(std::move(resized.error()));
  }
  return ok();
}

Status LoopExt4Driver::remove(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  const std::string image = image_path(disk_id);
  if (is_file(image)) {
    if (auto s = unmount(disk_id); !s) return s;
    // Still attached: a container's mount namespace holds the filesystem.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    auto attached = loop_devices_of(image);
    while (!attached.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // autoclear runs as the last user goes
      attached = loop_devices_of(image);
    }
    if (!attached.empty()) {
      return fail(ErrorCode::conflict, "disk " + disk_id + " is still in use (" + attached.front() + ")");
    }
    if (auto s = remove_file(image); !s) return s;
    if (auto s = fsync_directory(root_); !s) return s;
  }
  ::rmdir(mount_path(disk_id).c_str());
  return ok();
}

// ---- mounting ---------------------------------------------------------------------------------

Result<std::string> LoopExt4Driver::mount(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  const std::string image = image_path(disk_id);
  if (!is_file(image)) return fail(ErrorCode::not_found, "no disk " + disk_id);
  auto device = mounted_device(disk_id);
  if (!device) return fail(std::move(device.error()));
  if (!device->empty()) return mount_path(disk_id);
  // Mounting an image that is still attached elsewhere (a container kept it after the host's
  // mount went) would put two ext4 mounts on one image: refuse.
  if (auto attached = loop_devices_of(image); !attached.empty()) {
    return fail(ErrorCode::conflict, "disk " + disk_id + " is still in use (" + attached.front() + ")");
  }
  // A grow that could not finish (a crash, or no online resize here) is finished first.
  auto sb = read_ext4_superblock(image);
  if (!sb) return fail(std::move(sb.error()));
  if (sb->device_bytes() + 4 * kMiB < file_size(image)) {
    if (auto s = resize_offline(image); !s) return fail(std::move(s.error()));
  }
  if (auto s = make_directories(mount_path(disk_id)); !s) return fail(std::move(s.error()));
  auto mounted = run_tool({"mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noinit_itable", "--", image, mount_path(disk_id)},
                          kUtilLinux);
  if (!mounted) {
    ::rmdir(mount_path(disk_id).c_str());
    return fail(std::move(mounted.error()));
  }
  return mount_path(disk_id);
}

Status LoopExt4Driver::unmount(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  const std::string dir = mount_path(disk_id);
  if (auto m = find_mount(*table, dir)) {
    (void)run_tool({"fsfreeze", "--unfreeze", dir}, kUtilLinux);  // never leave a frozen one behind
    if (auto done = run_tool({"umount", "--", dir}, kUtilLinux); !done) {
      const bool busy = done.error().detail.find("busy") != std::string::npos;
      return fail(busy ? ErrorCode::conflict : ErrorCode::internal, done.error().detail);
    }
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return fail(ErrorCode::internal, "rmdir " + dir + ": " + std::strerror(errno));
  }
  return ok();
}

// ---- snapshots --------------------------------------------------------------------------------

Result<std::optional<SnapshotInfo>> LoopExt4Driver::inspect_snapshot(const std::string& snapshot_id) {
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return fail(std::move(s.error()));
  const std::string image = snapshot_image_path(snapshot_id);
  if (!is_file(image)) return std::optional<SnapshotInfo>();
  SnapshotInfo info;
  info.snapshot_id = snapshot_id;
  info.size_bytes = file_size(image);
  const SnapshotMeta meta = read_meta(snapshot_meta_path(snapshot_id));
  info.disk_id = meta.disk_id;
  info.durable = meta.durable;
  auto sb = read_ext4_superblock(image);
  if (!sb) return fail(std::move(sb.error()));
  info.used_bytes = sb->used_bytes();
  return std::optional<SnapshotInfo>(std::move(info));
}

Result<std::vector<SnapshotInfo>> LoopExt4Driver::list_snapshots() {
  std::vector<SnapshotInfo> out;
  for (const auto& id : ids_in(snapshots_, ".img")) {
    auto info = inspect_snapshot(id);
    if (!info) return fail(std::move(info.error()));
    if (*info) out.push_back(std::move(**info));
  }
  return out;
}

std::vector<std::string> LoopExt4Driver::torn_snapshots() { return ids_in(snapshots_, ".img.torn"); }

Result<SnapshotInfo> LoopExt4Driver::snapshot(const std::string& disk_id, const std::string& snapshot_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return fail(std::move(s.error()));
  auto existing = inspect_snapshot(snapshot_id);
  if (!existing) return fail(std::move(existing.error()));
  if (*existing) {
    if ((*existing)->disk_id != disk_id) {
      return fail(ErrorCode::conflict, "snapshot " + snapshot_id + " exists for disk " +
                                           ((*existing)->disk_id.empty() ? "(unknown)" : (*existing)->disk_id));
    }
    return **existing;
  }
  const std::string image = image_path(disk_id);
  if (!is_file(image)) return fail(ErrorCode::not_found, "no disk " + disk_id);
  auto device = mounted_device(disk_id);
  if (!device) return fail(std::move(device.error()));
  const std::string tmp = temp_path(snapshot_id);
  if (auto s = remove_file(tmp); !s) return fail(std::move(s.error()));
  const std::int64_t size = file_size(image);
  {
    // Frozen while copied: every write waits, so the copy is one moment of the filesystem.
    Freeze frozen(mount_path(disk_id));
    if (!device->empty()) {
      if (auto s = frozen.freeze(); !s) return fail(std::move(s.error()));
    }
    auto copied = run_tool({"cp", "--sparse=always", "--", image, tmp}, kCoreutils, kCopyTimeout);
    fault_point("agent.disk.snapshot.after_copy");
    auto thawed = frozen.thaw();
    if (!copied) {
      (void)remove_file(tmp);
      return fail(std::move(copied.error()));
    }
    if (!thawed) {
      (void)remove_file(tmp);
      return fail(std::move(thawed.error()));
    }
  }
  // No fsync of the copy here: it answers from the page cache (a kill -9 of the agent or a
  // dockerd restart keeps it), and make_snapshot_durable writes it back right after. The
  // metadata goes first, durably, saying so and naming this boot: start() can then tell a
  // copy the page cache still holds from one a host crash may have torn. Without a boot id
  // to tell them apart, the copy is fsynced before the answer, as it always was.
  const std::string boot = current_boot_id();
  if (boot.empty()) {
    if (auto s = fsync_file(tmp); !s) {
      (void)remove_file(tmp);
      return fail(std::move(s.error()));
    }
  }
  if (auto s = write_file_durably(snapshot_meta_path(snapshot_id), meta_json(disk_id, size, boot.empty(), boot)); !s) {
    (void)remove_file(tmp);
    return fail(std::move(s.error()));
  }
  if (auto s = rename_durably(tmp, snapshot_image_path(snapshot_id)); !s) return fail(std::move(s.error()));
  auto made = inspect_snapshot(snapshot_id);
  if (!made) return fail(std::move(made.error()));
  if (!*made) return fail(ErrorCode::internal, "snapshot " + snapshot_id + " vanished");
  return **made;
}

Status LoopExt4Driver::remove_snapshot(const std::string& snapshot_id) {
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return s;
  if (auto s = remove_file(snapshot_image_path(snapshot_id)); !s) return s;
  if (auto s = remove_file(snapshot_meta_path(snapshot_id)); !s) return s;
  // A copy set aside as torn at a start goes with it.
  if (auto s = remove_file(snapshot_image_path(snapshot_id) + ".torn"); !s) return s;
  if (auto s = remove_file(snapshot_meta_path(snapshot_id) + ".torn"); !s) return s;
  return fsync_directory(snapshots_);
}

Status LoopExt4Driver::make_snapshot_durable(const std::string& snapshot_id) {
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return s;
  const std::string image = snapshot_image_path(snapshot_id);
  if (!is_file(image)) return ok();  // removed meanwhile, or set aside
  const SnapshotMeta meta = read_meta(snapshot_meta_path(snapshot_id));
  if (!meta.present || meta.durable) return ok();
  if (auto s = fsync_file(image); !s) return s;
  // Only now may the metadata say so: a host crash before this line leaves "durable": false.
  return write_file_durably(snapshot_meta_path(snapshot_id),
                            meta_json(meta.disk_id, meta.size_bytes, true, meta.boot_id));
}

}  // namespace gpucloud::agent::disks
