#pragma once
// What a test needs from the machine (an engine, root, a GPU, ...). A missing capability
// skips the test, unless the run requires it: GPUCLOUD_REQUIRE=docker,root (set by ./dev test)
// turns that skip into a failure, so CI cannot go green by skipping half the suite.
//
// Use GPUCLOUD_NEED / GPUCLOUD_NEED_ENGINE only in a test body or a fixture's SetUp():
// GTEST_SKIP() and FAIL() return from the function they are written in, so inside a helper
// they would return from the helper alone and the test would go on.
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace gpucloud::testing {

// True when GPUCLOUD_REQUIRE lists `capability` (comma-separated; "all" requires every one).
bool capability_required(std::string_view capability);

// The capabilities themselves (each probed once per process).
bool have_root();
bool have_docker();  // an engine answers on /var/run/docker.sock and gpucloud/base:bookworm-2 exists
// Chromium (/usr/bin/chromium, or CHROMIUM_PATH), node, and the console's npm packages
// (web/node_modules/playwright-core): what the console's browser tests run on.
bool have_chromium();

}  // namespace gpucloud::testing

#define GPUCLOUD_NEED(capability, available, why)                                                          \
  do {                                                                                                     \
    if (!(available)) {                                                                                    \
      const std::string gpucloud_why_ = (why);                                                             \
      if (::gpucloud::testing::capability_required(capability))                                            \
        GTEST_FAIL() << "required capability '" << (capability) << "' is missing (GPUCLOUD_REQUIRE): "    \
                     << gpucloud_why_;                                                                     \
      GTEST_SKIP() << gpucloud_why_;                                                                       \
    }                                                                                                      \
  } while (0)

// The real engine: Docker with the base image, and root for nftables.
#define GPUCLOUD_NEED_ENGINE()                                                                             \
  do {                                                                                                     \
    GPUCLOUD_NEED("docker", ::gpucloud::testing::have_docker(),                                            \
                  "needs a Docker Engine on /var/run/docker.sock and gpucloud/base:bookworm-2");           \
    GPUCLOUD_NEED("root", ::gpucloud::testing::have_root(), "needs root (nftables)");                      \
  } while (0)
