#pragma once
#include <cstdint>

namespace gpucloud {

// Sizes in bytes.
inline constexpr std::int64_t kMiB = std::int64_t{1} << 20;
inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;

}  // namespace gpucloud
