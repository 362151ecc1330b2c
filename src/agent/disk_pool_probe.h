#pragma once
// The agent's measure of its host's disk pool: the filesystem holding DATA_DIR/agent (the data
// disks' images, snapshots and the agent's state; the store too, in all-in-one mode), read with
// statvfs. Size and use are counted as df counts them (blocks reserved for root left out), a
// reserve is held back for the store and the agent, and provisioned sizes may reach
// (size - reserve) x [agent] disk_overcommit. See docs/contract-notes.md "Disk pools".
#include <cstdint>
#include <string>

#include "agent/agent_protocol.h"
#include "core/result.h"

namespace gpucloud::agent {

// The reserve never shared with disks: 5 % of the filesystem, at least 256 MiB and at most
// 10 GiB (never more than half of it). Pure.
std::int64_t disk_pool_reserve(std::int64_t size_bytes);

// The pool from statvfs's counts (blocks in `fragment` units). Pure.
DiskPool disk_pool_from_counts(const std::string& path, std::uint64_t blocks, std::uint64_t free_blocks,
                               std::uint64_t available_blocks, std::uint64_t fragment, double overcommit);

// statvfs of `path`, or of its nearest existing parent. Blocking (one syscall): cheap on a
// local filesystem.
Result<DiskPool> measure_disk_pool(const std::string& path, double overcommit);

}  // namespace gpucloud::agent
