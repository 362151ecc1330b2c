#pragma once
// The agent's runtime driver: how instances become containers. Shaped like Nomad's task
// driver (plugins/drivers/driver.go): fingerprint, create/start, recover after an agent
// restart from a small persisted state blob, wait, stop, destroy, inspect, exec (captured or
// with a TTY and resize). Docker Engine today (docker_engine_driver.h), others later.
//
// Everything crossing this boundary is a value type; every call is a coroutine for the
// agent's event loop, and takes its arguments by value (they must outlive suspension).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "core/result.h"

namespace gpucloud::agent {

// Where the init and its inputs appear inside every instance.
inline constexpr std::string_view kInitPathInContainer = "/.gpucloud/init";
inline constexpr std::string_view kInitConfigDirInContainer = "/.gpucloud/config";
// The line the init prints (to the container log) with the instance's SSH host key.
inline constexpr std::string_view kHostKeyMarker = "GPUCLOUD-HOST-KEY ";
// The instance's own host key, generated at first boot; save-image must delete
// /etc/ssh/ssh_host_* from what it saves.
inline constexpr std::string_view kHostKeyPath = "/etc/ssh/ssh_host_ed25519_key";

struct Mount {
  std::string source;  // host path (must exist)
  std::string target;  // path in the container
  bool read_only = false;
};

// A device node passed to the container (HostConfig.Devices, permissions rwm).
struct DeviceMapping {
  std::string path_on_host;       // /dev/nvidia1 (or a test's fake /dev)
  std::string path_in_container;  // /dev/nvidia1
  bool operator==(const DeviceMapping&) const = default;
};

struct ContainerSpec {
  std::string name;      // engine container name, e.g. gpucloud-<installation>-<instance id>
  std::string image;
  std::string hostname;  // the instance's name
  std::map<std::string, std::string> labels;  // gpucloud.installation, gpucloud.instance
  std::vector<std::string> env;               // KEY=VALUE, never secrets (a saved image keeps them)
  std::vector<std::string> command;           // empty: the gpucloud init (and the image's
                                              // ENTRYPOINT is ignored either way)
  double cpus = 1;                       // capped at the host's cores (see CreatedContainer)
  std::int64_t memory_bytes = 0;         // 0 = no limit; swap is never allowed beyond it
  std::int64_t pids_limit = 4096;        // 0 = no limit
  std::int64_t shm_bytes = 0;            // 0 = half the memory limit (64 MiB without one)
  std::string network;                   // the gpucloud bridge network
  std::string ipv4;                      // fixed address on it (empty: engine's choice)
  std::string init_config_dir;           // host dir → /.gpucloud/config, read-only (keys, hash)
  std::vector<Mount> mounts;             // data disks
  std::vector<std::string> gpu_uuids;    // real GPUs only: no device request when empty
  // How gpu_uuids reach the container (agent/gpu/injection_plan.h): true, the engine's
  // nvidia device request (toolkit); false, gpucloud's own (builtin: the nodes in `devices`
  // and the driver's files among `mounts`). NVIDIA_VISIBLE_DEVICES names the UUIDs either way.
  bool gpu_device_request = true;
  std::vector<DeviceMapping> devices;    // HostConfig.Devices, rwm
  std::int64_t nofile_limit = 0;         // 0 = engine default; clamped to the agent's hard limit
  // > 0: the system disk's size, enforced by the engine (HostConfig.StorageOpt size; it
  // counts the image's layers too). Only where the storage driver can (SystemDiskLimit).
  std::int64_t system_disk_gib = 0;
  // Joins the network namespace of this (running) container: NetworkMode container:ID. The
  // engine then sets up no network for it; network and ipv4 must be empty, and Hostname (and
  // Dns, ExtraHosts, ports, MAC) are not sent, the engine refuses them in that mode: the
  // instance gets the joined container's hostname and /etc/hostname, /etc/hosts,
  // /etc/resolv.conf.
  std::string join_network_of;
  // A network holder: a container that only holds a network namespace (command "sleep
  // infinity", all capabilities dropped, no init or config mounts, tiny limits).
  bool network_holder = false;
};

// HostConfig.StorageOpt's "size" for a system disk of `gib` GiB ("30G": the engine reads G
// as GiB). Pure, for tests.
std::string storage_size_opt(std::int64_t gib);

// What create actually asked of the engine where it differs from the spec.
struct CreatedContainer {
  std::string id;
  double cpus = 0;              // applied CPU limit
  bool cpus_capped = false;     // spec asked for more cores than the host has
  std::int64_t nofile_limit = 0;
  bool nofile_clamped = false;  // spec asked for more than the agent's own hard limit
  std::vector<std::string> warnings;  // the engine's own warnings
};

struct ContainerStatus {
  std::string id;
  std::string name;  // without the engine's leading '/'
  std::string image;
  std::map<std::string, std::string> labels;
  bool exists = true;   // false: no such container (inspect/recover never fail for that)
  bool running = false;
  std::string state;    // engine's word: created, running, paused, restarting, exited, dead
  int exit_code = 0;
  bool oom_killed = false;  // unreliable on some hosts: exit 137 may be an OOM kill too
  std::string started_at;   // RFC 3339, empty if never
  std::string finished_at;  // RFC 3339, empty if never
  std::string ipv4;         // on the container's network
  std::int64_t nano_cpus = 0;
  std::int64_t memory_bytes = 0;
  int pid = 0;  // the container's init on the host while it runs (State.Pid); 0 otherwise
  std::string network_mode;  // HostConfig.NetworkMode ("container:ID" for a joined one)
  std::vector<std::string> mount_targets;  // Mounts[].Destination: where binds sit in it
};

struct NetworkSpec {
  std::string name;
  std::string subnet;   // CIDR, e.g. 10.88.0.0/16
  std::string gateway;  // empty: the engine picks the subnet's first address
  std::string bridge_name;  // Linux interface name (≤ 15 chars); empty: engine's br-<id>
  std::map<std::string, std::string> labels;
  bool icc = false;     // inter-container traffic; off for gpucloud (tenants stay apart)
  int mtu = 0;          // the bridge's MTU when it is made; 0: the engine's default (1500)
};

struct NetworkInfo {
  std::string id;
  std::string name;
  std::string subnet;
  std::string gateway;
  std::string bridge_name;  // the host interface, for the firewall
  int mtu = 0;              // as the engine has it; 0: its default
  bool created = false;     // this call created it
};

// An image the engine holds: its id and its size on disk (all its layers).
struct ImageInfo {
  std::string id;
  std::int64_t size_bytes = 0;
  int layers = 0;  // RootFS.Layers: overlay refuses to mount much past ~125
  std::vector<std::string> diff_ids = {};  // RootFS.Layers themselves (empty where unknown)
};

struct DriverInfo {
  std::string engine;          // e.g. "docker 20.10.24+dfsg1"
  std::string api_version;     // the pinned one the driver speaks
  int cgroup_version = 0;
  int cpus = 0;
  std::int64_t memory_bytes = 0;
  bool live_restore = false;   // instances survive an engine restart
  bool nvidia_runtime = false; // the engine can honour GPU device requests
  std::string storage_driver;  // GET /info Driver: "overlay2", "btrfs", ...
};

// How a container's system disk size is held, and when it is not, why. btrfs (subvolume
// quotas) and zfs (dataset quotas) hold it in the engine (StorageOpt size); overlay2 needs
// XFS project quotas for that, which these hosts' kernels lack, so there gpucloud holds it
// itself with a filesystem per container (agent/runtime/layer_filesystems.h) where it can
// (`layer_filesystems_unavailable` empty). Pure.
struct SystemDiskLimit {
  bool enforced = false;
  bool layer_filesystem = false;  // enforced by a filesystem of the container's own
  std::string reason;             // when not enforced
  std::string how() const { return !enforced ? "none" : layer_filesystem ? "layer_filesystem" : "engine"; }
};
SystemDiskLimit system_disk_limit_for(const std::string& storage_driver,
                                      const std::string& layer_filesystems_unavailable = "not configured");

// One path of a container's filesystem that differs from its image (GET /containers/{id}/changes).
enum class ChangeKind { modified = 0, added = 1, deleted = 2 };
struct FileChange {
  std::string path;  // absolute, as the engine gives it ("/etc/shadow")
  ChangeKind kind = ChangeKind::modified;
};

// Where the host holds a container's own files (what save-image reads its layer from), on the
// storage drivers whose layout is known: overlay2 (the upper dir: exactly the changed files,
// deletions as whiteout devices) and btrfs (the container's subvolume: its whole filesystem;
// its name is the mount id, kept in a file the agent reads off the loop).
struct ContainerLayerDir {
  std::string storage_driver;  // "overlay2" | "btrfs"
  std::string dir;             // overlay2: the upper dir; btrfs: <root>/btrfs/subvolumes
  std::string mount_id_file;   // btrfs: the file whose content names the subvolume in `dir`
  // overlay2 with the engine's native diff: the upper dir itself lists the changes (walked
  // by the agent; GET /changes costs the engine ~1 s even for a few files).
  bool walk_upper = false;
};

// What an image made of a container's base plus one layer needs of that base: its config
// (Env, Cmd, ... with `labels` merged, no per-container label), its layers' diff ids, and its
// platform.
struct SaveBase {
  std::string image_id;                // the image the container was created from
  boost::json::object config;          // the image config's "config"
  std::vector<std::string> diff_ids;   // RootFS.Layers
  std::string architecture, os, variant, created;
};

struct ExecResult {
  int exit_code = 0;
  std::string out;
  std::string err;
};

// The state an agent persists per instance to re-attach after its own restart (Nomad's
// TaskHandle.DriverState): opaque to the agent, versioned, small.
struct DriverState {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string container_id;
  std::string container_name;
  std::map<std::string, std::string> labels;  // to find the container if id and name fail
};
std::string encode_driver_state(const DriverState& state);
Result<DriverState> decode_driver_state(std::string_view json);

// The host key out of a container log, from the init's marker line ("ssh-ed25519 AAAA...").
std::optional<std::string> find_host_key(std::string_view log);

// An interactive exec with a TTY (the web terminal). One read and one write may be
// outstanding at the same time; no two reads or two writes.
// One of the engine's container events (die, start, destroy, oom...), as watch_events reports it.
struct EngineEvent {
  std::string action;                             // "die", "start", "destroy", ...
  std::string id;                                 // the container's id
  std::map<std::string, std::string> attributes;  // its labels, name, exitCode
};

class TerminalSession {
 public:
  virtual ~TerminalSession() = default;
  // The next output; an empty string once the process has closed its terminal.
  virtual boost::asio::awaitable<Result<std::string>> read() = 0;
  virtual boost::asio::awaitable<Status> write(std::string data) = 0;
  virtual boost::asio::awaitable<Status> resize(int rows, int cols) = 0;
  // After read() returned "": the process's exit code.
  virtual boost::asio::awaitable<Result<int>> exit_code() = 0;
  virtual void close() = 0;
};

class RuntimeDriver {
 public:
  virtual ~RuntimeDriver() = default;

  virtual boost::asio::awaitable<Status> ping() = 0;
  virtual boost::asio::awaitable<Result<DriverInfo>> fingerprint() = 0;

  virtual boost::asio::awaitable<Result<NetworkInfo>> ensure_network(NetworkSpec spec) = 0;
  virtual boost::asio::awaitable<Status> remove_network(std::string name) = 0;  // gone = ok
  virtual boost::asio::awaitable<Result<bool>> image_present(std::string ref) = 0;
  // nullopt when the engine does not hold `ref`.
  virtual boost::asio::awaitable<Result<std::optional<ImageInfo>>> image_inspect(std::string ref) = 0;
  // Pulls `ref` from its registry ("repo[:tag]" or "repo@digest"); the engine's own error
  // (no network, unknown image, denied) comes back as an unavailable error.
  virtual boost::asio::awaitable<Status> pull_image(std::string ref, std::chrono::milliseconds timeout) = 0;

  virtual boost::asio::awaitable<Result<CreatedContainer>> create(ContainerSpec spec) = 0;
  virtual boost::asio::awaitable<Status> start(std::string id) = 0;  // running already = ok
  // SIGTERM, then SIGKILL after `grace`. Stopped already = ok.
  virtual boost::asio::awaitable<Status> stop(std::string id, std::chrono::seconds grace) = 0;
  // Force, with its anonymous volumes. Gone already = ok.
  virtual boost::asio::awaitable<Status> remove(std::string id) = 0;
  virtual boost::asio::awaitable<Result<ContainerStatus>> inspect(std::string id) = 0;
  // Containers in every state carrying all the given labels.
  virtual boost::asio::awaitable<Result<std::vector<ContainerStatus>>> list(
      std::map<std::string, std::string> label_filter) = 0;
  // Re-attach after an agent restart: by id, else by name, else by labels (exactly one).
  virtual boost::asio::awaitable<Result<ContainerStatus>> recover(DriverState state) = 0;
  // Until the container is not running or `timeout` passed; then its status.
  virtual boost::asio::awaitable<Result<ContainerStatus>> wait(std::string id,
                                                                std::chrono::milliseconds timeout) = 0;
  // The container's log (stdout and stderr interleaved by stream), last `tail` lines.
  virtual boost::asio::awaitable<Result<std::string>> logs(std::string id, int tail) = 0;

  virtual boost::asio::awaitable<Result<ExecResult>> exec_run(
      std::string id, std::vector<std::string> argv, std::chrono::milliseconds timeout) = 0;
  // exec_run, stdout only; a non-zero exit is an error carrying stderr.
  virtual boost::asio::awaitable<Result<std::string>> exec_capture(std::string id,
                                                                   std::vector<std::string> argv) = 0;
  virtual boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> exec_tty(
      std::string id, std::vector<std::string> argv, int rows, int cols,
      std::vector<std::string> env) = 0;

  // Commits the container's filesystem (not its mounts) as repo:tag, paused while it runs:
  // rebuilds keep the system disk with it, and save-image takes its raw copy with it (which
  // ImageSaver then cleans and flattens: a commit keeps the secrets it holds). Returns the id.
  virtual boost::asio::awaitable<Result<std::string>> commit(
      std::string id, std::string repo, std::string tag,
      std::map<std::string, std::string> labels) = 0;
  virtual boost::asio::awaitable<Status> remove_image(std::string ref) = 0;  // gone = ok
  // The ids of the images (tagged or not) carrying every label in `labels`; unavailable where
  // the driver cannot list images.
  virtual boost::asio::awaitable<Result<std::vector<std::string>>> list_images(std::map<std::string, std::string> labels) {
    (void)labels;
    co_return fail(ErrorCode::unavailable, "this runtime does not list images");
  }

  // A container's CPU and memory limits changed in place (it may be stopped): what a start
  // at another size needs instead of a rebuild. Swap stays off (MemorySwap = Memory); the
  // CPU limit is capped at the host's cores like a create's. Returns the applied CPUs.
  virtual boost::asio::awaitable<Result<double>> update(std::string id, double cpus,
                                                        std::int64_t memory_bytes) = 0;
  // commit's result with ONE layer: the container's filesystem exported and imported as a
  // new image keeping its parent image's config (Env, Cmd, Entrypoint, WorkingDir, User,
  // labels), so repeated rebuilds cannot stack layers without bound. Returns the image id.
  virtual boost::asio::awaitable<Result<std::string>> flatten(
      std::string id, std::string repo, std::string tag,
      std::map<std::string, std::string> labels) = 0;

  // Follows the engine's container events for containers carrying every label in `labels`,
  // calling `on_event` for each (on the driver's executor) until the engine ends the stream or
  // the connection breaks. `connected` is called once the engine accepted the watch: events
  // from then on are seen. false from reports_events(): the runtime has none to give.
  virtual bool reports_events() const { return false; }
  virtual boost::asio::awaitable<Status> watch_events(std::map<std::string, std::string> labels,
                                                      std::function<void(EngineEvent)> on_event,
                                                      std::function<void()> connected) {
    (void)labels;
    (void)on_event;
    (void)connected;
    co_return fail(ErrorCode::unavailable, "this runtime reports no events");
  }

  // Save-image as the base's layers plus one layer (image_saver.h). Each is unavailable where
  // the runtime cannot: the saver then falls back to commit, clean and flatten.
  // Freeze / thaw a running container's processes (a paused one is already frozen: ok).
  virtual boost::asio::awaitable<Status> pause(std::string id) {
    (void)id;
    co_return fail(ErrorCode::unavailable, "this runtime does not pause");
  }
  virtual boost::asio::awaitable<Status> unpause(std::string id) {  // not paused = ok
    (void)id;
    co_return fail(ErrorCode::unavailable, "this runtime does not pause");
  }
  virtual boost::asio::awaitable<Result<std::vector<FileChange>>> changes(std::string id) {
    (void)id;
    co_return fail(ErrorCode::unavailable, "this runtime does not list changes");
  }
  virtual boost::asio::awaitable<Result<ContainerLayerDir>> layer_dir(std::string id) {
    (void)id;
    co_return fail(ErrorCode::unavailable, "this runtime does not expose a container's files");
  }
  virtual boost::asio::awaitable<Result<SaveBase>> save_base(std::string id, std::map<std::string, std::string> labels) {
    (void)id;
    (void)labels;
    co_return fail(ErrorCode::unavailable, "this runtime does not describe images");
  }
  // The next piece of a streamed body; empty when it is done. The view stays valid until the
  // next call.
  using BodySource = std::function<boost::asio::awaitable<Result<std::string_view>>()>;
  // POST /images/load with `source` as the body (an image tar: docker save's format), chunked.
  // Returns the engine's "Loaded image" line.
  virtual boost::asio::awaitable<Result<std::string>> load_image(BodySource source, std::chrono::milliseconds timeout) {
    (void)source;
    (void)timeout;
    co_return fail(ErrorCode::unavailable, "this runtime does not load images");
  }

  // Bytes the container wrote over its image (the engine's SizeRw); unavailable where the
  // driver cannot tell.
  virtual boost::asio::awaitable<Result<std::int64_t>> system_disk_used(std::string id) {
    (void)id;
    co_return fail(ErrorCode::unavailable, "this runtime does not report disk use");
  }
};

}  // namespace gpucloud::agent
