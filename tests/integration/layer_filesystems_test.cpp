// System disk filesystems (agent/runtime/layer_filesystems.h) on real loop devices, with a
// layer directory laid out as the engine's overlay2 leaves it after a create (diff, work/work,
// link, lower). ROOT_: mount. The instance-level test (a write past the size inside a real
// container on overlay2) is SystemDiskTest.DOCKER_ROOT_OnOverlay2….
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "agent/disks/disk_tools.h"
#include "agent/runtime/layer_filesystems.h"
#include "support/capabilities.h"
#include "support/test_resources.h"

namespace gpucloud::testing {
namespace {

namespace fs = std::filesystem;
using agent::LayerFilesystems;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool mounted_at(const std::string& dir) {
  auto table = agent::disks::read_mount_table();
  return table && agent::disks::find_mount(*table, dir).has_value();
}

int loop_devices_backed_under(const std::string& dir) {
  int n = 0;
  for (const auto& d : agent::disks::list_loop_devices()) n += agent::disks::path_is_under(d.backing_file, dir) ? 1 : 0;
  return n;
}

class LayerFilesystemsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED("root", ::geteuid() == 0, "needs root (mount)");
    dir_ = fs::path("/tmp") / unique_name("gpucloud-layerfs-");
    layer_ = dir_ / "engine" / "overlay2" / "3f9c0aa1";
    fs::create_directories(layer_ / "diff");
    fs::create_directories(layer_ / "work" / "work");
    std::ofstream(layer_ / "link") << "7PNUYU6PDUFYOOZTBEM5O2Z5LK";
    std::ofstream(layer_ / "lower") << "l/IST6XYOBZ22LAIG3I4WQTFDKZV";
    lease_ = std::make_unique<ResourceLease>();
    lease_->add("disk-dir", dir_.string());  // mounts and loop devices under it go with it
    filesystems_ = std::make_unique<LayerFilesystems>((dir_ / "system-disks").string());
    auto can = filesystems_->check();
    GPUCLOUD_NEED("root", static_cast<bool>(can), can ? std::string() : can.error().detail);
  }
  void TearDown() override {
    if (!dir_.empty() && mounted_at(layer_.string())) (void)agent::disks::run_tool({"umount", "-l", layer_.string()}, "");
    if (lease_) lease_->clean();
  }
  std::string upper() const { return (layer_ / "diff").string(); }

  fs::path dir_, layer_;
  std::unique_ptr<ResourceLease> lease_;
  std::unique_ptr<LayerFilesystems> filesystems_;
};

TEST_F(LayerFilesystemsTest, ROOT_MadeSizedOverTheLayerKeepsWhatTheEngineWroteAndSurvivesAnUnmount) {
  const std::string cid = "c0ffee01";
  auto made = filesystems_->make(cid, upper(), 1);
  ASSERT_TRUE(made) << made.error().detail;
  EXPECT_TRUE(filesystems_->has(cid));
  ASSERT_TRUE(mounted_at(layer_.string()));
  // The engine's files, copied in: overlay's mount reads link and lower, uses diff and work.
  EXPECT_EQ(read_file(layer_ / "link"), "7PNUYU6PDUFYOOZTBEM5O2Z5LK");
  EXPECT_EQ(read_file(layer_ / "lower"), "l/IST6XYOBZ22LAIG3I4WQTFDKZV");
  EXPECT_TRUE(fs::is_directory(layer_ / "work" / "work"));
  struct statvfs st {};
  ASSERT_EQ(::statvfs((layer_ / "diff").c_str(), &st), 0);
  const double size_gib = static_cast<double>(st.f_blocks) * st.f_frsize / (1024.0 * 1024 * 1024);
  EXPECT_GT(size_gib, 0.9) << "the filesystem is the system disk's size";
  EXPECT_LE(size_gib, 1.0);
  // A write past the size fails (fallocate: no gigabyte written).
  {
    std::ofstream(layer_ / "diff" / "kept") << "the user's file";
    const int fd = ::open((layer_ / "diff" / "big").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::posix_fallocate(fd, 0, 2LL << 30), 0) << "2 GiB fit a 1 GiB system disk";
    ::close(fd);
    fs::remove(layer_ / "diff" / "big");
  }
  // Made again (a retried ensure): nothing changes.
  ASSERT_TRUE(filesystems_->make(cid, upper(), 1));
  EXPECT_EQ(read_file(layer_ / "diff" / "kept"), "the user's file");
  // A reboot unmounts it: mount() puts it back with the user's file; the layer's own
  // (engine-made) directory underneath is untouched.
  ASSERT_TRUE(agent::disks::run_tool({"umount", layer_.string()}, ""));
  EXPECT_FALSE(fs::exists(layer_ / "diff" / "kept"));
  auto mounted = filesystems_->mount(cid, upper());
  ASSERT_TRUE(mounted) << mounted.error().detail;
  EXPECT_EQ(read_file(layer_ / "diff" / "kept"), "the user's file");
  ASSERT_TRUE(filesystems_->mount(cid, upper())) << "mounted already: ok";
  // forget(): what still mounts it is detached, the image goes, no loop device is left.
  auto forgotten = filesystems_->forget(cid);
  ASSERT_TRUE(forgotten) << forgotten.error().detail;
  EXPECT_FALSE(filesystems_->has(cid));
  EXPECT_FALSE(mounted_at(layer_.string()));
  EXPECT_EQ(loop_devices_backed_under(dir_.string()), 0);
}

TEST_F(LayerFilesystemsTest, ROOT_AContainerWithoutAnImageIsLeftAsItIsAndTheSweepTakesOnlyTheGones) {
  ASSERT_TRUE(filesystems_->mount("c0ffee02", upper())) << "no image: nothing to mount";
  EXPECT_FALSE(mounted_at(layer_.string()));
  // One kept (its container exists), one made for a container that is gone, and what a make
  // killed before its rename leaves.
  ASSERT_TRUE(filesystems_->make("kept01", upper(), 1));
  ASSERT_TRUE(agent::disks::run_tool({"umount", layer_.string()}, ""));
  fs::create_directories(dir_ / "other" / "overlay2" / "L" / "diff");
  ASSERT_TRUE(filesystems_->make("gone01", (dir_ / "other" / "overlay2" / "L" / "diff").string(), 1));
  std::ofstream(dir_ / "system-disks" / "gone02.img.tmp") << "half made";
  auto swept = filesystems_->sweep({"kept01"});
  ASSERT_TRUE(swept) << swept.error().detail;
  EXPECT_TRUE(filesystems_->has("kept01"));
  EXPECT_FALSE(filesystems_->has("gone01"));
  EXPECT_FALSE(fs::exists(dir_ / "system-disks" / "gone02.img.tmp"));
  EXPECT_FALSE(mounted_at((dir_ / "other" / "overlay2" / "L").string())) << "the gone one's mount was detached";
  EXPECT_EQ(loop_devices_backed_under(dir_.string()), 0);
}

TEST(LayerFilesystems, TheLayerDirIsTheUpperDirsParentUnderOverlay2Only) {
  auto dir = LayerFilesystems::layer_dir_of("/var/lib/docker/overlay2/abc/diff");
  ASSERT_TRUE(dir);
  EXPECT_EQ(*dir, "/var/lib/docker/overlay2/abc");
  EXPECT_FALSE(LayerFilesystems::layer_dir_of("/var/lib/docker/overlay2/abc"));
  EXPECT_FALSE(LayerFilesystems::layer_dir_of("relative/overlay2/abc/diff"));
  EXPECT_FALSE(LayerFilesystems::layer_dir_of("/var/lib/docker/btrfs/subvolumes/abc/diff"));
  LayerFilesystems filesystems("/tmp/nowhere");
  EXPECT_FALSE(filesystems.make("../../etc", "/var/lib/docker/overlay2/abc/diff", 1)) << "an id is never a path";
  EXPECT_FALSE(filesystems.make("abc", "/var/lib/docker/overlay2/abc/diff", 0)) << "no size, no filesystem";
}

}  // namespace
}  // namespace gpucloud::testing
