// The agent's measure of its disk pool (issue 23): df's size and use, the reserve, overcommit.
#include "agent/disk_pool_probe.h"

#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {
constexpr std::int64_t kMiB = std::int64_t{1} << 20, kGiB = std::int64_t{1} << 30;

TEST(DiskPoolProbe, SizeAndUseAsDfCountsThemLessTheReserveTimesOvercommit) {
  // 900 MiB of 4 KiB blocks, 100 MiB used, 50 MiB reserved for root (not available).
  const std::uint64_t block = 4096, blocks = 900 * kMiB / block, free_blocks = 800 * kMiB / block,
                      available = 750 * kMiB / block;
  auto p = disk_pool_from_counts("/data/agent", blocks, free_blocks, available, block, 1.0);
  EXPECT_EQ(p.used_bytes, 100 * kMiB);
  EXPECT_EQ(p.size_bytes, 850 * kMiB) << "root's reserved blocks are no one's pool";
  EXPECT_EQ(p.reserve_bytes, 256 * kMiB) << "5 %, at least 256 MiB";
  EXPECT_EQ(p.capacity_bytes, 594 * kMiB);
  auto over = disk_pool_from_counts("/data/agent", blocks, free_blocks, available, block, 4.0);
  EXPECT_EQ(over.capacity_bytes, 4 * 594 * kMiB);
}

TEST(DiskPoolProbe, TheReserveIsFivePercentBetween256MiBAnd10GiB) {
  EXPECT_EQ(disk_pool_reserve(100 * kGiB), 5 * kGiB);
  EXPECT_EQ(disk_pool_reserve(2048 * kGiB), 10 * kGiB);
  EXPECT_EQ(disk_pool_reserve(1 * kGiB), 256 * kMiB);
  EXPECT_EQ(disk_pool_reserve(300 * kMiB), 150 * kMiB) << "never more than half";
}

TEST(DiskPoolProbe, MeasuresARealFilesystemFromTheNearestExistingParent) {
  auto p = measure_disk_pool("/tmp/does-not-exist-gpucloud/agent", 1.0);
  ASSERT_TRUE(p) << p.error().detail;
  EXPECT_GT(p->size_bytes, 0);
  EXPECT_LE(p->used_bytes, p->size_bytes);
  EXPECT_EQ(p->capacity_bytes, std::max<std::int64_t>(0, p->size_bytes - p->reserve_bytes));
}

TEST(DiskPoolProbe, TheReportRoundTripsThroughJson) {
  DiskPool p{"/d", 10, 5, 2, 8};
  Heartbeat b{"node-1", 3, {}, p};
  auto back = heartbeat_from_json(to_json(b));
  ASSERT_TRUE(back) << back.error().detail;
  ASSERT_TRUE(back->disk_pool);
  EXPECT_EQ(back->disk_pool->capacity_bytes, 8);
  EXPECT_EQ(back->disk_pool->used_bytes, 5);
  Heartbeat none{"node-1", 4, {}, std::nullopt};
  auto without = heartbeat_from_json(to_json(none));
  ASSERT_TRUE(without);
  EXPECT_FALSE(without->disk_pool);
}

}  // namespace
}  // namespace gpucloud::agent
