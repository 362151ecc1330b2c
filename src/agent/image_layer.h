#pragma once
// Save-image's layer: the files a container changed over its image, written as one image
// layer (a tar, docker's layer format) straight from the host's copy of the container's files,
// with gpucloud's per-instance secrets cleaned out on the way (the rules of sanitize_script()):
//
//   /etc/ssh/ssh_host_*, /etc/ssh/sshd_config.d/gpucloud.conf,
//   /etc/profile.d/00-gpucloud-env.sh, /root/.ssh/.authorized_keys.gpucloud.*,
//   /etc/.shadow.gpucloud.*                        → a whiteout (gone, whatever the base had)
//   /root/.ssh/authorized_keys                     → the managed block removed (a whiteout
//                                                     when nothing else is left)
//   /etc/shadow                                    → root's password field '*'
//   /etc/shadow-                                   → the cleaned /etc/shadow (as the script's
//                                                     `cat /etc/shadow >/etc/shadow-`)
//
// A cleaned file's bytes are never read into the layer: a secret path that is not emitted is
// whited out, and everything under a whited-out path is skipped. A symlink at a cleaned path
// gets its (in-layer) target cleaned the same way; another name of a cleaned file's inode
// (hard link) gets the cleaned content too.
//
// The layer follows docker's own ExportChanges: the changes sorted by path, each added or
// modified path as one entry (directories non-recursively: their changed children are changes
// of their own), each deleted one as `.wh.NAME` in its parent, a deleted directory that exists
// again (overlay's opaque directory) as the directory plus `.wh..wh..opq`. ustar headers, PAX
// records for long names and link targets, big sizes and ids, security.capability. Hard links
// between the layer's files stay hard links. Sockets are skipped (tar cannot hold them).
//
// All of this is blocking file work: run it on a pool (ImageSaver does), never on the loop.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime_driver.h"
#include "core/result.h"

namespace gpucloud::agent::layer {

// The init's marks around the keys it manages in /root/.ssh/authorized_keys
// (scripts/instance-init/gpucloud-init.sh).
inline constexpr std::string_view kManagedKeysBegin =
    "# --- gpucloud managed keys: edits between these lines are replaced at boot ---";
inline constexpr std::string_view kManagedKeysEnd = "# --- end of gpucloud managed keys ---";

// `sed '/^BEGIN$/,/^END$/d'`: every line from a BEGIN mark through the next END mark (to the
// end when none follows) is dropped.
std::string strip_managed_keys(std::string_view text);
// root's second field ('*' instead of its hash), every other line as it was.
std::string clear_root_password(std::string_view shadow);

enum class SecretRule { none, drop, authorized_keys, shadow, shadow_backup };
// What the cleaning does with an absolute path ("/etc/shadow").
SecretRule secret_rule(std::string_view path);

// One tar member's header (PAX record block first when needed). Pure, public for tests.
struct TarHeader {
  std::string name;      // relative ("etc/shadow"; directories end in '/')
  char type = '0';       // '0' file, '1' hard link, '2' symlink, '3' char, '4' block, '5' dir, '6' fifo
  std::string linkname;  // hard link / symlink target
  std::uint32_t mode = 0644;  // permission bits, set-id and sticky bits
  std::uint64_t uid = 0, gid = 0;
  std::uint64_t size = 0;     // what follows (file content only)
  std::int64_t mtime = 0;
  std::uint32_t devmajor = 0, devminor = 0;
  std::map<std::string, std::string> xattrs;  // name → value (SCHILY.xattr.NAME)
};
std::string tar_header(const TarHeader& h);
// Zero bytes that round `size` up to a multiple of 512.
inline std::uint64_t tar_padding(std::uint64_t size) { return (512 - size % 512) % 512; }

// The layer as a sequence of pieces whose total size is known before a byte is read (the
// image's outer tar needs it up front).
struct LayerPiece {
  std::string head;            // header bytes (and inline content with its padding)
  std::string file;            // then this host file's first `file_size` bytes, if any
  std::uint64_t file_size = 0;
  std::uint64_t pad = 0;       // then this many zero bytes
};
struct LayerPlan {
  std::string root;                     // every file is opened beneath it, through no symlink
  std::vector<LayerPiece> pieces;
  std::uint64_t size = 0;               // every byte of the layer, end blocks included
  std::vector<std::string> cleaned;     // paths cleaned or whited out as secrets (for the log)
  std::vector<std::string> skipped;     // paths left out (sockets, vanished files)
  std::int64_t entries = 0;
};

// What an overlay upper dir holds, as changes (what the engine's native overlay diff reads):
// a 0/0 character device is a deleted path, a directory marked opaque
// (trusted.overlay.opaque=y) a deleted one made again, everything else added. Only where the
// engine reports "Native Overlay Diff: true" (no redirect_dir, no metacopy: the upper dir
// holds every changed file whole).
Result<std::vector<FileChange>> upper_dir_changes(const std::string& upper);

// Drops from `changes` the mount points the runtime made for the container's binds (the GPU
// driver's files, the init, data disks): an added path among `targets` that is an empty file
// or an empty directory under `root` (opened beneath it, through no symlink). Without this a
// saved image of a GPU instance carries empty libcuda.so.1 and nvidia-smi files, which a
// no-GPU instance of it would find. Blocking (it opens the paths).
void drop_mount_points(const std::string& root, std::vector<FileChange>& changes, const std::vector<std::string>& targets);

// The plan of the layer of `changes`, read from `root` (the host directory holding the
// container's files at their in-container paths). `whiteout_time`: the mtime of whiteouts.
Result<LayerPlan> plan_layer(const std::string& root, std::vector<FileChange> changes, std::int64_t whiteout_time);

// Reads a plan's bytes in order, hashing them (sha256) as they go. A file that ends before
// its planned size, or cannot be opened, is an error (the container changed under the save).
class LayerReader {
 public:
  explicit LayerReader(const LayerPlan& plan);
  ~LayerReader();
  LayerReader(const LayerReader&) = delete;
  LayerReader& operator=(const LayerReader&) = delete;
  // Up to `max` bytes into `out`; 0 once the whole layer was read.
  Result<std::size_t> read(char* out, std::size_t max);
  std::uint64_t produced() const { return produced_; }
  // "sha256:<hex>" of every byte; only once read() returned 0.
  std::string diff_id() const { return diff_id_; }

 private:
  Status open_file();
  const LayerPlan& plan_;
  std::size_t piece_ = 0;
  int stage_ = 0;  // 0 head, 1 file, 2 pad
  std::uint64_t offset_ = 0;
  int fd_ = -1;
  std::uint64_t produced_ = 0;
  struct Hash;
  std::unique_ptr<Hash> hash_;
  std::string diff_id_;
};

// Opens `full` (a path under `root`) read-only, through no symlink and not out of `root`
// (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it). -1 and errno on failure.
int open_beneath(const std::string& root, const std::string& full);

// sha256 of `data` as "sha256:<hex>" (the config's digest, tests).
std::string sha256_digest(std::string_view data);

}  // namespace gpucloud::agent::layer
