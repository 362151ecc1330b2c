#include "cli/cli_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

namespace gpucloud::cli {
namespace {

namespace fs = std::filesystem;

class CliConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-cli-config-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["XDG_CONFIG_HOME"] = (dir_ / "xdg").string();
    env_["HOME"] = (dir_ / "home").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  EnvLookup env() {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(CliConfigTest, PathUsesXdgConfigHomeThenHome) {
  EXPECT_EQ(config_path(env()).value(), dir_ / "xdg" / "gpucloud" / "config.toml");
  env_.erase("XDG_CONFIG_HOME");
  EXPECT_EQ(config_path(env()).value(), dir_ / "home" / ".config" / "gpucloud" / "config.toml");
  env_["XDG_CONFIG_HOME"] = "relative/path";  // not absolute: ignored, as the XDG spec says
  EXPECT_EQ(config_path(env()).value(), dir_ / "home" / ".config" / "gpucloud" / "config.toml");
  env_.erase("HOME");
  env_.erase("XDG_CONFIG_HOME");
  EXPECT_FALSE(config_path(env()).has_value());
}

TEST_F(CliConfigTest, MissingFileIsEmptyConfig) {
  auto config = load_config(config_path(env()).value());
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->endpoint, "");
  EXPECT_EQ(config->token, "");
}

TEST_F(CliConfigTest, RoundTripWritesMode0600InA0700Directory) {
  fs::path path = config_path(env()).value();
  ASSERT_TRUE(save_config(path, {"http://10.0.0.5:8080", "secret \"token\"\\x"}).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(::stat(path.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);

  auto loaded = load_config(path);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->endpoint, "http://10.0.0.5:8080");
  EXPECT_EQ(loaded->token, "secret \"token\"\\x");

  // Removing the token keeps the endpoint; no temporary file is left behind.
  ASSERT_TRUE(save_config(path, {"http://10.0.0.5:8080", ""}).has_value());
  loaded = load_config(path);
  EXPECT_EQ(loaded->endpoint, "http://10.0.0.5:8080");
  EXPECT_EQ(loaded->token, "");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(CliConfigTest, SaveTightensAWiderModeAndKeepsOtherKeys) {
  fs::path path = config_path(env()).value();
  fs::create_directories(path.parent_path());
  {
    std::ofstream f(path);
    f << "endpoint = \"http://a:1\"\ntoken = \"old\"\ncolor = false\n";
  }
  ::chmod(path.c_str(), 0644);
  ASSERT_TRUE(save_config(path, {"http://b:2", "new"}).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("color = false"), std::string::npos) << text.str();
  auto loaded = load_config(path);
  EXPECT_EQ(loaded->endpoint, "http://b:2");
  EXPECT_EQ(loaded->token, "new");
}

TEST_F(CliConfigTest, MalformedFileIsAnErrorNamingIt) {
  fs::path path = config_path(env()).value();
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "endpoint = \n";
  auto loaded = load_config(path);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.error().detail.find(path.string()), std::string::npos);
}

TEST_F(CliConfigTest, PrecedenceIsFlagThenEnvThenFileThenDefault) {
  CliConfig none;
  auto s = resolve_settings(none, env(), std::nullopt, std::nullopt);
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:8080");
  EXPECT_EQ(s.endpoint_source, Source::default_value);
  EXPECT_EQ(s.token, "");

  CliConfig file{"http://file:8080", "file-token"};
  s = resolve_settings(file, env(), std::nullopt, std::nullopt);
  EXPECT_EQ(s.endpoint, "http://file:8080");
  EXPECT_EQ(s.endpoint_source, Source::file);
  EXPECT_EQ(s.token, "file-token");
  EXPECT_EQ(s.token_source, Source::file);

  env_["GPUCLOUD_TOKEN"] = "env-token";
  s = resolve_settings(file, env(), std::nullopt, std::nullopt);
  EXPECT_EQ(s.endpoint, "http://file:8080");
  EXPECT_EQ(s.token, "env-token");
  EXPECT_EQ(s.token_source, Source::env);

  env_["GPUCLOUD_ENDPOINT"] = "http://env:8080/";
  s = resolve_settings(file, env(), std::nullopt, std::nullopt);
  EXPECT_EQ(s.endpoint, "http://env:8080");
  EXPECT_EQ(s.endpoint_source, Source::env);

  s = resolve_settings(file, env(), "http://flag:9000", "flag-token");
  EXPECT_EQ(s.endpoint, "http://flag:9000");
  EXPECT_EQ(s.endpoint_source, Source::flag);
  EXPECT_EQ(s.token, "flag-token");
  EXPECT_EQ(s.token_source, Source::flag);

  // Empty values count as unset.
  env_["GPUCLOUD_ENDPOINT"] = "";
  env_["GPUCLOUD_TOKEN"] = "";
  s = resolve_settings(file, env(), std::string(""), std::string(""));
  EXPECT_EQ(s.endpoint, "http://file:8080");
  EXPECT_EQ(s.token, "file-token");
}

TEST_F(CliConfigTest, StoredTokenIsNotSentToAnotherEndpoint) {
  CliConfig file{"http://file:8080", "file-token"};
  auto s = resolve_settings(file, env(), "http://elsewhere:8080", std::nullopt);
  EXPECT_EQ(s.endpoint, "http://elsewhere:8080");
  EXPECT_EQ(s.token, "");
  s = resolve_settings(file, env(), "http://file:8080/", std::nullopt);
  EXPECT_EQ(s.token, "file-token");
  // A file without an endpoint belongs to the default one.
  CliConfig token_only{"", "t"};
  EXPECT_EQ(resolve_settings(token_only, env(), std::nullopt, std::nullopt).token, "t");
  EXPECT_EQ(resolve_settings(token_only, env(), "http://x:1", std::nullopt).token, "");
}

}  // namespace
}  // namespace gpucloud::cli
