#pragma once
// The daemon's TOML configuration (docs: shared/spec/config.md). Parsing refuses unknown keys
// and bad values with a message naming the full key path, so a typo stops the daemon at
// start instead of silently falling back to a default.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gpucloud::config {

struct Zone {
  std::string name;
  std::string region = "local";
  std::string description;
};

struct SimulatedGpu {
  std::string model;
  std::int64_t memory_gib = 0;
  int count = 0;
};

// The [[hosts]] disk_driver names (agent/disks/disk_driver_registry.h makes them; a unit
// test keeps the two lists equal).
inline constexpr std::string_view kDiskDrivers[] = {"loop-ext4", "btrfs"};

struct Host {
  std::string name;
  std::string zone;  // may be omitted in the file when there is exactly one zone
  std::string engine = "unix:///var/run/docker.sock";
  int cpu = 0;
  std::int64_t memory_gib = 0;
  int port_min = 30000;  // config key port_range = "LOW-HIGH", both inclusive
  int port_max = 30999;
  std::vector<SimulatedGpu> simulated_gpus;  // empty => GPUs come from NVML
  // Where the host keeps data disks: "loop-ext4" (ext4 image files) or "btrfs" (subvolumes
  // of one pool, instant snapshots). See agent/disks/disk_driver_registry.h.
  std::string disk_driver = "loop-ext4";
  // Added key: the address users SSH to for this host's instances (a remote GPU host's own
  // name or IP); "" = the control plane's public_host.
  std::string public_address;
  bool uses_nvml() const { return simulated_gpus.empty(); }
  std::string port_range() const;  // "30000-30999"
};

struct Image {
  std::string name, engine_image, description, os, python, cuda;
  std::map<std::string, std::string> frameworks;
  bool ssh = true;  // added key: false for an image without sshd (reached by the web terminal)
  bool jupyter = false;  // added key: true for an image with Jupyter Notebook (started by the init)
};

struct Offer {
  std::string gpu_model;
  std::vector<std::string> nvml_names;
  std::int64_t gpu_memory_gib = 0;  // 0 = take from inventory
  int cpu_per_gpu = 0;
  std::int64_t memory_gib_per_gpu = 0;
  std::int64_t price_per_gpu_hour = 0, price_per_gpu_week = 0, price_per_gpu_month = 0;
};

struct NoGpuOffer {
  int cpu = 1;
  std::int64_t memory_gib = 2;
  std::int64_t price_per_hour = 10;
};

struct StoragePrices {  // config decimals per GiB-hour, held as integer millionths of the smallest unit
  std::int64_t system_disk_free_gib = 30;
  std::int64_t system_disk_per_gib_hour_micros = 20000;  // added key system_disk_per_gib_hour, default = data disk price
  std::int64_t data_disk_per_gib_hour_micros = 20000;
  std::int64_t snapshot_per_gib_hour_micros = 10000;
  std::int64_t image_per_gib_hour_micros = 10000;
};

struct Quotas {
  std::int64_t gpus = 8, instances = 10, disk_gib = 2000, images = 10;
  std::int64_t snapshots = 50;  // snapshots a user may hold (the recycle bin's count)
};

struct Billing {  // added section [billing]
  std::int64_t signup_credit = 0;           // credited to each new user's account (smallest unit)
  std::chrono::seconds settle_interval{3600};  // meters settle at least this often (ledger entries)
};

struct Monitoring {  // added section [monitoring]
  std::chrono::seconds sample_interval{5};              // the agent samples instances this often
  std::chrono::seconds raw_retention{86400};            // raw samples are kept this long
  std::chrono::seconds downsampled_retention{7 * 86400};  // 1-minute averages this long
};

struct Alerts {
  bool allow_private_webhook_targets = false;
};

struct AgentSettings {  // added section [agent]
  // Instances join a pre-started "network holder" container's network namespace
  // (NetworkMode container:HOLDER) instead of being attached to the bridge themselves: the
  // engine skips its network setup on the create's path. false: today's path, unchanged.
  bool network_holders = true;
  int network_pool_size = 2;  // holders kept started and unassigned, ready for creates (0-64)
  // A host's disk pool may hold provisioned sizes (data disks, snapshots, enforced system
  // disks) up to (its filesystem's size - the reserve) x this (0.1-100; 1.0: never more than
  // the disk has).
  double disk_overcommit = 1.0;
  // How an instance gets its GPUs (agent/gpu/injection_plan.h): "auto" (toolkit where the
  // engine has the nvidia runtime, else builtin where a driver is found, else none),
  // "toolkit" (the engine's device request), "builtin" (gpucloud passes the device nodes and
  // mounts the driver's files), "none" (no GPU instance can start on the host).
  std::string gpu_injection = "auto";
  // Where the driver's user-space files are (a directory holding libnvidia-ml.so.<ver>, or
  // one with bin/ and lib64/ or lib/); empty: NVML's loaded path, the linker cache, then
  // /usr/local/nvidia.
  std::string nvidia_driver_root;
  std::string dev_root = "/dev";  // where the device nodes are (tests point it at a fake /dev)
  // lxcfs's mount point: its proc/ and sys/ files are bound over an instance's /proc/meminfo,
  // cpuinfo, stat, uptime, diskstats, swaps, loadavg and /sys/devices/system/cpu/online when
  // it is mounted there. Empty: none.
  std::string lxcfs_dir;
  // Where the engine's storage driver cannot hold a system disk's size (overlay2 without XFS
  // project quotas): each container's layer directory becomes a sized ext4 filesystem of its
  // own (agent/runtime/layer_filesystems.h). false: such system disks are not limited.
  bool system_disk_filesystems = true;
};

// [agents]: the TLS listener remote agents dial (issue 26; docs/contract-notes.md "Remote
// agents: join tokens and certificates"). Off while `listen` is empty.
struct AgentsConfig {
  std::string listen;  // "HOST:PORT"; "" = no listener (all-in-one only)
  // The https URL agents dial and join commands name; "" in the file = made by apply_defaults
  // from listen (its host, or this machine's host name for 0.0.0.0 / [::]).
  std::string url;
  // The listener certificate's SANs; empty in the file = [host name, "localhost", "127.0.0.1"]
  // plus the listen address when it is not 0.0.0.0 / [::] (apply_defaults).
  std::vector<std::string> server_names;
  int certificate_days = 30;  // host and listener certificates; renewed at two-thirds
  std::chrono::seconds join_token_ttl{3600};
  std::chrono::seconds heartbeat_interval{10};
  std::chrono::seconds unreachable_after{30};
  std::chrono::seconds reconnect_grace{60};
  // The key that seals journaled agent commands; "" = DATA_DIR/agent-link/journal.key. Replicas
  // on one PostgreSQL store must share it (one file they all read), or one replica cannot open
  // the commands another journaled.
  std::string journal_key_file;
  bool enabled() const { return !listen.empty(); }
  std::chrono::seconds certificate_validity() const { return std::chrono::hours(24) * certificate_days; }
  // When a certificate issued now should be renewed: two-thirds of its life.
  std::chrono::seconds renew_after() const { return certificate_validity() * 2 / 3; }
};

// The URL of an [agents] listen address: https://HOST:PORT, HOST being `hostname` for a
// wildcard address (0.0.0.0, [::]). "" when listen is not HOST:PORT.
std::string default_agents_url(std::string_view listen, std::string_view hostname);
// This machine's host name (gethostname), "localhost" when it has none.
std::string machine_hostname();

struct Policy {
  int recycle_days = 7;  // deleted disks, snapshots, images stay restorable this long (0: final)
  int release_stopped_after_days = 15, arrears_release_instances_after_days = 15,
      arrears_delete_disks_after_days = 30;
};

struct MetricsAccess {  // added section [metrics]
  // A bearer token for Prometheus: with it (or an operator's token) /metrics adds the
  // per-instance series, labelled by user and name. "" = only an operator's token does.
  std::string token;
};

struct Server {  // added section [server]
  std::int64_t max_body_bytes = 1 << 20;
  // Bodies sent through an instance's web-service proxies (/jupyter/, /proxy/PORT/) by a
  // caller with a valid token or session: Notebook uploads a file up to 25 MiB in one
  // base64 PUT (about 34 MiB), larger ones in 8 MiB pieces.
  std::int64_t proxy_max_body_bytes = 64 << 20;
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds idle_timeout{120};
  std::chrono::seconds header_timeout{10};  // a request's headers must be complete within it
  int max_connections = 10000;              // past it, new connections are closed at once
  int worker_threads = 4;  // bounded pool for blocking work (SQLite reads, Argon2)
  int login_failures_allowed = 5;
  std::chrono::seconds login_window{900};
  bool metrics_require_auth = false;
  // The web console's files (index.html, assets/). "" = found beside the binary (the build
  // tree's web/dist, an installed <prefix>/share/gpucloud/console) or in the source tree.
  std::string console_dir;
};

struct Config {
  std::string listen = "127.0.0.1:8080";
  std::string data_dir = "/var/lib/gpucloud";
  std::string currency = "CNY";
  bool registration_open = true;  // config key registration = "open" | "closed"
  std::string public_host = "127.0.0.1";
  std::chrono::seconds session_ttl{86400};
  std::string billing_timezone = "UTC";
  std::string store_url;  // config key [store] url; "" = sqlite://DATA_DIR/gpucloud.db
  // [store] password_file: PostgreSQL's password, read at start (GPUCLOUD_STORE_PASSWORD, when
  // set, wins). Never in the URL, whose text may reach a log.
  std::string store_password_file;
  std::vector<Zone> zones;
  std::vector<Host> hosts;
  std::vector<Image> images;
  std::vector<Offer> offers;
  NoGpuOffer no_gpu_offer;
  StoragePrices storage_prices;
  Quotas quotas;
  Billing billing;
  Monitoring monitoring;
  Alerts alerts;
  AgentSettings agent;
  AgentsConfig agents;
  Policy policy;
  Server server;
  MetricsAccess metrics;

  // The SQLite file path after DATA_DIR substitution; error-free helper. "" for PostgreSQL.
  std::string store_path() const;
  bool store_is_postgres() const;
  const Zone* find_zone(std::string_view name) const;
  const Offer* find_offer(std::string_view gpu_model) const;
  // The offer a real GPU belongs to, by the name NVML reports (nvml_names, then gpu_model).
  const Offer* offer_for_nvml_name(std::string_view nvml_name) const;
};

Result<Config> parse_config(std::string_view toml_text, std::string_view source_name = "config");
Result<Config> load_config_file(const std::string& path);  // file missing/unreadable -> invalid_argument naming the path
Status validate(const Config&);  // cross-field checks, also called by parse_config; call again after flag overrides

// Fills what the file may leave out: the default zone "zone-a" when there is none, and a
// host's zone when there is exactly one. parse_config calls it before validate.
void apply_defaults(Config&);

// "90s", "30m", "24h", "7d", or a sum like "1h30m"; nullopt when malformed or overflowing.
std::optional<std::chrono::seconds> parse_duration(std::string_view text);
// A non-negative decimal as exact integer millionths (0.02 -> 20000); nullopt when negative,
// not finite, overflowing, or with more than 6 decimals.
std::optional<std::int64_t> decimal_to_micros(double value);
std::optional<std::int64_t> decimal_to_micros(std::string_view text);

// [a-z][a-z0-9-]{0,62}: zone names (and the resource names of the API).
bool is_valid_name(std::string_view name);
// [[hosts]] names (and the hosts that join): letters, digits, '-', '.', '_', starting with a
// letter or digit, at most 63.
bool is_valid_host_name(std::string_view name);
// A name a TLS certificate can carry as a SAN: an IPv4/IPv6 literal, or a DNS name (letters,
// digits, '-', '.'; labels of 1-63 not starting or ending with '-'; at most 253).
bool is_valid_certificate_name(std::string_view name);

}  // namespace gpucloud::config
