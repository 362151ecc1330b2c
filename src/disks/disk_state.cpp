#include "disks/disk_state.h"

#include <array>
#include <utility>

namespace gpucloud::disks {
namespace {
constexpr std::array<std::pair<DiskState, std::string_view>, 7> kDisk{{
    {DiskState::creating, "creating"},
    {DiskState::available, "available"},
    {DiskState::attached, "attached"},
    {DiskState::deleting, "deleting"},
    {DiskState::deleted, "deleted"},
    {DiskState::error, "error"},
    {DiskState::destroyed, "destroyed"},
}};
constexpr std::array<std::pair<SnapshotState, std::string_view>, 6> kSnapshot{{
    {SnapshotState::creating, "creating"},
    {SnapshotState::available, "available"},
    {SnapshotState::deleting, "deleting"},
    {SnapshotState::deleted, "deleted"},
    {SnapshotState::error, "error"},
    {SnapshotState::destroyed, "destroyed"},
}};
}  // namespace

std::string_view to_string(DiskState state) {
  for (const auto& [s, name] : kDisk)
    if (s == state) return name;
  return "error";
}
std::string_view to_string(SnapshotState state) {
  for (const auto& [s, name] : kSnapshot)
    if (s == state) return name;
  return "error";
}
std::optional<DiskState> parse_disk_state(std::string_view text) {
  for (const auto& [s, name] : kDisk)
    if (name == text) return s;
  return std::nullopt;
}
std::optional<SnapshotState> parse_snapshot_state(std::string_view text) {
  for (const auto& [s, name] : kSnapshot)
    if (name == text) return s;
  return std::nullopt;
}

}  // namespace gpucloud::disks
