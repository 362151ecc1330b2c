#include "agentlink/agent_file.h"

#include <cctype>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace gpucloud::agentlink {

namespace {

// The control plane's messages name "hosts[0].x"; here the key is "host.x".
std::string as_agent_keys(std::string detail) {
  for (std::string::size_type at; (at = detail.find("hosts[0]")) != std::string::npos;) detail.replace(at, 8, "host");
  return detail;
}

// Fix (issue 26 hub tests): parse_config reads a document made here, so the "SOURCE:L:C: "
// of its messages were that document's lines, not the agent file's. Each is replaced by where
// the key the message names is in the agent file (an unknown key: the key itself; else its
// value, as parse_config points), or dropped where it cannot be found.
std::string at_agent_file_lines(const std::string& detail, std::string_view source, const toml::table& root) {
  const std::string prefix = std::string(source) + ":";
  std::string out;
  std::string::size_type pos = 0;
  for (std::string::size_type at; (at = detail.find(prefix, pos)) != std::string::npos;) {
    out.append(detail, pos, at - pos);
    std::string::size_type p = at + prefix.size();
    auto digits = [&] {
      const auto start = p;
      while (p < detail.size() && std::isdigit(static_cast<unsigned char>(detail[p]))) ++p;
      return p > start && p < detail.size() && detail[p++] == ':';
    };
    if (!digits() || !digits() || detail.compare(p, 1, " ") != 0) {
      out += prefix;
      pos = at + prefix.size();
      continue;
    }
    ++p;  // past "SOURCE:L:C: "
    constexpr std::string_view kUnknown = "unknown key \"";
    const bool unknown = detail.compare(p, kUnknown.size(), kUnknown) == 0;
    const auto key_at = unknown ? p + kUnknown.size() : p;
    const auto key_end = detail.find(unknown ? "\"" : ": ", key_at);
    const std::string key = key_end == std::string::npos ? "" : detail.substr(key_at, key_end - key_at);
    std::optional<toml::source_position> where;
    if (!key.empty() && unknown) {
      const auto dot = key.rfind('.');
      const toml::table* parent = dot == std::string::npos ? &root : root.at_path(key.substr(0, dot)).as_table();
      const std::string name = dot == std::string::npos ? key : key.substr(dot + 1);
      if (parent)
        for (const auto& [k, v] : *parent)
          if (k.str() == name) where = k.source().begin;
    } else if (!key.empty()) {
      if (const toml::node* n = root.at_path(key).node()) where = n->source().begin;
    }
    out += std::string(source);
    if (where && where->line > 0) out += ":" + std::to_string(where->line) + ":" + std::to_string(where->column);
    out += ": ";
    pos = p;
  }
  out.append(detail, pos, std::string::npos);
  return out;
}

}  // namespace

Result<config::Config> parse_agent_file(std::string_view toml_text, std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return fail(ErrorCode::invalid_argument, std::string(source_name) + ": " + std::string(e.description()));
  } catch (const std::exception& e) {
    return fail(ErrorCode::invalid_argument, std::string(source_name) + ": " + e.what());
  }
  static const std::set<std::string> known{"data_dir", "host", "agent", "monitoring"};
  for (const auto& [key, value] : root)
    if (!known.contains(std::string(key.str())))
      return fail(ErrorCode::invalid_argument, std::string(source_name) + ": unknown key \"" + std::string(key.str()) +
                                                   "\" (an agent's file holds data_dir, [host], [agent], [monitoring])");
  const toml::table* host = root["host"].as_table();
  if (!host) return fail(ErrorCode::invalid_argument, std::string(source_name) + ": [host] is required");
  const auto zone = (*host)["zone"].value<std::string>();
  if (!zone || zone->empty())
    return fail(ErrorCode::invalid_argument, std::string(source_name) + ": host.zone is required");
  if (!(*host)["name"].value<std::string>())
    return fail(ErrorCode::invalid_argument, std::string(source_name) + ": host.name is required");
  // The same document a control plane with this one in-process host would read.
  toml::table doc;
  if (auto dir = root["data_dir"].node()) doc.insert("data_dir", *dir);
  toml::array zones;
  zones.push_back(toml::table{{"name", *zone}, {"region", "agent"}});
  doc.insert("zones", std::move(zones));
  toml::array hosts;
  hosts.push_back(*host);
  doc.insert("hosts", std::move(hosts));
  // The market is the control plane's: it checks a simulated model against its offers at the
  // registration. The agent's own check only needs each model to be declared.
  toml::array offers;
  std::set<std::string> models;
  if (const toml::array* sims = (*host)["simulated_gpus"].as_array())
    for (const auto& sim : *sims)
      if (const toml::table* t = sim.as_table())
        if (auto model = (*t)["model"].value<std::string>(); model && models.insert(*model).second)
          offers.push_back(toml::table{{"gpu_model", *model}, {"cpu_per_gpu", 1}, {"memory_gib_per_gpu", 1}});
  if (!offers.empty()) doc.insert("offers", std::move(offers));
  if (auto agent = root["agent"].node()) doc.insert("agent", *agent);
  if (auto monitoring = root["monitoring"].node()) doc.insert("monitoring", *monitoring);
  std::ostringstream text;
  text << doc;
  auto config = config::parse_config(text.str(), source_name);
  if (!config) {
    Error e = config.error();
    e.detail = at_agent_file_lines(as_agent_keys(std::move(e.detail)), source_name, root);
    return fail(std::move(e));
  }
  return config;
}

Result<config::Config> load_agent_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::invalid_argument, "cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_agent_file(text.str(), path);
}

}  // namespace gpucloud::agentlink
