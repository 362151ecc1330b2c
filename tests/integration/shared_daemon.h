#pragma once
// One gpucloudd for a whole test suite: for API contract suites where no test restarts or
// kills the daemon, changes its config, moves the test clock, or counts what the whole
// installation holds (all users, instances, events). Each test works with users and names of
// its own (unique_name, support/test_resources.h: a prefix of up to 18 characters makes a
// username), so the tests pass in any order and repeated: --gtest_shuffle, and --gtest_repeat
// (each repetition starts the suite's daemon afresh).
//
//   class FooTest : public SharedDaemonTest<FooTest> {
//    public:
//     static DaemonOptions daemon_options() { return DaemonOptions{config}; }  // optional
//   };
//   TEST_F(FooTest, Bar) { auto token = daemon_.register_and_login(unique_name("bar")); ... }
//
// What a per-test TestDaemon checks still holds. After each test the suite's daemon must still
// be alive and its log must hold no sanitizer report written during that test; else that test
// fails, naming it, and the tests after it fail at once. At the end of the suite TestDaemon's
// own teardown stops it and fails the suite when it did not exit cleanly on SIGTERM or its log
// holds a sanitizer report. When any test of the suite failed, the daemon's logs are kept and
// the failing test prints where.
//
// Suites listed in GPUCLOUD_SHARED_DAEMON_SUITES (CMakeLists.txt) run as one ctest entry, which
// is what shares the daemon under ctest; the others get one entry per test, and each entry
// starts the suite's daemon for its one test.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "support/test_daemon.h"

namespace gpucloud::testing {

template <class Suite>
class SharedDaemonTest : public ::testing::Test {
 public:
  static DaemonOptions daemon_options() { return DaemonOptions(); }

  static void SetUpTestSuite() {
    died_in().clear();
    shared() = new TestDaemon(Suite::daemon_options());
    shared()->start();  // throws when it does not start: gtest fails the suite and skips its tests
  }

  static void TearDownTestSuite() {
    TestDaemon* daemon = std::exchange(shared(), nullptr);
    if (!daemon) return;
    // TestDaemon keeps its directory when the current test failed; here there is no current
    // test, so say it for the suite: a failed test keeps the logs it ran against.
    const auto* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    const bool keep = suite && suite->failed_test_count() > 0 && !std::getenv("GPUCLOUD_KEEP_TEST_DIRS");
    if (keep) setenv("GPUCLOUD_KEEP_TEST_DIRS", "1", 1);
    delete daemon;  // SIGTERM; fails the suite if it died, did not exit 0 or logged a sanitizer report
    if (keep) unsetenv("GPUCLOUD_KEEP_TEST_DIRS");
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared() && shared()->running()) << "the suite's daemon did not start";
    ASSERT_TRUE(died_in().empty()) << "the suite's daemon died during " << died_in();
    log_from_ = daemon_.log().size();
    watching_ = true;
  }

  void TearDown() override {
    if (!watching_) return;  // SetUp failed and said why
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (!alive(daemon_.pid())) {
      died_in() = test;
      ADD_FAILURE() << "the suite's gpucloudd (pid " << daemon_.pid() << ") died during this test; its log:\n"
                    << daemon_.log().substr(log_from_);
    }
    const std::string written = daemon_.log().substr(log_from_);
    for (const char* marker : kCrashMarkers)
      if (auto at = written.find(marker); at != std::string::npos)
        ADD_FAILURE() << "the suite's gpucloudd logged '" << marker << "' during this test:\n" << written.substr(at, 4000);
    if (HasFailure()) std::cerr << "the suite's gpucloudd logs (kept): " << daemon_.dir() << "\n";
  }

  static TestDaemon*& shared() {
    static TestDaemon* daemon = nullptr;
    return daemon;
  }
  // A child that exited shows as a zombie (state Z) until TestDaemon waits for it.
  static bool alive(pid_t pid) {
    if (pid <= 0) return false;
    std::string stat;
    std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/stat"), stat);
    auto close_paren = stat.rfind(')');
    return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] != 'Z' &&
           stat[close_paren + 2] != 'X';
  }
  TestDaemon& daemon_ = *shared();

 private:
  // The lines TestDaemon's teardown looks for (support/test_daemon.cpp, kCrashMarkers).
  static constexpr const char* kCrashMarkers[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                                                  "SUMMARY: UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer",
                                                  "terminate called"};
  static std::string& died_in() {
    static std::string test;
    return test;
  }
  std::size_t log_from_ = 0;
  bool watching_ = false;
};

}  // namespace gpucloud::testing
