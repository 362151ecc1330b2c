#pragma once
// gpucloud-agent's configuration file (agent.toml): its data directory, the one host it
// serves ([host]: the keys of a control plane's [[hosts]] entry: name, zone, engine, cpu,
// memory_gib, port_range, simulated_gpus, disk_driver), and the [agent] and [monitoring]
// sections with the control plane's meaning. Read into a config::Config of one host so the
// agent runs the same code as gpucloudd's in-process hosts.
#include <string>
#include <string_view>

#include "config/config.h"

namespace gpucloud::agentlink {

Result<config::Config> parse_agent_file(std::string_view toml_text, std::string_view source_name);
Result<config::Config> load_agent_file(const std::string& path);

}  // namespace gpucloud::agentlink
