#pragma once
// RFC 3339 UTC times, the API's only time format.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace gpucloud {

using SysTime = std::chrono::sys_time<std::chrono::microseconds>;

std::string format_rfc3339(SysTime t);                   // "2026-11-30T12:00:00Z" (".123456" if sub-second)
std::optional<SysTime> parse_rfc3339(std::string_view);  // accepts Z or +hh:mm offsets
std::int64_t to_unix_micros(SysTime t);
SysTime from_unix_micros(std::int64_t micros);
SysTime system_now();

}  // namespace gpucloud
