#include "agent/image_layer.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include <openssl/evp.h>

namespace gpucloud::agent::layer {

namespace {

constexpr std::uint64_t kMaxCleanedFile = 64ull << 20;  // a shadow or authorized_keys file larger: refused

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

int open_beneath(const std::string& root, const std::string& full) {
  // openat2: no symlink anywhere on the way, nothing outside `root` (kernel 5.6+); where the
  // kernel lacks it, O_NOFOLLOW on the last component (the paths come from symlink-free walks).
  if (full.size() > root.size() && full.compare(0, root.size(), root) == 0 && full[root.size()] == '/') {
    const int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      open_how how{};
      how.flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
      const std::string rel = full.substr(root.size() + 1);
      const long fd = ::syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how);
      const int saved = errno;
      ::close(dir);
      if (fd >= 0 || saved != ENOSYS) {
        errno = saved;
        return static_cast<int>(fd);
      }
    }
  }
  return ::open(full.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
}

void drop_mount_points(const std::string& root, std::vector<FileChange>& changes, const std::vector<std::string>& targets) {
  if (targets.empty()) return;
  const std::set<std::string> wanted(targets.begin(), targets.end());
  auto is_empty_mount_point = [&](const std::string& path) {
    const int fd = open_beneath(root, root + path);
    if (fd < 0) return false;
    struct stat st {};
    bool empty = false;
    if (::fstat(fd, &st) == 0) {
      if (S_ISREG(st.st_mode)) {
        empty = st.st_size == 0;
      } else if (S_ISDIR(st.st_mode)) {
        std::error_code ec;
        empty = std::filesystem::is_empty("/proc/self/fd/" + std::to_string(fd), ec) && !ec;
      }
    }
    ::close(fd);
    return empty;
  };
  std::erase_if(changes, [&](const FileChange& c) {
    return c.kind == ChangeKind::added && wanted.contains(c.path) && is_empty_mount_point(c.path);
  });
}

namespace {

// Lines of `text`, each with its newline (the last may have none).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size() - 1;
    out.push_back(text.substr(start, nl - start + 1));
    start = nl + 1;
  }
  return out;
}

std::string_view without_newline(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  return line;
}

bool starts_with_name(std::string_view path, std::string_view dir, std::string_view prefix) {
  if (!path.starts_with(dir)) return false;
  auto name = path.substr(dir.size());
  return name.starts_with(prefix) && name.find('/') == std::string_view::npos;
}

bool valid_change_path(std::string_view p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/') return false;
  std::size_t start = 1;
  while (start <= p.size()) {
    auto end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    auto part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return p.find('\0') == std::string_view::npos;
}

std::string parent_of(const std::string& p) { return p.substr(0, p.rfind('/')); }  // "/a/b" → "/a", "/a" → ""

// `target` of a symlink at `link` (both in the container's view), made absolute and normal;
// empty when it leaves the root or is not a plain path.
std::string resolve_lexically(const std::string& link, const std::string& target) {
  std::string joined = target.starts_with('/') ? target : parent_of(link) + "/" + target;
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= joined.size()) {
    auto end = joined.find('/', start);
    if (end == std::string::npos) end = joined.size();
    std::string part = joined.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    start = end + 1;
  }
  if (parts.empty()) return {};
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out;
}

void put_octal(char* field, std::size_t width, std::uint64_t value) {
  // width - 1 digits, then NUL
  for (std::size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  field[width - 1] = '\0';
}

bool fits_octal(std::uint64_t value, std::size_t width) { return value < (std::uint64_t{1} << (3 * (width - 1))); }

std::string pax_record(std::string_view key, std::string_view value) {
  const std::size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  std::size_t total = body + std::to_string(body).size();
  if (std::to_string(total).size() != std::to_string(body).size()) total = body + std::to_string(total).size();
  std::string out = std::to_string(total);
  out += ' ';
  out += key;
  out += '=';
  out += value;
  out += '\n';
  return out;
}

std::string ustar_block(std::string_view name, char type, std::string_view linkname, std::uint32_t mode, std::uint64_t uid,
                        std::uint64_t gid, std::uint64_t size, std::int64_t mtime, std::uint32_t devmajor,
                        std::uint32_t devminor) {
  std::string b(512, '\0');
  std::memcpy(b.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  put_octal(&b[100], 8, mode & 07777);
  put_octal(&b[108], 8, fits_octal(uid, 8) ? uid : 0);
  put_octal(&b[116], 8, fits_octal(gid, 8) ? gid : 0);
  put_octal(&b[124], 12, fits_octal(size, 12) ? size : 0);
  const std::uint64_t t = mtime < 0 ? 0 : static_cast<std::uint64_t>(mtime);
  put_octal(&b[136], 12, fits_octal(t, 12) ? t : 0);
  b[156] = type;
  std::memcpy(&b[157], linkname.data(), std::min<std::size_t>(linkname.size(), 100));
  std::memcpy(&b[257], "ustar\0" "00", 8);
  put_octal(&b[329], 8, devmajor);
  put_octal(&b[337], 8, devminor);
  std::memset(&b[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : b) sum += c;
  put_octal(&b[148], 7, sum);  // six digits and NUL; the space after stays
  return b;
}

}  // namespace

std::string strip_managed_keys(std::string_view text) {
  std::string out;
  bool in_block = false;
  for (auto line : lines_of(text)) {
    const auto bare = without_newline(line);
    if (in_block) {
      if (bare == kManagedKeysEnd) in_block = false;
      continue;
    }
    if (bare == kManagedKeysBegin) {
      in_block = true;
      continue;
    }
    out += line;
  }
  return out;
}

std::string clear_root_password(std::string_view shadow) {
  std::string out;
  for (auto line : lines_of(shadow)) {
    auto bare = without_newline(line);
    const bool newline = bare.size() != line.size();
    const auto colon = bare.find(':');
    if (bare.substr(0, colon) != "root") {
      out += line;
      continue;
    }
    // awk -F: -v OFS=: '$1 == "root" { $2 = "*" }'
    out += "root:*";
    if (colon != std::string_view::npos) {
      const auto rest = bare.substr(colon + 1);
      const auto next = rest.find(':');
      if (next != std::string_view::npos) out += rest.substr(next);
    }
    if (newline) out += '\n';
  }
  return out;
}

SecretRule secret_rule(std::string_view path) {
  if (starts_with_name(path, "/etc/ssh/", "ssh_host_")) return SecretRule::drop;
  if (path == "/etc/ssh/sshd_config.d/gpucloud.conf" || path == "/etc/profile.d/00-gpucloud-env.sh") return SecretRule::drop;
  if (starts_with_name(path, "/root/.ssh/", ".authorized_keys.gpucloud.")) return SecretRule::drop;
  if (starts_with_name(path, "/etc/", ".shadow.gpucloud.")) return SecretRule::drop;
  if (path == "/root/.ssh/authorized_keys") return SecretRule::authorized_keys;
  if (path == "/etc/shadow") return SecretRule::shadow;
  if (path == "/etc/shadow-") return SecretRule::shadow_backup;
  return SecretRule::none;
}

std::string tar_header(const TarHeader& h) {
  std::string records;
  if (h.name.size() > 100) records += pax_record("path", h.name);
  if (h.linkname.size() > 100) records += pax_record("linkpath", h.linkname);
  if (!fits_octal(h.size, 12)) records += pax_record("size", std::to_string(h.size));
  if (!fits_octal(h.uid, 8)) records += pax_record("uid", std::to_string(h.uid));
  if (!fits_octal(h.gid, 8)) records += pax_record("gid", std::to_string(h.gid));
  if (h.mtime < 0 || !fits_octal(static_cast<std::uint64_t>(h.mtime), 12)) records += pax_record("mtime", std::to_string(h.mtime));
  for (const auto& [k, v] : h.xattrs) records += pax_record("SCHILY.xattr." + k, v);
  std::string out;
  if (!records.empty()) {
    std::string base = h.name;
    while (!base.empty() && base.back() == '/') base.pop_back();
    base = base.substr(base.rfind('/') == std::string::npos ? 0 : base.rfind('/') + 1);
    const std::string pax_name = ("PaxHeaders.0/" + base).substr(0, 100);
    out += ustar_block(pax_name, 'x', "", 0644, 0, 0, records.size(), h.mtime, 0, 0);
    out += records;
    out.append(tar_padding(records.size()), '\0');
  }
  out += ustar_block(h.name, h.type, h.linkname, h.mode, h.uid, h.gid, h.size, h.mtime, h.devmajor, h.devminor);
  return out;
}

namespace {

struct Planner {
  const std::string& root;
  std::int64_t whiteout_time;
  LayerPlan plan;

  void add(TarHeader h, std::string inline_content = {}, std::string file = {}) {
    LayerPiece p;
    p.head = tar_header(h);
    if (!inline_content.empty()) {
      p.head += inline_content;
      p.head.append(tar_padding(inline_content.size()), '\0');
    } else if (!file.empty() && h.size > 0) {
      p.file = std::move(file);
      p.file_size = h.size;
      p.pad = tar_padding(h.size);
    }
    plan.size += p.head.size() + p.file_size + p.pad;
    plan.pieces.push_back(std::move(p));
    ++plan.entries;
  }
  void whiteout(const std::string& path) {
    TarHeader h;
    const auto slash = path.rfind('/');
    h.name = path.substr(1, slash) + ".wh." + path.substr(slash + 1);  // "/a/b" → "a/.wh.b"
    h.mode = 0;
    h.mtime = whiteout_time;
    add(std::move(h));
  }
  static TarHeader header_of(const std::string& path, const struct stat& st) {
    TarHeader h;
    h.name = path.substr(1);
    h.mode = st.st_mode & 07777;
    h.uid = st.st_uid;
    h.gid = st.st_gid;
    h.mtime = st.st_mtim.tv_sec;
    return h;
  }
  std::map<std::string, std::string> xattrs_of(const std::string& full) const {
    std::map<std::string, std::string> out;
    char value[512];
    const auto n = ::lgetxattr(full.c_str(), "security.capability", value, sizeof value);
    if (n > 0) out.emplace("security.capability", std::string(value, static_cast<std::size_t>(n)));
    return out;
  }
};

Result<std::string> read_small(const std::string& root, const std::string& full) {
  const int fd = open_beneath(root, full);
  if (fd < 0) return fail(ErrorCode::internal, "reading " + full + ": " + errno_text(errno));
  std::string out;
  char buf[65536];
  for (;;) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return fail(ErrorCode::internal, "reading " + full + ": " + errno_text(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > kMaxCleanedFile) {
      ::close(fd);
      return fail(ErrorCode::invalid_argument, full + " is too large to be cleaned (over 64 MiB)");
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<std::vector<FileChange>> upper_dir_changes(const std::string& upper) {
  std::vector<FileChange> out;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(upper, std::filesystem::directory_options::none, ec);
  if (ec) return fail(ErrorCode::unavailable, "reading " + upper + ": " + ec.message());
  for (; it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return fail(ErrorCode::unavailable, "reading " + upper + ": " + ec.message());
    const std::string full = it->path().string();
    FileChange c;
    c.path = full.substr(upper.size());
    c.kind = ChangeKind::added;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) continue;  // gone meanwhile
    if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
      c.kind = ChangeKind::deleted;
    } else if (S_ISDIR(st.st_mode)) {
      char value[4];
      const auto n = ::lgetxattr(full.c_str(), "trusted.overlay.opaque", value, sizeof value);
      if (n == 1 && value[0] == 'y') c.kind = ChangeKind::deleted;
    }
    out.push_back(std::move(c));
  }
  return out;
}

Result<LayerPlan> plan_layer(const std::string& root, std::vector<FileChange> changes, std::int64_t whiteout_time) {
  std::sort(changes.begin(), changes.end(), [](const FileChange& a, const FileChange& b) { return a.path < b.path; });
  changes.erase(std::unique(changes.begin(), changes.end(), [](const FileChange& a, const FileChange& b) { return a.path == b.path; }),
                changes.end());
  Planner p{root, whiteout_time, {}};
  p.plan.root = root;

  // Only paths the changes list are ever looked at: those came from walks that follow no
  // symlink, so no component of them is one (a link the container made cannot lead the agent
  // out of `root`).
  std::set<std::string> listed;
  for (const auto& c : changes)
    if (c.kind != ChangeKind::deleted) listed.insert(c.path);
  // The files cleaned by content, and where a symlink at one of them points (within the
  // layer): that target is cleaned by the same rule.
  std::map<std::string, SecretRule> content_rules;
  for (const char* path : {"/root/.ssh/authorized_keys", "/etc/shadow", "/etc/shadow-"}) {
    std::string at = path;
    const SecretRule rule = secret_rule(path);
    for (int hops = 0; hops < 8 && !at.empty(); ++hops) {
      content_rules.emplace(at, rule);
      struct stat st {};
      if (!listed.contains(at) || ::lstat((root + at).c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) break;
      std::string target(4096, '\0');
      const auto n = ::readlink((root + at).c_str(), target.data(), target.size());
      if (n <= 0) break;
      target.resize(static_cast<std::size_t>(n));
      at = resolve_lexically(at, target);
    }
  }
  // Other names (hard links) of a cleaned file's inode get the cleaned content.
  std::map<std::pair<dev_t, ino_t>, SecretRule> secret_inodes;
  for (const auto& [path, rule] : content_rules) {
    struct stat st {};
    if (listed.contains(path) && ::lstat((root + path).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      secret_inodes.emplace(std::pair(st.st_dev, st.st_ino), rule);
  }
  // What /etc/shadow- becomes: the cleaned /etc/shadow (its own cleaned content when the
  // layer has no /etc/shadow to copy).
  std::optional<std::string> clean_shadow;
  auto shadow_content = [&]() -> std::optional<std::string> {
    if (clean_shadow) return clean_shadow;
    for (const auto& [path, rule] : content_rules) {
      if (rule != SecretRule::shadow || !listed.contains(path)) continue;
      struct stat st {};
      if (::lstat((root + path).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (auto text = read_small(root, root + path)) return clean_shadow = clear_root_password(*text);
    }
    return std::nullopt;
  };

  std::set<std::string> gone;  // whited out: nothing under them is emitted
  auto under_gone = [&](const std::string& path) {
    for (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0; slash = path.rfind('/', slash - 1)) {
      if (gone.contains(path.substr(0, slash))) return true;
    }
    return false;
  };
  std::map<std::pair<dev_t, ino_t>, std::string> first_name;  // hard links within the layer

  for (const auto& change : changes) {
    const std::string& path = change.path;
    if (path == "/") continue;
    if (!valid_change_path(path)) return fail(ErrorCode::internal, "the engine listed a change at a strange path: " + path);
    if (under_gone(path)) continue;
    const auto base = path.substr(path.rfind('/') + 1);
    if (base.starts_with(".wh.")) {  // a layer cannot hold such a name (docker reads it as a whiteout)
      p.plan.skipped.push_back(path);
      continue;
    }
    const std::string full = root + path;
    struct stat st {};
    const bool exists = ::lstat(full.c_str(), &st) == 0;
    if (!exists && errno != ENOENT) return fail(ErrorCode::internal, "lstat " + full + ": " + errno_text(errno));
    SecretRule rule = secret_rule(path);
    if (auto it = content_rules.find(path); rule == SecretRule::none && it != content_rules.end()) rule = it->second;

    const bool overlay_whiteout = exists && S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0;
    if (change.kind == ChangeKind::deleted || overlay_whiteout || rule == SecretRule::drop) {
      if (exists && S_ISDIR(st.st_mode) && rule != SecretRule::drop) {
        // Deleted and made again (overlay's opaque directory): the directory, hiding all below.
        TarHeader h = Planner::header_of(path, st);
        h.name += '/';
        h.type = '5';
        p.add(std::move(h));
        TarHeader opaque;
        opaque.name = path.substr(1) + "/.wh..wh..opq";
        opaque.mode = 0;
        opaque.mtime = whiteout_time;
        p.add(std::move(opaque));
        continue;
      }
      p.whiteout(path);
      gone.insert(path);
      if (rule == SecretRule::drop && exists) p.plan.cleaned.push_back(path);
      continue;
    }
    if (!exists) {  // listed, then gone (a stopped container does not change; a paused one neither)
      p.plan.skipped.push_back(path);
      continue;
    }
    TarHeader h = Planner::header_of(path, st);
    if (S_ISREG(st.st_mode)) {
      auto secret = secret_inodes.find(std::pair(st.st_dev, st.st_ino));
      if (rule == SecretRule::none && secret != secret_inodes.end()) rule = secret->second;
      if (rule != SecretRule::none) {
        auto text = read_small(root, full);
        if (!text) return fail(std::move(text.error()));
        std::string cleaned;
        if (rule == SecretRule::authorized_keys) {
          cleaned = strip_managed_keys(*text);
        } else if (rule == SecretRule::shadow) {
          cleaned = clear_root_password(*text);
        } else {
          auto shadow = shadow_content();
          cleaned = shadow ? *shadow : clear_root_password(*text);
        }
        p.plan.cleaned.push_back(path);
        if (cleaned.empty() && rule == SecretRule::authorized_keys) {
          p.whiteout(path);
          continue;
        }
        h.size = cleaned.size();
        h.xattrs = p.xattrs_of(full);
        p.add(std::move(h), std::move(cleaned));
        continue;
      }
      if (st.st_nlink > 1) {
        auto [it, fresh] = first_name.emplace(std::pair(st.st_dev, st.st_ino), h.name);
        if (!fresh) {
          h.type = '1';
          h.linkname = it->second;
          p.add(std::move(h));
          continue;
        }
      }
      h.type = '0';
      h.size = static_cast<std::uint64_t>(st.st_size);
      h.xattrs = p.xattrs_of(full);
      p.add(std::move(h), {}, full);
    } else if (S_ISDIR(st.st_mode)) {
      h.name += '/';
      h.type = '5';
      h.xattrs = p.xattrs_of(full);
      p.add(std::move(h));
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(4096, '\0');
      const auto n = ::readlink(full.c_str(), target.data(), target.size());
      if (n < 0) return fail(ErrorCode::internal, "readlink " + full + ": " + errno_text(errno));
      target.resize(static_cast<std::size_t>(n));
      h.type = '2';
      h.linkname = std::move(target);
      p.add(std::move(h));
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      h.type = S_ISCHR(st.st_mode) ? '3' : '4';
      h.devmajor = major(st.st_rdev);
      h.devminor = minor(st.st_rdev);
      p.add(std::move(h));
    } else if (S_ISFIFO(st.st_mode)) {
      h.type = '6';
      p.add(std::move(h));
    } else {
      p.plan.skipped.push_back(path);  // a socket
    }
  }
  LayerPiece end;
  end.head.assign(1024, '\0');
  p.plan.size += end.head.size();
  p.plan.pieces.push_back(std::move(end));
  return std::move(p.plan);
}

namespace {
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const char* data, std::size_t n) { EVP_DigestUpdate(ctx_, data, n); }
  std::string finish() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    static const char* hex = "0123456789abcdef";
    std::string out = "sha256:";
    for (unsigned i = 0; i < len; ++i) {
      out += hex[md[i] >> 4];
      out += hex[md[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};
}  // namespace

struct LayerReader::Hash : Sha256 {};

std::string sha256_digest(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.finish();
}

LayerReader::LayerReader(const LayerPlan& plan) : plan_(plan), hash_(std::make_unique<Hash>()) {}

LayerReader::~LayerReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status LayerReader::open_file() {
  const auto& piece = plan_.pieces[piece_];
  fd_ = open_beneath(plan_.root, piece.file);
  if (fd_ < 0) return fail(ErrorCode::unavailable, "the save's file " + piece.file + " cannot be read: " + errno_text(errno));
  (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  return ok();
}

Result<std::size_t> LayerReader::read(char* out, std::size_t max) {
  std::size_t n = 0;
  while (n < max && piece_ < plan_.pieces.size()) {
    const auto& piece = plan_.pieces[piece_];
    if (stage_ == 0) {
      const auto take = std::min<std::uint64_t>(piece.head.size() - offset_, max - n);
      std::memcpy(out + n, piece.head.data() + offset_, take);
      n += take;
      offset_ += take;
      if (offset_ == piece.head.size()) {
        stage_ = 1;
        offset_ = 0;
      }
    } else if (stage_ == 1) {
      if (offset_ == piece.file_size) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        stage_ = 2;
        offset_ = 0;
        continue;
      }
      if (fd_ < 0) {
        if (auto s = open_file(); !s) return fail(std::move(s.error()));
      }
      const auto want = std::min<std::uint64_t>(piece.file_size - offset_, max - n);
      const auto got = ::read(fd_, out + n, want);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return fail(ErrorCode::unavailable, "reading " + piece.file + ": " + errno_text(errno));
      if (got == 0)
        return fail(ErrorCode::unavailable, piece.file + " became shorter while it was saved (" + std::to_string(offset_) + " of " +
                                                std::to_string(piece.file_size) + " bytes)");
      n += static_cast<std::size_t>(got);
      offset_ += static_cast<std::uint64_t>(got);
    } else {
      const auto take = std::min<std::uint64_t>(piece.pad - offset_, max - n);
      std::memset(out + n, 0, take);
      n += take;
      offset_ += take;
      if (offset_ == piece.pad) {
        ++piece_;
        stage_ = 0;
        offset_ = 0;
      }
    }
  }
  hash_->update(out, n);
  produced_ += n;
  if (piece_ == plan_.pieces.size() && diff_id_.empty()) diff_id_ = hash_->finish();
  return n;
}

}  // namespace gpucloud::agent::layer
