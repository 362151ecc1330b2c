#include "agent/disks/disk_tools.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/child_process.h"

namespace gpucloud::agent::disks {

namespace fs = std::filesystem;

namespace {

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string_view digits = field.substr(i + 1, 3);
      if (digits.size() == 3 && digits[0] >= '0' && digits[0] <= '3' && digits[1] >= '0' && digits[1] <= '7' &&
          digits[2] >= '0' && digits[2] <= '7') {
        out += static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

Result<std::string> find_tool(const std::string& name, std::string_view package) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    std::string candidate = std::string(dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return fail(ErrorCode::unavailable, name + " not found (apt-get install " + std::string(package) + ")");
}

std::string tool_failure(const std::vector<std::string>& argv, const ProcessResult& result) {
  std::string shown;
  for (const auto& a : argv) shown += (shown.empty() ? "" : " ") + a;
  std::string err = trimmed(result.err.empty() ? result.out : result.err);
  if (err.size() > 2000) err = err.substr(0, 2000) + "...";
  const std::string how = result.exit_code < 0 ? std::string("killed") : "exit " + std::to_string(result.exit_code);
  return shown + ": " + how + ": " + err;
}

Result<ProcessResult> run_tool_exit(std::vector<std::string> argv, std::string_view package,
                                    std::chrono::milliseconds timeout) {
  if (argv.empty()) return fail(ErrorCode::internal, "run_tool: no program");
  auto path = find_tool(argv[0], package);
  if (!path) return fail(std::move(path.error()));
  const std::string name = argv[0];
  argv[0] = *path;
  auto res = run_process(argv, "", timeout);
  if (!res) return fail(res.error().code, name + ": " + res.error().detail);
  return res;
}

Result<std::string> run_tool(std::vector<std::string> argv, std::string_view package,
                             std::chrono::milliseconds timeout) {
  auto res = run_tool_exit(argv, package, timeout);
  if (!res) return fail(std::move(res.error()));
  if (res->exit_code != 0) return fail(ErrorCode::internal, tool_failure(argv, *res));
  return std::move(res->out);
}

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    auto fields = split_spaces(line);
    if (fields.size() < 7) continue;
    std::size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size()) continue;
    MountEntry e;
    const std::string_view devno = fields[2];
    const auto colon = devno.find(':');
    if (colon == std::string_view::npos) continue;
    e.major = static_cast<unsigned>(std::strtoul(std::string(devno.substr(0, colon)).c_str(), nullptr, 10));
    e.minor = static_cast<unsigned>(std::strtoul(std::string(devno.substr(colon + 1)).c_str(), nullptr, 10));
    e.root = unescape(fields[3]);
    e.mount_point = unescape(fields[4]);
    e.fs_type = std::string(fields[dash + 1]);
    e.source = dash + 2 < fields.size() ? unescape(fields[dash + 2]) : std::string();
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<MountEntry>> read_mount_table() {
  auto text = read_small_file("/proc/self/mountinfo");
  if (!text) return fail(ErrorCode::internal, "cannot read /proc/self/mountinfo");
  return parse_mountinfo(*text);
}

std::optional<MountEntry> find_mount(const std::vector<MountEntry>& table, const std::string& mount_point) {
  std::string wanted = fs::path(mount_point).lexically_normal().string();
  while (wanted.size() > 1 && wanted.back() == '/') wanted.pop_back();
  std::optional<MountEntry> found;
  for (const auto& e : table) {
    if (e.mount_point == wanted) found = e;
  }
  return found;
}

std::vector<LoopDevice> list_loop_devices() {
  std::vector<LoopDevice> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/block", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("loop", 0) != 0) continue;
    auto backing = read_small_file(entry.path().string() + "/loop/backing_file");
    if (!backing) continue;  // not attached
    LoopDevice d;
    d.device = "/dev/" + name;
    d.backing_file = trimmed(*backing);
    constexpr std::string_view kDeleted = " (deleted)";
    if (d.backing_file.size() > kDeleted.size() &&
        d.backing_file.compare(d.backing_file.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
      d.backing_file.resize(d.backing_file.size() - kDeleted.size());
      d.backing_deleted = true;
    }
    out.push_back(std::move(d));
  }
  return out;
}

bool mounted_in_other_namespace(unsigned major, unsigned minor, const std::string& root) {
  std::set<std::uint64_t> seen;  // mount namespaces already read (by the inode of /proc/PID/ns/mnt)
  struct stat own {};
  if (::stat("/proc/self/ns/mnt", &own) == 0) seen.insert(static_cast<std::uint64_t>(own.st_ino));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat ns {};
    if (::stat((entry.path() / "ns" / "mnt").c_str(), &ns) != 0) continue;  // gone, or a kernel thread
    if (!seen.insert(static_cast<std::uint64_t>(ns.st_ino)).second) continue;
    auto text = read_small_file((entry.path() / "mountinfo").string());
    if (!text) continue;
    for (const auto& m : parse_mountinfo(*text)) {
      if (m.major == major && m.minor == minor && path_is_under(m.root, root)) return true;
    }
  }
  return false;
}

bool path_is_under(const std::string& path, const std::string& dir) {
  const std::string p = fs::path(path).lexically_normal().string();
  std::string d = fs::path(dir).lexically_normal().string();
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (p == d) return true;
  return p.size() > d.size() && p.compare(0, d.size(), d) == 0 && (p[d.size()] == '/' || d == "/");
}

Result<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::not_found, "cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return fail(ErrorCode::internal, "cannot read " + path);
  return buf.str();
}

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::internal, sys_error("open " + dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return fail(ErrorCode::internal, sys_error("fsync " + dir));
  return ok();
}

Status write_file_durably(const std::string& path, std::string_view content) {
  static std::atomic<unsigned> counter{0};
  const fs::path target(path);
  const std::string tmp =
      (target.parent_path() / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                               std::to_string(counter++)))
          .string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ErrorCode::internal, sys_error("create " + tmp));
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string detail = sys_error("write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(ErrorCode::internal, detail);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string detail = sys_error("fsync " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, detail);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string detail = sys_error("rename " + tmp);
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, detail);
  }
  return fsync_directory(target.parent_path().string());
}

Status make_directories(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return ok();
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && parent != fs::path(dir)) {
    if (auto s = make_directories(parent.string()); !s) return s;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fail(ErrorCode::internal, sys_error("mkdir " + dir));
  return ok();
}

Status set_file_size(const std::string& path, std::int64_t size_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ErrorCode::internal, sys_error("open " + path));
  if (::ftruncate(fd, static_cast<off_t>(size_bytes)) != 0) {
    const std::string detail = sys_error("truncate " + path);
    ::close(fd);
    return fail(ErrorCode::internal, detail);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return fail(ErrorCode::internal, sys_error("fsync " + path));
  return ok();
}

Status rename_durably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return fail(ErrorCode::internal, sys_error("rename " + from + " to " + to));
  return fsync_directory(fs::path(to).parent_path().string());
}

Status remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail(ErrorCode::internal, sys_error("remove " + path));
  return ok();
}

bool is_valid_disk_id(std::string_view id) {
  if (id.empty() || id.size() > 80) return false;
  std::size_t i = 0;
  while (i < id.size() && id[i] >= 'a' && id[i] <= 'z') ++i;
  if (i == 0 || i > 16 || i >= id.size() || id[i] != '-') return false;
  ++i;
  if (i >= id.size()) return false;
  for (; i < id.size(); ++i) {
    const char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

}  // namespace gpucloud::agent::disks
