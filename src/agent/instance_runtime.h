#pragma once
// The agent's instance runtime: makes "instance X should be running (or stopped) with ..."
// true on this host, through the runtime driver (containers), gpucloud's nftables table
// (published ports) and its own state directory (agent_state.h). It serves these commands on
// a LocalAgent (or any agent that dispatches by command kind):
//
//   instance.ensure        desired: the instance's whole desired state; creates, starts or
//                          stops the container, writes the init's config, publishes ports
//   instance.remove        desired: {"instance_id"}; the container (forced), ports, config,
//                          record; the address returns to the pool
//
// A running instance whose ports or sources alone change (a security-group change) gets its
// table applied first, from the agent's saved record, before any engine call: the rule change
// holds even while the engine is down (the command then fails at the engine, the new rules
// stay).
//
// Both take an optional "generation" (integer, the control plane's version of the instance's
// desired state). The record keeps the highest applied; a command carrying an older one is
// refused with `conflict` ("stale command: ...") before anything changes, also after the
// instance was removed (STATE_DIR/removed/<id>.json). No generation (or 0): not fenced.
//   instance.status        desired: {}; every container of this installation and every
//                          recorded instance, plus containers with our label and no record
//   instance.stop_unknown  desired: {"container_id"}; stops (never deletes) such a container
//   instance.exec          desired: {"instance_id","argv":[...],"timeout_ms"?}; captured exec
//   image.save, image.remove   save-image (image_saver.h), under the instance's lock
//
// System disks: where the engine's storage driver can limit a container's size (btrfs),
// containers are created with the spec's system_disk_gib as StorageOpt size (detected once,
// from the engine's /info). instance.status says which ("system_disk": {"enforced",
// "reason", "storage_driver"}) and reports each container's written bytes
// ("system_disk_used_bytes", the engine's SizeRw; null when unknown).
//
// instance.ensure's "data_disks": [{"disk_id","mount_path"}] (absent = none; paths checked
// by disks::check_data_disks): before the container is created or started each disk is
// mounted on the host (DiskRuntime::attach) and bind-mounted at mount_path. Once the
// container is stopped (desired "stopped") or removed, the disks are detached (loop disks
// unmounted, never deleted; instance.remove never deletes a data disk). The container
// records the disks it was made with: another set is drift ("data_disks") and rebuilds a
// stopped container like a GPU change. Without a DiskRuntime (set_disk_runtime), data disks
// are refused (unavailable).
//
// Every command is idempotent (the same desired state twice changes nothing the second time),
// answers errors as values, and undoes what it did when a later step fails (a container it
// created is removed again if it cannot be started, a new record and its address released).
// Commands for one instance run one at a time; different instances proceed concurrently.
//
// Network holders (Options::network_holders, [agent] network_holders): a new instance's
// container joins a pre-started holder's network namespace (NetworkMode container:HOLDER) and
// its address is the holder's. The holder is recorded before the container is created; stop
// keeps it, start starts it first, instance.remove removes it, and instance.status repairs a
// running instance whose holder died, restarted or went away. Holders carry
// kNetworkHolderLabel and are never reported as unknown containers.
//
// Restarts: nothing here stops a container when the agent stops. start() reloads the state
// directory, re-checks the network and re-applies the firewall for the recorded instances;
// containers are found again from their persisted DriverState (id, then name, then labels).
//
// All coroutines run on a strand of the executor given to the constructor; nft runs on a
// private thread (it forks and waits), and so do the state directory's writes (they fsync).
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "agent/agent_protocol.h"
#include "agent/agent_state.h"
#include "agent/firewall/nftables.h"
#include "agent/runtime/layer_filesystems.h"
#include "agent/runtime/runtime_driver.h"
#include "agent/sampling/sample_target.h"
#include "core/result.h"

namespace gpucloud::gpu {
class GpuInjector;
}

namespace gpucloud::agent {

class LocalAgent;
class ImageSaver;
class DiskRuntime;

inline constexpr std::string_view kInstallationLabel = "gpucloud.installation";
inline constexpr std::string_view kInstanceLabel = "gpucloud.instance";
// On network holders (value "1"), beside kInstallationLabel; they carry no kInstanceLabel
// (which instance holds one is in that instance's record).
inline constexpr std::string_view kNetworkHolderLabel = "gpucloud.network-holder";

class InstanceRuntime {
 public:
  struct Options {
    std::chrono::seconds stop_grace{10};
    // How long ensure waits, after booting a container, for the init's host-key line.
    std::chrono::milliseconds host_key_wait{3000};
    // How long ensure waits, after booting a container that publishes port 22, for its sshd
    // to accept connections, so `running` means "ssh works now" (an image without sshd just
    // takes this long once per boot).
    std::chrono::milliseconds ssh_listen_wait{2000};
    std::chrono::milliseconds exec_timeout{30'000};  // instance.exec without timeout_ms
    // A rebuild whose commit would give the system image more layers than this exports and
    // imports the filesystem as one layer instead (overlay stops mounting near 125).
    // GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS overrides it (tests).
    int max_system_image_layers = default_max_system_image_layers();
    // Tests: sees each state-directory write, on the thread that makes it.
    std::function<void(const std::string&)> state_write_observer;
    // Tests: applies the table in place of nftables (called on the firewall thread with
    // every running instance's ports). Unset: NftablesFirewall::apply.
    std::function<Status(const std::vector<firewall::PublishedPort>&)> apply_ports;
    // Network holders ([agent] network_holders): a new instance's container joins the
    // network namespace of a pre-started holder container (NetworkMode container:HOLDER) that
    // has the instance's fixed address on the bridge, taken from a pool of
    // `network_pool_size` started, unassigned holders refilled in the background (an empty
    // pool makes one inline). false: instances are on the bridge themselves, as before;
    // instances already on holders keep theirs either way.
    bool network_holders = false;
    int network_pool_size = 2;
    // The MTU gpucloud's bridge is made with (0: the engine's 1500): the uplink's when it is
    // smaller (agent/runtime/uplink_mtu.h), so instances' full-size packets fit the uplink.
    int network_mtu = 0;
    // The holders' image (it needs `sleep`); when the engine lacks it, an inline holder uses
    // the instance's own image and the pool is not refilled.
    std::string holder_image = "gpucloud/base:bookworm-2";
    // Tests: sets the hostname in the UTS namespace of the process `pid` (default: nsenter
    // on the state thread). An instance on a holder shares the holder's hostname files but
    // has its own UTS namespace, which the engine names after the holder.
    std::function<Status(int pid, const std::string& hostname)> set_hostname;
    // How instances get their GPUs, per host (agent/gpu/gpu_injector.h; [agent]
    // gpu_injection). Null: the engine's device request for real GPUs, as before.
    std::shared_ptr<gpu::GpuInjector> gpu_injector;
    // lxcfs's mount point ([agent] lxcfs_dir; agent/lxcfs.h): when lxcfs is mounted there at a
    // create, its proc and sys files are bound over the container's. Empty: none.
    std::string lxcfs_dir;
    // System disks' sizes on overlay2 ([agent] system_disk_filesystems): a filesystem per
    // container over its layer directory (agent/runtime/layer_filesystems.h). Null: none.
    std::shared_ptr<LayerFilesystems> layer_filesystems;
  };
  static int default_max_system_image_layers();

  // How a stopped container meets a desired spec it was not created for. Pure, for tests.
  enum class Rebuild {
    none,    // it fits as it is
    update,  // only CPU/memory differ: changed in place
    commit,  // hostname or GPUs differ: commit its filesystem, recreate from that image
    flatten, // as commit, but the image would pass the layer bound: one layer instead
  };
  static Rebuild rebuild_for(const std::vector<std::string>& drift, int image_layers, int max_layers);

  // `installation_id` names the network (gpucloud-<id>), the containers
  // (gpucloud-<id>-<instance id>) and their gpucloud.installation label;
  // [A-Za-z0-9][A-Za-z0-9_.-]{0,39}. `init_script_path` is the host file the driver bind-mounts at
  // /.gpucloud/init (checked to exist at start; empty: not checked). `firewall_table`: the
  // nftables table for this installation's ports ("gpucloud..."; see port_rules.h).
  InstanceRuntime(boost::asio::any_io_executor loop, std::string installation_id,
                  std::string state_dir, std::unique_ptr<RuntimeDriver> driver,
                  std::string init_script_path, std::string firewall_table);
  InstanceRuntime(boost::asio::any_io_executor loop, std::string installation_id,
                  std::string state_dir, std::unique_ptr<RuntimeDriver> driver,
                  std::string init_script_path, std::string firewall_table, Options options);
  ~InstanceRuntime();
  InstanceRuntime(const InstanceRuntime&) = delete;
  InstanceRuntime& operator=(const InstanceRuntime&) = delete;

  // Re-attach: load the state directory, ensure the network (choosing and persisting its
  // subnet the first time), re-apply the firewall for every recorded running instance.
  // Touches no container. Commands arriving first load the state themselves (and every
  // ensure/remove re-applies the whole table anyway).
  boost::asio::awaitable<Status> start();
  // A standby replica (issue 27): commands, samples and terminals fail "unavailable" instead of
  // starting the runtime lazily, until start() (this replica leads).
  void hold_start() { start_held_ = true; }

  // Where instances' data disks come from (must outlive this runtime; null: none).
  void set_disk_runtime(DiskRuntime* disks) { disks_ = disks; }

  // Adds the instance.* handlers. The runtime must outlive the agent's use of them.
  void register_handlers(LocalAgent& agent);

  // Makes this runtime the agent's sample source (sample_targets). The runtime must outlive
  // the agent's use of it.
  void register_sample_source(LocalAgent& agent);

  // Engine events: every start, death or removal of one of this installation's containers is
  // reported to `sink` (LocalAgent::report_changes) with the instances it concerns (an
  // instance's own container, or the network holder it joins), so the control plane
  // reconciles now rather than at its next pass. A pooled holder that dies is dropped from
  // the pool and replaced at once (a create would otherwise find it dead and make one
  // inline). The watch reconnects while the engine is away (1 s doubling to 30 s) and reports
  // each reconnect as a change of everything, since events were missed. A driver without
  // events watches nothing. Called once; the sink runs on the loop.
  void report_changes_to(std::function<void(ChangeReport)> sink);
  // Stops the watch (shutdown; the runtime must outlive a watch it started).
  void stop_watching() { watching_ = false; }

  // The sampler's view of every instance whose desired state is running and whose container
  // the engine says runs: ids, host, the container's init pid, its GPUs and memory limit.
  // Pids are remembered per container and asked of the engine only for a container not seen
  // yet or named in `stale` (its cgroup could not be read with the pid given before).
  boost::asio::awaitable<Result<std::vector<sampling::SampleTarget>>> sample_targets(std::vector<std::string> stale);

  // A login shell in the instance's running container, on a TTY of rows x cols.
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_terminal(std::string instance_id, int rows,
                                                                               int cols);
  // A TCP connection to `port` at the running instance's own address, from inside its network
  // namespace (agent/instance_connection.h); 5 s to connect.
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> open_connection(std::string instance_id, int port);

  // The command handlers (what register_handlers installs), callable directly.
  boost::asio::awaitable<Result<CommandOutcome>> handle(Command command);

  const std::string& network_name() const { return network_name_; }
  // The network's subnet once known ("" before start).
  std::string subnet() const { return network_ ? network_->subnet : std::string(); }
  // Problems met loading the state directory (unreadable records), for the operator.
  const std::vector<std::string>& load_problems() const { return load_problems_; }
  RuntimeDriver& driver() { return *driver_; }
  // Started, unassigned network holders ready for creates (container ids), and the refills
  // under way. For tests and the operator.
  std::vector<std::string> pooled_holders() const;
  bool pool_refilling() const { return refilling_; }

 private:
  struct Instance;  // in-memory record plus its per-instance lock (instance_runtime_internal.h)
  class AsyncLock;
  struct EnsureRun;  // one instance.ensure's state, shared by its steps (instance_runtime_internal.h)

  // ---- dispatch, start / re-attach, the state directory, fencing (instance_runtime.cpp) ----
  boost::asio::awaitable<Result<CommandOutcome>> dispatch(Command command);
  boost::asio::awaitable<Status> start_on_strand();
  boost::asio::awaitable<Status> start_locked();
  boost::asio::awaitable<Status> ensure_started();
  // The state directory's writes (and fsyncs), on state_thread_.
  boost::asio::awaitable<Status> save_record(InstanceRecord record);
  boost::asio::awaitable<Status> drop_record(std::string id);
  boost::asio::awaitable<Status> save_network_record(NetworkRecord network);
  boost::asio::awaitable<Result<bool>> write_init_config(std::string id, std::string authorized_keys,
                                                         std::optional<std::string> password_hash);
  // The host key in the instance's config directory ("" when none); `make`: make one if absent.
  boost::asio::awaitable<Result<std::string>> instance_host_key(std::string id, std::string comment, bool make);
  boost::asio::awaitable<void> forget_record(Instance& slot, std::string id);   // undo of a new record
  boost::asio::awaitable<void> restore_record(Instance& slot, InstanceRecord old);
  // conflict when `generation` is older than what the instance (or its removal) applied.
  boost::asio::awaitable<Status> check_fence(Instance& slot, std::string id, std::int64_t generation);
  std::string container_name(const std::string& instance_id) const;
  DriverState driver_state_for(const InstanceRecord& record) const;
  Instance& instance_slot(const std::string& instance_id);
  boost::asio::awaitable<void> remove_container_quietly(std::string container_id);
  boost::asio::awaitable<void> stop_container_quietly(std::string container_id);

  // ---- engine events and the sampler's targets (instance_runtime_events.cpp) ----
  boost::asio::awaitable<void> watch_engine_events();
  void on_engine_event(const EngineEvent& event);  // on the strand
  boost::asio::awaitable<void> replace_pooled_holder(std::string container_id);
  // The instances an event concerns, grouped by host (on the strand).
  std::map<std::string, std::vector<std::string>> instances_of(const EngineEvent& event) const;
  boost::asio::awaitable<Result<std::vector<sampling::SampleTarget>>> sample_targets_on_strand(
      std::vector<std::string> stale);

  // ---- the bridge network and addresses (instance_runtime_network.cpp) ----
  boost::asio::awaitable<Status> ensure_network();
  void warn_if_mtu_differs(const NetworkInfo& info) const;
  boost::asio::awaitable<Result<std::string>> allocate_ip(std::string instance_id,
                                                          std::string preferred);

  // ---- network holders (instance_runtime_holders.cpp) ----
  struct PoolHolder {
    std::string id;
    std::string name;
    std::string ipv4;
    int pid = 0;
    std::string started_at;
  };
  // Creates and starts a holder at `ip` (allocated here when empty). Unassigned.
  boost::asio::awaitable<Result<PoolHolder>> make_holder(std::string ip, std::string image);
  // A started holder for a new instance: from the pool, else made now (ensure refills the
  // pool once it is done).
  boost::asio::awaitable<Result<PoolHolder>> take_holder(std::string fallback_image);
  boost::asio::awaitable<void> refill_pool();
  void schedule_refill();
  // Once per runtime: labelled holders the records name stay theirs; other running ones join
  // the pool (up to its size), the rest are removed.
  boost::asio::awaitable<Status> adopt_holders();
  // The record's holder exists and runs (started, or made again at the record's address when
  // gone); updates record.holder's id. Answers the holder's status.
  boost::asio::awaitable<Result<ContainerStatus>> ensure_holder(InstanceRecord& record, std::string image);
  // Under the instance's lock: a running instance whose holder died or restarted gets its
  // holder started and its container restarted into the holder's new network namespace.
  boost::asio::awaitable<Status> repair_holder(std::string instance_id);
  boost::asio::awaitable<Status> set_instance_hostname(int pid, std::string hostname);
  boost::asio::awaitable<Status> write_hostname_file(std::string id, std::string hostname);

  // ---- published ports (instance_runtime_ports.cpp) ----
  boost::asio::awaitable<Status> apply_firewall();
  // Whether `desired` differs from `recorded` in its ports (or their sources) only, both
  // running: what instance.ensure applies to the table before it asks the engine anything.
  static bool only_ports_differ(const InstanceSpec& recorded, const InstanceSpec& desired);
  // Saves `spec` (and the generation) into the instance's record and applies the table; on a
  // failure the record is as before. No engine call.
  boost::asio::awaitable<Status> apply_ports_change(Instance& slot, InstanceSpec spec, std::int64_t generation);
  std::vector<firewall::PublishedPort> published_ports() const;
  Status check_ports_free(const InstanceSpec& spec) const;

  // ---- the container's spec, drift and rebuilds, system disks (instance_runtime_rebuild.cpp) ----
  // The instance's container as it is created: on the bridge at its address, or joining its
  // network holder. (The system disk's limit as detect_system_disk_limit found it.)
  // Its GPUs (builtin injection: the nodes and driver files; none with GPUs: an error) and
  // lxcfs's files where lxcfs is mounted.
  Result<ContainerSpec> instance_container_spec(const InstanceRecord& record, const InstanceSpec& spec,
                                                std::vector<Mount> mounts) const;
  // The GPUs a container is made with: the spec's, but none for simulated GPUs unless the
  // host injects them (builtin on a fake driver tree).
  std::vector<std::string> effective_gpus(const InstanceSpec& spec) const;
  // What the container was made with that the desired spec no longer matches.
  std::vector<std::string> drift_of(const CreatedWith& created_with, const InstanceSpec& spec) const;
  // Saves the (stopped) container's filesystem as the instance's next system image: a
  // commit, or with `flatten` a one-layer export/import.
  boost::asio::awaitable<Result<std::string>> commit_system_disk(const InstanceRecord& record, bool flatten);
  // The layers of the image the container was created from (0 when unknown).
  boost::asio::awaitable<int> system_image_layers(const InstanceRecord& record, const InstanceSpec& spec);
  // The engine's storage driver, asked once (what system disks the engine can limit).
  boost::asio::awaitable<void> detect_system_disk_limit();
  // Overlay2's system disks (a no-op where the engine holds the size or none is asked): made
  // right after a create, mounted again before a start (a reboot unmounted it), removed with
  // the container. remove_container is every removal of an instance's container.
  boost::asio::awaitable<Status> make_layer_filesystem(std::string container_id, std::int64_t gib);
  // `make_gib` > 0: made now when it has none (a crash between the create and the make left
  // a container that never started).
  boost::asio::awaitable<Status> mount_layer_filesystem(std::string container_id, std::int64_t make_gib = 0);
  boost::asio::awaitable<Status> remove_container(std::string container_id);

  // ---- instance.ensure (instance_runtime_ensure.cpp) ----
  boost::asio::awaitable<Result<boost::json::object>> ensure(boost::json::object desired);
  // Its steps, in order, under the instance's lock; each registers in run.revert how to undo
  // what it changed.
  boost::asio::awaitable<Result<boost::json::object>> ensure_steps(EnsureRun& run);
  boost::asio::awaitable<Status> ensure_record(EnsureRun& run);        // 1-3: container, address, record
  boost::asio::awaitable<Status> ensure_init_inputs(EnsureRun& run);   // 4: the init's config, host key
  boost::asio::awaitable<Status> host_key_step(EnsureRun& run);       // 4 (or with the create)
  boost::asio::awaitable<Status> ensure_fits_spec(EnsureRun& run);     // 5: holder, resize or rebuild
  boost::asio::awaitable<Status> ensure_container(EnsureRun& run);     // 5: disks, create, start or stop
  boost::asio::awaitable<Result<boost::json::object>> ensure_observed(EnsureRun& run);  // 6-7
  boost::asio::awaitable<std::string> read_host_key(std::string container_id,
                                                    std::chrono::milliseconds wait);
  // Whether something accepts TCP connections at ip:port within `limit` (tried every 20 ms),
  // from inside the network namespace of `pid` (agent/instance_connection.h).
  boost::asio::awaitable<bool> wait_for_listener(int pid, std::string ip, int port, std::chrono::milliseconds limit);

  // ---- the other commands (instance_runtime_commands.cpp) ----
  boost::asio::awaitable<Result<boost::json::object>> remove(boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> status();
  boost::asio::awaitable<Result<boost::json::object>> stop_unknown(boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> exec(boost::json::object desired);
  // {"images": [REF...], "pull": [REF...]} → {"images": {REF: {"present", "id", "size_bytes",
  // "pulling", "pull_error"}}}; a missing image listed under "pull" is pulled in the background.
  boost::asio::awaitable<Result<boost::json::object>> inspect_images(boost::json::object desired);
  boost::asio::awaitable<void> pull_one(std::string ref);
  boost::asio::awaitable<Result<boost::json::object>> save_image(boost::json::object desired);

  boost::asio::strand<boost::asio::any_io_executor> strand_;
  std::string installation_id_;
  std::string network_name_;
  AgentStateStore store_;
  std::unique_ptr<RuntimeDriver> driver_;
  DiskRuntime* disks_ = nullptr;
  // Registry pulls of missing images, one at a time per reference, in the background.
  struct PullState {
    bool running = false;
    std::string error;  // the last attempt's, "" when none failed
    std::chrono::steady_clock::time_point last_try{};
  };
  std::map<std::string, PullState> pulls_;
  std::string init_script_path_;
  firewall::NftablesFirewall firewall_;
  Options options_;
  boost::asio::thread_pool firewall_thread_{1};
  // The state directory's files are written and fsynced here, never on the event loop.
  boost::asio::thread_pool state_thread_{1};
  // mkfs, mount and cp of system disk filesystems (blocking, tens of milliseconds each).
  boost::asio::thread_pool layer_fs_pool_{2};
  // Sockets for connections into instances are made here: the thread enters an instance's
  // network namespace for the socket() call and leaves it.
  boost::asio::thread_pool connection_thread_{1};

  bool started_ = false;
  bool start_held_ = false;  // hold_start(): nothing starts it lazily until start()
  std::shared_ptr<AsyncLock> start_lock_;    // loading the state directory
  std::shared_ptr<AsyncLock> network_lock_;  // choosing and creating the network
  std::optional<NetworkRecord> network_;
  bool network_checked_ = false;
  std::map<std::string, std::unique_ptr<Instance>> instances_;
  std::set<std::string> reserved_ips_;  // handed out, record not yet saved
  std::vector<std::string> load_problems_;
  std::unique_ptr<ImageSaver> images_;
  int saves_in_flight_ = 0;  // start() sweeps save leftovers only while none runs
  std::optional<SystemDiskLimit> system_disk_;  // nullopt until the engine answered
  std::map<std::string, int> sample_pids_;      // container id -> its init's pid, for the sampler
  std::string storage_driver_;
  std::deque<PoolHolder> pool_;
  bool refilling_ = false;
  bool holders_adopted_ = false;
  std::string holder_image_failed_;  // the refill's last error, logged once
  bool watching_ = false;
  std::function<void(ChangeReport)> change_sink_;
};

}  // namespace gpucloud::agent
