#pragma once
// What both disk drivers need from the host: running their tools (PATH-only environment,
// argv only, never a shell), the mount table, loop devices, small files written atomically.
// All blocking.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/child_process.h"
#include "core/result.h"

namespace gpucloud::agent::disks {

// The executable `name` from the sbin and bin directories (an agent started with a user's
// PATH may lack sbin); unavailable naming the package when absent.
Result<std::string> find_tool(const std::string& name, std::string_view package);

// Runs `argv` (argv[0] a tool name, found with find_tool); a non-zero exit is an internal
// error "TOOL ARGS...: exit N: STDERR". Answers stdout.
Result<std::string> run_tool(std::vector<std::string> argv, std::string_view package,
                             std::chrono::milliseconds timeout = std::chrono::minutes(2));

// run_tool's raw form: any exit code is a result (e2fsck answers 1 for "fixed").
Result<ProcessResult> run_tool_exit(std::vector<std::string> argv, std::string_view package,
                                    std::chrono::milliseconds timeout = std::chrono::minutes(2));
// "TOOL ARGS: exit N: STDERR" for a failed run.
std::string tool_failure(const std::vector<std::string>& argv, const ProcessResult& result);

// One line of /proc/self/mountinfo.
struct MountEntry {
  std::string root;         // the path inside the filesystem that is mounted ("/" or a subvolume)
  std::string mount_point;  // unescaped
  std::string fs_type;
  std::string source;       // e.g. /dev/loop3
  unsigned major = 0, minor = 0;
};
// Parses mountinfo text (pure, for tests); unparseable lines are skipped.
std::vector<MountEntry> parse_mountinfo(std::string_view text);
// This process's mount table.
Result<std::vector<MountEntry>> read_mount_table();
// The entry mounted at `mount_point` (the last one, which is what a path resolves to).
std::optional<MountEntry> find_mount(const std::vector<MountEntry>& table, const std::string& mount_point);

struct LoopDevice {
  std::string device;        // /dev/loopN
  std::string backing_file;  // without a " (deleted)" suffix
  bool backing_deleted = false;
};
// Every attached loop device, from /sys/block/loop*/loop/backing_file.
std::vector<LoopDevice> list_loop_devices();

// Whether a mount namespace other than the agent's own (any process's /proc/PID/mountinfo) mounts the
// filesystem on device major:minor with a root at or below `root` ("/" for a whole
// filesystem, "/disks/ID" for a btrfs subvolume): a container holding a data disk does.
bool mounted_in_other_namespace(unsigned major, unsigned minor, const std::string& root);

// `path` is `dir` or below it (both normalised, no symlinks followed).
bool path_is_under(const std::string& path, const std::string& dir);

// The file's content, or not_found.
Result<std::string> read_small_file(const std::string& path);
// Replaces `path` atomically (temporary file, fsync, rename, fsync of the directory).
Status write_file_durably(const std::string& path, std::string_view content);
Status fsync_directory(const std::string& dir);
// mkdir -p with mode 0700 for the new ones.
Status make_directories(const std::string& dir);
// Sets the file's size (sparse growth), fsyncs it.
Status set_file_size(const std::string& path, std::int64_t size_bytes);
// rename(2) then fsync of the target's directory.
Status rename_durably(const std::string& from, const std::string& to);
// Removes a file; absent = ok.
Status remove_file(const std::string& path);

}  // namespace gpucloud::agent::disks
