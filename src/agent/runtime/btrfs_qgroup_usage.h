#pragma once
// What a btrfs subvolume holds by its own quota group: the system disk's use where the engine
// cannot say (with btrfs simple quotas it answers SizeRw -1 once a container filled its
// limit: re-applying the limit on inspect fails with EDQUOT). Read with
// `btrfs qgroup show --raw -f PATH`, blocking: call it off the event loop.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::agent {

// The Exclusive bytes of the first level-0 qgroup row ("0/260  314572800  314572800  path")
// in that command's output; nullopt when there is none. Pure.
std::optional<std::int64_t> parse_qgroup_exclusive(std::string_view output);

// Runs the command for the subvolume at `path` (absolute).
Result<std::int64_t> btrfs_subvolume_usage(const std::string& path);

}  // namespace gpucloud::agent
