#include "core/fault_points.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <cctype>
#include <sstream>

#include <gtest/gtest.h>

namespace gpucloud {
namespace {
namespace fs = std::filesystem;

// Every `fault_point("NAME")` in src/ names a registered point, and every registered point has
// a call site: a point renamed at its call site (or in the registry only) fails here, not as
// a crash test that silently never crashes.
TEST(FaultPoints, EveryCallSiteIsRegisteredAndEveryRegisteredPointHasACallSite) {
  const fs::path src = fs::path(GPUCLOUD_SOURCE_DIR) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  std::map<std::string, std::string> sites;  // name -> first file using it
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const auto path = entry.path();
    const auto ext = path.extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    const auto file = path.filename().string();
    if (file.starts_with("fault_points") || file.ends_with("_test.cpp")) continue;
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    const std::string body = text.str();
    // Plain searching, not std::regex: this reads every source file (regex took 3 s at -O0).
    const std::string call = "fault_point(\"";
    for (auto at = body.find(call); at != std::string::npos; at = body.find(call, at + 1)) {
      if (at > 0 && (std::isalnum(static_cast<unsigned char>(body[at - 1])) || body[at - 1] == '_')) continue;
      const auto begin = at + call.size();
      const auto end = body.find('"', begin);
      if (end == std::string::npos) break;
      sites.emplace(body.substr(begin, end - begin), fs::relative(path, src).string());
    }
  }
  ASSERT_FALSE(sites.empty()) << "no fault_point(\"...\") call found under " << src;
  const auto known = known_fault_points();
  for (const auto& [name, file] : sites)
    EXPECT_NE(std::find(known.begin(), known.end(), name), known.end())
        << file << " calls fault_point(\"" << name << "\"), which core/fault_points.cpp does not list";
  for (auto name : known) EXPECT_TRUE(sites.contains(std::string(name))) << "registered point " << name << " has no call site";
}

TEST(FaultPoints, NamesAreUnique) {
  auto known = known_fault_points();
  std::vector<std::string_view> sorted(known.begin(), known.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
}

}  // namespace
}  // namespace gpucloud
