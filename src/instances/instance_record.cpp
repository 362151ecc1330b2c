#include "instances/instance_record.h"

#include <algorithm>
#include <set>

#include <boost/json.hpp>

#include "billing/ledger.h"
#include "billing/resource_meters.h"
#include "events/events.h"
#include "instances/schedules.h"
#include "market/hosts.h"
#include "store/meta.h"

namespace gpucloud::instances {
namespace json = boost::json;

namespace {
std::string keys_text(const std::vector<std::string>& keys) {
  json::array a;
  for (const auto& k : keys) a.push_back(json::value(k));
  return json::serialize(a);
}
std::vector<std::string> keys_from(const std::string& text) {
  std::vector<std::string> out;
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (!ec && v.is_array())
    for (const auto& k : v.as_array())
      if (k.is_string()) out.emplace_back(k.as_string());
  return out;
}
std::optional<std::int64_t> micros(const std::optional<SysTime>& t) {
  return t ? std::optional(to_unix_micros(*t)) : std::nullopt;
}
std::optional<SysTime> time_of(const std::optional<std::int64_t>& v) {
  return v ? std::optional(from_unix_micros(*v)) : std::nullopt;
}

constexpr const char* kInstanceColumns =
    "SELECT i.id, i.owner, i.name, i.state, i.state_reason, i.zone, i.host_id, h.name, i.gpu_model, i.gpu_count, i.cpu, "
    "i.memory_gib, i.no_gpu, i.system_disk_gib, i.image_id, i.ssh_keys, i.password_hash, i.billing_mode, i.auto_renew, "
    "i.price_per_hour, i.ipv4, i.host_key, i.container_id, i.cpus_capped, i.run_seconds, "
    "(SELECT COALESCE(SUM(m.charged), 0) FROM meters m WHERE m.resource = i.id AND m.kind IN ('compute', 'compute_no_gpu')), "
    "i.created_at, "
    "i.started_at, i.stopped_at, i.released_at, im.name, i.generation, i.system_disk_used_bytes, i.security_group, sg.rules, "
    "i.spend_limit, i.spend_warned, i.expires_at, i.renewal_tried_for, i.autostop_idle_minutes, "
    "i.autostop_below_percent, i.idle_since, i.busy_reason, i.stop_at, i.release_after_stopped_days, i.schedule_warned, "
    "i.schedule_at, i.term_anchor, COALESCE(im.jupyter, 0), COALESCE(h.state, ''), COALESCE(h.public_address, '') "
    "FROM instances i LEFT JOIN hosts h ON h.id = i.host_id LEFT JOIN images im ON im.id = i.image_id "
    "LEFT JOIN security_groups sg ON sg.id = i.security_group ";

Result<Instance> instance_from(const store::Row& r) {
  Instance i;
  i.id = r.text(0);
  i.owner = r.text(1);
  i.name = r.text(2);
  i.state = parse_instance_state(r.text(3)).value_or(InstanceState::error);
  i.state_reason = r.text(4);
  i.zone = r.text(5);
  i.host_id = r.opt_text(6);
  i.host_name = r.opt_text(7);
  i.gpu_model = r.opt_text(8);
  i.gpu_count = static_cast<int>(r.int64(9));
  i.cpu = static_cast<int>(r.int64(10));
  i.memory_gib = r.int64(11);
  i.no_gpu = r.int64(12) != 0;
  i.system_disk_gib = r.int64(13);
  i.image_id = r.text(14);
  i.ssh_keys = keys_from(r.text(15));
  i.password_hash = r.opt_text(16);
  i.billing_mode = r.text(17);
  i.auto_renew = r.int64(18) != 0;
  i.price_per_hour = r.int64(19);
  i.ipv4 = r.opt_text(20);
  i.host_key = r.opt_text(21);
  i.container_id = r.opt_text(22);
  i.cpus_capped = r.int64(23) != 0;
  i.run_seconds = r.int64(24);
  i.charged = r.int64(25);
  i.created_at = from_unix_micros(r.int64(26));
  i.started_at = time_of(r.opt_int64(27));
  i.stopped_at = time_of(r.opt_int64(28));
  i.released_at = time_of(r.opt_int64(29));
  i.image_name = r.opt_text(30).value_or("");
  i.generation = r.int64(31);
  i.system_disk_used_bytes = r.opt_int64(32);
  i.security_group_id = r.opt_text(33);
  if (auto rules = r.opt_text(34)) {
    auto parsed = security_groups::rules_from_text(*rules);
    if (!parsed) return fail(parsed.error());
    i.security_rules = std::move(*parsed);
  }
  i.spend_limit = r.opt_int64(35);
  i.spend_warned = r.int64(36) != 0;
  i.expires_at = time_of(r.opt_int64(37));
  i.renewal_tried_for = time_of(r.opt_int64(38));
  if (auto minutes = r.opt_int64(39))
    i.autostop = Instance::Autostop{static_cast<int>(*minutes), static_cast<int>(r.opt_int64(40).value_or(5))};
  i.idle_since = time_of(r.opt_int64(41));
  i.busy_reason = r.opt_text(42);
  i.stop_at = time_of(r.opt_int64(43));
  if (auto days = r.opt_int64(44)) i.release_after_stopped_days = static_cast<int>(*days);
  i.schedule_warned = static_cast<int>(r.int64(45));
  i.schedule_at = time_of(r.opt_int64(46));
  i.term_anchor = time_of(r.opt_int64(47));
  i.jupyter = r.int64(48) != 0;
  i.host_unreachable = i.state != InstanceState::released && r.text(49) == "unreachable";
  i.host_public_address = r.text(50);
  return i;
}

Status attach_details(store::Database& db, Instance& i) {
  auto ports = db.all("SELECT container_port, protocol, host_port FROM instance_ports WHERE instance_id = ? "
                      "ORDER BY container_port",
                      {i.id});
  if (!ports) return fail(ports.error());
  for (const auto& p : *ports) i.ports.push_back(PortBinding{static_cast<int>(p.int64(0)), p.text(1), static_cast<int>(p.int64(2))});
  auto gpus = db.all("SELECT g.uuid, g.simulated, g.present, g.health, g.idx, g.model, g.lost_at FROM reservations r "
                     "JOIN gpu_reservations gr ON gr.reservation_id = r.id "
                     "AND gr.active = 1 JOIN gpus g ON g.uuid = gr.gpu_uuid "
                     "WHERE r.holder = ? AND r.active = 1 ORDER BY g.idx, g.uuid",
                     {i.id});
  if (!gpus) return fail(gpus.error());
  for (const auto& g : *gpus) {
    i.gpu_uuids.push_back(g.text(0));
    i.gpus_simulated = i.gpus_simulated || g.int64(1) != 0;
    i.gpu_health.push_back(Instance::GpuHealth{g.int64(2) != 0 ? g.text(3) : std::string(market::kGpuMissing),
                                               static_cast<int>(g.int64(4)), g.text(5), time_of(g.opt_int64(6))});
  }
  auto disks = db.all("SELECT id, mount_path FROM disks WHERE instance_id = ? AND state != 'destroyed' "
                      "ORDER BY mount_path, id",
                      {i.id});
  if (!disks) return fail(disks.error());
  for (const auto& d : *disks) i.data_disks.push_back(Instance::AttachedDisk{d.text(0), d.text(1)});
  return ok();
}

Result<std::vector<Instance>> load_many(store::Database& db, const std::string& sql, std::initializer_list<store::Arg> args) {
  auto rows = db.all(sql, args);
  if (!rows) return fail(rows.error());
  std::vector<Instance> out;
  for (const auto& r : *rows) {
    auto i = instance_from(r);
    if (!i) return fail(i.error());
    out.push_back(std::move(*i));
    if (auto s = attach_details(db, out.back()); !s) return fail(s.error());
  }
  return out;
}
std::optional<std::int64_t> autostop_minutes(const Instance& i) {
  return i.autostop ? std::optional<std::int64_t>(i.autostop->idle_minutes) : std::nullopt;
}
std::optional<std::int64_t> autostop_percent(const Instance& i) {
  return i.autostop ? std::optional<std::int64_t>(i.autostop->below_percent) : std::nullopt;
}
std::optional<std::int64_t> release_days(const Instance& i) {
  return i.release_after_stopped_days ? std::optional<std::int64_t>(*i.release_after_stopped_days) : std::nullopt;
}

// The platform's default release period, as gpucloudd wrote it to meta at start.
int default_release_days(store::Database& db) {
  auto v = store::get_meta(db, kReleaseDaysMetaKey);
  if (!v || !*v) return 15;
  try {
    return std::stoi(**v);
  } catch (const std::exception&) {
    return 15;
  }
}

// The instance's earliest deadline, planned from what is about to be written; the schedule
// timer learns of it after the commit.
std::optional<SysTime> plan_schedule(store::Database& db, const Instance& i) {
  auto at = next_deadline(i, default_release_days(db));
  if (at) db.note_schedule(*at);
  return at;
}
}  // namespace

Status insert_instance(store::Database& db, const Instance& i) {
  auto s = db.run(
      "INSERT INTO instances (id, owner, name, state, state_reason, zone, host_id, gpu_model, gpu_count, cpu, memory_gib, "
      "no_gpu, system_disk_gib, image_id, ssh_keys, password_hash, billing_mode, auto_renew, price_per_hour, created_at, "
      "generation, security_group, spend_limit, autostop_idle_minutes, autostop_below_percent, stop_at, "
      "release_after_stopped_days, schedule_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      {i.id, i.owner, i.name, std::string(to_string(i.state)), i.state_reason, i.zone, i.host_id, i.gpu_model, i.gpu_count, i.cpu, i.memory_gib,
       i.no_gpu, i.system_disk_gib, i.image_id, keys_text(i.ssh_keys), i.password_hash, i.billing_mode, i.auto_renew,
       i.price_per_hour, to_unix_micros(i.created_at), i.generation, i.security_group_id, i.spend_limit,
       autostop_minutes(i), autostop_percent(i), micros(i.stop_at), release_days(i), micros(i.stop_at)});
  if (!s) return s;
  if (i.stop_at) db.note_schedule(*i.stop_at);
  return ok();
}

Result<std::optional<Instance>> load_instance(store::Database& db, const std::string& id) {
  auto many = load_many(db, std::string(kInstanceColumns) + "WHERE i.id = ?", {id});
  if (!many) return fail(many.error());
  if (many->empty()) return std::optional<Instance>{};
  return std::optional<Instance>{std::move(many->front())};
}

Result<Instance> find_owned_instance(store::Database& db, const std::string& owner, const std::string& id_or_name) {
  // A live instance by id or name first; then a released one, so that a client polling a
  // release sees `released` (its name may since have been taken by a live instance).
  auto many = load_many(db, std::string(kInstanceColumns) + "WHERE i.owner = ? AND (i.id = ? OR i.name = ?) "
                        "ORDER BY i.state = 'released', i.created_at DESC LIMIT 1",
                        {owner, id_or_name, id_or_name});
  if (!many) return fail(many.error());
  if (many->empty()) return fail(ErrorCode::not_found, "instance " + id_or_name + " not found");
  return std::move(many->front());
}

Result<std::vector<Instance>> list_instances(store::Database& db, const std::optional<std::string>& owner,
                                             const std::optional<InstanceState>& state_filter, bool with_released) {
  std::optional<std::string> state;
  if (state_filter) state = std::string(to_string(*state_filter));
  std::string sql = std::string(kInstanceColumns) + "WHERE (? IS NULL OR i.owner = ?) AND ";
  if (state) sql += "i.state = ? ";
  else if (with_released) sql += "(? IS NULL) ";
  else sql += "(? IS NULL AND i.state != 'released') ";
  sql += "ORDER BY i.created_at DESC, i.id DESC";
  return load_many(db, sql, {owner, owner, state});
}

Result<std::vector<Instance>> live_instances(store::Database& db) {
  return load_many(db, std::string(kInstanceColumns) + "WHERE i.state != 'released' ORDER BY i.created_at", {});
}

Result<std::optional<InstanceState>> instance_state_of(store::Database& db, const std::string& id) {
  auto row = db.one("SELECT state FROM instances WHERE id = ?", {id});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<InstanceState>{};
  return std::optional<InstanceState>{parse_instance_state((*row)->text(0)).value_or(InstanceState::error)};
}

namespace {
Status expect_one_row(store::Database& db, const std::string& id) {
  if (db.changes() == 1) return ok();
  auto now = instance_state_of(db, id);
  if (!now) return fail(now.error());
  if (!*now) return fail(ErrorCode::not_found, "instance " + id + " not found");
  return fail(ErrorCode::conflict, "the instance changed meanwhile; it is " + std::string(to_string(**now)));
}
}  // namespace

Status write_instance_state(store::Database& db, const std::string& id, InstanceState state, std::int64_t generation,
                            const Instance& i) {
  if (auto s = db.run(
          "UPDATE instances SET name = ?, state = ?, state_reason = ?, host_id = ?, gpu_model = ?, gpu_count = ?, cpu = ?, "
          "memory_gib = ?, no_gpu = ?, ssh_keys = ?, auto_renew = ?, price_per_hour = ?, ipv4 = ?, host_key = ?, "
          "container_id = ?, cpus_capped = ?, run_seconds = ?, charged = ?, started_at = ?, stopped_at = ?, released_at = ?, "
          "generation = ?, security_group = ?, spend_limit = ?, spend_warned = ?, billing_mode = ?, expires_at = ?, "
          "renewal_tried_for = ?, autostop_idle_minutes = ?, autostop_below_percent = ?, idle_since = ?, busy_reason = ?, "
          "stop_at = ?, release_after_stopped_days = ?, schedule_warned = ?, schedule_at = ?, term_anchor = ? "
          "WHERE id = ? AND state = ? AND generation = ?",
          {i.name, std::string(to_string(i.state)), i.state_reason, i.host_id, i.gpu_model, i.gpu_count, i.cpu, i.memory_gib,
           i.no_gpu, keys_text(i.ssh_keys), i.auto_renew, i.price_per_hour, i.ipv4, i.host_key, i.container_id, i.cpus_capped,
           i.run_seconds, i.charged, micros(i.started_at), micros(i.stopped_at), micros(i.released_at), i.generation,
           i.security_group_id, i.spend_limit, i.spend_warned, i.billing_mode, micros(i.expires_at),
           micros(i.renewal_tried_for), autostop_minutes(i), autostop_percent(i), micros(i.idle_since), i.busy_reason,
           micros(i.stop_at), release_days(i), i.schedule_warned, micros(plan_schedule(db, i)), micros(i.term_anchor), id,
           std::string(to_string(state)), generation});
      !s)
    return s;
  return expect_one_row(db, id);
}

Status write_cost_control(store::Database& db, const Instance& i, InstanceState state) {
  if (auto s = db.run("UPDATE instances SET idle_since = ?, busy_reason = ?, stop_at = ?, schedule_warned = ?, "
                      "schedule_at = ? WHERE id = ? AND state = ?",
                      {micros(i.idle_since), i.busy_reason, micros(i.stop_at), i.schedule_warned,
                       micros(plan_schedule(db, i)), i.id, std::string(to_string(state))});
      !s)
    return s;
  return expect_one_row(db, i.id);
}

Result<std::vector<std::string>> instances_due(store::Database& db, SysTime now, int limit) {
  auto rows = db.all("SELECT id FROM instances WHERE schedule_at IS NOT NULL AND schedule_at <= ? "
                     "ORDER BY schedule_at, id LIMIT ?",
                     {to_unix_micros(now), limit});
  if (!rows) return fail(rows.error());
  std::vector<std::string> out;
  for (const auto& r : *rows) out.push_back(r.text(0));
  return out;
}

Result<std::optional<SysTime>> earliest_schedule(store::Database& db) {
  auto row = db.one("SELECT MIN(schedule_at) FROM instances WHERE schedule_at IS NOT NULL");
  if (!row) return fail(row.error());
  if (!*row) return std::optional<SysTime>{};
  return time_of((*row)->opt_int64(0));
}

Result<std::vector<RunningOnHost>> running_on_host(store::Database& db, const std::string& host_name) {
  auto rows = db.all("SELECT i.id, i.autostop_idle_minutes FROM instances i JOIN hosts h ON h.id = i.host_id "
                     "WHERE h.name = ? AND i.state = 'running'",
                     {host_name});
  if (!rows) return fail(rows.error());
  std::vector<RunningOnHost> out;
  for (const auto& r : *rows) out.push_back({r.text(0), !r.is_null(1)});
  return out;
}

Status mark_spend_warned(store::Database& db, const std::string& id) {
  return db.run("UPDATE instances SET spend_warned = 1 WHERE id = ?", {id});
}

Status update_desired(store::Database& db, const Instance& loaded, Instance& next) {
  next.state = loaded.state;
  next.generation = loaded.generation + 1;
  return write_instance_state(db, loaded.id, loaded.state, loaded.generation, next);
}

Status record_state_event(store::Database& db, const Instance& i, SysTime now) {
  const std::string state(to_string(i.state));
  std::string message = "instance " + i.name + " is " + state + (i.state_reason.empty() ? "" : ": " + i.state_reason);
  json::object data{{"state", state}, {"name", i.name}};
  if (!i.state_reason.empty()) data["reason"] = i.state_reason;
  std::string type = i.state == InstanceState::creating ? "instance.created" : "instance." + state;
  return events::record(db, now, type, i.id, i.owner, message, std::move(data));
}

Result<InstanceUsage> instance_usage(store::Database& db, const std::string& owner, const std::optional<std::string>& except_id) {
  auto row = db.one(
      "SELECT COUNT(*), COALESCE(SUM(CASE WHEN no_gpu = 0 AND state IN ('creating','starting','running','stopping') "
      "THEN gpu_count ELSE 0 END), 0) FROM instances WHERE owner = ? AND state != 'released' AND (? IS NULL OR id != ?)",
      {owner, except_id, except_id});
  if (!row) return fail(row.error());
  return InstanceUsage{(*row)->int64(0), (*row)->int64(1)};
}

Result<bool> live_name_taken(store::Database& db, const std::string& owner, const std::string& name) {
  auto row = db.one("SELECT 1 FROM instances WHERE owner = ? AND name = ? AND state != 'released'", {owner, name});
  if (!row) return fail(row.error());
  return row->has_value();
}

Result<std::vector<PortBinding>> allocate_ports(store::Database& db, const std::string& instance_id,
                                                const std::string& host_id, const std::vector<PortSpec>& ports) {
  auto range = db.one("SELECT port_min, port_max FROM hosts WHERE id = ?", {host_id});
  if (!range || !*range) return fail(ErrorCode::internal, "host " + host_id + " has no port range");
  auto used_rows = db.all("SELECT host_port FROM instance_ports WHERE host_id = ?", {host_id});
  if (!used_rows) return fail(used_rows.error());
  std::set<int> used;
  for (const auto& r : *used_rows) used.insert(static_cast<int>(r.int64(0)));
  std::vector<PortBinding> out;
  int next = static_cast<int>((*range)->int64(0));
  int last = static_cast<int>((*range)->int64(1));
  for (const auto& p : ports) {
    while (next <= last && used.count(next)) ++next;
    if (next > last) return fail(ErrorCode::no_capacity, "no free host port left on the host for port " + std::to_string(p.port));
    if (auto s = db.run("INSERT INTO instance_ports (instance_id, container_port, protocol, host_id, host_port) "
                        "VALUES (?, ?, ?, ?, ?)",
                        {instance_id, p.port, p.protocol, host_id, next});
        !s)
      return fail(s.error());
    out.push_back(PortBinding{p.port, p.protocol, next});
    used.insert(next);
  }
  return out;
}

Status free_ports(store::Database& db, const std::string& instance_id) {
  return db.run("DELETE FROM instance_ports WHERE instance_id = ?", {instance_id});
}

Status free_port(store::Database& db, const std::string& instance_id, const PortSpec& port) {
  return db.run("DELETE FROM instance_ports WHERE instance_id = ? AND container_port = ? AND protocol = ?",
                {instance_id, port.port, port.protocol});
}

std::vector<std::string> port_sources(const Instance& i, const PortBinding& p) {
  auto protocol = security_groups::parse_protocol(p.protocol).value_or(security_groups::Protocol::tcp);
  return security_groups::sources_for(i.security_rules, protocol, p.container_port);
}

std::vector<std::string> port_sources_v4(const Instance& i, const PortBinding& p) {
  std::vector<std::string> out;
  for (auto& s : port_sources(i, p))
    if (!security_groups::is_ipv6_cidr(s)) out.push_back(std::move(s));
  return out;
}

namespace {
// "GPU GPU-x (RTX 4090, last seen as GPU 1) is missing from host node-1": one GPU's loss, as
// the instance's `degraded.reason` and its gpu_lost event say it.
std::string gpu_loss_sentence(const std::string& uuid, const std::string& model, int index, const std::string& health,
                              const std::string& host_name) {
  std::string gpu = "GPU " + uuid + " (" + model + ", last seen as GPU " + std::to_string(index) + ")";
  if (health == market::kGpuMissing) return gpu + " is missing from host " + host_name;
  return gpu + " on host " + host_name + " is unhealthy: " + health;
}

// null while every GPU it holds is usable; else which are not, why, and since when.
json::value degraded_json(const Instance& i) {
  if (!i.degraded()) return nullptr;
  std::string reason;
  json::array uuids;
  std::optional<SysTime> since;
  for (std::size_t n = 0; n < i.gpu_health.size() && n < i.gpu_uuids.size(); ++n) {
    const auto& g = i.gpu_health[n];
    if (g.health == "ok") continue;
    reason += (reason.empty() ? "" : "; ") + gpu_loss_sentence(i.gpu_uuids[n], g.model, g.index, g.health,
                                                                i.host_name.value_or(""));
    uuids.push_back(json::value(i.gpu_uuids[n]));
    if (g.lost_at && (!since || *g.lost_at < *since)) since = g.lost_at;
  }
  return json::object{{"reason", reason},
                      {"gpus", std::move(uuids)},
                      {"since", since ? json::value(format_rfc3339(*since)) : json::value(nullptr)}};
}
}  // namespace

namespace {
// No compute is charged while the platform is at fault: a run whose GPU is lost stops
// accruing until every GPU it holds is usable again; the resumption writes a zero charge on
// the instance that says why, so usage and the ledger explain the gap.
Status follow_gpu_health_in_billing(store::Database& db, const Instance& holder, bool lost, const std::string& what,
                                    std::optional<SysTime> lost_since, SysTime now) {
  if (lost) {
    if (auto s = billing::close_run(db, holder.id, now, now); !s) return s;
    return events::record(db, now, "instance.billing_paused", holder.id, holder.owner,
                          "instance " + holder.name + " is not charged while " + what,
                          json::object{{"name", holder.name}});
  }
  if (holder.degraded()) return ok();  // another of its GPUs is still lost
  if (auto s = billing::open_run(db, holder.id, holder.owner, holder.no_gpu || holder.gpu_count == 0,
                                 holder.price_per_hour, now);
      !s)
    return s;
  const std::int64_t seconds =
      lost_since ? std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(now - *lost_since).count()) : 0;
  auto account = billing::account_of_user(db, holder.owner);
  if (!account) return fail(account.error());
  billing::NewEntry note{billing::EntryKind::charge, 0, holder.owner, holder.id, std::string("compute"), 0,
                         "not charged: " + std::to_string(seconds) + " s of " + holder.name +
                             " while its GPU was lost (the platform's fault)"};
  if (auto e = billing::post_entry(db, account->id, note, now); !e) return fail(e.error());
  return events::record(db, now, "instance.billing_resumed", holder.id, holder.owner,
                        "instance " + holder.name + " is charged again: its GPUs are usable (" + std::to_string(seconds) +
                            " s not charged)",
                        json::object{{"name", holder.name}, {"not_charged_seconds", seconds}});
}
}  // namespace

Status record_gpu_changes(store::Database& db, const std::string& host_id, const std::string& host_name,
                          const std::vector<market::GpuChange>& changes, SysTime now) {
  for (const auto& c : changes) {
    if (c.kind == market::GpuChange::Kind::added) {
      // A GPU new to the host (a replaced card): the operator's record; nobody holds it yet.
      json::object data{{"name", host_name}, {"uuid", c.uuid}, {"model", c.model}, {"index", c.index}, {"health", c.health}};
      if (auto s = events::record(db, now, "host.gpu_added", host_id, std::nullopt,
                                  "GPU " + c.uuid + " (" + c.model + ", GPU " + std::to_string(c.index) + ") appeared on host " +
                                      host_name + (c.health == "ok" ? "" : " (" + c.health + ")"),
                                  std::move(data));
          !s)
        return s;
      continue;
    }
    const bool lost = c.kind == market::GpuChange::Kind::lost;
    const std::string what = lost ? gpu_loss_sentence(c.uuid, c.model, c.index, c.health, host_name)
                                  : "GPU " + c.uuid + " (" + c.model + ", GPU " + std::to_string(c.index) + ") on host " +
                                        host_name + " is healthy again";
    // The holder, when it is a live instance: its owner hears of it too.
    std::optional<Instance> holder;
    if (c.holder) {
      auto found = load_instance(db, *c.holder);
      if (!found) return fail(found.error());
      if (*found && (*found)->state != InstanceState::released) holder = std::move(**found);
    }
    json::object data{{"name", host_name}, {"uuid", c.uuid},   {"model", c.model},
                      {"index", c.index},  {"health", c.health}, {"instance", holder ? json::value(holder->id) : json::value(nullptr)}};
    if (!lost) data["lost_at"] = c.lost_at ? json::value(format_rfc3339(*c.lost_at)) : json::value(nullptr);
    if (auto s = events::record(db, now, lost ? "host.gpu_lost" : "host.gpu_recovered", host_id, std::nullopt,
                                what + (holder ? " (held by instance " + holder->id + ")" : ""), data);
        !s)
      return s;
    if (!holder) continue;
    data.erase("instance");
    data["name"] = holder->name;
    data["host"] = host_name;
    // It keeps running on what it has (its processes may hold state on its other GPUs), and
    // its reservation stays on this physical GPU; stopping is the owner's call.
    std::string message = "instance " + holder->name + ": " + what;
    if (lost) {
      const bool runs = holder->state == InstanceState::running || holder->state == InstanceState::starting;
      if (runs) message += holder->billing_mode == "hourly" ? "; it keeps running, and is not charged until the GPU is back"
                                                            : "; it keeps running";
      message += "; a start takes other free GPUs while this one is gone";
    }
    if (auto s = events::record(db, now, lost ? "instance.gpu_lost" : "instance.gpu_recovered", holder->id, holder->owner,
                                message, std::move(data));
        !s)
      return s;
    if (holder->state == InstanceState::running && holder->billing_mode == "hourly")
      if (auto s = follow_gpu_health_in_billing(db, *holder, lost, what, c.lost_at, now); !s) return s;
  }
  return ok();
}

json::object instance_json(const Instance& i, const ViewContext& view, std::int64_t run_seconds_now) {
  // Users reach a host's published ports at its own address when it has one (a remote GPU
  // host), else at the control plane's public_host.
  const std::string& public_host = i.host_public_address.empty() ? view.public_host : i.host_public_address;
  auto opt = [](const std::optional<std::string>& v) { return v ? json::value(*v) : json::value(nullptr); };
  auto opt_time = [](const std::optional<SysTime>& t) { return t ? json::value(format_rfc3339(*t)) : json::value(nullptr); };
  json::array gpus;
  for (std::size_t n = 0; n < i.gpu_uuids.size(); ++n)
    gpus.push_back(json::object{{"index", static_cast<std::int64_t>(n)},
                                {"uuid", i.gpu_uuids[n]},
                                {"simulated", i.gpus_simulated},
                                {"health", n < i.gpu_health.size() ? i.gpu_health[n].health : std::string("ok")}});
  json::array ports;
  json::value ssh = nullptr;
  for (const auto& p : i.ports) {
    json::array sources;
    for (const auto& s : port_sources(i, p)) sources.push_back(json::value(s));
    // Reachable: ports are published on IPv4, so an IPv6 source alone opens nothing yet.
    const bool allowed = !port_sources_v4(i, p).empty();
    ports.push_back(json::object{{"port", p.container_port},
                                 {"protocol", p.protocol},
                                 {"host", public_host},
                                 {"host_port", p.host_port},
                                 {"allowed", allowed},
                                 {"sources", std::move(sources)}});
    if (p.container_port == 22 && p.protocol == "tcp")
      ssh = json::object{{"host", public_host},
                         {"port", p.host_port},
                         {"user", "root"},
                         {"command", "ssh -p " + std::to_string(p.host_port) + " root@" + public_host},
                         {"host_key", opt(i.host_key)}};
  }
  json::array keys;
  for (const auto& k : i.ssh_keys) keys.push_back(json::value(k));
  json::object o;
  o["id"] = i.id;
  o["name"] = i.name;
  o["owner"] = i.owner;
  o["state"] = std::string(to_string(i.state));
  o["state_reason"] = i.state_reason.empty() ? json::value(nullptr) : json::value(i.state_reason);
  o["zone"] = i.zone;
  o["host"] = opt(i.host_name);
  o["host_unreachable"] = i.host_unreachable;
  o["gpu_model"] = opt(i.gpu_model);
  o["gpu_count"] = i.gpu_count;
  o["gpus"] = std::move(gpus);
  o["simulated"] = i.gpus_simulated;
  o["degraded"] = degraded_json(i);
  o["cpu"] = i.cpu;
  o["cpu_capped_to_machine"] = i.cpus_capped;
  o["memory_gib"] = i.memory_gib;
  o["system_disk_gib"] = i.system_disk_gib;
  o["system_disk_used_bytes"] = i.system_disk_used_bytes ? json::value(*i.system_disk_used_bytes) : json::value(nullptr);
  o["image"] = i.image_id;
  o["image_name"] = i.image_name;
  o["no_gpu"] = i.no_gpu;
  json::array disks;
  for (const auto& d : i.data_disks) disks.push_back(json::object{{"id", d.id}, {"mount_path", d.mount_path}});
  o["data_disks"] = std::move(disks);
  o["security_group"] = opt(i.security_group_id);
  o["ssh"] = std::move(ssh);
  o["ssh_keys"] = std::move(keys);
  o["password_login"] = i.password_hash.has_value();
  o["ports"] = std::move(ports);
  o["ipv4"] = opt(i.ipv4);
  // The authenticated proxy to the instance's Jupyter (path on this API's origin), only when
  // its image has Jupyter.
  o["jupyter_url"] = i.jupyter ? json::value("/api/v1/instances/" + i.id + "/jupyter/") : json::value(nullptr);
  o["billing"] = json::object{{"mode", i.billing_mode},
                              {"auto_renew", i.auto_renew},
                              {"expires_at", opt_time(i.expires_at)},
                              {"price_per_hour", i.price_per_hour},
                              {"currency", view.currency}};
  if (i.autostop) {
    const bool idle = i.idle_since.has_value();
    const bool gpu_basis = i.gpu_count > 0 && !i.no_gpu && !i.gpus_simulated;
    o["autostop"] = json::object{{"idle_minutes", i.autostop->idle_minutes},
                                 {"gpu_util_below_percent", i.autostop->below_percent},
                                 {"applies_to", gpu_basis ? "gpu" : "cpu"},
                                 {"idle_since", opt_time(i.idle_since)},
                                 {"busy_reason", idle ? json::value(nullptr) : opt(i.busy_reason)},
                                 {"idle_reason", idle ? opt(i.busy_reason) : json::value(nullptr)},
                                 {"stops_at", [&]() -> json::value {
                                    auto a = autostop_deadlines(i);
                                    return a ? json::value(format_rfc3339(a->stop_at)) : json::value(nullptr);
                                  }()}};
  } else {
    o["autostop"] = nullptr;
  }
  o["stop_at"] = opt_time(i.stop_at);
  o["release_after_stopped_days"] = i.release_after_stopped_days.value_or(view.default_release_days);
  o["release_at"] = opt_time(release_at(i, view.default_release_days));
  // What the monitoring series hold: simulated GPUs and no-GPU runs have no GPU series.
  std::optional<std::string> no_gpu_metrics;
  if (i.gpu_count == 0 || i.no_gpu) no_gpu_metrics = "the instance runs without GPUs";
  else if (i.gpus_simulated) no_gpu_metrics = "simulated GPUs report no utilisation";
  o["monitoring"] = json::object{{"gpu_metrics", !no_gpu_metrics.has_value()}, {"reason", opt(no_gpu_metrics)}};
  o["spend_limit"] = i.spend_limit ? json::value(*i.spend_limit) : json::value(nullptr);
  o["created_at"] = format_rfc3339(i.created_at);
  o["started_at"] = opt_time(i.started_at);
  o["stopped_at"] = opt_time(i.stopped_at);
  o["run_seconds"] = run_seconds_now;
  o["charged"] = i.charged;
  o["currency"] = view.currency;
  return o;
}

}  // namespace gpucloud::instances
