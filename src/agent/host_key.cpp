#include "agent/host_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/child_process.h"

namespace gpucloud::agent {

namespace fs = std::filesystem;

namespace {

std::string first_two_fields(const std::string& line) {
  std::istringstream in(line);
  std::string type, blob;
  in >> type >> blob;
  if (type.empty() || blob.empty()) return {};
  return type + " " + blob;
}

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::internal, errno_text(("open " + dir).c_str()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return fail(ErrorCode::internal, errno_text(("fsync " + dir).c_str()));
  return ok();
}

}  // namespace

Result<std::string> read_config_host_key(const std::string& config_dir) {
  const std::string key = config_dir + "/" + std::string(kConfigHostKeyName);
  std::error_code ec;
  if (!fs::is_regular_file(key, ec) || fs::file_size(key, ec) == 0 || ec) return std::string();
  std::ifstream pub(key + ".pub");
  if (!pub) return std::string();
  std::string line;
  std::getline(pub, line);
  return first_two_fields(line);
}

Result<std::string> ensure_config_host_key(const std::string& config_dir, const std::string& comment) {
  auto existing = read_config_host_key(config_dir);
  if (!existing) return existing;
  if (!existing->empty()) return existing;

  std::string keygen;
  for (const char* candidate : {"/usr/bin/ssh-keygen", "/bin/ssh-keygen", "/usr/local/bin/ssh-keygen"}) {
    if (::access(candidate, X_OK) == 0) {
      keygen = candidate;
      break;
    }
  }
  if (keygen.empty()) return fail(ErrorCode::unavailable, "no ssh-keygen on this host");

  static std::atomic<unsigned> counter{0};
  const std::string final_key = config_dir + "/" + std::string(kConfigHostKeyName);
  const std::string tmp = config_dir + "/.host-key-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::remove(tmp + ".pub", ec);
  auto made = run_process({keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", tmp}, "",
                          std::chrono::seconds(10));
  auto abandon = [&](Error e) {
    fs::remove(tmp, ec);
    fs::remove(tmp + ".pub", ec);
    return tl::unexpected(std::move(e));
  };
  if (!made) return abandon(made.error());
  if (made->exit_code != 0) {
    return abandon(Error{ErrorCode::internal, "ssh-keygen exited " + std::to_string(made->exit_code) + ": " + made->err, {}, 0});
  }
  // ssh-keygen fsyncs nothing: the files must be on disk before they are renamed into place.
  for (const std::string& path : {tmp, tmp + ".pub"}) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fchmod(fd, 0600) != 0 || ::fsync(fd) != 0) {
      const std::string detail = errno_text(("fsync " + path).c_str());
      if (fd >= 0) ::close(fd);
      return abandon(Error{ErrorCode::internal, detail, {}, 0});
    }
    ::close(fd);
  }
  // The public half first: a key without its .pub reads as none and is made again.
  if (::rename((tmp + ".pub").c_str(), (final_key + ".pub").c_str()) != 0 ||
      ::rename(tmp.c_str(), final_key.c_str()) != 0) {
    return abandon(Error{ErrorCode::internal, errno_text(("rename " + tmp).c_str()), {}, 0});
  }
  if (auto s = fsync_directory(config_dir); !s) return fail(std::move(s.error()));
  auto key = read_config_host_key(config_dir);
  if (key && key->empty()) return fail(ErrorCode::internal, "ssh-keygen made no readable key in " + config_dir);
  return key;
}

}  // namespace gpucloud::agent
