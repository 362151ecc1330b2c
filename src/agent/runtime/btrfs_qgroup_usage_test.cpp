#include "agent/runtime/btrfs_qgroup_usage.h"

#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {

TEST(BtrfsQgroupUsage, ReadsTheExclusiveBytesOfTheSubvolumesOwnQgroup) {
  // btrfs-progs 6.2 on a data root with simple quotas, a container at its 300 MiB limit.
  const std::string out =
      "Qgroupid    Referenced    Exclusive   Path \n"
      "--------    ----------    ---------   ---- \n"
      "0/260        314572800    314572800   btrfs/subvolumes/7f691128f9ea8da5\n";
  EXPECT_EQ(parse_qgroup_exclusive(out), 314572800);
  // Full quotas: referenced counts the shared image, exclusive only what the container wrote.
  EXPECT_EQ(parse_qgroup_exclusive("qgroupid rfer excl\n-------- ---- ----\n0/258 334595841 110297088\n"), 110297088);
}

TEST(BtrfsQgroupUsage, NothingWithoutALevelZeroRow) {
  EXPECT_EQ(parse_qgroup_exclusive(""), std::nullopt);
  EXPECT_EQ(parse_qgroup_exclusive("Qgroupid Referenced Exclusive\n1/100 5 5\n"), std::nullopt);
  EXPECT_EQ(parse_qgroup_exclusive("0/260 12 notanumber\n"), std::nullopt);
  EXPECT_EQ(parse_qgroup_exclusive("0/260 12 -5\n"), std::nullopt);
}

TEST(BtrfsQgroupUsage, RefusesARelativePath) {
  auto r = btrfs_subvolume_usage("btrfs/subvolumes/x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace gpucloud::agent
