#include "agent/lxcfs.h"

#include <sys/stat.h>
#include <sys/vfs.h>

namespace gpucloud::agent {

namespace {
constexpr long kFuseSuperMagic = 0x65735546;  // FUSE_SUPER_MAGIC
}

LxcfsStatus probe_lxcfs(const std::string& dir) {
  LxcfsStatus out;
  if (dir.empty()) {
    out.reason = "not configured ([agent] lxcfs_dir)";
    return out;
  }
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) {
    out.reason = "lxcfs_dir " + dir + " does not exist";
    return out;
  }
  if (static_cast<long>(fs.f_type) != kFuseSuperMagic) {
    out.reason = "lxcfs is not mounted on " + dir;
    return out;
  }
  for (const char* file : kLxcfsFiles) {
    std::string host = dir + "/" + file;
    struct stat st {};
    if (::stat(host.c_str(), &st) != 0) continue;  // lxcfs 5 without this file: left alone
    out.mounts.push_back(Mount{host, std::string("/") + file, true});
  }
  if (out.mounts.empty()) {
    out.reason = dir + " is a FUSE mount without lxcfs's proc/meminfo";
    return out;
  }
  out.available = true;
  out.reason = "lxcfs at " + dir;
  return out;
}

}  // namespace gpucloud::agent
