#include "agent/disks/btrfs_driver.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <boost/json.hpp>

#include "agent/disks/disk_tools.h"

namespace gpucloud::agent::disks {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::string_view kBtrfsProgs = "btrfs-progs";
constexpr std::string_view kUtilLinux = "util-linux";
constexpr std::int64_t kMinimumSize = 16 * kMiB;
constexpr std::int64_t kPoolHeadroom = 2 * kGiB;  // metadata (DUP) and the snapshots' own trees
constexpr std::uint64_t kSubvolumeRootInode = 256;  // BTRFS_FIRST_FREE_OBJECTID


Status check_id(const std::string& id, const char* what) {
  if (!is_valid_disk_id(id)) return invalid(std::string(what) + " '" + id + "' is not an id like disk-3kq9x2m7c4v8");
  return ok();
}

Status check_size(std::int64_t size_bytes) {
  if (size_bytes < kMinimumSize) return invalid("size must be at least 16 MiB");
  if (size_bytes % 4096 != 0) return invalid("size must be a multiple of 4 KiB");
  return ok();
}

bool is_subvolume(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_ino == kSubvolumeRootInode;
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_size);
}

std::int64_t to_int(std::string_view s) {
  if (s.empty() || s == "none" || s == "-") return 0;
  return std::strtoll(std::string(s).c_str(), nullptr, 10);
}

std::string meta_json(const std::string& disk_id, std::int64_t size_bytes) {
  return json::serialize(json::object{{"disk_id", disk_id}, {"size_bytes", size_bytes}});
}

struct Meta {
  std::string disk_id;
  std::int64_t size_bytes = 0;
};
std::optional<Meta> read_meta(const std::string& path) {
  auto text = read_small_file(path);
  if (!text) return std::nullopt;
  boost::system::error_code ec;
  auto v = json::parse(*text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  Meta m;
  const auto& o = v.as_object();
  if (const auto* d = o.if_contains("disk_id"); d && d->is_string()) m.disk_id = d->as_string();
  if (const auto* s = o.if_contains("size_bytes"); s && s->is_int64()) m.size_bytes = s->as_int64();
  return m;
}

std::vector<std::string> valid_ids_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string id = entry.path().filename().string();
    if (is_valid_disk_id(id) && is_subvolume(entry.path().string())) out.push_back(std::move(id));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::map<std::uint64_t, QgroupRow> parse_qgroup_show(std::string_view text) {
  std::map<std::uint64_t, QgroupRow> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, rfer, excl, max_rfer;
    if (!(fields >> id >> rfer >> excl)) continue;
    fields >> max_rfer;
    if (id.rfind("0/", 0) != 0 || rfer.find_first_not_of("0123456789") != std::string::npos) continue;
    QgroupRow row;
    row.subvolume_id = std::strtoull(id.c_str() + 2, nullptr, 10);
    row.referenced = to_int(rfer);
    row.exclusive = to_int(excl);
    row.max_referenced = to_int(max_rfer);
    out[row.subvolume_id] = row;
  }
  return out;
}

std::map<std::string, std::uint64_t> parse_subvolume_list(std::string_view text) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    // ID 256 gen 15 top level 5 path disks/disk-1
    if (line.rfind("ID ", 0) != 0) continue;
    const auto at = line.find(" path ");
    if (at == std::string::npos) continue;
    out[line.substr(at + 6)] = std::strtoull(line.c_str() + 3, nullptr, 10);
  }
  return out;
}

std::vector<std::uint64_t> stale_qgroups(const std::map<std::string, std::uint64_t>& subvolumes,
                                         const std::map<std::uint64_t, QgroupRow>& qgroups) {
  std::set<std::uint64_t> live;
  for (const auto& [path, id] : subvolumes) live.insert(id);
  std::vector<std::uint64_t> out;
  for (const auto& [id, row] : qgroups)
    if (id != 5 && !live.contains(id)) out.push_back(id);
  return out;
}

const QgroupRow* BtrfsDriver::Accounting::row(const std::string& relative) const {
  auto id = ids.find(relative);
  if (id == ids.end()) return nullptr;
  auto q = qgroups.find(id->second);
  return q == qgroups.end() ? nullptr : &q->second;
}

BtrfsDriver::BtrfsDriver(const DiskDriverOptions& options)
    : root_(fs::absolute(fs::path(options.agent_dir) / "disks" / "btrfs").lexically_normal().string()),
      pool_(root_ + "/pool.img"),
      mnt_(root_ + "/mnt"),
      pool_initial_bytes_(options.btrfs_pool_initial_bytes) {}

// ---- the pool -----------------------------------------------------------------------------

Status BtrfsDriver::ensure_mounted() {
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  if (auto m = find_mount(*table, mnt_)) {
    if (m->fs_type != "btrfs") return fail(ErrorCode::conflict, mnt_ + " is mounted with " + m->fs_type + ", not the btrfs pool");
    return ok();
  }
  // Loop devices of the pool that nothing mounts (a crash between losetup and mount).
  for (const auto& d : list_loop_devices()) {
    if (d.backing_file != pool_) continue;
    bool mounted = false;
    for (const auto& m : *table) mounted = mounted || m.source == d.device;
    if (!mounted) (void)run_tool({"losetup", "--detach", d.device}, kUtilLinux);
  }
  if (auto s = make_directories(mnt_); !s) return s;
  auto mounted = run_tool({"mount", "-t", "btrfs", "-o", "loop", "--", pool_, mnt_}, kUtilLinux);
  if (!mounted) return fail(std::move(mounted.error()));
  return ok();
}

Status BtrfsDriver::start() {
  if (auto s = make_directories(root_); !s) return s;
  if (::geteuid() != 0) return fail(ErrorCode::unavailable, "btrfs disks need root (mount, btrfs)");
  if (auto s = find_tool("btrfs", kBtrfsProgs); !s) return fail(std::move(s.error()));
  if (file_size(pool_) < 0) {
    const std::string tmp = pool_ + ".partial";
    if (auto s = remove_file(tmp); !s) return s;
    if (auto s = set_file_size(tmp, pool_initial_bytes_); !s) return s;
    if (auto s = run_tool({"mkfs.btrfs", "-q", "-f", tmp}, kBtrfsProgs); !s) {
      (void)remove_file(tmp);
      return fail(std::move(s.error()));
    }
    if (auto s = rename_durably(tmp, pool_); !s) return s;
  }
  if (auto s = ensure_mounted(); !s) return s;
  // On the empty pool this costs nothing; enabling it again is a no-op.
  if (auto s = run_tool({"btrfs", "quota", "enable", mnt_}, kBtrfsProgs); !s) return fail(std::move(s.error()));
  for (const char* dir : {"/disks", "/snapshots", "/.tmp"}) {
    if (auto s = make_directories(mnt_ + dir); !s) return s;
  }
  // What a crash left half-made.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(mnt_ + "/.tmp", ec)) {
    if (is_subvolume(entry.path().string())) {
      if (auto s = delete_subvolume(entry.path().string()); !s) return s;
    } else {
      fs::remove_all(entry.path(), ec);
    }
  }
  for (const auto& entry : fs::directory_iterator(mnt_ + "/snapshots", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) {
      fs::remove(entry.path(), ec);
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 &&
               !is_subvolume(mnt_ + "/snapshots/" + name.substr(0, name.size() - 5))) {
      fs::remove(entry.path(), ec);
    }
  }
  return ok();
}

Status BtrfsDriver::unmount_all_except(const std::set<std::string>&) { return ok(); }

Result<BtrfsDriver::Accounting> BtrfsDriver::accounting(bool sync) const {
  if (sync) {
    // Qgroup numbers move at transaction commit: commit now so a write just made counts.
    if (auto s = run_tool({"btrfs", "filesystem", "sync", mnt_}, kBtrfsProgs); !s) return fail(std::move(s.error()));
  }
  auto list = run_tool({"btrfs", "subvolume", "list", mnt_}, kBtrfsProgs);
  if (!list) return fail(std::move(list.error()));
  auto show = run_tool({"btrfs", "qgroup", "show", "--raw", "-r", mnt_}, kBtrfsProgs);
  if (!show) return fail(std::move(show.error()));
  Accounting a;
  a.ids = parse_subvolume_list(*list);
  a.qgroups = parse_qgroup_show(*show);
  return a;
}

Status BtrfsDriver::ensure_pool_room(std::int64_t extra_bytes, const Accounting* known) {
  std::lock_guard lock(pool_mutex_);
  Result<Accounting> a = known ? Result<Accounting>(*known) : accounting(false);
  if (!a) return fail(std::move(a.error()));
  std::int64_t needed = kPoolHeadroom + extra_bytes;
  for (const auto& [path, id] : a->ids) {
    auto q = a->qgroups.find(id);
    if (q == a->qgroups.end()) continue;
    needed += path.rfind("snapshots/", 0) == 0 ? q->second.referenced : q->second.max_referenced;
  }
  const std::int64_t current = file_size(pool_);
  if (needed <= current) return ok();
  // Sparse, so generous steps cost nothing and keep resizes rare.
  std::int64_t wanted = std::max(needed, current + current / 2);
  wanted = (wanted + kGiB - 1) / kGiB * kGiB;
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  auto m = find_mount(*table, mnt_);
  if (!m) return fail(ErrorCode::internal, "the btrfs pool is not mounted at " + mnt_);
  if (auto s = set_file_size(pool_, wanted); !s) return s;
  if (auto s = run_tool({"losetup", "--set-capacity", m->source}, kUtilLinux); !s) return fail(std::move(s.error()));
  if (auto s = run_tool({"btrfs", "filesystem", "resize", "max", mnt_}, kBtrfsProgs); !s) return fail(std::move(s.error()));
  return ok();
}

Status BtrfsDriver::set_limit(const std::string& path, std::int64_t size_bytes) {
  auto done = run_tool({"btrfs", "qgroup", "limit", std::to_string(size_bytes), path}, kBtrfsProgs);
  if (!done) return fail(std::move(done.error()));
  return ok();
}

Status BtrfsDriver::delete_subvolume(const std::string& path) {
  auto done = run_tool({"btrfs", "subvolume", "delete", path}, kBtrfsProgs);
  if (!done) return fail(std::move(done.error()));
  return fsync_directory(fs::path(path).parent_path().string());
}

// ---- disks --------------------------------------------------------------------------------

Result<std::optional<DiskInfo>> BtrfsDriver::inspect(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  if (!is_subvolume(disk_path(disk_id))) return std::optional<DiskInfo>();
  auto a = accounting(true);
  if (!a) return fail(std::move(a.error()));
  DiskInfo info;
  info.disk_id = disk_id;
  if (const auto* q = a->row("disks/" + disk_id)) {
    info.size_bytes = q->max_referenced;
    info.used_bytes = q->referenced;
  }
  return std::optional<DiskInfo>(std::move(info));
}

Result<std::vector<DiskInfo>> BtrfsDriver::list_disks() {
  auto a = accounting(true);
  if (!a) return fail(std::move(a.error()));
  // Each deletion destroys its subvolume's qgroup, which the kernel refuses while the cleaner
  // still holds the tree (kernels before 6.x leave it for good): the listing every reconcile
  // takes clears what is left, one fork and only when something is (issue 23, btrfs churn).
  if (!stale_qgroups(a->ids, a->qgroups).empty())
    (void)run_tool({"btrfs", "qgroup", "clear-stale", mnt_}, kBtrfsProgs);
  std::vector<DiskInfo> out;
  for (const auto& id : valid_ids_in(mnt_ + "/disks")) {
    DiskInfo info;
    info.disk_id = id;
    if (const auto* q = a->row("disks/" + id)) {
      info.size_bytes = q->max_referenced;
      info.used_bytes = q->referenced;
    }
    out.push_back(std::move(info));
  }
  return out;
}

Status BtrfsDriver::create(const std::string& disk_id, std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  if (is_subvolume(disk_path(disk_id))) return fail(ErrorCode::conflict, "disk " + disk_id + " exists");
  if (auto s = ensure_pool_room(size_bytes); !s) return s;
  const std::string tmp = temp_path(disk_id);
  if (is_subvolume(tmp)) {
    if (auto s = delete_subvolume(tmp); !s) return s;
  }
  if (auto s = run_tool({"btrfs", "subvolume", "create", tmp}, kBtrfsProgs); !s) return fail(std::move(s.error()));
  if (auto s = set_limit(tmp, size_bytes); !s) {
    (void)delete_subvolume(tmp);
    return s;
  }
  return rename_durably(tmp, disk_path(disk_id));
}

Status BtrfsDriver::create_from_snapshot(const std::string& disk_id, const std::string& snapshot_id,
                                         std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_id(snapshot_id, "from_snapshot"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  if (is_subvolume(disk_path(disk_id))) return fail(ErrorCode::conflict, "disk " + disk_id + " exists");
  auto snap = inspect_snapshot(snapshot_id);
  if (!snap) return fail(std::move(snap.error()));
  if (!*snap) return fail(ErrorCode::not_found, "from_snapshot: no snapshot " + snapshot_id);
  if (size_bytes < (*snap)->size_bytes) {
    return invalid("size_gib: smaller than snapshot " + snapshot_id + " (" + std::to_string((*snap)->size_bytes / kGiB) +
                   " GiB)");
  }
  if (auto s = ensure_pool_room(size_bytes); !s) return s;
  const std::string tmp = temp_path(disk_id);
  if (is_subvolume(tmp)) {
    if (auto s = delete_subvolume(tmp); !s) return s;
  }
  // Writable, sharing every extent with the snapshot until written.
  if (auto s = run_tool({"btrfs", "subvolume", "snapshot", snapshot_path(snapshot_id), tmp}, kBtrfsProgs); !s) {
    return fail(std::move(s.error()));
  }
  if (auto s = set_limit(tmp, size_bytes); !s) {
    (void)delete_subvolume(tmp);
    return s;
  }
  return rename_durably(tmp, disk_path(disk_id));
}

Status BtrfsDriver::grow(const std::string& disk_id, std::int64_t size_bytes) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  if (auto s = check_size(size_bytes); !s) return s;
  auto info = inspect(disk_id);
  if (!info) return fail(std::move(info.error()));
  if (!*info) return fail(ErrorCode::not_found, "no disk " + disk_id);
  const std::int64_t current = (*info)->size_bytes;
  if (size_bytes < current) return invalid("size_gib: disks only grow");
  if (size_bytes == current) return ok();
  if (auto s = ensure_pool_room(size_bytes - current); !s) return s;
  return set_limit(disk_path(disk_id), size_bytes);
}

Status BtrfsDriver::remove(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  const std::string path = disk_path(disk_id);
  if (!is_subvolume(path)) return ok();
  auto table = read_mount_table();
  if (!table) return fail(std::move(table.error()));
  if (auto m = find_mount(*table, mnt_); m && mounted_in_other_namespace(m->major, m->minor, "/disks/" + disk_id)) {
    return fail(ErrorCode::conflict, "disk " + disk_id + " is still in use (a container mounts it)");
  }
  auto a = accounting(false);
  std::optional<std::uint64_t> id;
  if (a) {
    if (auto it = a->ids.find("disks/" + disk_id); it != a->ids.end()) id = it->second;
  }
  if (auto s = delete_subvolume(path); !s) return s;
  // Its qgroup outlives it; best effort (refused while the cleaner still holds the tree).
  if (id) (void)run_tool({"btrfs", "qgroup", "destroy", "0/" + std::to_string(*id), mnt_}, kBtrfsProgs);
  return ok();
}

Result<std::string> BtrfsDriver::mount(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  if (!is_subvolume(disk_path(disk_id))) return fail(ErrorCode::not_found, "no disk " + disk_id);
  return disk_path(disk_id);
}

Status BtrfsDriver::unmount(const std::string& disk_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return s;
  return ok();
}

// ---- snapshots ----------------------------------------------------------------------------

Result<std::optional<SnapshotInfo>> BtrfsDriver::inspect_snapshot(const std::string& snapshot_id) {
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return fail(std::move(s.error()));
  if (!is_subvolume(snapshot_path(snapshot_id))) return std::optional<SnapshotInfo>();
  auto a = accounting(false);  // a read-only snapshot's numbers do not move
  if (!a) return fail(std::move(a.error()));
  SnapshotInfo info;
  info.snapshot_id = snapshot_id;
  const auto* q = a->row("snapshots/" + snapshot_id);
  if (q) info.used_bytes = q->referenced;
  if (auto meta = read_meta(snapshot_meta_path(snapshot_id))) {
    info.disk_id = meta->disk_id;
    info.size_bytes = meta->size_bytes;
  } else if (q) {
    info.size_bytes = q->max_referenced;
  }
  return std::optional<SnapshotInfo>(std::move(info));
}

Result<std::vector<SnapshotInfo>> BtrfsDriver::list_snapshots() {
  auto a = accounting(false);
  if (!a) return fail(std::move(a.error()));
  std::vector<SnapshotInfo> out;
  for (const auto& id : valid_ids_in(mnt_ + "/snapshots")) {
    SnapshotInfo info;
    info.snapshot_id = id;
    const auto* q = a->row("snapshots/" + id);
    if (q) info.used_bytes = q->referenced;
    if (auto meta = read_meta(snapshot_meta_path(id))) {
      info.disk_id = meta->disk_id;
      info.size_bytes = meta->size_bytes;
    } else if (q) {
      info.size_bytes = q->max_referenced;
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<SnapshotInfo> BtrfsDriver::snapshot(const std::string& disk_id, const std::string& snapshot_id) {
  if (auto s = check_id(disk_id, "disk_id"); !s) return fail(std::move(s.error()));
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return fail(std::move(s.error()));
  if (is_subvolume(snapshot_path(snapshot_id))) {
    auto existing = inspect_snapshot(snapshot_id);
    if (!existing) return fail(std::move(existing.error()));
    if (*existing) {
      if ((*existing)->disk_id != disk_id) {
        return fail(ErrorCode::conflict, "snapshot " + snapshot_id + " exists for disk " +
                                             ((*existing)->disk_id.empty() ? "(unknown)" : (*existing)->disk_id));
      }
      return **existing;
    }
  }
  if (!is_subvolume(disk_path(disk_id))) return fail(ErrorCode::not_found, "no disk " + disk_id);
  // Only this disk's qgroup (each btrfs call is a fork, and a snapshot should take milliseconds).
  auto shown = run_tool({"btrfs", "qgroup", "show", "--raw", "-r", "-f", disk_path(disk_id)}, kBtrfsProgs);
  if (!shown) return fail(std::move(shown.error()));
  auto rows = parse_qgroup_show(*shown);
  if (rows.empty()) return fail(ErrorCode::internal, "no qgroup for disk " + disk_id);
  SnapshotInfo info;
  info.snapshot_id = snapshot_id;
  info.disk_id = disk_id;
  info.size_bytes = rows.begin()->second.max_referenced;
  info.used_bytes = rows.begin()->second.referenced;  // as of the last commit; read again below
  // A new snapshot shares every extent; it costs room only as the disk is rewritten. Grow the
  // pool only when it is short already.
  struct statvfs st {};
  if (::statvfs(mnt_.c_str(), &st) != 0 ||
      static_cast<std::int64_t>(st.f_bavail * st.f_frsize) < info.used_bytes + kPoolHeadroom) {
    if (auto s = ensure_pool_room(info.used_bytes); !s) return fail(std::move(s.error()));
  }
  // The metadata first: a crash before the snapshot leaves only it, removed at start.
  if (auto s = write_file_durably(snapshot_meta_path(snapshot_id), meta_json(disk_id, info.size_bytes)); !s) {
    return fail(std::move(s.error()));
  }
  // Atomic and consistent: btrfs flushes the subvolume's pending writes into the snapshot.
  if (auto s = run_tool({"btrfs", "subvolume", "snapshot", "-r", disk_path(disk_id), snapshot_path(snapshot_id)},
                        kBtrfsProgs);
      !s) {
    (void)remove_file(snapshot_meta_path(snapshot_id));
    return fail(std::move(s.error()));
  }
  if (auto s = fsync_directory(mnt_ + "/snapshots"); !s) return fail(std::move(s.error()));
  // The snapshot was made in a transaction commit, which settles its qgroup: now its numbers
  // include what was written just before (the disk's did not yet).
  if (auto after = run_tool({"btrfs", "qgroup", "show", "--raw", "-r", "-f", snapshot_path(snapshot_id)}, kBtrfsProgs)) {
    if (auto now = parse_qgroup_show(*after); !now.empty()) info.used_bytes = now.begin()->second.referenced;
  }
  return info;
}

Status BtrfsDriver::remove_snapshot(const std::string& snapshot_id) {
  if (auto s = check_id(snapshot_id, "snapshot_id"); !s) return s;
  const std::string path = snapshot_path(snapshot_id);
  if (is_subvolume(path)) {
    std::optional<std::uint64_t> id;
    if (auto a = accounting(false)) {
      if (auto it = a->ids.find("snapshots/" + snapshot_id); it != a->ids.end()) id = it->second;
    }
    if (auto s = delete_subvolume(path); !s) return s;
    if (id) (void)run_tool({"btrfs", "qgroup", "destroy", "0/" + std::to_string(*id), mnt_}, kBtrfsProgs);
  }
  if (auto s = remove_file(snapshot_meta_path(snapshot_id)); !s) return s;
  return ok();
}

}  // namespace gpucloud::agent::disks
