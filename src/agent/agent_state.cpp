#include "agent/agent_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <boost/json.hpp>

#include "agent/firewall/port_rules.h"
#include "agent/runtime/runtime_driver.h"

namespace gpucloud::agent {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// ---- typed readers; `what` names the field in errors ---------------------------------------

Result<std::string> read_string(const json::object& o, std::string_view key, bool required,
                                std::string fallback = {}) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return invalid(std::string(key) + " is required");
    return fallback;
  }
  if (!v->is_string()) return invalid(std::string(key) + " must be a string");
  return std::string(v->as_string());
}

Result<std::int64_t> read_int(const json::object& o, std::string_view key, bool required,
                              std::int64_t fallback = 0) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return invalid(std::string(key) + " is required");
    return fallback;
  }
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(v->as_uint64());
  }
  if (v->is_double() && std::floor(v->as_double()) == v->as_double() &&
      std::fabs(v->as_double()) < 1e15) {
    return static_cast<std::int64_t>(v->as_double());
  }
  return invalid(std::string(key) + " must be an integer");
}

Result<double> read_number(const json::object& o, std::string_view key, bool required,
                           double fallback = 0) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return invalid(std::string(key) + " is required");
    return fallback;
  }
  if (v->is_int64()) return static_cast<double>(v->as_int64());
  if (v->is_uint64()) return static_cast<double>(v->as_uint64());
  if (v->is_double()) return v->as_double();
  return invalid(std::string(key) + " must be a number");
}

Result<bool> read_bool(const json::object& o, std::string_view key, bool fallback) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_bool()) return invalid(std::string(key) + " must be true or false");
  return v->as_bool();
}

Result<std::vector<std::string>> read_strings(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return out;
  if (!v->is_array()) return invalid(std::string(key) + " must be an array of strings");
  for (const auto& item : v->as_array()) {
    if (!item.is_string()) return invalid(std::string(key) + " must be an array of strings");
    out.emplace_back(item.as_string());
  }
  return out;
}

json::array data_disks_json(const std::vector<disks::DataDiskAttachment>& items) {
  json::array out;
  for (const auto& d : items) out.push_back(json::object{{"disk_id", d.disk_id}, {"mount_path", d.mount_path}});
  return out;
}

// "data_disks": [{"disk_id", "mount_path"}]; absent or null = none. Checked with
// disks::check_data_disks (absolute, not a system directory, no duplicates).
Result<std::vector<disks::DataDiskAttachment>> data_disks_from_json(const json::object& o) {
  std::vector<disks::DataDiskAttachment> out;
  const auto* v = o.if_contains("data_disks");
  if (!v || v->is_null()) return out;
  if (!v->is_array()) return invalid("data_disks must be an array");
  if (v->as_array().size() > 16) return invalid("data_disks: at most 16");
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const std::string at = "data_disks[" + std::to_string(i) + "]";
    const auto& item = v->as_array()[i];
    if (!item.is_object()) return invalid(at + " must be an object");
    auto id = read_string(item.as_object(), "disk_id", true);
    if (!id) return invalid(at + "." + id.error().detail);
    auto path = read_string(item.as_object(), "mount_path", true);
    if (!path) return invalid(at + "." + path.error().detail);
    out.push_back({*id, *path});
  }
  if (auto s = disks::check_data_disks(out); !s) return fail(std::move(s.error()));
  return out;
}

json::array to_array(const std::vector<std::string>& items) {
  json::array out;
  for (const auto& s : items) out.emplace_back(s);
  return out;
}

bool is_hostname_label(std::string_view s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

bool is_gpu_uuid(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '/') return false;
  }
  return true;
}

Result<PortSpec> port_from_json(const json::value& v, std::size_t index) {
  const std::string where = "ports[" + std::to_string(index) + "]";
  if (!v.is_object()) return invalid(where + " must be an object");
  const auto& o = v.as_object();
  PortSpec p;
  auto container_port = read_int(o, "container_port", true);
  if (!container_port) return invalid(where + "." + container_port.error().detail);
  auto host_port = read_int(o, "host_port", true);
  if (!host_port) return invalid(where + "." + host_port.error().detail);
  auto protocol = read_string(o, "protocol", false, "tcp");
  if (!protocol) return invalid(where + "." + protocol.error().detail);
  auto allowed = read_strings(o, "allowed");
  if (!allowed) return invalid(where + "." + allowed.error().detail);
  if (*container_port < 1 || *container_port > 65535) return invalid(where + ".container_port must be 1-65535");
  if (*host_port < 1 || *host_port > 65535) return invalid(where + ".host_port must be 1-65535");
  if (*protocol != "tcp" && *protocol != "udp") return invalid(where + ".protocol must be tcp or udp");
  p.container_port = static_cast<int>(*container_port);
  p.host_port = static_cast<int>(*host_port);
  p.protocol = *protocol;
  std::set<std::string> seen;
  for (const auto& cidr : *allowed) {
    auto canonical = firewall::canonical_cidr(cidr);
    if (!canonical) return invalid(where + ".allowed: " + canonical.error().detail);
    if (seen.insert(*canonical).second) p.allowed.push_back(*canonical);
  }
  return p;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::not_found, "cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return fail(ErrorCode::internal, "cannot read " + path);
  return buf.str();
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::internal, errno_text("open " + dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return fail(ErrorCode::internal, errno_text("fsync " + dir));
  return ok();
}

Status make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::internal, "cannot create " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0) return fail(ErrorCode::internal, errno_text("chmod " + dir));
  return ok();
}

}  // namespace

bool is_valid_instance_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || !std::isalnum(static_cast<unsigned char>(id.front()))) {
    return false;
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

Result<InstanceSpec> instance_spec_from_json(const json::value& desired) {
  if (!desired.is_object()) return invalid("desired must be an object");
  const auto& o = desired.as_object();
  InstanceSpec s;
  auto id = read_string(o, "instance_id", true);
  if (!id) return fail(id.error());
  if (!is_valid_instance_id(*id)) {
    return invalid("instance_id must be 1-64 of [A-Za-z0-9_.-], starting with a letter or digit");
  }
  s.instance_id = *id;
  auto name = read_string(o, "name", true);
  if (!name) return fail(name.error());
  if (!is_hostname_label(*name)) return invalid("name must be a hostname: 1-63 of [A-Za-z0-9-], no leading or trailing '-'");
  s.name = *name;
  auto host = read_string(o, "host", false);
  if (!host) return fail(host.error());
  s.host = *host;
  auto state = read_string(o, "state", true);
  if (!state) return fail(state.error());
  if (*state != "running" && *state != "stopped") return invalid("state must be running or stopped");
  s.state = *state;
  auto image = read_string(o, "image", true);
  if (!image) return fail(image.error());
  if (image->empty()) return invalid("image must not be empty");
  s.image = *image;
  auto cpu = read_number(o, "cpu", true);
  if (!cpu) return fail(cpu.error());
  if (!std::isfinite(*cpu) || *cpu < 0.01 || *cpu > 4096) return invalid("cpu must be between 0.01 and 4096");
  s.cpu = *cpu;
  auto memory = read_int(o, "memory_gib", true);
  if (!memory) return fail(memory.error());
  if (*memory < 1 || *memory > (1 << 20)) return invalid("memory_gib must be at least 1");
  s.memory_gib = *memory;
  auto disk = read_int(o, "system_disk_gib", false);  // absent (older control planes): no limit
  if (!disk) return fail(disk.error());
  if (*disk < 0 || *disk > (1 << 20)) return invalid("system_disk_gib must be 0 (no limit) or a size in GiB");
  s.system_disk_gib = *disk;
  auto gpus = read_strings(o, "gpu_uuids");
  if (!gpus) return fail(gpus.error());
  for (const auto& uuid : *gpus) {
    if (!is_gpu_uuid(uuid)) return invalid("gpu_uuids: '" + uuid + "' is not a GPU UUID");
  }
  s.gpu_uuids = std::move(*gpus);
  auto simulated = read_bool(o, "gpus_simulated", false);
  if (!simulated) return fail(simulated.error());
  s.gpus_simulated = *simulated;
  if (const auto* ports = o.if_contains("ports"); ports && !ports->is_null()) {
    if (!ports->is_array()) return invalid("ports must be an array");
    if (ports->as_array().size() > 64) return invalid("ports: at most 64");
    std::set<std::pair<int, std::string>> inside, outside;
    for (std::size_t i = 0; i < ports->as_array().size(); ++i) {
      auto p = port_from_json(ports->as_array()[i], i);
      if (!p) return fail(p.error());
      if (!inside.insert({p->container_port, p->protocol}).second) {
        return invalid("ports: " + p->protocol + "/" + std::to_string(p->container_port) + " is declared twice");
      }
      if (!outside.insert({p->host_port, p->protocol}).second) {
        return invalid("ports: host port " + p->protocol + "/" + std::to_string(p->host_port) + " is used twice");
      }
      s.ports.push_back(std::move(*p));
    }
  }
  auto data_disks = data_disks_from_json(o);
  if (!data_disks) return fail(data_disks.error());
  s.data_disks = std::move(*data_disks);
  return s;
}

json::object to_json(const InstanceSpec& s) {
  json::array ports;
  for (const auto& p : s.ports) {
    ports.push_back(json::object{{"container_port", p.container_port},
                                 {"host_port", p.host_port},
                                 {"protocol", p.protocol},
                                 {"allowed", to_array(p.allowed)}});
  }
  return json::object{{"instance_id", s.instance_id},
                      {"name", s.name},
                      {"host", s.host},
                      {"state", s.state},
                      {"image", s.image},
                      {"cpu", s.cpu},
                      {"memory_gib", s.memory_gib},
                      {"system_disk_gib", s.system_disk_gib},
                      {"gpu_uuids", to_array(s.gpu_uuids)},
                      {"gpus_simulated", s.gpus_simulated},
                      {"ports", std::move(ports)},
                      {"data_disks", data_disks_json(s.data_disks)}};
}

json::object to_json(const InstanceRecord& r) {
  json::value driver_state = nullptr;
  if (!r.driver_state.empty()) {
    boost::system::error_code ec;
    driver_state = json::parse(r.driver_state, ec);
    if (ec) driver_state = nullptr;
  }
  return json::object{
      {"version", r.version},
      {"desired", to_json(r.desired)},
      {"ipv4", r.ipv4},
      {"driver_state", std::move(driver_state)},
      {"host_key", r.host_key.empty() ? json::value(nullptr) : json::value(r.host_key)},
      {"created_with", json::object{{"image", r.created_with.image},
                                    {"hostname", r.created_with.hostname},
                                    {"cpu", r.created_with.cpu},
                                    {"memory_gib", r.created_with.memory_gib},
                                    {"gpu_uuids", to_array(r.created_with.gpu_uuids)},
                                    {"data_disks", data_disks_json(r.created_with.data_disks)}}},
      {"system_images", to_array(r.system_images)},
      {"generation", r.generation},
      {"holder", r.holder.id.empty() ? json::value(nullptr)
                                     : json::value(json::object{{"id", r.holder.id},
                                                                {"name", r.holder.name},
                                                                {"pid", r.holder.pid},
                                                                {"started_at", r.holder.started_at}})},
  };
}

Result<std::int64_t> command_generation(const json::object& desired) {
  auto g = read_int(desired, "generation", false, 0);
  if (!g) return fail(g.error());
  if (*g < 0) return invalid("generation must be an integer >= 0");
  return *g;
}

Status check_generation(const std::string& instance_id, std::int64_t applied, std::int64_t incoming) {
  if (incoming <= 0 || incoming >= applied) return ok();
  return fail(ErrorCode::conflict, "stale command: instance " + instance_id + " has applied generation " +
                                       std::to_string(applied) + "; this command carries generation " +
                                       std::to_string(incoming));
}

Result<InstanceRecord> instance_record_from_json(const json::value& value) {
  if (!value.is_object()) return invalid("instance record is not a JSON object");
  const auto& o = value.as_object();
  InstanceRecord r;
  auto version = read_int(o, "version", true);
  if (!version) return fail(version.error());
  if (*version < 1 || *version > InstanceRecord::kVersion) {
    return invalid("instance record version " + std::to_string(*version) + " is not supported");
  }
  r.version = InstanceRecord::kVersion;
  const auto* desired = o.if_contains("desired");
  if (!desired) return invalid("instance record has no desired spec");
  auto spec = instance_spec_from_json(*desired);
  if (!spec) return invalid("instance record: " + spec.error().detail);
  r.desired = std::move(*spec);
  auto ip = read_string(o, "ipv4", true);
  if (!ip) return fail(ip.error());
  if (!firewall::is_ipv4_address(*ip)) return invalid("instance record: ipv4 is not an address");
  r.ipv4 = *ip;
  if (const auto* ds = o.if_contains("driver_state"); ds && ds->is_object()) {
    auto decoded = decode_driver_state(json::serialize(*ds));
    if (!decoded) return invalid("instance record: " + decoded.error().detail);
    r.driver_state = encode_driver_state(*decoded);
    r.container_id = decoded->container_id;
  }
  auto key = read_string(o, "host_key", false);
  if (!key) return fail(key.error());
  r.host_key = *key;
  if (const auto* cw = o.if_contains("created_with"); cw && cw->is_object()) {
    const auto& c = cw->as_object();
    r.created_with.image = read_string(c, "image", false).value_or("");
    r.created_with.hostname = read_string(c, "hostname", false).value_or("");
    r.created_with.cpu = read_number(c, "cpu", false).value_or(0);
    r.created_with.memory_gib = read_int(c, "memory_gib", false).value_or(0);
    r.created_with.gpu_uuids = read_strings(c, "gpu_uuids").value_or(std::vector<std::string>{});
    r.created_with.data_disks = data_disks_from_json(c).value_or(std::vector<disks::DataDiskAttachment>{});
  }
  auto images = read_strings(o, "system_images");
  if (!images) return fail(images.error());
  r.system_images = std::move(*images);
  auto generation = read_int(o, "generation", false, 0);  // absent in records before fencing
  if (!generation) return fail(generation.error());
  r.generation = *generation;
  if (const auto* h = o.if_contains("holder"); h && h->is_object()) {  // absent before network holders
    const auto& ho = h->as_object();
    auto id = read_string(ho, "id", true);
    if (!id) return invalid("instance record: holder: " + id.error().detail);
    r.holder.id = *id;
    r.holder.name = read_string(ho, "name", false).value_or("");
    r.holder.pid = static_cast<int>(read_int(ho, "pid", false, 0).value_or(0));
    r.holder.started_at = read_string(ho, "started_at", false).value_or("");
  }
  return r;
}

Status write_file_atomic(const std::string& path, std::string_view content, unsigned mode) {
  static std::atomic<unsigned> counter{0};
  const fs::path target(path);
  const std::string tmp = (target.parent_path() / ("." + target.filename().string() + ".tmp-" +
                                                    std::to_string(::getpid()) + "-" +
                                                    std::to_string(counter++)))
                              .string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return fail(ErrorCode::internal, errno_text("create " + tmp));
  auto abandon = [&](const std::string& what) {
    const std::string detail = errno_text(what);
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, detail);
  };
  if (::fchmod(fd, mode) != 0) return abandon("chmod " + tmp);  // the umask may have cut it
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return abandon("write " + tmp);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return abandon("fsync " + tmp);
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, errno_text("close " + tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string detail = errno_text("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, detail);
  }
  return fsync_dir(target.parent_path().string());
}

AgentStateStore::AgentStateStore(std::string dir) : dir_(std::move(dir)) {}

std::string AgentStateStore::instance_dir(const std::string& instance_id) const {
  return dir_ + "/instances/" + instance_id;
}

std::string AgentStateStore::config_dir(const std::string& instance_id) const {
  return instance_dir(instance_id) + "/config";
}

Status AgentStateStore::prepare() {
  if (dir_.empty()) return invalid("no state directory");
  if (auto s = make_dir(dir_); !s) return s;
  return make_dir(dir_ + "/instances");
}

Result<std::optional<NetworkRecord>> AgentStateStore::load_network() const {
  const std::string path = dir_ + "/network.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<NetworkRecord>();
  auto text = read_text_file(path);
  if (!text) return fail(text.error());
  boost::system::error_code jec;
  const json::value v = json::parse(*text, jec);
  if (jec || !v.is_object()) return fail(ErrorCode::internal, path + " is not a JSON object");
  NetworkRecord n;
  n.name = read_string(v.as_object(), "name", false).value_or("");
  n.subnet = read_string(v.as_object(), "subnet", false).value_or("");
  n.gateway = read_string(v.as_object(), "gateway", false).value_or("");
  n.bridge = read_string(v.as_object(), "bridge", false).value_or("");
  if (n.subnet.empty()) return fail(ErrorCode::internal, path + " names no subnet");
  return std::optional<NetworkRecord>(std::move(n));
}

Status AgentStateStore::save_network(const NetworkRecord& n) {
  if (auto s = prepare(); !s) return s;
  const json::object o{{"name", n.name}, {"subnet", n.subnet}, {"gateway", n.gateway}, {"bridge", n.bridge}};
  observe(dir_ + "/network.json");
  return write_file_atomic(dir_ + "/network.json", json::serialize(o) + "\n", 0600);
}

Result<std::vector<InstanceRecord>> AgentStateStore::load_instances(
    std::vector<std::string>* problems) const {
  std::vector<InstanceRecord> out;
  const fs::path root = fs::path(dir_) / "instances";
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    const std::string id = it->path().filename().string();
    const std::string path = (it->path() / "instance.json").string();
    auto problem = [&](const std::string& what) {
      if (problems) problems->push_back(path + ": " + what);
    };
    auto text = read_text_file(path);
    if (!text) {
      problem("no record");
      continue;
    }
    boost::system::error_code jec;
    const json::value v = json::parse(*text, jec);
    if (jec) {
      problem("not JSON");
      continue;
    }
    auto record = instance_record_from_json(v);
    if (!record) {
      problem(record.error().detail);
      continue;
    }
    if (record->desired.instance_id != id) {
      problem("record is for instance " + record->desired.instance_id);
      continue;
    }
    out.push_back(std::move(*record));
  }
  if (ec) return fail(ErrorCode::internal, "cannot list " + root.string() + ": " + ec.message());
  return out;
}

Status AgentStateStore::save_instance(const InstanceRecord& record) {
  if (!is_valid_instance_id(record.desired.instance_id)) return invalid("bad instance id");
  if (auto s = prepare(); !s) return s;
  const std::string dir = instance_dir(record.desired.instance_id);
  if (auto s = make_dir(dir); !s) return s;
  observe(dir + "/instance.json");
  return write_file_atomic(dir + "/instance.json", json::serialize(to_json(record)) + "\n", 0600);
}

Status AgentStateStore::remove_instance(const std::string& instance_id) {
  if (!is_valid_instance_id(instance_id)) return invalid("bad instance id");
  observe(instance_dir(instance_id));
  std::error_code ec;
  fs::remove_all(instance_dir(instance_id), ec);
  if (ec) return fail(ErrorCode::internal, "cannot remove " + instance_dir(instance_id) + ": " + ec.message());
  return fsync_dir(dir_ + "/instances");
}

Result<std::int64_t> AgentStateStore::load_removed_generation(const std::string& instance_id) const {
  if (!is_valid_instance_id(instance_id)) return invalid("bad instance id");
  const std::string path = dir_ + "/removed/" + instance_id + ".json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::int64_t{0};
  auto text = read_text_file(path);
  if (!text) return fail(text.error());
  boost::system::error_code jec;
  const json::value v = json::parse(*text, jec);
  if (jec || !v.is_object()) return fail(ErrorCode::internal, path + " is not a JSON object");
  return read_int(v.as_object(), "generation", true);
}

Status AgentStateStore::save_removed_generation(const std::string& instance_id, std::int64_t generation) {
  if (!is_valid_instance_id(instance_id)) return invalid("bad instance id");
  if (auto s = prepare(); !s) return s;
  if (auto s = make_dir(dir_ + "/removed"); !s) return s;
  const json::object o{{"generation", generation}};
  observe(dir_ + "/removed/" + instance_id + ".json");
  return write_file_atomic(dir_ + "/removed/" + instance_id + ".json", json::serialize(o) + "\n", 0600);
}

Result<bool> AgentStateStore::write_config(const std::string& instance_id,
                                           const std::string& authorized_keys,
                                           const std::optional<std::string>& password_hash) {
  if (!is_valid_instance_id(instance_id)) return invalid("bad instance id");
  const std::string dir = config_dir(instance_id);
  if (auto s = make_dir(dir); !s) return fail(s.error());
  bool changed = false;
  auto put = [&](const std::string& name, const std::string& content) -> Status {
    const std::string path = dir + "/" + name;
    auto current = read_text_file(path);
    struct stat st {};
    if (current && *current == content && ::stat(path.c_str(), &st) == 0 && (st.st_mode & 0777) == 0600) {
      return ok();
    }
    changed = true;
    observe(path);
    return write_file_atomic(path, content, 0600);
  };
  std::string keys = authorized_keys;
  if (!keys.empty() && keys.back() != '\n') keys += '\n';
  if (auto s = put("authorized_keys", keys); !s) return fail(s.error());
  if (password_hash) {
    if (auto s = put("password_hash", *password_hash + "\n"); !s) return fail(s.error());
  } else {
    const std::string path = dir + "/password_hash";
    std::error_code ec;
    if (fs::exists(path, ec)) {
      changed = true;
      if (!fs::remove(path, ec) && ec) {
        return fail(ErrorCode::internal, "cannot remove " + path + ": " + ec.message());
      }
    }
  }
  return changed;
}

}  // namespace gpucloud::agent
