// The real gpucloud CLI against the real daemon: config file, env overrides, exit codes.
#include <filesystem>

#include <gtest/gtest.h>

#include "shared_daemon.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {

// One daemon for the suite (shared_daemon.h): nothing here restarts it; each test has users
// of its own names and a config home of its own (the CLI stores its token there).
class CliTest : public SharedDaemonTest<CliTest> {
 protected:
  void SetUp() override {
    SharedDaemonTest::SetUp();
    home_ = daemon_.dir() + "/" + unique_name("xdg");
    std::filesystem::create_directories(home_);
    env_ = {{"XDG_CONFIG_HOME", home_}, {"GPUCLOUD_ENDPOINT", daemon_.endpoint()}, {"HOME", home_}};
  }
  std::string home_;
  std::map<std::string, std::string> env_;
};

TEST_F(CliTest, RegisterLoginWhoamiAndTheStoredToken) {
  const std::string zoe = unique_name("zoe");
  auto reg = run_cli({"register", "--username", zoe, "--password-stdin"}, env_, "password-123\n");
  ASSERT_EQ(reg.exit_code, 0) << reg.err;
  auto login = run_cli({"login", "--username", zoe, "--password-stdin"}, env_, "password-123\n");
  ASSERT_EQ(login.exit_code, 0) << login.err;
  auto config = home_ + "/gpucloud/config.toml";
  ASSERT_TRUE(std::filesystem::exists(config));
  EXPECT_EQ(std::filesystem::status(config).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto who = run_cli({"whoami"}, env_);
  ASSERT_EQ(who.exit_code, 0) << who.err;
  EXPECT_NE(who.out.find(zoe), std::string::npos) << who.out;
  auto json = run_cli({"whoami", "--json"}, env_);
  ASSERT_EQ(json.exit_code, 0);
  EXPECT_EQ(boost::json::parse(json.out).at("username").as_string(), zoe);
  // GPUCLOUD_TOKEN overrides the stored token.
  auto env = env_;
  env["GPUCLOUD_TOKEN"] = "gpc_wrong";
  auto bad = run_cli({"whoami"}, env);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("error:"), std::string::npos) << bad.err;
  // And --token overrides both.
  std::string token = daemon_.login(zoe, "password-123");
  EXPECT_EQ(run_cli({"whoami", "--token", token}, env).exit_code, 0);
}

TEST_F(CliTest, RefusalsExitOneUsageErrorsExitTwo) {
  auto wrong = run_cli({"login", "--username", "nobody", "--password-stdin"}, env_, "password-123\n");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_FALSE(wrong.err.empty());
  EXPECT_EQ(run_cli({"no-such-command"}, env_).exit_code, 2);
  EXPECT_EQ(run_cli({"create", "x", "--gpu", "RTX 4090"}, env_).exit_code, 2) << "a --gpu without a count";
  auto unreachable = env_;
  unreachable["GPUCLOUD_ENDPOINT"] = "http://127.0.0.1:1";
  auto down = run_cli({"whoami", "--token", "x"}, unreachable);
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("127.0.0.1:1"), std::string::npos) << down.err;
}

TEST_F(CliTest, MarketKeysAndOperatorCommands) {
  const std::string yan = unique_name("yan");
  ASSERT_EQ(run_cli({"register", "--username", yan, "--password-stdin"}, env_, "password-123\n").exit_code, 0);
  ASSERT_EQ(run_cli({"login", "--username", yan, "--password-stdin"}, env_, "password-123\n").exit_code, 0);
  auto market = run_cli({"market"}, env_);
  EXPECT_EQ(market.exit_code, 0) << market.err;
  std::string key_dir = home_ + "/key";
  shell("mkdir -p " + key_dir + " && ssh-keygen -q -t ed25519 -N '' -f " + key_dir + "/id");
  auto add = run_cli({"key", "add", "laptop", "--file", key_dir + "/id.pub"}, env_);
  EXPECT_EQ(add.exit_code, 0) << add.err;
  auto ls = run_cli({"key", "ls"}, env_);
  EXPECT_NE(ls.out.find("laptop"), std::string::npos) << ls.out;
  auto hosts = run_cli({"admin", "hosts"}, env_);
  EXPECT_EQ(hosts.exit_code, 1) << "a user is refused operator commands";
  auto admin_env = env_;
  admin_env["GPUCLOUD_TOKEN"] = daemon_.admin_token();
  auto as_admin = run_cli({"admin", "hosts"}, admin_env);
  EXPECT_EQ(as_admin.exit_code, 0) << as_admin.err;
}

}  // namespace
}  // namespace gpucloud::testing
