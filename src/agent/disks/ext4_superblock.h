#pragma once
// The few fields of an ext4 superblock the loop-ext4 driver reads to learn an unmounted
// disk's size and usage without mounting it (the superblock is 1024 bytes at offset 1024).
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::agent::disks {

inline constexpr std::size_t kExt4SuperblockOffset = 1024;
inline constexpr std::size_t kExt4SuperblockSize = 1024;

struct Ext4Superblock {
  std::uint64_t block_count = 0;
  std::uint64_t free_blocks = 0;
  std::uint64_t overhead_blocks = 0;  // s_overhead_clusters: metadata statfs leaves out
  std::uint64_t block_size = 0;
  // What statvfs would call the filesystem's size and its used part (f_blocks excludes the
  // overhead), so a mounted and an unmounted disk report the same numbers.
  std::int64_t size_bytes() const { return static_cast<std::int64_t>((block_count - overhead_blocks) * block_size); }
  std::int64_t used_bytes() const {
    const std::uint64_t used = block_count > overhead_blocks + free_blocks ? block_count - overhead_blocks - free_blocks : 0;
    return static_cast<std::int64_t>(used * block_size);
  }
  std::int64_t device_bytes() const { return static_cast<std::int64_t>(block_count * block_size); }
};

// `raw`: the 1024 bytes of the superblock. invalid_argument when the magic is not ext4's or
// the fields make no sense.
Result<Ext4Superblock> parse_ext4_superblock(std::string_view raw);
// Reads and parses the superblock of the image file at `path`.
Result<Ext4Superblock> read_ext4_superblock(const std::string& path);

}  // namespace gpucloud::agent::disks
