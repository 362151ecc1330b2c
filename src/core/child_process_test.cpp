#include "core/child_process.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpucloud {
namespace {

// The daemon's environment (GPUCLOUD_ADMIN_PASSWORD among it) never reaches what it runs.
TEST(ChildProcess, GetsOnlyTheMinimalEnvironmentNeverTheDaemons) {
  ::setenv("GPUCLOUD_CHILD_ENV_MARKER", "marker-7f3a", 1);
  ::setenv("GPUCLOUD_ADMIN_PASSWORD", "admin-secret-9c1e", 1);
  auto run = run_process({"/usr/bin/env"}, "");
  ::unsetenv("GPUCLOUD_CHILD_ENV_MARKER");
  ::unsetenv("GPUCLOUD_ADMIN_PASSWORD");
  ASSERT_TRUE(run) << run.error().detail;
  EXPECT_EQ(run->exit_code, 0) << run->err;
  EXPECT_THAT(run->out, ::testing::Not(::testing::HasSubstr("marker-7f3a")));
  EXPECT_THAT(run->out, ::testing::Not(::testing::HasSubstr("admin-secret-9c1e")));
  EXPECT_EQ(run->out, "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
}

TEST(ChildProcess, FeedsStdinCapturesBothStreamsAndTheExitCode) {
  auto run = run_process({"/bin/sh", "-c", "cat; echo oops >&2; exit 3"}, "hello\n");
  ASSERT_TRUE(run) << run.error().detail;
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_EQ(run->out, "hello\n");
  EXPECT_EQ(run->err, "oops\n");
}

TEST(ChildProcess, KilledPastItsTimeout) {
  auto run = run_process({"/bin/sleep", "10"}, "", std::chrono::milliseconds(100));
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error().code, ErrorCode::unavailable);
}

}  // namespace
}  // namespace gpucloud
