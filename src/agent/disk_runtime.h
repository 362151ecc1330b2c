#pragma once
// The agent's data disks: serves the disk commands on a LocalAgent through each host's disk
// driver (agent/disks/, [[hosts]] disk_driver: "loop-ext4" by default, or "btrfs"), and
// mounts an instance's disks for InstanceRuntime before its container is made or started.
//
//   disk.ensure      desired {"disk_id", "size_gib", "from_snapshot"?: "snap-...", "generation"?}
//                    creates the disk when absent (with the snapshot's content when given;
//                    size_gib >= the snapshot's), grows it when size_gib is bigger, never
//                    shrinks (invalid_argument "size_gib: disks only grow ...").
//                    observed {"disk_id", "size_gib", "used_bytes", "driver", "created"}
//   disk.remove      desired {"disk_id", "generation"?}: destroys it; absent is success;
//                    conflict while it is attached to a running instance (or a container
//                    still holds it). observed {"disk_id", "existed"}
//   disk.snapshot    desired {"disk_id", "snapshot_id"}: a consistent snapshot (a mounted
//                    loop-ext4 disk is frozen while copied); the same snapshot_id again is
//                    success, for another disk conflict; no such disk not_found. loop-ext4
//                    answers before the copy is written back (usable at once; a kill -9 or a
//                    dockerd restart keeps it); the runtime then runs the driver's
//                    make_snapshot_durable on its pool, holding the snapshot's lock, so a
//                    snapshot.remove or a disk made from it waits for that fsync. A failure
//                    is logged and done again by the driver's next start.
//                    observed {"snapshot_id", "disk_id", "size_gib", "used_bytes"}
//   snapshot.remove  desired {"snapshot_id"}; absent is success. observed {"snapshot_id", "existed"}
//   disk.status      desired {}: {"driver", "enforces_size", "disks": [{"disk_id", "size_gib",
//                    "used_bytes", "mounted"}], "snapshots": [{"snapshot_id", "disk_id",
//                    "size_gib", "used_bytes"}], "torn_snapshots": [ids set aside after a host
//                    crash before they were durable]} of the command's host's driver
//
// Command.host_name picks the host, hence the driver (empty: the only host). Hosts of an
// all-in-one agent that name the same driver share its store (ids are global, so nothing
// clashes; disk.status then lists every disk of that driver). Errors are values:
// invalid_argument naming the field, not_found, conflict, unavailable (no root, a tool
// missing), internal with the tool's stderr. Every command is idempotent.
//
// Fencing: disk.remove with a generation leaves a tombstone (AGENT_DIR/disks/removed/ID.json);
// a disk.ensure whose generation is not newer is refused with conflict ("stale command"), so
// a delayed retry cannot bring a removed disk back. No generation (or 0): not fenced.
//
// Instances: InstanceRuntime calls attach() before creating or starting a container (each
// disk mounted on the host; the answer is what to bind-mount where) and detach() once the
// container is stopped or removed (loop disks are unmounted, never deleted). A disk attached
// to one instance is refused to another (conflict) until detached. After an agent restart
// adopt() is told the disks of the instances whose containers run; every other mount of ours
// is removed.
//
// Threads: the state lives on a strand of the given executor; every driver call (they block:
// mkfs, mount, cp, btrfs) runs on this runtime's own thread pool. Calls for one disk or
// snapshot run one at a time, in order; different disks proceed concurrently.
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "agent/agent_protocol.h"
#include "agent/disks/data_disk_mounts.h"
#include "agent/disks/disk_driver.h"
#include "agent/runtime/runtime_driver.h"
#include "core/result.h"
#include "core/units.h"

namespace gpucloud::agent {

class LocalAgent;

class DiskRuntime {
 public:
  struct Options {
    int threads = 2;  // concurrent driver calls (a snapshot copy may take seconds)
    std::int64_t btrfs_pool_initial_bytes = 16 * kGiB;
  };
  struct HostDriver {
    std::string host_name;
    std::string driver;  // a disk_driver_registry name
  };

  // `agent_dir`: DATA_DIR/agent. An unknown driver name is reported by start().
  DiskRuntime(boost::asio::any_io_executor loop, std::string agent_dir, std::vector<HostDriver> hosts);
  DiskRuntime(boost::asio::any_io_executor loop, std::string agent_dir, std::vector<HostDriver> hosts, Options options);
  ~DiskRuntime();
  DiskRuntime(const DiskRuntime&) = delete;
  DiskRuntime& operator=(const DiskRuntime&) = delete;

  // Starts every host's driver (directories, the btrfs pool, a crash's leftovers). A driver
  // that cannot start answers its commands with the reason, and is tried again by each.
  boost::asio::awaitable<Status> start();
  void register_handlers(LocalAgent& agent);
  boost::asio::awaitable<Result<CommandOutcome>> handle(Command command);

  // For InstanceRuntime. `host`: the instance's host ("" = the only one).
  boost::asio::awaitable<Result<std::vector<Mount>>> attach(std::string host, std::string instance_id,
                                                            std::vector<disks::DataDiskAttachment> data_disks);
  boost::asio::awaitable<void> detach(std::string instance_id);
  // Records that a running instance holds these disks (nothing is mounted): after a restart
  // that could not see its container.
  boost::asio::awaitable<void> claim(std::string host, std::string instance_id,
                                     std::vector<disks::DataDiskAttachment> data_disks);
  struct RunningInstance {
    std::string host;
    std::vector<disks::DataDiskAttachment> data_disks;
  };
  boost::asio::awaitable<void> adopt(std::map<std::string, RunningInstance> running);

  // The instance a disk is attached to ("" when none).
  std::string attached_to(const std::string& disk_id) const;

 private:
  class AsyncLock;
  struct Driver {
    std::string name;
    std::unique_ptr<disks::DiskDriver> impl;  // null: unknown name
    bool started = false;
    Error start_error;
  };
  struct Claim {
    std::string instance_id;
    Driver* driver = nullptr;
  };

  boost::asio::awaitable<Result<CommandOutcome>> dispatch(Command command);
  boost::asio::awaitable<Result<std::vector<Mount>>> attach_on_strand(std::string host, std::string instance_id,
                                                                      std::vector<disks::DataDiskAttachment> data_disks);
  boost::asio::awaitable<void> detach_on_strand(std::string instance_id);
  boost::asio::awaitable<void> claim_on_strand(std::string host, std::string instance_id,
                                              std::vector<disks::DataDiskAttachment> data_disks);
  boost::asio::awaitable<void> adopt_on_strand(std::map<std::string, RunningInstance> running);
  boost::asio::awaitable<Status> start_on_strand();
  boost::asio::awaitable<Status> start_driver(Driver& driver);
  Result<Driver*> driver_for(const std::string& host_name);

  boost::asio::awaitable<Result<boost::json::object>> ensure_disk(Driver& driver, boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> remove_disk(Driver& driver, boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> snapshot_disk(Driver& driver, boost::json::object desired);
  // After a snapshot answered before it was durable: the driver's make_snapshot_durable, on
  // the pool, holding the snapshot's lock (taken over from snapshot_disk, released here).
  boost::asio::awaitable<void> make_durable(Driver* driver, std::string snapshot_id);
  boost::asio::awaitable<Result<boost::json::object>> remove_snapshot(Driver& driver, boost::json::object desired);
  boost::asio::awaitable<Result<boost::json::object>> status(Driver& driver);

  AsyncLock& lock_for(const std::string& key);
  std::string tombstone_path(const std::string& disk_id) const;

  boost::asio::strand<boost::asio::any_io_executor> strand_;
  std::string agent_dir_;
  Options options_;
  std::vector<HostDriver> hosts_;
  std::map<std::string, std::unique_ptr<Driver>> drivers_;  // by driver name
  std::map<std::string, Claim> claims_;                     // by disk id
  std::map<std::string, std::shared_ptr<AsyncLock>> locks_;  // "disk:ID", "snap:ID"
  std::shared_ptr<AsyncLock> start_lock_;
  // false once the destructor runs: a background step resuming later touches nothing.
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  boost::asio::thread_pool pool_;
};

}  // namespace gpucloud::agent
