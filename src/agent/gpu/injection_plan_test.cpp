#include "agent/gpu/injection_plan.h"
#include "core/unique_temp_dir.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/gpu/fake_driver_tree.h"

namespace gpucloud::gpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class InjectionPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-injection");
    testing::make_fake_driver_tree(dir_ / "driver");
    if (auto why = testing::make_fake_dev(dir_ / "dev", 8); !why.empty()) GTEST_SKIP() << "no fake /dev: " << why;
  }
  void TearDown() override { fs::remove_all(dir_); }

  DriverFiles driver() {
    auto files = find_driver_files(location_from_root((dir_ / "driver").string(), "nvidia_driver_root"));
    EXPECT_TRUE(files) << files.error().detail;
    return files ? *files : DriverFiles{};
  }
  std::string host_lib(const std::string& stem) {
    return fs::canonical(dir_ / "driver" / "lib64" / (stem + ".so." + testing::kFakeDriverVersion)).string();
  }
  static std::vector<std::string> container_paths(const std::vector<DeviceNode>& nodes) {
    std::vector<std::string> out;
    for (const auto& n : nodes) out.push_back(n.path_in_container);
    return out;
  }
  static const DriverMount* mount_at(const std::vector<DriverMount>& mounts, const std::string& target) {
    for (const auto& m : mounts)
      if (m.container_path == target) return &m;
    return nullptr;
  }

  fs::path dir_;
};

TEST_F(InjectionPlanTest, DriverFilesVersionLinksAndBinary) {
  auto files = driver();
  EXPECT_EQ(files.version, testing::kFakeDriverVersion);
  EXPECT_EQ(files.location.lib_dir, (dir_ / "driver" / "lib64").string());
  EXPECT_TRUE(files.missing.empty()) << files.missing.front();
  const std::string lib = "/usr/lib/x86_64-linux-gnu/";
  // The versioned files, their links in the directory, and the names images expect.
  for (const auto& [target, stem] : std::vector<std::pair<std::string, std::string>>{
           {"libcuda.so.580.159.04", "libcuda"},
           {"libcuda.so.1", "libcuda"},
           {"libcuda.so", "libcuda"},  // not in the tree: CUDA images still expect it
           {"libnvidia-ml.so.580.159.04", "libnvidia-ml"},
           {"libnvidia-ml.so.1", "libnvidia-ml"},
           {"libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler"},
           {"libnvidia-nvvm.so.4", "libnvidia-nvvm"},
           {"libcudadebugger.so.1", "libcudadebugger"},
           {"libnvidia-gpucomp.so.580.159.04", "libnvidia-gpucomp"}}) {
    const auto* m = mount_at(files.mounts, lib + target);
    ASSERT_NE(m, nullptr) << target;
    EXPECT_EQ(m->host_path, host_lib(stem)) << target << ": a link is bound as the real file";
  }
  const auto* smi = mount_at(files.mounts, "/usr/bin/nvidia-smi");
  ASSERT_NE(smi, nullptr);
  EXPECT_EQ(smi->host_path, fs::canonical(dir_ / "driver" / "bin" / "nvidia-smi").string());
  EXPECT_EQ(mount_at(files.mounts, lib + "libnvidia-opencl.so.1"), nullptr) << "absent optional libraries are not guessed";
  EXPECT_TRUE(std::is_sorted(files.mounts.begin(), files.mounts.end(),
                             [](const auto& a, const auto& b) { return a.container_path < b.container_path; }));
}

TEST_F(InjectionPlanTest, MissingLibraryIsReportedNotGuessed) {
  testing::make_fake_driver_tree(dir_ / "partial", {"libnvidia-ptxjitcompiler", "nvidia-smi"});
  auto files = find_driver_files(location_from_root((dir_ / "partial").string(), "nvidia_driver_root"));
  ASSERT_TRUE(files) << files.error().detail;
  EXPECT_THAT(files->missing, ::testing::UnorderedElementsAre("libnvidia-ptxjitcompiler.so.580.159.04", "nvidia-smi"));
  EXPECT_EQ(mount_at(files->mounts, "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"), nullptr);
  EXPECT_EQ(mount_at(files->mounts, "/usr/bin/nvidia-smi"), nullptr);
  // The plan carries what is missing.
  auto plan = plan_injection(InjectionMode::builtin, {0}, (dir_ / "dev").string(), &*files);
  ASSERT_TRUE(plan) << plan.error().detail;
  EXPECT_EQ(plan->missing, files->missing);
  // No libnvidia-ml at all: no driver.
  fs::create_directories(dir_ / "empty" / "lib64");
  auto none = find_driver_files(location_from_root((dir_ / "empty").string(), "nvidia_driver_root"));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::not_found);
}

TEST_F(InjectionPlanTest, BuiltinPlanForZeroOneAndTwoOfEightGpus) {
  auto files = driver();
  const std::string dev = (dir_ / "dev").string();
  // 0 GPUs: nothing NVIDIA at all.
  auto zero = plan_injection(InjectionMode::builtin, {}, dev, &files);
  ASSERT_TRUE(zero) << zero.error().detail;
  EXPECT_TRUE(zero->devices.empty());
  EXPECT_TRUE(zero->mounts.empty());
  EXPECT_TRUE(zero->env.empty());
  EXPECT_FALSE(zero->device_request);

  const std::vector<std::string> control{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                         "/dev/nvidia-caps/nvidia-cap1"};
  auto one = plan_injection(InjectionMode::builtin, {5}, dev, &files);
  ASSERT_TRUE(one) << one.error().detail;
  std::vector<std::string> want{"/dev/nvidia5"};
  want.insert(want.end(), control.begin(), control.end());
  EXPECT_EQ(container_paths(one->devices), want) << "exactly its GPU's node (no nvidia-modeset: absent here)";
  EXPECT_EQ(one->devices[0].path_on_host, dev + "/nvidia5");
  EXPECT_EQ(one->devices[0].major, 1u);
  EXPECT_EQ(one->devices[0].minor, 3u) << "major:minor read by stat";
  EXPECT_EQ(one->mounts, files.mounts);
  EXPECT_EQ(one->env, std::vector<std::string>{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"});
  EXPECT_FALSE(one->device_request);

  auto two = plan_injection(InjectionMode::builtin, {1, 6}, dev, &files);
  ASSERT_TRUE(two) << two.error().detail;
  want = {"/dev/nvidia1", "/dev/nvidia6"};
  want.insert(want.end(), control.begin(), control.end());
  EXPECT_EQ(container_paths(two->devices), want);
  for (const auto& n : two->devices) EXPECT_NE(n.path_in_container, "/dev/nvidia0");

  // A GPU whose node is missing is refused, naming it.
  auto nine = plan_injection(InjectionMode::builtin, {9}, dev, &files);
  ASSERT_FALSE(nine);
  EXPECT_THAT(nine.error().detail, HasSubstr("nvidia9"));
}

TEST_F(InjectionPlanTest, ToolkitAndNonePlans) {
  const std::string dev = (dir_ / "dev").string();
  for (const std::vector<int>& minors : {std::vector<int>{}, std::vector<int>{3}, std::vector<int>{2, 7}}) {
    auto plan = plan_injection(InjectionMode::toolkit, minors, dev, nullptr);
    ASSERT_TRUE(plan) << plan.error().detail;
    EXPECT_EQ(plan->device_request, !minors.empty());
    EXPECT_TRUE(plan->devices.empty()) << "the toolkit's runtime passes the nodes itself";
    EXPECT_TRUE(plan->mounts.empty());
  }
  auto none0 = plan_injection(InjectionMode::none, {}, dev, nullptr);
  ASSERT_TRUE(none0) << "a no-GPU create works in every mode";
  auto none1 = plan_injection(InjectionMode::none, {0}, dev, nullptr, "simulated GPUs and no NVIDIA driver found");
  ASSERT_FALSE(none1);
  EXPECT_THAT(none1.error().detail, HasSubstr("GPU injection is none: simulated GPUs and no NVIDIA driver found"));
}

TEST_F(InjectionPlanTest, ModeChoice) {
  Result<DriverFiles> found = driver();
  Result<DriverFiles> absent = fail(ErrorCode::not_found, "no NVIDIA driver found");
  EXPECT_EQ(choose_injection_mode("auto", true, absent, false).mode, InjectionMode::toolkit);
  EXPECT_EQ(choose_injection_mode("auto", false, found, false).mode, InjectionMode::builtin);
  auto sim = choose_injection_mode("auto", false, found, true);
  EXPECT_EQ(sim.mode, InjectionMode::builtin);
  EXPECT_THAT(sim.reason, HasSubstr(testing::kFakeDriverVersion));
  EXPECT_EQ(choose_injection_mode("auto", true, found, true).mode, InjectionMode::builtin)
      << "simulated UUIDs mean nothing to the toolkit";
  auto none = choose_injection_mode("auto", false, absent, true);
  EXPECT_EQ(none.mode, InjectionMode::none);
  EXPECT_EQ(none.reason, "simulated GPUs and no NVIDIA driver found");
  EXPECT_EQ(choose_injection_mode("auto", false, absent, false).mode, InjectionMode::none);
  EXPECT_EQ(choose_injection_mode("none", true, found, false).mode, InjectionMode::none);
  EXPECT_EQ(choose_injection_mode("toolkit", false, found, false).mode, InjectionMode::toolkit);
  EXPECT_EQ(choose_injection_mode("builtin", true, found, false).mode, InjectionMode::builtin);
  auto no_driver = choose_injection_mode("builtin", true, absent, false);
  EXPECT_EQ(no_driver.mode, InjectionMode::none);
  EXPECT_THAT(no_driver.reason, HasSubstr("no NVIDIA driver found"));
}

TEST(InjectionPlanPureTest, LdconfigAndLocations) {
  const char* out =
      "1234 libs found in cache `/etc/ld.so.cache'\n"
      "\tlibnvidia-ml.so.1 (libc6) => /usr/lib/i386-linux-gnu/libnvidia-ml.so.1\n"
      "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libnvidia-ml.so.1\n"
      "\tlibnvidia-ml.so (libc6,x86-64) => /usr/lib/libnvidia-ml.so\n";
  EXPECT_EQ(libnvidia_ml_dir_from_ldconfig(out), "/usr/local/nvidia/lib64");
  EXPECT_EQ(libnvidia_ml_dir_from_ldconfig("\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n"), "");
  auto picked = pick_driver_location({{"/nonexistent/a", "/nonexistent/a", "nvidia_driver_root"}});
  ASSERT_FALSE(picked);
  EXPECT_THAT(picked.error().detail, HasSubstr("/nonexistent/a (nvidia_driver_root)"));
  auto mode = parse_injection_mode("builtin");
  ASSERT_TRUE(mode);
  EXPECT_EQ(*mode, InjectionMode::builtin);
  EXPECT_FALSE(parse_injection_mode("auto"));
}

}  // namespace
}  // namespace gpucloud::gpu
