#include "agentlink/link_messages.h"

#include <boost/json.hpp>

namespace gpucloud::agentlink {
namespace json = boost::json;

std::string envelope(std::string_view type, json::object body) {
  return json::serialize(json::object{{"type", type}, {"body", std::move(body)}});
}

Result<LinkMessage> read_envelope(std::string_view text) {
  auto parsed = agent::parse_message(text);
  if (!parsed) return fail(parsed.error());
  const auto* o = parsed->if_object();
  const auto* type = o ? o->if_contains("type") : nullptr;
  const auto* body = o ? o->if_contains("body") : nullptr;
  if (!type || !type->is_string() || !body || !body->is_object())
    return fail(ErrorCode::invalid_argument, "a link message is {\"type\": string, \"body\": object}");
  return LinkMessage{std::string(type->as_string()), body->as_object()};
}

json::object to_json(const Hello& h) {
  return {{"link_version", h.link_version}, {"agent_version", h.agent_version}, {"inventory", agent::to_json(h.inventory)}};
}

Result<Hello> hello_from_json(const json::object& o) {
  Hello h;
  const auto* version = o.if_contains("link_version");
  const auto* agent_version = o.if_contains("agent_version");
  const auto* inventory = o.if_contains("inventory");
  if (!version || !version->is_int64() || !agent_version || !agent_version->is_string() || !inventory)
    return fail(ErrorCode::invalid_argument, "hello needs link_version, agent_version and inventory");
  h.link_version = static_cast<int>(version->as_int64());
  h.agent_version = std::string(agent_version->as_string());
  auto inv = agent::host_inventory_from_json(*inventory);
  if (!inv) return fail(ErrorCode::invalid_argument, "hello: " + inv.error().detail);
  h.inventory = std::move(*inv);
  return h;
}

json::object to_json(const Welcome& w) {
  json::object o{{"link_version", w.link_version}, {"control_plane_version", w.control_plane_version}};
  if (w.heartbeat_interval_ms > 0) o["heartbeat_interval_ms"] = w.heartbeat_interval_ms;
  return o;
}

Result<Welcome> welcome_from_json(const json::object& o) {
  const auto* version = o.if_contains("link_version");
  const auto* cp = o.if_contains("control_plane_version");
  if (!version || !version->is_int64() || !cp || !cp->is_string())
    return fail(ErrorCode::invalid_argument, "welcome needs link_version and control_plane_version");
  Welcome w{static_cast<int>(version->as_int64()), std::string(cp->as_string())};
  if (const auto* beat = o.if_contains("heartbeat_interval_ms"); beat && beat->is_int64() && beat->as_int64() > 0)
    w.heartbeat_interval_ms = beat->as_int64();
  return w;
}

}  // namespace gpucloud::agentlink
