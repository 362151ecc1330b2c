#include "agent/agent_protocol.h"

#include <cstdint>
#include <optional>
#include <vector>

#include <boost/json.hpp>

namespace gpucloud::agent {
namespace json = boost::json;

namespace {
// Reading JSON messages: a malformed message (not an object, a field missing or of the wrong
// type, a number out of range) is an error value naming the field, never an exception. The
// first problem is kept; reads after it answer defaults.
class Fields {
 public:
  Fields(const json::value& v, const char* what) : what_(what) {
    if (const auto* o = v.if_object()) {
      object_ = o;
    } else {
      problem_ = "not a JSON object";
    }
  }

  std::string str(const char* key) {
    const json::value* v = get(key);
    if (!v) return {};
    if (!v->is_string()) return bad(key, "not a string"), std::string();
    return std::string(v->as_string());
  }
  std::int64_t int64(const char* key, std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX) {
    const json::value* v = get(key);
    if (!v) return 0;
    std::int64_t out = 0;
    if (v->is_int64()) {
      out = v->as_int64();
    } else if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
      out = static_cast<std::int64_t>(v->as_uint64());
    } else {
      return bad(key, "not an integer"), 0;
    }
    if (out < min || out > max) return bad(key, "out of range"), 0;
    return out;
  }
  int int32(const char* key, int min = INT32_MIN, int max = INT32_MAX) {
    return static_cast<int>(int64(key, min, max));
  }
  // A number that may be null (a reading the agent could not take): present, null or a number.
  std::optional<double> nullable_number(const char* key) {
    const json::value* v = get(key);
    if (!v || v->is_null()) return std::nullopt;
    if (v->is_double()) return v->as_double();
    if (v->is_int64()) return static_cast<double>(v->as_int64());
    if (v->is_uint64()) return static_cast<double>(v->as_uint64());
    return bad(key, "not a number or null"), std::nullopt;
  }
  std::optional<std::int64_t> nullable_int64(const char* key, std::int64_t min = INT64_MIN) {
    const json::value* v = get(key);
    if (!v || v->is_null()) return std::nullopt;
    const std::int64_t out = int64(key, min);
    if (!problem_.empty()) return std::nullopt;
    return out;
  }
  std::uint64_t uint64(const char* key) {
    const json::value* v = get(key);
    if (!v) return 0;
    if (v->is_uint64()) return v->as_uint64();
    if (v->is_int64() && v->as_int64() >= 0) return static_cast<std::uint64_t>(v->as_int64());
    return bad(key, "not a non-negative integer"), 0;
  }
  bool boolean(const char* key) {
    const json::value* v = get(key);
    if (!v) return false;
    if (!v->is_bool()) return bad(key, "not a boolean"), false;
    return v->as_bool();
  }
  json::object object(const char* key) {
    const json::value* v = get(key);
    if (!v) return {};
    if (!v->is_object()) return bad(key, "not an object"), json::object();
    return v->as_object();
  }
  const json::array* array(const char* key) {
    const json::value* v = get(key);
    if (!v) return nullptr;
    if (!v->is_array()) return bad(key, "not an array"), nullptr;
    return &v->as_array();
  }
  void bad(const std::string& key, const std::string& why) {
    if (problem_.empty()) problem_ = key + ": " + why;
  }

  template <class T>
  Result<T> finish(T value) const {
    if (!problem_.empty()) {
      return fail(ErrorCode::internal, std::string("agent protocol: malformed ") + what_ + ": " + problem_);
    }
    return value;
  }

 private:
  const json::value* get(const char* key) {
    if (!object_) return nullptr;
    const json::value* v = object_->if_contains(key);
    if (!v) bad(key, "missing");
    return v;
  }

  const char* what_;
  const json::object* object_ = nullptr;
  std::string problem_;
};
}  // namespace

json::object to_json(const GpuInfo& g) {
  return {{"index", g.index},       {"uuid", g.uuid},     {"model", g.model},         {"memory_bytes", g.memory_bytes},
          {"pci_bus_id", g.pci_bus_id}, {"health", g.health}, {"simulated", g.simulated}};
}

json::object to_json(const DiskPool& p) {
  return {{"path", p.path},
          {"size_bytes", p.size_bytes},
          {"used_bytes", p.used_bytes},
          {"reserve_bytes", p.reserve_bytes},
          {"capacity_bytes", p.capacity_bytes}};
}

Result<DiskPool> disk_pool_from_json(const json::value& v) {
  Fields f(v, "disk pool");
  DiskPool p;
  p.path = f.str("path");
  p.size_bytes = f.int64("size_bytes", 0);
  p.used_bytes = f.int64("used_bytes", 0);
  p.reserve_bytes = f.int64("reserve_bytes", 0);
  p.capacity_bytes = f.int64("capacity_bytes", 0);
  return f.finish(std::move(p));
}

namespace {
// "disk_pool": absent or null (not measured), or a pool; a malformed one is the message's error.
Status read_disk_pool(const json::value& message, std::optional<DiskPool>& into) {
  const auto* o = message.if_object();
  const json::value* v = o ? o->if_contains("disk_pool") : nullptr;
  if (!v || v->is_null()) return ok();
  auto pool = disk_pool_from_json(*v);
  if (!pool) return fail(pool.error());
  into = std::move(*pool);
  return ok();
}
json::value disk_pool_value(const std::optional<DiskPool>& p) { return p ? json::value(to_json(*p)) : json::value(nullptr); }
}  // namespace

json::object to_json(const HostInventory& h) {
  json::array gpus;
  for (const auto& g : h.gpus) gpus.push_back(to_json(g));
  json::object out{{"name", h.name},
          {"disk_pool", disk_pool_value(h.disk_pool)},
          {"zone", h.zone},
          {"cpu", h.cpu},
          {"memory_gib", h.memory_gib},
          {"port_min", h.port_min},
          {"port_max", h.port_max},
          {"engine", h.engine},
          {"simulated", h.simulated},
          {"inventory_source", h.inventory_source},
          {"inventory_error", h.inventory_error},
          {"public_address", h.public_address},
          {"gpus", std::move(gpus)},
          {"protocol_version", h.protocol_version}};
  if (!h.gpu_injection.empty())
    out["gpu_injection"] = json::object{
        {"mode", h.gpu_injection}, {"reason", h.gpu_injection_reason}, {"driver_version", h.driver_version}};
  if (h.lxcfs_available) out["lxcfs"] = json::object{{"available", *h.lxcfs_available}, {"reason", h.lxcfs_reason}};
  return out;
}

json::object to_json(const Heartbeat& b) {
  json::array gpus;
  for (const auto& g : b.gpus) gpus.push_back(to_json(g));
  return {{"host_name", b.host_name},
          {"sequence", b.sequence},
          {"gpus", std::move(gpus)},
          {"disk_pool", disk_pool_value(b.disk_pool)}};
}

json::object to_json(const ChangeReport& r) {
  json::array ids;
  for (const auto& id : r.instance_ids) ids.emplace_back(id);
  return {{"host_name", r.host_name}, {"instance_ids", std::move(ids)}};
}

Result<ChangeReport> change_report_from_json(const json::value& v) {
  Fields f(v, "change report");
  ChangeReport r;
  r.host_name = f.str("host_name");
  if (const auto* ids = f.array("instance_ids")) {
    for (const auto& id : *ids)
      if (id.is_string()) r.instance_ids.emplace_back(id.as_string());
  }
  return f.finish(std::move(r));
}

json::object to_json(const Command& c) {
  return {{"id", c.id}, {"host_name", c.host_name}, {"kind", c.kind}, {"desired", c.desired}};
}

json::object to_json(const CommandOutcome& o) {
  return {{"command_id", o.command_id}, {"ok", o.ok},           {"error_code", o.error_code},
          {"error_detail", o.error_detail}, {"observed", o.observed}};
}

namespace {
json::value nullable(const std::optional<double>& v) { return v ? json::value(*v) : json::value(nullptr); }
json::value nullable(const std::optional<std::int64_t>& v) { return v ? json::value(*v) : json::value(nullptr); }

json::object to_json(const GpuReading& g) {
  return {{"index", g.index},
          {"uuid", g.uuid},
          {"util_percent", g.util_percent},
          {"memory_used_bytes", g.memory_used_bytes},
          {"memory_total_bytes", g.memory_total_bytes},
          {"process_memory_bytes", nullable(g.process_memory_bytes)}};
}

json::array to_json(const std::vector<GpuReading>& readings) {
  json::array out;
  for (const auto& g : readings) out.push_back(to_json(g));
  return out;
}

Result<GpuReading> gpu_reading_from_json(const json::value& v) {
  Fields f(v, "gpu reading");
  GpuReading g;
  g.index = f.int32("index", 0);
  g.uuid = f.str("uuid");
  g.util_percent = f.int32("util_percent", 0, 100);
  g.memory_used_bytes = f.int64("memory_used_bytes", 0);
  g.memory_total_bytes = f.int64("memory_total_bytes", 0);
  if (const auto* o = v.if_object(); o && o->contains("process_memory_bytes"))
    g.process_memory_bytes = f.nullable_int64("process_memory_bytes", 0);
  return f.finish(std::move(g));
}

// Each element of `key` read with `read`; the first bad one is named in `f`.
template <class T, class Read>
std::vector<T> read_array(Fields& f, const char* key, Read read) {
  std::vector<T> out;
  if (const auto* items = f.array(key)) {
    for (const auto& item : *items) {
      auto one = read(item);
      if (!one) {
        f.bad(key, one.error().detail);
        break;
      }
      out.push_back(std::move(*one));
    }
  }
  return out;
}

Result<InstanceSample> instance_sample_from_json(const json::value& v) {
  Fields f(v, "instance sample");
  InstanceSample s;
  s.instance_id = f.str("instance_id");
  s.cpu_percent = f.nullable_number("cpu_percent");
  if (s.cpu_percent && !(*s.cpu_percent >= 0)) f.bad("cpu_percent", "out of range");  // NaN too
  s.memory_used_bytes = f.nullable_int64("memory_used_bytes", 0);
  s.memory_limit_bytes = f.int64("memory_limit_bytes", 0);
  s.gpus = read_array<GpuReading>(f, "gpus", gpu_reading_from_json);
  s.gpu_note = f.str("gpu_note");
  return f.finish(std::move(s));
}
}  // namespace

json::object to_json(const SampleReport& r) {
  json::array instances;
  for (const auto& i : r.instances) {
    instances.push_back(json::object{{"instance_id", i.instance_id},
                                     {"cpu_percent", nullable(i.cpu_percent)},
                                     {"memory_used_bytes", nullable(i.memory_used_bytes)},
                                     {"memory_limit_bytes", i.memory_limit_bytes},
                                     {"gpus", to_json(i.gpus)},
                                     {"gpu_note", i.gpu_note}});
  }
  return {{"host_name", r.host_name}, {"instances", std::move(instances)}, {"gpus", to_json(r.gpus)}};
}

Result<SampleReport> sample_report_from_json(const json::value& v) {
  Fields f(v, "sample report");
  SampleReport r;
  r.host_name = f.str("host_name");
  r.instances = read_array<InstanceSample>(f, "instances", instance_sample_from_json);
  r.gpus = read_array<GpuReading>(f, "gpus", gpu_reading_from_json);
  return f.finish(std::move(r));
}

Result<GpuInfo> gpu_info_from_json(const json::value& v) {
  Fields f(v, "gpu");
  GpuInfo g;
  g.index = f.int32("index");
  g.uuid = f.str("uuid");
  g.model = f.str("model");
  g.memory_bytes = f.int64("memory_bytes");
  g.pci_bus_id = f.str("pci_bus_id");
  g.health = f.str("health");
  g.simulated = f.boolean("simulated");
  return f.finish(std::move(g));
}

Result<HostInventory> host_inventory_from_json(const json::value& v) {
  Fields f(v, "host inventory");
  HostInventory h;
  h.name = f.str("name");
  h.zone = f.str("zone");
  h.cpu = f.int32("cpu");
  h.memory_gib = f.int64("memory_gib");
  h.port_min = f.int32("port_min");
  h.port_max = f.int32("port_max");
  h.engine = f.str("engine");
  h.simulated = f.boolean("simulated");
  h.inventory_source = f.str("inventory_source");
  h.inventory_error = f.str("inventory_error");
  h.protocol_version = f.int32("protocol_version");
  if (const auto* gpus = f.array("gpus")) {
    for (const auto& g : *gpus) {
      auto gpu = gpu_info_from_json(g);
      if (!gpu) {
        f.bad("gpus", gpu.error().detail);
        break;
      }
      h.gpus.push_back(std::move(*gpu));
    }
  }
  if (auto s = read_disk_pool(v, h.disk_pool); !s) return fail(s.error());
  if (const auto* o = v.if_object()) {
    if (const auto* pa = o->if_contains("public_address"); pa && pa->is_string())
      h.public_address = std::string(pa->as_string());
    if (const auto* gi = o->if_contains("gpu_injection"); gi && !gi->is_null()) {
      Fields g(*gi, "gpu_injection");
      h.gpu_injection = g.str("mode");
      h.gpu_injection_reason = g.str("reason");
      h.driver_version = g.str("driver_version");
      if (auto s = g.finish(0); !s) return fail(s.error());
    }
    if (const auto* lx = o->if_contains("lxcfs"); lx && !lx->is_null()) {
      Fields l(*lx, "lxcfs");
      h.lxcfs_available = l.boolean("available");
      h.lxcfs_reason = l.str("reason");
      if (auto s = l.finish(0); !s) return fail(s.error());
    }
  }
  return f.finish(std::move(h));
}

Result<Heartbeat> heartbeat_from_json(const json::value& v) {
  Fields f(v, "heartbeat");
  Heartbeat b;
  b.host_name = f.str("host_name");
  b.sequence = f.uint64("sequence");
  // A GPU the agent could not describe is left out of the beat (its health stays as it was).
  if (const auto* gpus = f.array("gpus")) {
    for (const auto& g : *gpus)
      if (auto gpu = gpu_info_from_json(g)) b.gpus.push_back(std::move(*gpu));
  }
  if (auto s = read_disk_pool(v, b.disk_pool); !s) return fail(s.error());
  return f.finish(std::move(b));
}

Result<Command> command_from_json(const json::value& v) {
  Fields f(v, "command");
  Command c;
  c.id = f.str("id");
  c.host_name = f.str("host_name");
  c.kind = f.str("kind");
  c.desired = f.object("desired");
  return f.finish(std::move(c));
}

Result<CommandOutcome> command_outcome_from_json(const json::value& v) {
  Fields f(v, "command outcome");
  CommandOutcome c;
  c.command_id = f.str("command_id");
  c.ok = f.boolean("ok");
  c.error_code = f.str("error_code");
  c.error_detail = f.str("error_detail");
  c.observed = f.object("observed");
  return f.finish(std::move(c));
}

Result<json::value> parse_message(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return fail(ErrorCode::internal, "agent protocol: not JSON: " + ec.message());
  return v;
}

CommandOutcome failed_outcome(const std::string& command_id, const Error& error) {
  return CommandOutcome{command_id, false, std::string(to_string(error.code)), error.detail, {}};
}

Error outcome_error(const CommandOutcome& outcome) {
  static constexpr ErrorCode kCodes[] = {
      ErrorCode::invalid_argument, ErrorCode::unauthorized, ErrorCode::forbidden,   ErrorCode::not_found,
      ErrorCode::conflict,         ErrorCode::insufficient_balance, ErrorCode::no_capacity, ErrorCode::quota_exceeded,
      ErrorCode::rate_limited,     ErrorCode::payload_too_large,    ErrorCode::method_not_allowed,
      ErrorCode::unsupported_media_type, ErrorCode::unavailable, ErrorCode::internal};
  for (ErrorCode c : kCodes)
    if (to_string(c) == outcome.error_code) return Error{c, outcome.error_detail, {}, 0};
  return Error{ErrorCode::internal, outcome.error_detail, {}, 0};
}

}  // namespace gpucloud::agent
