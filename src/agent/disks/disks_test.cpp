// The pure parts of the data-disk drivers: ids, mount paths, the ext4 superblock, the mount
// table, btrfs' qgroup and subvolume listings, the driver registry and the config's names.
// Hermetic: nothing here mounts, forks or needs root (tests/integration/disk_driver_test.cpp does).
#include <cstring>
#include <string>

#include <boost/json.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/agent_state.h"
#include "agent/disks/btrfs_driver.h"
#include "agent/disks/data_disk_mounts.h"
#include "agent/disks/disk_driver_registry.h"
#include "agent/disks/disk_tools.h"
#include "agent/disks/ext4_superblock.h"
#include "config/config.h"

namespace {

using namespace gpucloud;
using namespace gpucloud::agent::disks;
using ::testing::HasSubstr;

TEST(DiskIds, ShapeIsPrefixDashAlphanumerics) {
  for (const char* ok : {"disk-3kq9x2m7c4v8", "snap-ABC123", "d-1", "disk-x"}) EXPECT_TRUE(is_valid_disk_id(ok)) << ok;
  for (const char* bad : {"", "disk", "disk-", "-abc", "Disk-abc", "disk-a/b", "disk-..", "disk-a.b", "disk-a b",
                          "disk-a-b", "../disk-a", "abcdefghijklmnopq-1"}) {
    EXPECT_FALSE(is_valid_disk_id(bad)) << bad;
  }
  EXPECT_FALSE(is_valid_disk_id("disk-" + std::string(80, 'a')));
}

TEST(DataDiskMounts, MountPathsMustBeAbsoluteNormalAndNotSystemDirectories) {
  for (const char* ok : {"/root/data", "/data", "/home/user/work", "/mnt/x", "/var/lib/data", "/workspace", "/opt/a b"}) {
    EXPECT_TRUE(check_mount_path(ok)) << ok;
  }
  for (const char* bad : {"", "data", "/", "/root", "/var", "/etc", "/etc/x", "/usr/local/data", "/proc", "/dev/shm",
                          "/sys/fs", "/bin", "/sbin/x", "/lib", "/lib64/x", "/boot", "/run", "/run/x", "/var/run",
                          "/var/run/docker.sock", "/.gpucloud", "/.gpucloud/config", "/data/", "/data//x", "/data/./x",
                          "/data/../etc", "/..", "/a:b", "/a,b", "/a\nb"}) {
    EXPECT_FALSE(check_mount_path(bad)) << bad;
  }
  EXPECT_FALSE(check_mount_path("/" + std::string(1100, 'a')));
  // Only whole components are reserved.
  EXPECT_TRUE(check_mount_path("/etcetera"));
  EXPECT_TRUE(check_mount_path("/usrdata"));
}

TEST(DataDiskMounts, ListRefusesDuplicatesAndNestingNamingTheEntry) {
  EXPECT_TRUE(check_data_disks({}));
  EXPECT_TRUE(check_data_disks({{"disk-a", "/data"}, {"disk-b", "/data2"}}));
  auto dup_disk = check_data_disks({{"disk-a", "/data"}, {"disk-a", "/other"}});
  ASSERT_FALSE(dup_disk);
  EXPECT_EQ(dup_disk.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(dup_disk.error().detail, HasSubstr("data_disks[1].disk_id"));
  auto dup_path = check_data_disks({{"disk-a", "/data"}, {"disk-b", "/data"}});
  ASSERT_FALSE(dup_path);
  EXPECT_THAT(dup_path.error().detail, HasSubstr("data_disks[1].mount_path"));
  auto nested = check_data_disks({{"disk-a", "/data"}, {"disk-b", "/data/inner"}});
  ASSERT_FALSE(nested);
  EXPECT_THAT(nested.error().detail, HasSubstr("overlaps"));
  auto system = check_data_disks({{"disk-a", "/etc"}});
  ASSERT_FALSE(system);
  EXPECT_THAT(system.error().detail, HasSubstr("data_disks[0].mount_path"));
  auto bad_id = check_data_disks({{"../x", "/data"}});
  ASSERT_FALSE(bad_id);
  EXPECT_THAT(bad_id.error().detail, HasSubstr("data_disks[0].disk_id"));
}

TEST(DataDiskMounts, InstanceSpecCarriesAndChecksDataDisks) {
  namespace json = boost::json;
  json::object desired{{"instance_id", "i-1"}, {"name", "box"},  {"state", "running"},
                       {"image", "img"},       {"cpu", 1},         {"memory_gib", 1}};
  auto none = agent::instance_spec_from_json(desired);
  ASSERT_TRUE(none) << none.error().detail;
  EXPECT_TRUE(none->data_disks.empty());
  desired["data_disks"] = json::array{json::object{{"disk_id", "disk-a"}, {"mount_path", "/root/data"}}};
  auto one = agent::instance_spec_from_json(desired);
  ASSERT_TRUE(one) << one.error().detail;
  ASSERT_EQ(one->data_disks.size(), 1u);
  EXPECT_EQ(one->data_disks[0].disk_id, "disk-a");
  EXPECT_EQ(one->data_disks[0].mount_path, "/root/data");
  // It survives the record's round trip, on both sides.
  agent::InstanceRecord record;
  record.desired = *one;
  record.ipv4 = "10.200.0.2";
  record.created_with.data_disks = one->data_disks;
  auto back = agent::instance_record_from_json(agent::to_json(record));
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(back->desired.data_disks, one->data_disks);
  EXPECT_EQ(back->created_with.data_disks, one->data_disks);

  desired["data_disks"] = json::array{json::object{{"disk_id", "disk-a"}, {"mount_path", "/proc/x"}}};
  auto bad = agent::instance_spec_from_json(desired);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(bad.error().detail, HasSubstr("data_disks[0].mount_path"));
  desired["data_disks"] = json::array{json::object{{"mount_path", "/data"}}};
  auto missing = agent::instance_spec_from_json(desired);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().detail, HasSubstr("data_disks[0].disk_id"));
  desired["data_disks"] = "disk-a";
  EXPECT_FALSE(agent::instance_spec_from_json(desired));
}

// A superblock as mke2fs writes it, with the fields the driver reads.
std::string superblock(std::uint32_t blocks_lo, std::uint32_t free_lo, std::uint32_t log_block, std::uint32_t overhead,
                       bool is64 = false, std::uint32_t blocks_hi = 0, std::uint32_t free_hi = 0) {
  std::string raw(kExt4SuperblockSize, '\0');
  auto put32 = [&](std::size_t off, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) raw[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put32(0x04, blocks_lo);
  put32(0x0C, free_lo);
  put32(0x18, log_block);
  raw[0x38] = static_cast<char>(0x53);
  raw[0x39] = static_cast<char>(0xEF);
  put32(0x60, is64 ? 0x80 | 0x2 : 0x2);
  put32(0x150, blocks_hi);
  put32(0x158, free_hi);
  put32(0x248, overhead);
  return raw;
}

TEST(Ext4Superblock, SizeAndUsageLikeStatfs) {
  // The numbers of a real 1 GiB image after a 10 MiB write (dumpe2fs and statfs agreed).
  auto sb = parse_ext4_superblock(superblock(262144, 246629, 2, 12949));
  ASSERT_TRUE(sb) << sb.error().detail;
  EXPECT_EQ(sb->block_size, 4096u);
  EXPECT_EQ(sb->device_bytes(), std::int64_t{1} << 30);
  EXPECT_EQ(sb->size_bytes(), std::int64_t{249195} * 4096);              // statfs f_blocks
  EXPECT_EQ(sb->used_bytes(), std::int64_t{249195 - 246629} * 4096);     // f_blocks - f_bfree
  auto big = parse_ext4_superblock(superblock(0, 5, 2, 10, true, 2, 1));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->block_count, (std::uint64_t{2} << 32));
  EXPECT_EQ(big->free_blocks, (std::uint64_t{1} << 32) + 5);
  auto not64 = parse_ext4_superblock(superblock(100, 50, 0, 0, false, 1, 1));
  ASSERT_TRUE(not64);
  EXPECT_EQ(not64->block_count, 100u) << "the high words count only with the 64bit feature";
  EXPECT_EQ(not64->block_size, 1024u);
}

TEST(Ext4Superblock, GarbageIsAnErrorNotACrash) {
  EXPECT_FALSE(parse_ext4_superblock(""));
  EXPECT_FALSE(parse_ext4_superblock(std::string(kExt4SuperblockSize, '\0')));  // no magic
  EXPECT_FALSE(parse_ext4_superblock(superblock(100, 200, 2, 0)));              // more free than there is
  EXPECT_FALSE(parse_ext4_superblock(superblock(100, 10, 40, 0)));              // absurd block size
  EXPECT_FALSE(parse_ext4_superblock(superblock(0, 0, 2, 0)));
  EXPECT_FALSE(read_ext4_superblock("/nonexistent/disk.img"));
}

TEST(MountTable, ParsesMountinfoWithEscapesAndOptionalFields) {
  const std::string text =
      "22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "95 22 7:3 / /data/agent/mounts/disk-a rw,nosuid,nodev,relatime shared:50 master:2 - ext4 /dev/loop3 rw\n"
      "96 22 0:45 /disks/disk-b /srv/with\\040space rw - btrfs /dev/loop4 rw,space_cache=v2\n"
      "garbage line\n"
      "97 22 0:46 / /x rw\n";
  auto table = parse_mountinfo(text);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[1].mount_point, "/data/agent/mounts/disk-a");
  EXPECT_EQ(table[1].source, "/dev/loop3");
  EXPECT_EQ(table[1].fs_type, "ext4");
  EXPECT_EQ(table[1].major, 7u);
  EXPECT_EQ(table[1].minor, 3u);
  EXPECT_EQ(table[2].mount_point, "/srv/with space");
  EXPECT_EQ(table[2].root, "/disks/disk-b");
  EXPECT_EQ(table[2].fs_type, "btrfs");
  auto found = find_mount(table, "/data/agent/mounts/disk-a/");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->source, "/dev/loop3");
  EXPECT_FALSE(find_mount(table, "/data/agent/mounts"));
}

TEST(MountTable, PathIsUnder) {
  EXPECT_TRUE(path_is_under("/a/b", "/a"));
  EXPECT_TRUE(path_is_under("/a", "/a"));
  EXPECT_TRUE(path_is_under("/a/b/", "/a/"));
  EXPECT_FALSE(path_is_under("/ab", "/a"));
  EXPECT_FALSE(path_is_under("/a", "/a/b"));
  EXPECT_TRUE(path_is_under("/disks/disk-a/x", "/disks/disk-a"));
  EXPECT_FALSE(path_is_under("/", "/disks/disk-a"));
}

TEST(BtrfsListings, QgroupShowAndSubvolumeList) {
  const std::string show =
      "Qgroupid    Referenced    Exclusive  Max referenced   Path \n"
      "--------    ----------    ---------  --------------   ---- \n"
      "0/5              16384        16384            none   <toplevel>\n"
      "0/256         67092480        16384        67108864   disks/disk-a\n"
      "0/257         67092480        16384        67108864   snapshots/snap-a\n"
      "1/100              0            0            none   \n";
  auto q = parse_qgroup_show(show);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q.at(5).max_referenced, 0);
  EXPECT_EQ(q.at(256).referenced, 67092480);
  EXPECT_EQ(q.at(256).exclusive, 16384);
  EXPECT_EQ(q.at(256).max_referenced, 67108864);
  // Older btrfs-progs: no Path column, lowercase header.
  auto old = parse_qgroup_show("qgroupid rfer excl max_rfer\n-------- ---- ---- --------\n0/258 4096 4096 1048576\n");
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old.at(258).max_referenced, 1048576);

  auto list = parse_subvolume_list("ID 256 gen 15 top level 5 path disks/disk-a\nID 257 gen 16 top level 5 path snapshots/snap-a\n");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list.at("disks/disk-a"), 256u);
  EXPECT_EQ(list.at("snapshots/snap-a"), 257u);
  EXPECT_TRUE(parse_subvolume_list("").empty());

  // A qgroup whose subvolume is gone is stale (the top level's never is).
  auto shown = parse_qgroup_show("0/5 16384 16384 none\n0/256 4096 4096 0\n0/300 4096 4096 0\n");
  EXPECT_EQ(stale_qgroups(list, shown), std::vector<std::uint64_t>{300});
  EXPECT_TRUE(stale_qgroups(list, q).empty());
}

TEST(DiskDriverRegistry, KnowsTheConfigsNamesAndRefusesOthers) {
  auto names = disk_driver_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), kDefaultDiskDriver);
  ASSERT_EQ(names.size(), std::size(config::kDiskDrivers));
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(names[i], config::kDiskDrivers[i]);
  DiskDriverOptions options;
  options.agent_dir = "/nonexistent/agent";
  for (auto name : names) {
    auto d = make_disk_driver(name, options);
    ASSERT_TRUE(d) << name;
    EXPECT_EQ((*d)->name(), name);
    EXPECT_TRUE((*d)->enforces_size());
  }
  auto unknown = make_disk_driver("zfs", options);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(unknown.error().detail, HasSubstr("disk_driver"));
}

TEST(DiskDriverConfig, UnknownDriverIsRefusedNamingTheKey) {
  const std::string host = "[[hosts]]\nname = \"node-1\"\ncpu = 4\nmemory_gib = 8\n";
  auto defaulted = config::parse_config(host, "t.toml");
  ASSERT_TRUE(defaulted) << defaulted.error().detail;
  EXPECT_EQ(defaulted->hosts.at(0).disk_driver, "loop-ext4");
  auto btrfs = config::parse_config(host + "disk_driver = \"btrfs\"\n", "t.toml");
  ASSERT_TRUE(btrfs) << btrfs.error().detail;
  EXPECT_EQ(btrfs->hosts.at(0).disk_driver, "btrfs");
  auto bad = config::parse_config(host + "disk_driver = \"zfs\"\n", "t.toml");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().detail, HasSubstr("hosts[0].disk_driver"));
}

}  // namespace
