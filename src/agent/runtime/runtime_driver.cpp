#include "agent/runtime/runtime_driver.h"

#include <boost/json.hpp>

namespace gpucloud::agent {

namespace json = boost::json;

std::string encode_driver_state(const DriverState& state) {
  json::object labels;
  for (const auto& [k, v] : state.labels) labels[k] = v;
  json::object obj{
      {"version", state.version},
      {"container_id", state.container_id},
      {"container_name", state.container_name},
      {"labels", std::move(labels)},
  };
  return json::serialize(obj);
}

Result<DriverState> decode_driver_state(std::string_view text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) {
    return fail(ErrorCode::invalid_argument, "driver state is not a JSON object");
  }
  const auto& obj = value.as_object();
  DriverState state;
  const auto* version = obj.if_contains("version");
  if (!version || !version->is_int64()) {
    return fail(ErrorCode::invalid_argument, "driver state has no version");
  }
  state.version = static_cast<int>(version->as_int64());
  if (state.version < 1 || state.version > DriverState::kVersion) {
    return fail(ErrorCode::invalid_argument,
                "driver state version " + std::to_string(state.version) + " is not supported");
  }
  auto text_field = [&obj](std::string_view key) -> std::string {
    const auto* v = obj.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  state.container_id = text_field("container_id");
  state.container_name = text_field("container_name");
  if (const auto* labels = obj.if_contains("labels"); labels && labels->is_object()) {
    for (const auto& [k, v] : labels->as_object()) {
      if (v.is_string()) state.labels.emplace(std::string(k), std::string(v.as_string()));
    }
  }
  if (state.container_id.empty() && state.container_name.empty() && state.labels.empty()) {
    return fail(ErrorCode::invalid_argument, "driver state names no container");
  }
  return state;
}

std::optional<std::string> find_host_key(std::string_view log) {
  std::optional<std::string> found;
  // The last marker wins: the key printed by the latest boot.
  for (std::size_t pos = log.find(kHostKeyMarker); pos != std::string_view::npos;
       pos = log.find(kHostKeyMarker, pos + 1)) {
    if (pos != 0 && log[pos - 1] != '\n') continue;
    std::string_view line = log.substr(pos + kHostKeyMarker.size());
    line = line.substr(0, line.find('\n'));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    // "<type> <base64>": two words, the type an ssh key type.
    const auto space = line.find(' ');
    if (space == std::string_view::npos || line.substr(0, 4) != "ssh-" ||
        line.find(' ', space + 1) != std::string_view::npos || space + 1 == line.size()) {
      continue;
    }
    found = std::string(line);
  }
  return found;
}

}  // namespace gpucloud::agent

namespace gpucloud::agent {

std::string storage_size_opt(std::int64_t gib) { return std::to_string(gib) + "G"; }

SystemDiskLimit system_disk_limit_for(const std::string& storage_driver,
                                      const std::string& layer_filesystems_unavailable) {
  if (storage_driver == "btrfs" || storage_driver == "zfs") return {true, false, ""};
  if (storage_driver.empty()) return {false, false, "the engine did not name its storage driver"};
  if (storage_driver == "overlay2" && layer_filesystems_unavailable.empty()) return {true, true, ""};
  std::string reason = "storage driver " + storage_driver + " cannot limit a container's size here";
  if (storage_driver == "overlay2") reason += " and system disk filesystems are off (" + layer_filesystems_unavailable + ")";
  return {false, false, reason + "; use is reported instead"};
}

}  // namespace gpucloud::agent
