// The harness itself can fail: an unknown fault point, a point that never fires, a daemon
// that dies behind the test's back, and a sanitizer report in its log each fail the test.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {

// GPUCLOUD_NEED inside a function of its own, as the fatal-failure check below needs.
void need_a_missing_gpu() { GPUCLOUD_NEED("gpu", false, "no GPU on this machine"); }

TEST(CapabilitiesTest, ARequiredCapabilityThatIsMissingFailsInsteadOfSkipping) {
  const char* before = std::getenv("GPUCLOUD_REQUIRE");
  const std::string saved = before ? before : "";
  ::setenv("GPUCLOUD_REQUIRE", "docker, gpu", 1);
  EXPECT_TRUE(capability_required("gpu"));
  EXPECT_TRUE(capability_required("docker"));
  EXPECT_FALSE(capability_required("root"));
  EXPECT_FATAL_FAILURE(need_a_missing_gpu(), "required capability 'gpu' is missing");
  ::setenv("GPUCLOUD_REQUIRE", "all", 1);
  EXPECT_TRUE(capability_required("postgres"));
  if (before) ::setenv("GPUCLOUD_REQUIRE", saved.c_str(), 1);
  else ::unsetenv("GPUCLOUD_REQUIRE");
}

TEST(TestDaemonTest, AnUnknownFaultPointStopsTheDaemonAtStart) {
  TestDaemon daemon;
  try {
    daemon.start("create.after_enigne");  // a typo
    FAIL() << "the daemon started with an unknown fault point";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("is not a fault point"), std::string::npos) << e.what();
  }
}

TEST(TestDaemonTest, KilledAtFailsWhenThePointNeverFires) {
  TestDaemon daemon;
  daemon.start("create.after_engine");  // armed, but nothing creates an instance
  auto died = daemon.killed_at("create.after_engine", std::chrono::milliseconds(500));
  EXPECT_FALSE(died);
  EXPECT_NE(std::string(died.message()).find("did not fire"), std::string::npos) << died.message();
  EXPECT_FALSE(daemon.killed_at("stop.before_state_commit")) << "not the point it was armed with";
}

TEST(TestDaemonTest, ADaemonThatDiesDuringTheTestFailsIt) {
  std::string dir;
  EXPECT_NONFATAL_FAILURE(
      {
        TestDaemon daemon;
        daemon.start();
        dir = daemon.dir();
        ::kill(daemon.pid(), SIGKILL);
        ASSERT_TRUE(wait_until([&] { return ::kill(daemon.pid(), 0) != 0 || shell("ps -o stat= -p " + std::to_string(daemon.pid())).starts_with("Z"); },
                               std::chrono::seconds(10), "the daemon to die"));
      },
      "died during the test");
  EXPECT_TRUE(std::filesystem::exists(dir + "/daemon-0.log")) << "its log is kept";
  std::filesystem::remove_all(dir);
}

TEST(TestDaemonTest, ASanitizerReportInTheLogFailsTheTest) {
  std::string dir;
  EXPECT_NONFATAL_FAILURE(
      {
        TestDaemon daemon;
        daemon.start();
        dir = daemon.dir();
        daemon.stop();  // first: the daemon writes its log at its own offset, over what we append
        std::ofstream(dir + "/daemon-0.log", std::ios::app) << "src/x.cpp:1:2: runtime error: signed integer overflow\n";
      },
      "runtime error:");
  EXPECT_TRUE(std::filesystem::exists(dir + "/daemon-0.log")) << "its log is kept";
  std::filesystem::remove_all(dir);
}

TEST(TestDaemonTest, ACleanStopPassesAndRemovesTheDirectory) {
  std::string dir;
  {
    TestDaemon daemon;
    daemon.start();
    dir = daemon.dir();
    EXPECT_EQ(daemon.stop(), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace gpucloud::testing
