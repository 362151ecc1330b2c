#include "store/migrations.h"

#include <string>

namespace gpucloud::store {
namespace {

// Times are unix microseconds (INTEGER); money is INTEGER smallest units.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE users (
  id TEXT PRIMARY KEY,
  username TEXT NOT NULL UNIQUE,
  email TEXT,
  password_hash TEXT NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
  disabled INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL REFERENCES users(id),
  kind TEXT NOT NULL CHECK (kind IN ('session', 'api')),
  name TEXT,
  token_hash TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  revoked_at INTEGER
);
CREATE INDEX tokens_by_user ON tokens(user_id, created_at);
CREATE TABLE idempotency_keys (
  user_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
  status INTEGER,
  response TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (user_id, method, path, key)
);
CREATE INDEX idempotency_by_age ON idempotency_keys(created_at);
)sql"},
    // Hosts, their GPUs, and reservations. Double booking is impossible in the schema: a GPU
    // has at most one active reservation (partial unique index), and a host's used CPU and
    // memory can never pass its capacity (CHECK), both enforced on SQLite and PostgreSQL.
    {2, R"sql(
CREATE TABLE hosts (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  zone TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('ready', 'unreachable', 'draining')),
  simulated INTEGER NOT NULL,
  inventory_source TEXT NOT NULL,
  inventory_error TEXT NOT NULL DEFAULT '',
  engine TEXT NOT NULL,
  cpu INTEGER NOT NULL CHECK (cpu >= 0),
  memory_gib INTEGER NOT NULL CHECK (memory_gib >= 0),
  cpu_used INTEGER NOT NULL DEFAULT 0,
  memory_gib_used INTEGER NOT NULL DEFAULT 0,
  port_min INTEGER NOT NULL,
  port_max INTEGER NOT NULL,
  last_seen INTEGER,
  created_at INTEGER NOT NULL,
  CHECK (cpu_used >= 0 AND cpu_used <= cpu),
  CHECK (memory_gib_used >= 0 AND memory_gib_used <= memory_gib)
);
CREATE TABLE gpus (
  host_id TEXT NOT NULL REFERENCES hosts(id),
  idx INTEGER NOT NULL,
  uuid TEXT NOT NULL UNIQUE,
  model TEXT NOT NULL,
  reported_name TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL,
  pci_bus_id TEXT NOT NULL,
  health TEXT NOT NULL,
  simulated INTEGER NOT NULL,
  present INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (host_id, idx)
);
CREATE TABLE reservations (
  id TEXT PRIMARY KEY,
  host_id TEXT NOT NULL REFERENCES hosts(id),
  holder TEXT NOT NULL,
  cpu INTEGER NOT NULL CHECK (cpu >= 0),
  memory_gib INTEGER NOT NULL CHECK (memory_gib >= 0),
  gpu_model TEXT,
  active INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  released_at INTEGER
);
CREATE UNIQUE INDEX reservations_one_active_per_holder ON reservations(holder) WHERE active = 1;
CREATE TABLE gpu_reservations (
  reservation_id TEXT NOT NULL REFERENCES reservations(id),
  host_id TEXT NOT NULL,
  gpu_index INTEGER NOT NULL,
  active INTEGER NOT NULL DEFAULT 1,
  FOREIGN KEY (host_id, gpu_index) REFERENCES gpus(host_id, idx)
);
CREATE UNIQUE INDEX gpu_reservations_one_active ON gpu_reservations(host_id, gpu_index) WHERE active = 1;
CREATE TABLE gpu_prices (
  gpu_model TEXT PRIMARY KEY,
  price_per_gpu_hour INTEGER NOT NULL CHECK (price_per_gpu_hour >= 0),
  price_per_gpu_week INTEGER NOT NULL CHECK (price_per_gpu_week >= 0),
  price_per_gpu_month INTEGER NOT NULL CHECK (price_per_gpu_month >= 0)
);
CREATE TABLE other_prices (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL CHECK (value >= 0)
);
)sql"},
    // SSH keys, images, instances and their host ports. Names are unique per owner among
    // live resources (partial unique indexes); a host port belongs to one instance per host.
    {3, R"sql(
CREATE TABLE ssh_keys (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  public_key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE (owner, name)
);
CREATE TABLE images (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  engine_image TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  os TEXT NOT NULL DEFAULT '',
  python TEXT NOT NULL DEFAULT '',
  cuda TEXT NOT NULL DEFAULT '',
  frameworks TEXT NOT NULL DEFAULT '{}',
  size_bytes INTEGER NOT NULL DEFAULT 0,
  visibility TEXT NOT NULL CHECK (visibility IN ('public', 'private')),
  owner TEXT,
  state TEXT NOT NULL CHECK (state IN ('creating', 'available', 'error', 'deleted')),
  ssh INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX images_public_name ON images(name) WHERE visibility = 'public' AND state != 'deleted';
CREATE TABLE instances (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  state_reason TEXT NOT NULL DEFAULT '',
  zone TEXT NOT NULL,
  host_id TEXT REFERENCES hosts(id),
  gpu_model TEXT,
  gpu_count INTEGER NOT NULL,
  cpu INTEGER NOT NULL,
  memory_gib INTEGER NOT NULL,
  no_gpu INTEGER NOT NULL DEFAULT 0,
  system_disk_gib INTEGER NOT NULL,
  image_id TEXT NOT NULL REFERENCES images(id),
  ssh_keys TEXT NOT NULL DEFAULT '[]',
  password_hash TEXT,
  billing_mode TEXT NOT NULL DEFAULT 'hourly',
  auto_renew INTEGER NOT NULL DEFAULT 1,
  price_per_hour INTEGER NOT NULL DEFAULT 0,
  autostop TEXT,
  ipv4 TEXT,
  host_key TEXT,
  container_id TEXT,
  cpus_capped INTEGER NOT NULL DEFAULT 0,
  run_seconds INTEGER NOT NULL DEFAULT 0,
  charged INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  stopped_at INTEGER,
  released_at INTEGER
);
CREATE UNIQUE INDEX instances_live_name ON instances(owner, name) WHERE state != 'released';
CREATE INDEX instances_by_owner ON instances(owner, created_at);
CREATE TABLE instance_ports (
  instance_id TEXT NOT NULL REFERENCES instances(id),
  container_port INTEGER NOT NULL,
  protocol TEXT NOT NULL CHECK (protocol IN ('tcp', 'udp')),
  host_id TEXT NOT NULL REFERENCES hosts(id),
  host_port INTEGER NOT NULL,
  PRIMARY KEY (instance_id, container_port, protocol),
  UNIQUE (host_id, host_port, protocol)
);
)sql"},
    // Events: every lifecycle transition and notable happening, in commit order (seq).
    {4, R"sql(
CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  time INTEGER NOT NULL,
  type TEXT NOT NULL,
  resource TEXT NOT NULL,
  user_id TEXT,
  message TEXT NOT NULL,
  data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_user ON events(user_id, seq);
CREATE INDEX events_by_resource ON events(resource, seq);
)sql"},
    // Why an image is not available (e.g. the engine does not hold it), for the operator.
    {5, R"sql(
ALTER TABLE images ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
)sql"},
    // GPUs are identified by UUID, not by NVML index: an index renumbers when a GPU falls off
    // the bus or is replaced, a UUID does not. `idx` is only where the GPU was last seen;
    // reservations name the UUID, so they never point at another physical GPU.
    {6, R"sql(
CREATE TABLE gpus_by_uuid (
  uuid TEXT PRIMARY KEY,
  host_id TEXT NOT NULL REFERENCES hosts(id),
  idx INTEGER NOT NULL,
  model TEXT NOT NULL,
  reported_name TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL,
  pci_bus_id TEXT NOT NULL,
  health TEXT NOT NULL,
  simulated INTEGER NOT NULL,
  present INTEGER NOT NULL DEFAULT 1
);
INSERT INTO gpus_by_uuid (uuid, host_id, idx, model, reported_name, memory_bytes, pci_bus_id, health, simulated, present)
  SELECT uuid, host_id, idx, model, reported_name, memory_bytes, pci_bus_id, health, simulated, present FROM gpus;
CREATE TABLE gpu_reservations_by_uuid (
  reservation_id TEXT NOT NULL REFERENCES reservations(id),
  gpu_uuid TEXT NOT NULL REFERENCES gpus_by_uuid(uuid),
  active INTEGER NOT NULL DEFAULT 1
);
INSERT INTO gpu_reservations_by_uuid (reservation_id, gpu_uuid, active)
  SELECT gr.reservation_id, g.uuid, gr.active FROM gpu_reservations gr
  JOIN gpus g ON g.host_id = gr.host_id AND g.idx = gr.gpu_index;
DROP TABLE gpu_reservations;
DROP TABLE gpus;
ALTER TABLE gpus_by_uuid RENAME TO gpus;
ALTER TABLE gpu_reservations_by_uuid RENAME TO gpu_reservations;
CREATE INDEX gpus_by_host ON gpus(host_id, idx);
CREATE UNIQUE INDEX gpu_reservations_one_active ON gpu_reservations(gpu_uuid) WHERE active = 1;
CREATE INDEX gpu_reservations_by_reservation ON gpu_reservations(reservation_id);
)sql"},
    // Instances: the generation every write compares and sets, and that fences agent commands.
    {7, R"sql(
ALTER TABLE instances ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
)sql"},
    // Data disks, their snapshots, and per-user quota overrides. A disk lives on one host;
    // names are unique per owner among disks that are not deleted (the recycle bin's
    // `deleted` ones free their name, `destroyed` rows are kept for events' sake and hidden).
    // A mount path is taken once per instance. `generation` is every write's compare-and-set
    // key and the fence of the agent's disk commands; `applied_size_gib` is what the agent last
    // confirmed, so a grow it has not made yet is re-sent after a crash.
    {8, R"sql(
CREATE TABLE disks (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  zone TEXT NOT NULL,
  host_id TEXT NOT NULL REFERENCES hosts(id),
  size_gib INTEGER NOT NULL CHECK (size_gib > 0),
  applied_size_gib INTEGER NOT NULL DEFAULT 0,
  used_bytes INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL CHECK (state IN ('creating', 'available', 'attached', 'deleting', 'deleted', 'error', 'destroyed')),
  state_reason TEXT NOT NULL DEFAULT '',
  instance_id TEXT REFERENCES instances(id),
  mount_path TEXT,
  delete_on_release INTEGER NOT NULL DEFAULT 0,
  from_snapshot TEXT,
  generation INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  deleted_at INTEGER,
  purge_warned INTEGER NOT NULL DEFAULT 0,
  CHECK ((instance_id IS NULL) = (mount_path IS NULL))
);
CREATE UNIQUE INDEX disks_live_name ON disks(owner, name) WHERE state NOT IN ('deleted', 'deleting', 'destroyed');
CREATE UNIQUE INDEX disks_one_mount_path ON disks(instance_id, mount_path) WHERE instance_id IS NOT NULL;
CREATE INDEX disks_by_owner ON disks(owner, created_at, id);
CREATE INDEX disks_by_instance ON disks(instance_id);
CREATE TABLE snapshots (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  disk_id TEXT NOT NULL REFERENCES disks(id),
  host_id TEXT NOT NULL REFERENCES hosts(id),
  zone TEXT NOT NULL,
  size_gib INTEGER NOT NULL CHECK (size_gib > 0),
  used_bytes INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL CHECK (state IN ('creating', 'available', 'deleting', 'deleted', 'error', 'destroyed')),
  state_reason TEXT NOT NULL DEFAULT '',
  generation INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  deleted_at INTEGER,
  purge_warned INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX snapshots_live_name ON snapshots(owner, name) WHERE state NOT IN ('deleted', 'deleting', 'destroyed');
CREATE INDEX snapshots_by_owner ON snapshots(owner, created_at, id);
CREATE INDEX snapshots_by_disk ON snapshots(disk_id);
CREATE TABLE user_quotas (
  user_id TEXT PRIMARY KEY REFERENCES users(id),
  gpus INTEGER CHECK (gpus >= 0),
  instances INTEGER CHECK (instances >= 0),
  disk_gib INTEGER CHECK (disk_gib >= 0),
  images INTEGER CHECK (images >= 0)
);
)sql"},
    // Custom images (saved from an instance's system disk, billed by their own layers) and
    // their recycle bin; what each host's engine enforces of a system disk's size, and how
    // much of it an instance uses. A purged image keeps its row (instances still name it)
    // with purged_at set: it is gone from the API.
    {9, R"sql(
ALTER TABLE images ADD COLUMN own_size_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE images ADD COLUMN host_id TEXT;
ALTER TABLE images ADD COLUMN source_instance TEXT;
ALTER TABLE images ADD COLUMN base_image_id TEXT;
ALTER TABLE images ADD COLUMN deleted_at INTEGER;
ALTER TABLE images ADD COLUMN purge_warned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE images ADD COLUMN purged_at INTEGER;
ALTER TABLE images ADD COLUMN engine_removed INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX images_private_name ON images(owner, name) WHERE visibility = 'private' AND state != 'deleted';
CREATE INDEX images_by_owner ON images(owner, created_at);
ALTER TABLE hosts ADD COLUMN system_disk_enforced INTEGER;
ALTER TABLE hosts ADD COLUMN system_disk_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN system_disk_used_bytes INTEGER;
)sql"},
    // Security groups: inbound rules over an instance's declared ports. Every user has one
    // `default` group (tcp/22 from anywhere) whose id is derived from the user's, so it is
    // made once however many writers make it; existing users get theirs here and existing
    // instances use it. A deleted group keeps its row (released instances name it), hidden.
    {10, R"sql(
CREATE TABLE security_groups (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  rules TEXT NOT NULL DEFAULT '[]',
  is_default INTEGER NOT NULL DEFAULT 0,
  generation INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  deleted_at INTEGER
);
CREATE UNIQUE INDEX security_groups_live_name ON security_groups(owner, name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX security_groups_one_default ON security_groups(owner) WHERE is_default = 1;
CREATE INDEX security_groups_by_owner ON security_groups(owner, created_at, id);
INSERT INTO security_groups (id, owner, name, description, rules, is_default, generation, created_at, updated_at)
  SELECT 'sg-' || substr(id, 3), id, 'default', 'SSH from anywhere',
         '[{"protocol":"tcp","port_min":22,"port_max":22,"source":"0.0.0.0/0","description":"SSH"}]', 1, 1,
         created_at, created_at
  FROM users;
ALTER TABLE instances ADD COLUMN security_group TEXT REFERENCES security_groups(id);
UPDATE instances SET security_group = 'sg-' || substr(owner, 3);
CREATE INDEX instances_by_security_group ON instances(security_group);
)sql"},
    // Billing (spec "Billing"): one account per user today (the model allows a group account
    // its members draw on), an append-only ledger whose entries chain per account by `seq`
    // (unique, so two writers cannot both append after the same balance), and meters that
    // accrue exact integers: accrued = rate × seconds, charged = floor(accrued ÷ divisor).
    {11, R"sql(
CREATE TABLE billing_accounts (
  id TEXT PRIMARY KEY,
  kind TEXT NOT NULL CHECK (kind IN ('user', 'group')),
  name TEXT NOT NULL,
  balance INTEGER NOT NULL DEFAULT 0,
  entries INTEGER NOT NULL DEFAULT 0,
  arrears_since INTEGER,
  arrears_warned INTEGER NOT NULL DEFAULT 0,
  alert_threshold INTEGER,
  alert_webhook_url TEXT,
  alert_armed INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL
);
INSERT INTO billing_accounts (id, kind, name, created_at)
  SELECT 'ba-' || substr(id, 3), 'user', username, created_at FROM users;
ALTER TABLE users ADD COLUMN billing_account TEXT REFERENCES billing_accounts(id);
UPDATE users SET billing_account = 'ba-' || substr(id, 3);
CREATE TABLE ledger_entries (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES billing_accounts(id),
  seq INTEGER NOT NULL,
  user_id TEXT,
  time INTEGER NOT NULL,
  amount INTEGER NOT NULL,
  balance_after INTEGER NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('charge', 'credit', 'subscription', 'refund', 'adjustment')),
  resource TEXT,
  resource_kind TEXT,
  quantity INTEGER NOT NULL DEFAULT 0,
  description TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX ledger_entries_chain ON ledger_entries(account_id, seq);
CREATE INDEX ledger_entries_by_time ON ledger_entries(account_id, time);
CREATE TABLE meters (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES billing_accounts(id),
  user_id TEXT NOT NULL,
  resource TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('compute', 'compute_no_gpu', 'system_disk', 'data_disk', 'snapshot', 'image')),
  divisor INTEGER NOT NULL CHECK (divisor > 0),
  rate INTEGER NOT NULL DEFAULT 0 CHECK (rate >= 0),
  gib INTEGER NOT NULL DEFAULT 0,
  open_since INTEGER,
  accrued INTEGER NOT NULL DEFAULT 0,
  quantity INTEGER NOT NULL DEFAULT 0,
  charged INTEGER NOT NULL DEFAULT 0,
  settled_quantity INTEGER NOT NULL DEFAULT 0,
  settled_until INTEGER NOT NULL,
  generation INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  UNIQUE (resource, kind)
);
CREATE INDEX meters_open ON meters(account_id) WHERE open_since IS NOT NULL;
CREATE TABLE webhook_outbox (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  url TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  delivered_at INTEGER,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX webhook_outbox_pending ON webhook_outbox(created_at) WHERE delivered_at IS NULL;
)sql"},
    // A spend limit per instance (spec "Cost control"): compute charges at which it stops,
    // with an event at 80 % (spend_warned remembers it was sent).
    {12, R"sql(
ALTER TABLE instances ADD COLUMN spend_limit INTEGER CHECK (spend_limit IS NULL OR spend_limit > 0);
ALTER TABLE instances ADD COLUMN spend_warned INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Subscriptions (spec "Billing"): the paid term ends at expires_at (set at the first
    // `running`); renewal_tried_for is the expires_at whose renewal was already tried.
    {13, R"sql(
ALTER TABLE instances ADD COLUMN expires_at INTEGER;
ALTER TABLE instances ADD COLUMN renewal_tried_for INTEGER;
)sql"},
    // Monitoring and cost control: idle autostop (threshold, window, the running judgment),
    // a one-off stop, release after N days stopped, the warnings sent (bits), and the
    // earliest time any of them is due (what the schedule timer waits for).
    // instance_samples: raw samples (resolution 0) and 1-minute averages (resolution 60) of
    // an instance; gpu -1 is the instance's CPU (util = percent of one core) and memory.
    {14, R"sql(
ALTER TABLE instances ADD COLUMN autostop_idle_minutes INTEGER;
ALTER TABLE instances ADD COLUMN autostop_below_percent INTEGER;
ALTER TABLE instances ADD COLUMN idle_since INTEGER;
ALTER TABLE instances ADD COLUMN busy_reason TEXT;
ALTER TABLE instances ADD COLUMN stop_at INTEGER;
ALTER TABLE instances ADD COLUMN release_after_stopped_days INTEGER;
ALTER TABLE instances ADD COLUMN schedule_warned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN schedule_at INTEGER;
CREATE INDEX instances_schedule_at ON instances (schedule_at);
CREATE TABLE instance_samples (
  instance_id TEXT NOT NULL,
  resolution INTEGER NOT NULL,
  t INTEGER NOT NULL,
  gpu INTEGER NOT NULL,
  util DOUBLE PRECISION,
  memory_bytes BIGINT,
  PRIMARY KEY (instance_id, resolution, t, gpu)
);
CREATE INDEX instance_samples_age ON instance_samples (resolution, t);
)sql"},
    // When a GPU stopped being usable (missing or unhealthy); NULL while it is. Set and
    // cleared by compare-and-set, so each loss and each recovery is recorded (with its events)
    // once, whichever report or process sees it first.
    {15, R"sql(
ALTER TABLE gpus ADD COLUMN lost_at INTEGER;
)sql"},
    // An hourly settlement writes one entry per account, user and meter kind; when it covers
    // several resources, their lines (resource, quantity, amount) travel in the entry, so a
    // pass over 100,000 instances appends thousands of rows, not hundreds of thousands.
    // Empty for an entry about one resource (or none).
    // The meters are rebuilt clustered by account: a settlement span (a range of accounts)
    // then rewrites a contiguous run of pages instead of touching every page of the table
    // once per span, and the open-meter index covers open_since so the spans are cut from the
    // index alone.
    {16, R"sql(
ALTER TABLE ledger_entries ADD COLUMN lines TEXT NOT NULL DEFAULT '';
CREATE TABLE meters_by_account (
  id TEXT NOT NULL UNIQUE,
  account_id TEXT NOT NULL REFERENCES billing_accounts(id),
  user_id TEXT NOT NULL,
  resource TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('compute', 'compute_no_gpu', 'system_disk', 'data_disk', 'snapshot', 'image')),
  divisor INTEGER NOT NULL CHECK (divisor > 0),
  rate INTEGER NOT NULL DEFAULT 0 CHECK (rate >= 0),
  gib INTEGER NOT NULL DEFAULT 0,
  open_since INTEGER,
  accrued INTEGER NOT NULL DEFAULT 0,
  quantity INTEGER NOT NULL DEFAULT 0,
  charged INTEGER NOT NULL DEFAULT 0,
  settled_quantity INTEGER NOT NULL DEFAULT 0,
  settled_until INTEGER NOT NULL,
  generation INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, id),
  UNIQUE (resource, kind)
) WITHOUT ROWID;
INSERT INTO meters_by_account (id, account_id, user_id, resource, kind, divisor, rate, gib, open_since, accrued,
                               quantity, charged, settled_quantity, settled_until, generation, created_at)
  SELECT id, account_id, user_id, resource, kind, divisor, rate, gib, open_since, accrued, quantity, charged,
         settled_quantity, settled_until, generation, created_at FROM meters;
DROP TABLE meters;
ALTER TABLE meters_by_account RENAME TO meters;
CREATE INDEX meters_open ON meters(account_id, open_since) WHERE open_since IS NOT NULL;
)sql"},
    // Each host's disk pool (issue 23): the capacity its agent measured (NULL until reported:
    // not checked), what is provisioned in it (data disks, snapshots and system disks by their
    // sizes, kept by conditional updates in the transaction that makes or destroys each), the
    // filesystem's real size and use as last reported, and the highest use warning given
    // (0, 80, 95) so each crossing warns once; an instance's system disk counts (disk_pool_bytes)
    // when its host's engine enforces its size. The recycle bin's clock starts at a resource's
    // first deletion (first_deleted_at), whatever restores follow. Snapshots get a quota.
    {17, R"sql(
ALTER TABLE hosts ADD COLUMN disk_pool_capacity_bytes INTEGER;
ALTER TABLE hosts ADD COLUMN disk_pool_provisioned_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN disk_pool_size_bytes INTEGER;
ALTER TABLE hosts ADD COLUMN disk_pool_used_bytes INTEGER;
ALTER TABLE hosts ADD COLUMN disk_pool_reserve_bytes INTEGER;
ALTER TABLE hosts ADD COLUMN disk_pool_warned_percent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN disk_pool_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE instances SET disk_pool_bytes = 1073741824 * system_disk_gib WHERE state != 'released' AND host_id IN
  (SELECT id FROM hosts WHERE system_disk_enforced = 1);
UPDATE hosts SET disk_pool_provisioned_bytes =
  1073741824 * COALESCE((SELECT SUM(d.size_gib) FROM disks d WHERE d.host_id = hosts.id AND d.state != 'destroyed'), 0) +
  1073741824 * COALESCE((SELECT SUM(s.size_gib) FROM snapshots s WHERE s.host_id = hosts.id AND s.state != 'destroyed'), 0) +
  COALESCE((SELECT SUM(i.disk_pool_bytes) FROM instances i WHERE i.host_id = hosts.id AND i.state != 'released'), 0);
ALTER TABLE disks ADD COLUMN first_deleted_at INTEGER;
ALTER TABLE snapshots ADD COLUMN first_deleted_at INTEGER;
ALTER TABLE images ADD COLUMN first_deleted_at INTEGER;
UPDATE disks SET first_deleted_at = deleted_at WHERE deleted_at IS NOT NULL;
UPDATE snapshots SET first_deleted_at = deleted_at WHERE deleted_at IS NOT NULL;
UPDATE images SET first_deleted_at = deleted_at WHERE deleted_at IS NOT NULL;
ALTER TABLE user_quotas ADD COLUMN snapshots INTEGER CHECK (snapshots >= 0);
)sql"},
    {18, R"sql(
-- Money repairs (issue 23): the projected zero a "balance runs out" warning named, so a
-- changed projection is warned about again; a subscription's anchor (its first running), so
-- monthly terms keep the anchor's day (31 Jan -> 28 Feb -> 31 Mar).
ALTER TABLE billing_accounts ADD COLUMN stop_warned_zero INTEGER;
ALTER TABLE instances ADD COLUMN term_anchor INTEGER;
)sql"},
    {19, R"sql(
-- The web console (issue 24): whether an image has Jupyter Notebook (its instances' init
-- starts it; the API proxies it).
ALTER TABLE images ADD COLUMN jupyter INTEGER NOT NULL DEFAULT 0;
)sql"},
    {20, R"sql(
-- "Notify me" on a sold-out GPU model (issue 24): a user's watch on a zone's model, fired
-- once (an event and the alert webhook) when a GPU of it frees up.
CREATE TABLE market_watches (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL REFERENCES users(id),
  zone TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  fired_at INTEGER
);
CREATE INDEX market_watches_open ON market_watches(zone, gpu_model) WHERE fired_at IS NULL;
CREATE UNIQUE INDEX market_watches_one_open ON market_watches(user_id, zone, gpu_model) WHERE fired_at IS NULL;
)sql"},
    // How each host gives instances their GPUs (toolkit | builtin | none, and why) and whether
    // lxcfs serves their /proc, as its agent reported at registration (issue 25).
    {21, R"sql(
ALTER TABLE hosts ADD COLUMN gpu_injection TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN gpu_injection_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN driver_version TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN lxcfs_available INTEGER;
ALTER TABLE hosts ADD COLUMN lxcfs_reason TEXT NOT NULL DEFAULT '';
)sql"},
    // Remote agents (issue 26, src/pki/): single-use join tokens (only the id and a SHA-256
    // of the secret; never the token) and the certificates the agents' CA signed for hosts.
    // Times in unix microseconds like every other table.
    {22, R"sql(
CREATE TABLE join_tokens (
  id TEXT PRIMARY KEY,
  host_name TEXT NOT NULL,
  secret_hash TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  used_at INTEGER
);
CREATE TABLE host_certificates (
  serial TEXT PRIMARY KEY,
  host_name TEXT NOT NULL,
  not_after INTEGER NOT NULL,
  issued_at INTEGER NOT NULL,
  revoked_at INTEGER
);
CREATE INDEX host_certificates_by_host ON host_certificates(host_name, issued_at);
)sql"},
    // Remote agents (issue 26, src/agentlink/): commands for a remote host, durable until its
    // agent reports their outcome (the body sealed: it may carry secrets). Unix microseconds.
    {23, R"sql(
CREATE TABLE agent_commands (
  id TEXT PRIMARY KEY,
  host_name TEXT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  completed_at INTEGER,
  outcome TEXT
);
CREATE INDEX agent_commands_pending ON agent_commands(host_name, created_at) WHERE completed_at IS NULL;
)sql"},
    // Host states and agents (issue 26): the operator's word on a host (active | draining |
    // removed) kept apart from liveness (`state`: ready | unreachable, from heartbeats; a
    // 'draining' there moves over), and who serves it: agent kind (in_process | remote),
    // version, a remote agent's address, since when connected, its last heartbeat. Starts look
    // up a holder's earlier reservations by holder.
    {24, R"sql(
ALTER TABLE hosts ADD COLUMN admin_state TEXT NOT NULL DEFAULT 'active'
  CHECK (admin_state IN ('active', 'draining', 'removed'));
UPDATE hosts SET admin_state = 'draining', state = 'ready' WHERE state = 'draining';
ALTER TABLE hosts ADD COLUMN agent_kind TEXT CHECK (agent_kind IN ('in_process', 'remote'));
ALTER TABLE hosts ADD COLUMN agent_version TEXT;
ALTER TABLE hosts ADD COLUMN agent_address TEXT;
ALTER TABLE hosts ADD COLUMN connected_at INTEGER;
ALTER TABLE hosts ADD COLUMN last_heartbeat_at INTEGER;
CREATE INDEX reservations_by_holder ON reservations(holder, created_at);
)sql"},
    // Remote agents (issue 26): a compute meter whose host is unreachable is held: no
    // settlement charges it past held_since until its agent reports the container's own times.
    {25, R"sql(
ALTER TABLE meters ADD COLUMN held_since INTEGER;
)sql"},
    // A host's own public address (issue 26: a remote GPU host's instances are reached at it).
    {26, R"sql(
ALTER TABLE hosts ADD COLUMN public_address TEXT NOT NULL DEFAULT '';
)sql"},
    // Failed logins where several gpucloudd share the store (issue 27): the throttle holds
    // across them. Key: username and client address; `at` unix microseconds.
    {27, R"sql(
CREATE TABLE login_failures (key TEXT NOT NULL, at INTEGER NOT NULL);
CREATE INDEX login_failures_by_key ON login_failures(key, at);
)sql"},
    // Replicas on PostgreSQL (issue 27): who leads the background work. The lease row is
    // renewed every second by its holder; the fence row changes only when the lease changes
    // hands, so a leader's commits check it (FOR SHARE) without colliding with its renewals.
    // A command's whole outcome, sealed: the replica that asked reads it when another replica
    // (the one holding the host's link, or the leader for in-process hosts) ran it.
    {28, R"sql(
CREATE TABLE leader_lease (
  name TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  locked INTEGER NOT NULL DEFAULT 0,
  expires_at INTEGER NOT NULL
);
CREATE TABLE leader_fence (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
ALTER TABLE agent_commands ADD COLUMN result TEXT;
)sql"},
    // Replicas on PostgreSQL (issue 27): where each replica's API answers, so that one that
    // does not serve a host (an in-process host served by the leader, a remote host whose
    // agent dialled another replica) can hand a web terminal to the one that does; and which
    // replica holds each remote host's agent link.
    {29, R"sql(
CREATE TABLE replicas (holder TEXT PRIMARY KEY, api_url TEXT NOT NULL, seen_at INTEGER NOT NULL);
ALTER TABLE hosts ADD COLUMN agent_replica TEXT;
)sql"},
    // Settlement on PostgreSQL (issue 27): every pass rewrites each open meter's settled
    // columns (none of them indexed). With half of each page left free, PostgreSQL writes the
    // new row version on the same page (a HOT update) instead of a new page plus an entry in
    // each of the table's four indexes; the accounts' balances likewise. SQLite rewrites in place.
    {30, "", R"sql(
ALTER TABLE meters SET (fillfactor = 50);
ALTER TABLE billing_accounts SET (fillfactor = 70);
)sql"},
    // The leader's commit fence as one statement (PostgreSQL only, replicas): sent with the
    // COMMIT in one round trip instead of a SELECT before it. SQLSTATE GCF01 names a refusal.
    {31, "", R"sql(
CREATE OR REPLACE FUNCTION gpucloud_lease_fence(lease TEXT, expected BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $fence$
DECLARE
  current_epoch BIGINT;
BEGIN
  SELECT epoch INTO current_epoch FROM leader_fence WHERE name = lease FOR SHARE;
  IF current_epoch IS DISTINCT FROM expected THEN
    RAISE EXCEPTION USING ERRCODE = 'GCF01', MESSAGE = format(
      'this replica no longer leads the background work (its lease epoch %s, now %s)', expected,
      coalesce(current_epoch, 0));
  END IF;
END
$fence$;
)sql"},
};

}  // namespace

std::span<const Migration> schema_migrations() { return kMigrations; }

Result<int> current_schema_version(Database& db) {
  if (auto s = db.exec_script("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); !s)
    return fail(s.error());
  auto row = db.one("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!row) return fail(row.error());
  return static_cast<int>((*row)->int64(0));
}

Result<int> apply_migrations(Database& db, std::span<const Migration> migrations) {
  // On PostgreSQL several gpucloudd may start at once: one migrates while the others wait on
  // the lock, and each statement after it sees what the first committed (READ COMMITTED).
  const bool postgres = db.dialect() == Dialect::postgres;
  if (auto s = db.exec_script(postgres ? "BEGIN" : "BEGIN IMMEDIATE"); !s) return fail(s.error());
  if (postgres)
    if (auto s = db.exec_script("SELECT pg_advisory_xact_lock(7262737401)"); !s) {
      (void)db.exec_script("ROLLBACK");
      return fail(s.error());
    }
  auto rollback_with = [&](Error e) -> Result<int> {
    (void)db.exec_script("ROLLBACK");
    return fail(std::move(e));
  };
  auto version = current_schema_version(db);
  if (!version) return rollback_with(version.error());
  int latest = migrations.empty() ? 0 : migrations.back().version;
  if (*version > latest)
    return rollback_with(Error{ErrorCode::internal,
                               "store schema version " + std::to_string(*version) +
                                   " is newer than this gpucloudd knows (" + std::to_string(latest) + ")",
                               {}, 0});
  int reached = *version;
  for (const Migration& m : migrations) {
    if (m.version <= reached) continue;
    if (m.version != reached + 1)
      return rollback_with(Error{ErrorCode::internal, "migration " + std::to_string(m.version) + " out of order", {}, 0});
    if (auto s = m.sql.empty() ? ok() : db.exec_script(m.sql); !s)
      return rollback_with(Error{ErrorCode::internal,
                                 "migration " + std::to_string(m.version) + " failed: " + s.error().detail, {}, 0});
    if (postgres && !m.postgres_only.empty())
      if (auto s = db.exec_script(m.postgres_only); !s)
        return rollback_with(Error{ErrorCode::internal,
                                   "migration " + std::to_string(m.version) + " failed: " + s.error().detail, {}, 0});
    if (auto s = db.run("INSERT INTO schema_version (version) VALUES (?)", {m.version}); !s)
      return rollback_with(s.error());
    reached = m.version;
  }
  if (auto s = db.exec_script("COMMIT"); !s) return rollback_with(s.error());
  return reached;
}

}  // namespace gpucloud::store
