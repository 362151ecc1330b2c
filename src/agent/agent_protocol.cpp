#include "agent/agent_protocol.h"

#include <boost/json.hpp>

namespace gpucloud::agent {
namespace json = boost::json;

namespace {
// Reading JSON messages: a malformed message is an error value, never an exception.
template <class T, class F>
Result<T> read_message(const json::value& v, const char* what, F&& fill) {
  try {
    T out;
    fill(v.as_object(), out);
    return out;
  } catch (const std::exception& e) {
    return fail(ErrorCode::internal, std::string("agent protocol: malformed ") + what + ": " + e.what());
  }
}
std::string str(const json::object& o, const char* k) { return std::string(o.at(k).as_string()); }
}  // namespace

json::object to_json(const GpuInfo& g) {
  return {{"index", g.index},       {"uuid", g.uuid},     {"model", g.model},         {"memory_bytes", g.memory_bytes},
          {"pci_bus_id", g.pci_bus_id}, {"health", g.health}, {"simulated", g.simulated}};
}

json::object to_json(const HostInventory& h) {
  json::array gpus;
  for (const auto& g : h.gpus) gpus.push_back(to_json(g));
  return {{"name", h.name},
          {"zone", h.zone},
          {"cpu", h.cpu},
          {"memory_gib", h.memory_gib},
          {"port_min", h.port_min},
          {"port_max", h.port_max},
          {"engine", h.engine},
          {"simulated", h.simulated},
          {"inventory_source", h.inventory_source},
          {"inventory_error", h.inventory_error},
          {"gpus", std::move(gpus)},
          {"protocol_version", h.protocol_version}};
}

json::object to_json(const Heartbeat& b) {
  json::array gpus;
  for (const auto& g : b.gpus) gpus.push_back(to_json(g));
  return {{"host_name", b.host_name}, {"sequence", b.sequence}, {"gpus", std::move(gpus)}};
}

json::object to_json(const Command& c) {
  return {{"id", c.id}, {"host_name", c.host_name}, {"kind", c.kind}, {"desired", c.desired}};
}

json::object to_json(const CommandOutcome& o) {
  return {{"command_id", o.command_id}, {"ok", o.ok},           {"error_code", o.error_code},
          {"error_detail", o.error_detail}, {"observed", o.observed}};
}

Result<GpuInfo> gpu_info_from_json(const json::value& v) {
  return read_message<GpuInfo>(v, "gpu", [](const json::object& o, GpuInfo& g) {
    g.index = static_cast<int>(o.at("index").to_number<std::int64_t>());
    g.uuid = str(o, "uuid");
    g.model = str(o, "model");
    g.memory_bytes = o.at("memory_bytes").to_number<std::int64_t>();
    g.pci_bus_id = str(o, "pci_bus_id");
    g.health = str(o, "health");
    g.simulated = o.at("simulated").as_bool();
  });
}

Result<HostInventory> host_inventory_from_json(const json::value& v) {
  std::optional<Error> gpu_error;
  auto r = read_message<HostInventory>(v, "host inventory", [&](const json::object& o, HostInventory& h) {
    h.name = str(o, "name");
    h.zone = str(o, "zone");
    h.cpu = static_cast<int>(o.at("cpu").to_number<std::int64_t>());
    h.memory_gib = o.at("memory_gib").to_number<std::int64_t>();
    h.port_min = static_cast<int>(o.at("port_min").to_number<std::int64_t>());
    h.port_max = static_cast<int>(o.at("port_max").to_number<std::int64_t>());
    h.engine = str(o, "engine");
    h.simulated = o.at("simulated").as_bool();
    h.inventory_source = str(o, "inventory_source");
    h.inventory_error = str(o, "inventory_error");
    h.protocol_version = static_cast<int>(o.at("protocol_version").to_number<std::int64_t>());
    for (const auto& g : o.at("gpus").as_array()) {
      auto gpu = gpu_info_from_json(g);
      if (!gpu) gpu_error = gpu.error();
      else h.gpus.push_back(std::move(*gpu));
    }
  });
  if (r && gpu_error) return fail(*gpu_error);
  return r;
}

Result<Heartbeat> heartbeat_from_json(const json::value& v) {
  return read_message<Heartbeat>(v, "heartbeat", [](const json::object& o, Heartbeat& b) {
    b.host_name = str(o, "host_name");
    b.sequence = o.at("sequence").to_number<std::uint64_t>();
    for (const auto& g : o.at("gpus").as_array())
      if (auto gpu = gpu_info_from_json(g)) b.gpus.push_back(std::move(*gpu));
  });
}

Result<Command> command_from_json(const json::value& v) {
  return read_message<Command>(v, "command", [](const json::object& o, Command& c) {
    c.id = str(o, "id");
    c.host_name = str(o, "host_name");
    c.kind = str(o, "kind");
    c.desired = o.at("desired").as_object();
  });
}

Result<CommandOutcome> command_outcome_from_json(const json::value& v) {
  return read_message<CommandOutcome>(v, "command outcome", [](const json::object& o, CommandOutcome& c) {
    c.command_id = str(o, "command_id");
    c.ok = o.at("ok").as_bool();
    c.error_code = str(o, "error_code");
    c.error_detail = str(o, "error_detail");
    c.observed = o.at("observed").as_object();
  });
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
