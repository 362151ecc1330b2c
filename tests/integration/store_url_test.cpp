// A [store] url the daemon cannot open stops it at start, naming store.url, instead of
// serving from a database that is not the one configured.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {

using ::testing::HasSubstr;

struct StartResult {
  int exit_code = -1;
  std::string output;
};

// Runs gpucloudd with `store_url` and reads what it says; it must exit on its own (the
// timeout kills a daemon that started serving instead, which then reads as 124).
StartResult start_with_store_url(const std::string& store_url) {
  const auto dir = std::filesystem::temp_directory_path() / ("gpucloud-store-url-" + random_suffix());
  std::filesystem::create_directories(dir);
  {
    std::ofstream config(dir / "gpucloud.toml");
    config << "[store]\nurl = \"" << store_url << "\"\n";
  }
  const std::string cmd = "cd " + dir.string() + " && GPUCLOUD_ADMIN_PASSWORD=admin-password-1 timeout 20 " +
                          GPUCLOUD_BIN_DIR "/gpucloudd --config gpucloud.toml --listen 127.0.0.1:0 --data-dir " +
                          (dir / "data").string() + " 2>&1; echo \"exit=$?\"";
  std::string out = shell(cmd);
  std::filesystem::remove_all(dir);
  StartResult r;
  const auto at = out.rfind("exit=");
  if (at != std::string::npos) {
    r.exit_code = std::atoi(out.c_str() + at + 5);
    out.erase(at);
  }
  r.output = out;
  return r;
}

TEST(StoreUrl, APostgresqlThatDoesNotAnswerIsRefusedAtStartNotReplacedByATemporaryDatabase) {
  auto r = start_with_store_url("postgresql://gc@127.0.0.1:1/gpucloud");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the daemon started serving: " << r.output;
  EXPECT_THAT(r.output, HasSubstr("store.url: cannot connect to store postgresql://gc@127.0.0.1:1/gpucloud")) << r.output;
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("listening on")));
}

TEST(StoreUrl, UnknownSchemeIsRefusedNamingTheKey) {
  auto r = start_with_store_url("mysql://db/gc");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_THAT(r.output, HasSubstr("store.url")) << r.output;
}

TEST(StoreUrl, UnopenablePathIsRefusedNamingTheKey) {
  auto r = start_with_store_url("sqlite:///proc/no-such-dir/gpucloud.db");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_THAT(r.output, HasSubstr("store.url: ")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/proc/no-such-dir/gpucloud.db")) << r.output;
}

}  // namespace
}  // namespace gpucloud::testing
