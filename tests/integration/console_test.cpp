// The web console end to end: real Chromium (playwright-core, web/tests/e2e/console.mjs)
// against a real gpucloudd with the engine, serving web/dist. The script signs up, creates an
// instance from the create page, follows it live, uses SSH, the terminal, Jupyter and the port
// proxy, stops it, reads the charge, checks 中文, isolation, CSRF and the operator's credit,
// runs axe over the pages and takes the screenshots (docs/screenshots/ when
// GPUCLOUD_UPDATE_SCREENSHOTS=1, else the test's own folder).
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "support/capabilities.h"
#include "support/ssh_client.h"
#include "support/test_daemon.h"
#include "support/test_resources.h"

namespace gpucloud::testing {
namespace {
namespace fs = std::filesystem;

std::string console_e2e_config(const std::string& dist) {
  return R"(
[server]
console_dir = ")" + dist + R"("
[[hosts]]
name = "node-1"
cpu = 4
memory_gib = 16
port_range = ")" + port_range() + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
)";
}

std::string console_shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` with sh; its combined output into `out`; the exit status (-1 when it did not exit).
int console_run_command(const std::string& command, std::string& out) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ConsoleTest, CHROMIUM_DOCKER_ROOT_SLOW_SignUpCreateFollowUseStopBillTranslateIsolateAndCredit) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("chromium", have_chromium(),
                "needs /usr/bin/chromium, node and web/node_modules (cd web && npm ci): the console's browser test");
  const std::string source = GPUCLOUD_SOURCE_DIR;
  const std::string dist = source + "/web/dist";
  GPUCLOUD_NEED("chromium", fs::exists(dist + "/index.html"), "needs the built console (cd web && npm run build)");

  DaemonOptions options{console_e2e_config(dist)};
  options.test_clock = true;
  TestDaemon daemon(options);
  daemon.start();
  KeyPair key = make_key();

  const char* update = std::getenv("GPUCLOUD_UPDATE_SCREENSHOTS");
  const std::string shots = update && std::string(update) == "1" ? source + "/docs/screenshots" : daemon.dir() + "/screenshots";
  const std::string command = "cd " + console_shell_quote(source + "/web") + " && GPUCLOUD_URL=" + console_shell_quote(daemon.endpoint()) +
                              " GPUCLOUD_ADMIN_PASSWORD=" + console_shell_quote(options.admin_password) +
                              " GPUCLOUD_SSH_KEY=" + console_shell_quote(key.private_key) + " GPUCLOUD_SCREENSHOTS=" + console_shell_quote(shots) +
                              " GPUCLOUD_TEST_CLOCK=1 timeout 270 node tests/e2e/console.mjs";
  std::string out;
  const int rc = console_run_command(command, out);
  fs::remove_all(key.dir);
  if (rc == 77) {
    std::cout << out;
    GTEST_SKIP() << "the console's e2e script skipped: " << out.substr(out.rfind("SKIPPED:") == std::string::npos ? 0 : out.rfind("SKIPPED:"));
  }
  EXPECT_EQ(rc, 0) << out;
  if (rc == 0) std::cout << out;
}

}  // namespace
}  // namespace gpucloud::testing
