#pragma once
// The states of a data disk and of a snapshot, as types. The spec's names are the strings;
// `destroyed` is internal: the data is gone, the row stays for the events that name it, and
// the API answers 404 for it.
#include <optional>
#include <string_view>

namespace gpucloud::disks {

enum class DiskState { creating, available, attached, deleting, deleted, error, destroyed };
enum class SnapshotState { creating, available, deleting, deleted, error, destroyed };

std::string_view to_string(DiskState state);
std::string_view to_string(SnapshotState state);
std::optional<DiskState> parse_disk_state(std::string_view text);
std::optional<SnapshotState> parse_snapshot_state(std::string_view text);

}  // namespace gpucloud::disks
