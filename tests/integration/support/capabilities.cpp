#include "support/capabilities.h"

#include <cstdlib>
#include <string>
#include <unistd.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {

bool have_root() { return ::geteuid() == 0; }

bool have_docker() { return docker_available(); }

bool have_chromium() {
  static const bool available = [] {
    const char* path = std::getenv("CHROMIUM_PATH");
    const std::string chromium = path && *path ? path : "/usr/bin/chromium";
    return ::access(chromium.c_str(), X_OK) == 0 && std::system("command -v node >/dev/null 2>&1") == 0 &&
           ::access(GPUCLOUD_SOURCE_DIR "/web/node_modules/playwright-core/package.json", R_OK) == 0;
  }();
  return available;
}

}  // namespace gpucloud::testing
