// The floors (docs/architecture.md): no resource module calls another resource's actions.
// Work that spans resources lives in policy/ (or is reached through a hook App wires); where a
// consequence must share a transaction, the resource below offers a record step, not an
// action. Read from the sources, so a new cross call fails here, naming the file.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpucloud::policy {
namespace {

namespace fs = std::filesystem;

TEST(Floors, NoResourceModuleIncludesAnotherResourcesActions) {
  const std::vector<std::string> resources{"instances", "disks", "security_groups", "billing", "monitoring"};
  const fs::path src = fs::path(GPUCLOUD_SOURCE_DIR) / "src";
  // `#include "MODULE/anything_actions.h"` or `"MODULE/actions.h"`.
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/([a-z_]*actions)\.h")re");
  int files = 0;
  for (const auto& module : resources) {
    ASSERT_TRUE(fs::is_directory(src / module)) << (src / module);
    for (const auto& entry : fs::directory_iterator(src / module)) {
      const std::string name = entry.path().filename().string();
      if (!(name.ends_with(".cpp") || name.ends_with(".h")) || name.ends_with("_test.cpp")) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (std::regex_search(line, m, include) && m[1].str() != module)
          ADD_FAILURE() << "src/" << module << "/" << name << ":" << n << " includes " << m[1] << "/" << m[2]
                        << ".h: call it from policy/ (or a hook App wires), or use a record step of " << m[1] << "/";
      }
    }
  }
  EXPECT_GT(files, 40) << "the sources were not found under " << src;
}

}  // namespace
}  // namespace gpucloud::policy
