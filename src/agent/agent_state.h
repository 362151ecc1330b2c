#pragma once
// What the agent keeps on its own disk so that a restart re-attaches to the instances it runs
// instead of recreating (or killing) them: the installation's network and, per instance, the
// last desired spec (without secrets), the fixed address, the driver's re-attach blob and the
// SSH host key once known. JSON files under one directory, each replaced atomically (write a
// temporary file, fsync, rename, fsync the directory), so a crash at any moment leaves either
// the old or the new version, never half of one.
//
//   STATE_DIR/network.json
//   STATE_DIR/instances/<instance id>/instance.json
//   STATE_DIR/instances/<instance id>/config/{authorized_keys,password_hash}   (0600; the
//       init's read-only /.gpucloud/config inside the container)
//   STATE_DIR/removed/<instance id>.json   {"generation": N} of a removed instance
// (Network holders of the pool have no file: they are found again by their label.)
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "agent/disks/data_disk_mounts.h"
#include "core/result.h"

namespace gpucloud::agent {

struct NetworkRecord {
  std::string name;
  std::string subnet;   // "10.213.7.0/24"
  std::string gateway;  // "10.213.7.1"
  std::string bridge;   // its host interface ("br-0123456789ab"), guarded by the firewall; "" until known
};

struct PortSpec {
  int container_port = 0;
  int host_port = 0;
  std::string protocol = "tcp";
  std::vector<std::string> allowed;  // canonical CIDRs; empty: nobody but the host itself
};

// The desired state of one instance as instance.ensure carries it, less its secrets
// (authorized_keys and password_hash live only in the config directory).
struct InstanceSpec {
  std::string instance_id;
  std::string name;   // hostname
  std::string host;
  std::string state = "running";  // "running" | "stopped"
  std::string image;
  double cpu = 1;
  std::int64_t memory_gib = 1;
  std::int64_t system_disk_gib = 0;  // 0: no limit asked; enforced only where the engine can
  std::vector<std::string> gpu_uuids;
  bool gpus_simulated = false;
  std::vector<PortSpec> ports;
  // Data disks bind-mounted into the container (mounted on the host by DiskRuntime first).
  std::vector<disks::DataDiskAttachment> data_disks;
};

// What the container was created with: a later desired spec that differs here cannot be
// applied to the existing container (the engine cannot change GPUs or image in place).
struct CreatedWith {
  std::string image;
  std::string hostname;
  double cpu = 0;
  std::int64_t memory_gib = 0;
  std::vector<std::string> gpu_uuids;  // the device request actually made (none if simulated)
  std::vector<disks::DataDiskAttachment> data_disks;  // the bind mounts it was made with
};

struct InstanceRecord {
  static constexpr int kVersion = 1;
  int version = kVersion;
  InstanceSpec desired;
  std::string ipv4;          // fixed, for the instance's life
  std::string driver_state;  // encode_driver_state(); empty until the container exists
  std::string container_id;  // convenience copy of the driver state's id
  std::string host_key;      // "ssh-ed25519 AAAA...", empty until seen
  CreatedWith created_with;
  // The system disk kept across container rebuilds (a new hostname, other GPUs or another
  // size need a new container): each rebuild commits the old container's filesystem as the
  // next of these images, oldest first; the container runs from the last. Removed at release.
  std::vector<std::string> system_images;
  // The highest command generation applied to this instance (0: none given yet). A command
  // carrying an older generation is refused (see check_generation), so a retried or
  // reordered command cannot undo a newer one.
  std::int64_t generation = 0;
  // The network holder whose network namespace the instance's container joins
  // (NetworkMode container:HOLDER; [agent] network_holders). Empty: the container is on the
  // bridge itself. Recorded before the instance's container is created, so a crash between
  // the two leaks neither the holder nor its address (ipv4 above is the holder's). The
  // holder's pid and start time when the container last joined it: another pid means the
  // holder restarted (or was replaced) and the container lost its network.
  struct Holder {
    std::string id;
    std::string name;
    int pid = 0;
    std::string started_at;
    bool operator==(const Holder&) const = default;
  };
  Holder holder;
};

// An instance command's "generation" (desired.generation: an integer >= 0; absent = 0, which
// is not fenced). invalid_argument when present and not such an integer.
Result<std::int64_t> command_generation(const boost::json::object& desired);
// conflict ("stale command") when `incoming` > 0 and older than `applied`; equal is a retry
// of the same generation and is let through.
Status check_generation(const std::string& instance_id, std::int64_t applied, std::int64_t incoming);

// Instance ids name files, containers and firewall comments: [A-Za-z0-9][A-Za-z0-9_.-]{0,63}.
bool is_valid_instance_id(std::string_view id);

// instance.ensure's desired JSON (the secrets are read separately by the caller). Checks
// types and ranges; invalid_argument naming the field.
Result<InstanceSpec> instance_spec_from_json(const boost::json::value& desired);
boost::json::object to_json(const InstanceSpec& spec);

boost::json::object to_json(const InstanceRecord& record);
Result<InstanceRecord> instance_record_from_json(const boost::json::value& value);

// Replaces `path` with `content` atomically, the new file having `mode`.
Status write_file_atomic(const std::string& path, std::string_view content, unsigned mode = 0600);

class AgentStateStore {
 public:
  explicit AgentStateStore(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string instance_dir(const std::string& instance_id) const;
  std::string config_dir(const std::string& instance_id) const;

  // Tests: called with the path on the thread that writes it, before each write or removal.
  void set_write_observer(std::function<void(const std::string&)> observer) { observer_ = std::move(observer); }

  // Creates the directory tree (0700).
  Status prepare();

  Result<std::optional<NetworkRecord>> load_network() const;
  Status save_network(const NetworkRecord& network);

  // The generation an instance was removed at (STATE_DIR/removed/<id>.json), so that a
  // stale ensure arriving after the remove cannot bring it back. 0 when none is recorded.
  Result<std::int64_t> load_removed_generation(const std::string& instance_id) const;
  Status save_removed_generation(const std::string& instance_id, std::int64_t generation);

  // Every readable record; unreadable ones are named in `problems` and skipped (their
  // containers then show up as unknown, for the operator to look at).
  Result<std::vector<InstanceRecord>> load_instances(std::vector<std::string>* problems) const;
  Status save_instance(const InstanceRecord& record);
  // The instance's whole directory (record and config); gone already = ok.
  Status remove_instance(const std::string& instance_id);

  // Writes authorized_keys (always; empty when none) and password_hash (removed when none),
  // both 0600, each only if its content differs. Answers whether anything changed.
  Result<bool> write_config(const std::string& instance_id, const std::string& authorized_keys,
                            const std::optional<std::string>& password_hash);

 private:
  void observe(const std::string& path) const {
    if (observer_) observer_(path);
  }

  std::string dir_;
  std::function<void(const std::string&)> observer_;
};

}  // namespace gpucloud::agent
