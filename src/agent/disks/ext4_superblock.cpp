#include "agent/disks/ext4_superblock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpucloud::agent::disks {

namespace {

std::uint32_t le32(std::string_view raw, std::size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + offset);
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
std::uint16_t le16(std::string_view raw, std::size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + offset);
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
}

// Offsets in struct ext4_super_block (fs/ext4/ext4.h).
constexpr std::size_t kBlocksCountLo = 0x04, kFreeBlocksLo = 0x0C, kLogBlockSize = 0x18, kMagic = 0x38,
                      kFeatureIncompat = 0x60, kBlocksCountHi = 0x150, kFreeBlocksHi = 0x158,
                      kOverheadClusters = 0x248;
constexpr std::uint16_t kExt4Magic = 0xEF53;
constexpr std::uint32_t kIncompat64Bit = 0x80;

}  // namespace

Result<Ext4Superblock> parse_ext4_superblock(std::string_view raw) {
  if (raw.size() < kExt4SuperblockSize) return fail(ErrorCode::invalid_argument, "ext4 superblock: short read");
  if (le16(raw, kMagic) != kExt4Magic) return fail(ErrorCode::invalid_argument, "ext4 superblock: bad magic");
  Ext4Superblock sb;
  const std::uint32_t log = le32(raw, kLogBlockSize);
  if (log > 6) return fail(ErrorCode::invalid_argument, "ext4 superblock: block size out of range");
  sb.block_size = std::uint64_t{1024} << log;
  sb.block_count = le32(raw, kBlocksCountLo);
  sb.free_blocks = le32(raw, kFreeBlocksLo);
  if (le32(raw, kFeatureIncompat) & kIncompat64Bit) {
    sb.block_count |= static_cast<std::uint64_t>(le32(raw, kBlocksCountHi)) << 32;
    sb.free_blocks |= static_cast<std::uint64_t>(le32(raw, kFreeBlocksHi)) << 32;
  }
  sb.overhead_blocks = le32(raw, kOverheadClusters);
  if (sb.block_count == 0 || sb.free_blocks > sb.block_count || sb.overhead_blocks > sb.block_count) {
    return fail(ErrorCode::invalid_argument, "ext4 superblock: inconsistent block counts");
  }
  return sb;
}

Result<Ext4Superblock> read_ext4_superblock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::not_found, "open " + path + ": " + std::strerror(errno));
  std::string buf(kExt4SuperblockSize, '\0');
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(kExt4SuperblockOffset));
  const int saved = errno;
  ::close(fd);
  if (n < 0) return fail(ErrorCode::internal, "read " + path + ": " + std::strerror(saved));
  buf.resize(static_cast<std::size_t>(n));
  auto sb = parse_ext4_superblock(buf);
  if (!sb) return fail(ErrorCode::internal, path + ": " + sb.error().detail);
  return sb;
}

}  // namespace gpucloud::agent::disks
