#include "server/openapi_schemas.h"

#include <boost/json.hpp>

namespace gpucloud::server::openapi {
namespace json = boost::json;

namespace {

// Small builders, so each schema below reads like the JSON it describes.
json::object str(std::string_view description = {}) {
  json::object s{{"type", "string"}};
  if (!description.empty()) s["description"] = description;
  return s;
}
json::object integer(std::string_view description = {}) {
  json::object s{{"type", "integer"}, {"format", "int64"}};
  if (!description.empty()) s["description"] = description;
  return s;
}
json::object boolean(std::string_view description = {}) {
  json::object s{{"type", "boolean"}};
  if (!description.empty()) s["description"] = description;
  return s;
}
json::object time(std::string_view description = {}) {
  json::object s = str(description);
  s["format"] = "date-time";
  return s;
}
json::object one_of(std::initializer_list<std::string_view> values, std::string_view description = {}) {
  json::object s = str(description);
  json::array e;
  for (auto v : values) e.emplace_back(v);
  s["enum"] = std::move(e);
  return s;
}
json::object nullable(json::object s) {
  s["nullable"] = true;
  return s;
}
json::object ref(std::string_view component) {
  return {{"$ref", "#/components/schemas/" + std::string(component)}};
}
// OpenAPI 3.0 ignores siblings of $ref, so a nullable reference goes through allOf; and
// `nullable` counts only beside a `type` (every component referenced so is an object).
json::object nullable_ref(std::string_view component, std::string_view description = {}) {
  json::object s{{"type", "object"}, {"nullable", true}, {"allOf", json::array{ref(component)}}};
  if (!description.empty()) s["description"] = description;
  return s;
}
json::object array_of(json::object items, std::string_view description = {}) {
  json::object s{{"type", "array"}, {"items", std::move(items)}};
  if (!description.empty()) s["description"] = description;
  return s;
}
json::object with(json::object s, std::string_view key, json::value v) {
  s[key] = std::move(v);
  return s;
}
// An object with these properties; `required` names those always present (answers) or
// demanded (requests).
json::object object(json::object properties, std::initializer_list<std::string_view> required = {},
                    std::string_view description = {}) {
  json::object s{{"type", "object"}};
  if (!description.empty()) s["description"] = description;
  if (required.size()) {
    json::array r;
    for (auto name : required) r.emplace_back(name);
    s["required"] = std::move(r);
  }
  s["properties"] = std::move(properties);
  return s;
}
// Every key of an answer object: the handler emits them all, null where api.md says so.
json::object answer(json::object properties, std::string_view description = {}) {
  json::object s{{"type", "object"}};
  if (!description.empty()) s["description"] = description;
  json::array r;
  for (const auto& p : properties) r.emplace_back(p.key());
  s["required"] = std::move(r);
  s["properties"] = std::move(properties);
  return s;
}
json::object list_of(std::string_view item) {
  return answer({{"items", array_of(ref(item))},
                 {"next_cursor", nullable(str("Pass as `cursor` for the next page; null on the last page"))}},
                "A page of " + std::string(item) + " items");
}

constexpr const char* kNamePattern = "^[a-z][a-z0-9-]{0,62}$";
constexpr const char* kUsernamePattern = "^[a-z][a-z0-9_-]{2,31}$";

json::object instance_schemas(json::object& s) {
  s["InstanceGpu"] = answer({{"index", integer()},
                             {"uuid", str()},
                             {"simulated", boolean()},
                             {"health", str("\"ok\", \"missing\" (its host no longer reports it), or the host's error")}});
  s["InstanceDegraded"] = answer(
      {{"reason", str("Which GPUs it holds are missing or unhealthy, and where they were last seen")},
       {"gpus", array_of(str(), "Their UUIDs")},
       {"since", nullable(time("When the first of them was found unusable; null when not recorded"))}},
      "Some GPU it holds is missing or unhealthy. It keeps running (pay-as-you-go compute keeps billing) and its "
      "reservation stays on that GPU; a stop frees it, and a start takes other free GPUs while it is gone");
  s["InstanceSsh"] = answer({{"host", str()},
                             {"port", integer("The host port that forwards to the instance's port 22")},
                             {"user", one_of({"root"})},
                             {"command", str("e.g. ssh -p 30022 root@HOST")},
                             {"host_key", nullable(str("ssh-ed25519 AAAA...; null until the instance first ran"))}});
  s["InstancePort"] = answer({{"port", integer("The instance's port")},
                              {"protocol", one_of({"tcp", "udp"})},
                              {"host", str()},
                              {"host_port", integer()},
                              {"allowed", boolean("Some rule of its security group lets an (IPv4) source reach it")},
                              {"sources", array_of(str(), "The CIDRs its security group lets reach it")}});
  s["InstanceBilling"] = answer({{"mode", one_of({"hourly", "weekly", "monthly"})},
                                 {"auto_renew", boolean()},
                                 {"expires_at", nullable(time())},
                                 {"price_per_hour", integer("Smallest currency unit per hour")},
                                 {"currency", str()}});
  s["DataDiskAttachment"] = object({{"id", str()}, {"mount_path", str()}}, {"id", "mount_path"});
  s["Autostop"] = object({{"idle_minutes", with(with(integer(), "minimum", 1), "maximum", 10080)},
                          {"gpu_util_below_percent", with(with(with(integer(), "minimum", 1), "maximum", 100), "default", 5)}},
                         {"idle_minutes"});
  s["AutostopState"] = answer(
      {{"idle_minutes", integer()},
       {"gpu_util_below_percent", integer()},
       {"applies_to", one_of({"gpu", "cpu"})},
       {"idle_since", nullable(time("Every reading below the threshold since then"))},
       {"busy_reason", nullable(str("Why it counts as busy: which GPU (or the CPU) was above the threshold, and when"))},
       {"idle_reason", nullable(str("The latest idle reading"))},
       {"stops_at", nullable(time("When autostop stops it if it stays idle"))}});
  s["InstanceMonitoring"] = answer({{"gpu_metrics", boolean("Whether the series hold GPU readings")},
                                    {"reason", nullable(str("Why not: simulated GPUs, no GPUs"))}});
  json::object instance_states = one_of({"creating", "starting", "running", "stopping", "stopped", "releasing", "released", "error"});
  return answer(
      {{"id", str("i-...")},
       {"name", str()},
       {"owner", str("The owner's user id")},
       {"state", std::move(instance_states)},
       {"state_reason", nullable(str("Why it is in this state (e.g. restart, an error)"))},
       {"zone", str()},
       {"host", nullable(str("The host's name"))},
       {"host_unreachable", boolean("Its host stopped answering (heartbeats ceased); the instance keeps its state, "
                                    "nothing is stopped or moved")},
       {"gpu_model", nullable(str())},
       {"gpu_count", integer()},
       {"gpus", array_of(ref("InstanceGpu"), "The GPUs it holds now (none while stopped or no-GPU)")},
       {"simulated", boolean("Its GPUs are simulated")},
       {"degraded", nullable_ref("InstanceDegraded", "null while every GPU it holds is present and healthy")},
       {"cpu", integer()},
       {"cpu_capped_to_machine", boolean("Fewer CPUs than `cpu` exist on the host; the container got them all")},
       {"memory_gib", integer()},
       {"system_disk_gib", integer()},
       {"system_disk_used_bytes",
        nullable(integer("What the system disk holds (the engine's count), as last seen; null when unknown"))},
       {"image", str("The image id")},
       {"image_name", str("The image's name")},
       {"no_gpu", boolean("Running (or to start) at the no-GPU size")},
       {"data_disks", array_of(ref("DataDiskAttachment"))},
       {"security_group", nullable(str("sg-...: the group deciding who reaches its ports"))},
       {"ssh", nullable_ref("InstanceSsh", "null when port 22 is not published")},
       {"ssh_keys", array_of(str(), "Ids of the authorized SSH keys")},
       {"password_login", boolean("A root password was set")},
       {"ports", array_of(ref("InstancePort"))},
       {"ipv4", nullable(str("The container's address on the host"))},
       {"jupyter_url", nullable(str())},
       {"billing", ref("InstanceBilling")},
       {"autostop", nullable_ref("AutostopState")},
       {"stop_at", nullable(time("A one-off stop"))},
       {"release_after_stopped_days", integer("Released after this many days stopped (the instance's or the platform's)")},
       {"release_at", nullable(time("When this stopped instance will be released"))},
       {"monitoring", ref("InstanceMonitoring")},
       {"spend_limit", nullable(integer("Stops when its compute charges reach this (smallest unit); an event at 80 %"))},
       {"created_at", time()},
       {"started_at", nullable(time())},
       {"stopped_at", nullable(time())},
       {"run_seconds", integer("Total time spent running")},
       {"charged", integer("Total compute charged, smallest currency unit")},
       {"currency", str()}});
}

// Declared ports: 8888 (tcp), "53/udp", or {port, protocol}.
json::object ports_schema(std::string_view description) {
  json::object number = with(with(integer("A tcp port"), "minimum", 1), "maximum", 65535);
  json::object text = with(str("PORT/tcp or PORT/udp"), "pattern", "^[0-9]{1,5}/(tcp|udp)$");
  json::object spec = object({{"port", with(with(integer(), "minimum", 1), "maximum", 65535)},
                              {"protocol", with(one_of({"tcp", "udp"}), "default", "tcp")}},
                             {"port"});
  json::object ports = array_of(json::object{{"oneOf", json::array{number, text, spec}}}, description);
  ports["maxItems"] = 10;
  return ports;
}

json::object instance_create_schema() {
  json::object new_disk = object({{"size_gib", integer()}, {"mount_path", str()}, {"delete_on_release", boolean()}},
                                 {"size_gib", "mount_path"});
  json::object existing_disk = object({{"id", str("d-... or the disk's name")}, {"mount_path", str()}}, {"id", "mount_path"});
  json::object ports = ports_schema("Default [22]");
  return object(
      {{"name", with(str(), "pattern", kNamePattern)},
       {"zone", str("Default: the first zone")},
       {"gpu_model", str("Required when gpu_count > 0; omit for a no-GPU instance")},
       {"gpu_count", with(with(with(integer("0 creates a no-GPU instance; default 1 with gpu_model, else 0"), "minimum", 0),
                               "maximum", 64),
                          "default", 1)},
       {"image", str("Image id or name; default the base image")},
       {"system_disk_gib", with(with(with(integer(), "minimum", 10), "maximum", 4096), "default", 30)},
       {"data_disks", array_of(json::object{{"oneOf", json::array{std::move(new_disk), std::move(existing_disk)}}},
                               "New disks (size_gib) made with it, or available disks (id) attached to it")},
       {"security_group", str("Your security group's id or name; default: your `default` group")},
       {"ports", std::move(ports)},
       {"ssh_keys", array_of(str(), "SSH key ids or names")},
       {"password", with(with(str("Root password"), "minLength", 8), "maxLength", 256)},
       {"billing", object({{"mode", with(one_of({"hourly", "weekly", "monthly"}), "default", "hourly")},
                           {"auto_renew", with(boolean(), "default", true)}})},
       {"autostop", nullable_ref("Autostop", "Stop after idle_minutes with every GPU (no-GPU, simulated: the CPU) below the threshold")},
       {"stop_at", time("A one-off stop, in the future")},
       {"release_after_stopped_days", with(with(integer("Default: [policy] release_stopped_after_days"), "minimum", 1), "maximum", 3650)},
       {"spend_limit", nullable(with(integer("Stop when its compute charges reach this (smallest unit)"), "minimum", 1))}},
      {"name"});
}

json::object instance_update_schema() {
  json::object s = object(
      {{"name", with(str(), "pattern", kNamePattern)},
       {"ports", ports_schema("Replaces the declared ports; kept ones keep their host port")},
       {"security_group", str("Your security group's id or name; applies to a running instance within 2 s")},
       {"autostop", nullable_ref("Autostop", "null turns autostop off; a new rule starts the idle window again")},
       {"billing", with(object({{"auto_renew", boolean()}}), "additionalProperties", false)},
       {"stop_at", nullable(time("A one-off stop, in the future; null cancels it"))},
       {"release_after_stopped_days",
        nullable(with(with(integer("null: the platform's default"), "minimum", 1), "maximum", 3650))},
       {"spend_limit", nullable(with(integer("A new limit (warned about afresh at 80 %); null removes it"), "minimum", 1))}});
  s["additionalProperties"] = false;  // the handler refuses unknown fields
  return s;
}

json::object price_schemas(json::object& s) {
  s["GpuPrice"] = answer({{"gpu_model", str()},
                          {"price_per_gpu_hour", integer()},
                          {"price_per_gpu_week", integer()},
                          {"price_per_gpu_month", integer()}});
  json::object table{{"currency", str("Shown for reading; ignored on PUT")},
                     {"gpus", array_of(ref("GpuPrice"))},
                     {"no_gpu_price_per_hour", integer()},
                     {"system_disk_free_gib", integer("Free system-disk allowance per instance")},
                     {"system_disk_per_gib_hour_micros", integer("Millionths of the smallest unit per GiB-hour")},
                     {"data_disk_per_gib_hour_micros", integer()},
                     {"snapshot_per_gib_hour_micros", integer()},
                     {"image_per_gib_hour_micros", integer()}};
  // PUT takes the whole table (every field but currency) and refuses unknown fields.
  json::object input = object(table, {"gpus", "no_gpu_price_per_hour", "system_disk_free_gib",
                                      "system_disk_per_gib_hour_micros", "data_disk_per_gib_hour_micros",
                                      "snapshot_per_gib_hour_micros", "image_per_gib_hour_micros"});
  input["additionalProperties"] = false;
  s["PriceTableInput"] = std::move(input);
  return answer(std::move(table), "Prices in the smallest currency unit");
}

}  // namespace

json::object component_schemas() {
  json::object s;
  json::object problem = object({{"type", str()},
                                 {"title", str()},
                                 {"status", integer()},
                                 {"detail", str("A human sentence; names the field or the state")},
                                 {"code", str("Stable snake_case code")},
                                 {"gpus_free", integer("no_capacity: the most GPUs free on one host")},
                                 {"cpu_free", integer("no_capacity: the most CPUs free on one host")},
                                 {"memory_gib_free", integer("no_capacity: the most memory free on one host")}},
                                {"type", "title", "status", "detail", "code"});
  s["Problem"] = std::move(problem);
  s["Health"] = answer({{"status", one_of({"ok"})}, {"version", str()}});
  s["User"] = answer({{"id", str("u-...")},
                      {"username", str()},
                      {"email", nullable(str())},
                      {"role", one_of({"user", "admin"})},
                      {"disabled", boolean()},
                      {"created_at", time()}});
  s["Session"] = answer({{"token", str("Bearer token")}, {"expires_at", time()}});
  s["BrowserSession"] = answer({{"user", ref("User")},
                                {"csrf_token", str("Send as X-CSRF-Token with every unsafe request the cookie authenticates")},
                                {"expires_at", nullable(time())}});
  s["Token"] = answer({{"id", str("tok-...")}, {"name", str()}, {"created_at", time()}, {"expires_at", nullable(time())}});
  s["TokenCreated"] = json::object{
      {"allOf", json::array{ref("Token"), answer({{"token", str("The secret, shown only in this answer")}})}}};
  // Remote agents' join tokens (issue 26). A replay of the create (same Idempotency-Key)
  // answers without token and join_command, with token_redacted: true.
  s["JoinToken"] = object(
      {{"token", str("gcjoin1.<CA fingerprint>.<id>.<secret>: single use, shown only in this answer")},
       {"host", str("The host it admits")},
       {"expires_at", time()},
       {"ca_fingerprint", str("SHA-256 of the agents' CA certificate (DER), lowercase hex: the agent pins it")},
       {"join_command", str("gpucloud-agent --config agent.toml --join <[agents] url> --token <token>")},
       {"token_redacted", boolean("Present (true) on a replay, which carries neither token nor join_command")}},
      {"host", "expires_at", "ca_fingerprint"});
  s["CertificatesRevoked"] = answer({{"host", str()}, {"revoked", integer("Certificates revoked now (0: all already were)")}});
  s["Zone"] = answer({{"name", str()}, {"region", str()}, {"description", str()}});
  // One schema for both kinds of offer: a GPU model's, and the zone's no-GPU offer
  // (gpu_model null), which carries price_per_hour, cpu, memory_gib, instances_free instead.
  s["MarketOffer"] = object(
      {{"zone", str()},
       {"gpu_model", nullable(str("null for the no-GPU offer"))},
       {"simulated", boolean()},
       {"currency", str()},
       {"gpu_memory_gib", integer("GPU offers")},
       {"cpu_per_gpu", integer("GPU offers")},
       {"memory_gib_per_gpu", integer("GPU offers")},
       {"price_per_gpu_hour", integer("GPU offers")},
       {"price_per_gpu_week", integer("GPU offers")},
       {"price_per_gpu_month", integer("GPU offers")},
       {"gpus_total", integer("GPU offers")},
       {"gpus_free", integer("GPU offers; live")},
       {"max_gpus_per_instance", integer("GPU offers: the most free GPUs (with CPU and memory) on one host")},
       {"price_per_hour", integer("The no-GPU offer")},
       {"cpu", integer("The no-GPU offer")},
       {"memory_gib", integer("The no-GPU offer")},
       {"instances_free", integer("The no-GPU offer: how many more fit on the zone's ready hosts")}},
      {"zone", "gpu_model", "simulated", "currency"});
  s["Image"] = answer({{"id", str("img-...")},
                       {"name", str()},
                       {"description", str()},
                       {"os", nullable(str())},
                       {"python", nullable(str())},
                       {"cuda", nullable(str())},
                       {"state_reason", nullable(str("Why it is not available"))},
                       {"frameworks", with(json::object{{"type", "object"}}, "additionalProperties", str())},
                       {"size_bytes", integer()},
                       {"visibility", one_of({"public", "private"})},
                       {"owner", nullable(str("null for public images"))},
                       {"state", one_of({"creating", "available", "error", "deleted"})},
                       {"ssh", boolean("The image has sshd")},
                       {"jupyter", boolean("The image has Jupyter Notebook (its instances' jupyter_url is set)")},
                       {"engine_image", str("The container engine's reference")},
                       {"own_size_bytes", integer("Custom images: the bytes its layers add over its base (what is billed)")},
                       {"source_instance", nullable(str("Custom images: the instance it was saved from"))},
                       {"deleted_at", nullable(time("In the recycle bin since (restorable for [policy] recycle_days)"))},
                       {"purge_at", nullable(time("In the recycle bin: when it is destroyed for good (deleted_at + [policy] recycle_days); else null"))},
                       {"created_at", time()}});
  json::object instance = instance_schemas(s);  // adds the nested parts first
  s["Instance"] = std::move(instance);
  s["SshKey"] = answer({{"id", str("key-...")},
                        {"name", str()},
                        {"public_key", str("OpenSSH format")},
                        {"fingerprint", str()},
                        {"created_at", time()}});
  s["SecurityGroupRule"] = object({{"protocol", one_of({"tcp", "udp"})},
                                   {"port_min", with(with(integer(), "minimum", 1), "maximum", 65535)},
                                   {"port_max", with(with(integer("Default: port_min"), "minimum", 1), "maximum", 65535)},
                                   {"source", str("A CIDR, IPv4 or IPv6; normalised (host bits cleared, a bare address is /32 or /128)")},
                                   {"description", with(str(), "maxLength", 255)}},
                                  {"protocol", "port_min", "source"});
  s["SecurityGroup"] = answer({{"id", str("sg-...")},
                               {"name", str()},
                               {"owner", str("The owner's user id")},
                               {"description", str()},
                               {"rules", array_of(ref("SecurityGroupRule"))},
                               {"instances", array_of(str(), "Live instances that use it")},
                               {"is_default", boolean("The user's `default` group (tcp/22 from anywhere at first)")},
                               {"created_at", time()},
                               {"updated_at", time()}});
  s["Event"] = answer({{"id", str()},
                       {"seq", integer("Increases; resume after it")},
                       {"time", time()},
                       {"type", str("instance.created|running|stopped|released|error, host.*, ...")},
                       {"resource", str("The resource's id")},
                       {"user", nullable(str("The user it concerns"))},
                       {"message", str()},
                       {"data", json::object{{"type", "object"}}}});
  s["HostGpu"] = answer({{"index", integer()},
                         {"uuid", str()},
                         {"model", str("The offer's model")},
                         {"reported_name", str("As the inventory reported it")},
                         {"memory_gib", integer()},
                         {"pci_bus_id", str()},
                         {"health", str("\"ok\", \"missing\" (no longer reported by the host), or why not")},
                         {"simulated", boolean()},
                         {"reserved_by", nullable(str("The holder of its active reservation"))},
                         {"instance", nullable(str("The holding instance's id"))},
                         {"lost_at", nullable(time("Since when it has not been usable (missing or unhealthy)"))}});
  s["Host"] = answer({{"id", str("h-...")},
                      {"name", str()},
                      {"zone", str()},
                      {"state", one_of({"ready", "unreachable", "draining", "removed"},
                                       "The stronger of admin_state and liveness: removed > draining > unreachable > "
                                       "ready; only a ready host takes new placements")},
                      {"liveness", one_of({"ready", "unreachable"}, "From heartbeats (unreachable after ~30 s without)")},
                      {"admin_state", one_of({"active", "draining", "removed"}, "The operator's word (drain, undrain, remove)")},
                      {"agent", ref("HostAgent")},
                      {"simulated", boolean()},
                      {"inventory_source", str()},
                      {"inventory_error", nullable(str())},
                      {"cpu", integer()},
                      {"cpu_used", integer()},
                      {"memory_gib", integer()},
                      {"memory_gib_used", integer()},
                      {"port_range", str("MIN-MAX host ports for published instance ports")},
                      {"gpus", array_of(ref("HostGpu"))},
                      {"last_seen", nullable(time())},
                      {"system_disk_enforced", boolean("The engine enforces system_disk_gib (a btrfs data root)")},
                      {"system_disk_reason", nullable(str("Why it is not enforced"))},
                      {"disk_pool", ref("HostDiskPool")},
                      {"gpu_injection", nullable_ref("HostGpuInjection", "How its instances get GPUs; null until its agent reports it")},
                      {"lxcfs", nullable_ref("HostLxcfs", "Whether lxcfs serves its instances' /proc; null until reported")}});
  s["HostAgent"] = answer(
      {{"kind", nullable(one_of({"in_process", "remote"}, "null: no agent connected since this was recorded"))},
       {"version", nullable(str("The agent's build version"))},
       {"address", nullable(str("A remote agent's address; null in-process"))},
       {"connected_since", nullable(time("null while it is not connected"))},
       {"last_heartbeat_at", nullable(time("Its last heartbeat recorded (written every few seconds)"))},
       {"certificate_expires_at", nullable(time("When its newest unrevoked certificate expires; null in-process"))}});
  s["HostGpuInjection"] = answer(
      {{"mode", one_of({"toolkit", "builtin", "none"})},
       {"reason", str("Why this mode ([agent] gpu_injection, the engine's nvidia runtime, the driver found)")},
       {"driver_version", nullable(str("The NVIDIA driver's version found for builtin injection"))}});
  s["HostLxcfs"] = answer({{"available", boolean("lxcfs serves instances' /proc files ([agent] lxcfs_dir)")},
                           {"reason", str()}});
  s["HostDiskPool"] = answer(
      {{"capacity_bytes", nullable(integer("What provisioned sizes may reach: (size - reserve) x [agent] disk_overcommit; "
                                           "null until the host reported it"))},
       {"provisioned_bytes", integer("Data disks, snapshots and enforced system disks by their sizes")},
       {"free_bytes", nullable(integer("capacity - provisioned"))},
       {"size_bytes", nullable(integer("The filesystem holding the host's disks, as df counts it"))},
       {"used_bytes", nullable(integer("Its real use"))},
       {"reserve_bytes", nullable(integer("Held back for the store and the agent, never provisioned"))},
       {"used_percent", nullable(json::object{{"type", "number"}})}});
  s["Disk"] = answer({{"id", str("d-...")},
                      {"name", str()},
                      {"owner", str()},
                      {"zone", str()},
                      {"host", str("The host it lives on; it attaches only to instances there")},
                      {"size_gib", integer()},
                      {"used_bytes", integer("Bytes in use on its filesystem, as its host last reported")},
                      {"state", one_of({"creating", "available", "attached", "deleting", "deleted", "error"})},
                      {"state_reason", nullable(str("Why it is in error"))},
                      {"instance", nullable(str("The instance it is attached to"))},
                      {"mount_path", nullable(str("Where it is mounted in that instance"))},
                      {"delete_on_release", boolean("Deleted (to the recycle bin) when its instance is released")},
                      {"from_snapshot", nullable(str("The snapshot it was made from"))},
                      {"created_at", time()},
                      {"deleted_at", nullable(time("When it went to the recycle bin"))},
                      {"purge_at", nullable(time("In the recycle bin: when it is destroyed for good (deleted_at + [policy] recycle_days); else null"))}});
  s["Snapshot"] = answer({{"id", str("snap-...")},
                          {"name", str()},
                          {"owner", str()},
                          {"disk", str("The disk it was taken of")},
                          {"zone", str()},
                          {"host", str()},
                          {"size_gib", integer("The disk's size when it was taken")},
                          {"used_bytes", integer()},
                          {"state", one_of({"creating", "available", "deleting", "deleted", "error"})},
                          {"state_reason", nullable(str())},
                          {"created_at", time()},
                          {"deleted_at", nullable(time())},
                          {"purge_at", nullable(time("In the recycle bin: when it is destroyed for good (deleted_at + [policy] recycle_days); else null"))}});
  s["QuotaUse"] = answer({{"gpus", integer("GPUs held by instances that run or will")},
                          {"instances", integer("Instances not released")},
                          {"disk_gib", integer("GiB of data disks, the recycle bin's included")},
                          {"images", integer("Custom images")},
                          {"snapshots", integer("Snapshots, the recycle bin's included")}});
  s["QuotaLimits"] = answer({{"gpus", integer()},
                             {"instances", integer()},
                             {"disk_gib", integer()},
                             {"images", integer()},
                             {"snapshots", integer()}});
  s["MyQuota"] = answer({{"gpus", integer("The limit that binds")},
                         {"instances", integer()},
                         {"disk_gib", integer()},
                         {"images", integer()},
                         {"snapshots", integer()},
                         {"used", ref("QuotaUse")}});
  s["UserQuota"] = answer({{"gpus", nullable(integer("The user's own limit; null: the config's default"))},
                           {"instances", nullable(integer())},
                           {"disk_gib", nullable(integer())},
                           {"images", nullable(integer())},
                           {"snapshots", nullable(integer())},
                           {"user", str()},
                           {"effective", ref("QuotaLimits")},
                           {"defaults", ref("QuotaLimits")},
                           {"used", ref("QuotaUse")}});
  json::object prices = price_schemas(s);
  s["PriceTable"] = std::move(prices);
  s["Clock"] = answer({{"now", time("The platform time after the advance")}});
  for (std::string_view item :
       {"User", "AdminUser", "Token", "Zone", "MarketOffer", "MarketWatch", "Image", "Instance", "SshKey", "Event",
        "Host", "Disk", "Snapshot", "SecurityGroup", "LedgerEntry"})
    s[std::string(item) + "List"] = list_of(item);

  // Request bodies.
  s["RegisterRequest"] = object({{"username", with(str(), "pattern", kUsernamePattern)},
                                 {"password", with(str(), "minLength", 8)},
                                 {"email", nullable(str())}},
                                {"username", "password"});
  s["LoginRequest"] = object({{"username", str()}, {"password", str()}}, {"username", "password"});
  s["PasswordChange"] = object({{"old_password", str()},
                                {"new_password", with(str(), "minLength", 8)},
                                {"revoke_tokens", boolean("Also revoke every API token of the user")}},
                               {"old_password", "new_password"});
  s["TokenCreate"] = object({{"name", with(with(str(), "minLength", 1), "maxLength", 100)}}, {"name"});
  s["JoinTokenCreate"] = object(
      {{"host", with(with(str("The host's name ([[hosts]] name rules); not one this daemon serves in-process"), "minLength", 1),
                     "maxLength", 63)},
       {"ttl_seconds", with(with(integer("How long it may be used (default [agents] join_token_ttl, 1 h)"), "minimum", 60),
                            "maximum", 604800)}},
      {"host"});
  s["SshKeyCreate"] = object({{"name", with(str(), "pattern", kNamePattern)},
                              {"public_key", str("OpenSSH format: TYPE BASE64 [COMMENT]; DSA is refused")}},
                             {"name", "public_key"});
  s["ImageSave"] = object({{"name", with(str("Unique among your images; not a public image's name"), "pattern", kNamePattern)},
                           {"description", with(str(), "maxLength", 1000)}},
                          {"name"});
  s["InstanceCreate"] = instance_create_schema();
  s["InstanceUpdate"] = instance_update_schema();
  json::object rules = with(array_of(ref("SecurityGroupRule")), "maxItems", 100);
  s["SecurityGroupCreate"] =
      object({{"name", with(str(), "pattern", kNamePattern)},
              {"description", with(str(), "maxLength", 255)},
              {"rules", rules},
              {"acknowledge_risk", with(boolean("Needed for rules that together open more than 10 ports to half or more of the IPv4 or IPv6 space"), "default", false)}},
             {"name", "rules"});
  s["SecurityGroupUpdate"] =
      object({{"description", with(str(), "maxLength", 255)},
              {"rules", std::move(rules)},
              {"acknowledge_risk", with(boolean("Needed for rules that together open more than 10 ports to half or more of the IPv4 or IPv6 space"), "default", false)}},
             {"rules"});
  s["InstanceStart"] = object({{"no_gpu", with(boolean("Start at the no-GPU size, to reach its data"), "default", false)}});
  s["AdminUserCreate"] = object({{"username", with(str(), "pattern", kUsernamePattern)},
                                 {"password", with(str(), "minLength", 8)},
                                 {"role", with(one_of({"user", "admin"}), "default", "user")},
                                 {"email", nullable(str())}},
                                {"username", "password"});
  s["AdminUserUpdate"] = object({{"disabled", boolean()}, {"role", one_of({"user", "admin"})}});
  s["DiskCreate"] = object({{"name", with(str(), "pattern", kNamePattern)},
                            {"zone", str("Default: the only zone; a disk from a snapshot lives where the snapshot does")},
                            {"host", str("A host of the zone (name or id); default: the one with most free GPUs")},
                            {"size_gib", with(with(integer(), "minimum", 1), "maximum", 65536)},
                            {"from_snapshot", str("snap-... or its name: the new disk holds the snapshot's data")}},
                           {"name"});
  s["DiskAttach"] = object({{"instance", str("A stopped instance on the disk's host: id or name")},
                            {"mount_path", with(str("Absolute; not /, not a system directory"), "default", "/root/data")}},
                           {"instance"});
  s["DiskResize"] = object({{"size_gib", with(integer("Grow only"), "minimum", 1)}}, {"size_gib"});
  s["SnapshotCreate"] = object({{"name", with(str(), "pattern", kNamePattern)}}, {"name"});
  s["QuotaUpdate"] = object({{"gpus", nullable(with(integer(), "minimum", 0))},
                             {"instances", nullable(with(integer(), "minimum", 0))},
                             {"disk_gib", nullable(with(integer(), "minimum", 0))},
                             {"images", nullable(with(integer(), "minimum", 0))},
                             {"snapshots", nullable(with(integer(), "minimum", 0))}});
  // Monitoring.
  json::object point = with(array_of(json::object{{"oneOf", json::array{str("RFC 3339 time, the step's start"),
                                                                           json::object{{"type", "number"}}}}},
                                     "[time, value]"),
                            "minItems", 2);
  s["MetricSeries"] = answer({{"name", one_of({"cpu_percent", "memory_used_bytes", "gpu_util_percent", "gpu_memory_used_bytes"})},
                              {"gpu", integer("The GPU's position in the instance (GPU series only)")},
                              {"points", array_of(std::move(point))}});
  s["InstanceMetrics"] = answer(
      {{"instance", str("i-...")},
       {"since", time()},
       {"until", time()},
       {"step", integer("Seconds per point")},
       {"resolution", one_of({"raw", "1m"})},
       {"cpu", integer("Cores of the instance")},
       {"memory_limit_bytes", integer()},
       {"gpus", array_of(json::object{{"type", "object"}})},
       {"gpu_metrics", ref("InstanceMonitoring")},
       {"series", array_of(ref("MetricSeries"))},
       {"latest", json::object{{"type", "object"}, {"nullable", true}, {"description", "The newest reading, null when none"}}}});
  // Billing.
  json::object money = integer("In the currency's smallest unit (fen for CNY)");
  s["BillingAlert"] = answer({{"threshold", money}, {"webhook_url", nullable(str("Gets one POST per downward crossing"))}});
  s["BillingAccount"] = answer({{"id", str("ba-...")},
                                {"kind", one_of({"user", "group"})},
                                {"balance", integer("Live balance, smallest unit: the ledger's balance less what "
                                                    "running meters have accrued and not yet settled")},
                                {"settled_balance", integer("The ledger's balance (the sum of its entries)")},
                                {"unsettled", integer("Accrued by open meters, not yet settled (smallest unit)")},
                                {"currency", str("ISO 4217, e.g. CNY")},
                                {"state", one_of({"ok", "low", "arrears"})},
                                {"alert", nullable_ref("BillingAlert")},
                                {"arrears_since", nullable(time("When the balance reached zero"))}});
  s["MarketWatch"] = answer({{"id", str("watch-...")},
                             {"zone", str()},
                             {"gpu_model", str()},
                             {"created_at", time()},
                             {"fired_at", nullable(time("When a GPU of it freed up and the watch fired"))}});
  s["MarketWatchCreate"] = object({{"zone", str()}, {"gpu_model", str()}}, {"zone", "gpu_model"});
  s["AdminUser"] = answer({{"id", str("u-...")},
                           {"username", str()},
                           {"email", nullable(str())},
                           {"role", one_of({"user", "admin"})},
                           {"disabled", boolean()},
                           {"created_at", time()},
                           {"balance", integer("The user's live balance (as GET /billing/account shows it)")},
                           {"billing_state", one_of({"ok", "low", "arrears"})},
                           {"billing", ref("BillingAccount")}});
  json::object entry_kind = one_of({"charge", "credit", "subscription", "refund", "adjustment"});
  json::object entry_fields{{"id", str("le-...")},
                            {"seq", integer("Position in the account's chain: 1, 2, 3, ...")},
                            {"time", time()},
                            {"amount", integer("Smallest unit; charges are negative")},
                            {"balance_after", money},
                            {"kind", entry_kind},
                            {"resource", nullable(str("What it is for (i-..., d-..., ...)"))},
                            {"resource_kind", nullable(one_of({"compute", "compute_no_gpu", "system_disk", "data_disk",
                                                               "snapshot", "image"}))},
                            {"quantity", integer("What a charge covers: seconds, or GiB-seconds for storage")},
                            {"description", str()}};
  // An hourly settlement's entry for several resources of one kind names no resource and
  // carries their shares; present only then.
  auto with_lines = [&](json::object schema, json::object quantity) {
    schema["properties"].as_object()["lines"] = with(
        array_of(answer({{"resource", str("i-..., d-..., ...")},
                         {"resource_kind", one_of({"compute", "compute_no_gpu", "system_disk", "data_disk",
                                                   "snapshot", "image"})},
                         {"quantity", std::move(quantity)},
                         {"amount", integer("This resource's share of the entry's amount")}})),
        "description", "Present when the entry covers several resources: each one's share");
    return schema;
  };
  s["LedgerEntry"] = with_lines(answer(entry_fields), integer("Seconds, or GiB-seconds for storage"));
  json::object credited = entry_fields;
  credited["user"] = str("The credited user's id");
  s["CreditEntry"] = answer(credited);
  json::object line = entry_fields;
  line["quantity"] = json::object{{"type", "number"}, {"description", "Seconds, or GiB-hours for storage"}};
  s["StatementLine"] = with_lines(answer(line), json::object{{"type", "number"}, {"description", "Seconds, or GiB-hours for storage"}});
  s["Statement"] = answer({{"month", str("YYYY-MM")},
                           {"timezone", str("billing_timezone")},
                           {"currency", str()},
                           {"opening_balance", money},
                           {"credits", money},
                           {"charges", with(json::object{{"type", "object"}}, "additionalProperties", integer())},
                           {"charges_total", money},
                           {"refunds", integer("Refunds, netted in charges")},
                           {"closing_balance", money},
                           {"lines", array_of(ref("StatementLine"))}});
  s["UsageItem"] = object({{"resource", str()},
                           {"kind", one_of({"compute", "compute_no_gpu", "system_disk", "data_disk", "snapshot", "image"})},
                           {"quantity", json::object{{"type", "number"}}},
                           {"unit", one_of({"second", "gib_hour"})},
                           {"amount", money},
                           {"day", str("YYYY-MM-DD in billing_timezone (group_by=day)")},
                           {"notes", array_of(str("Why time was not charged (e.g. a lost GPU)"))}},
                          {"resource", "kind", "quantity", "unit", "amount"});
  s["UsageList"] = answer({{"items", array_of(ref("UsageItem"))}, {"next_cursor", nullable(str())}, {"currency", str()}});
  s["IdleItem"] = answer({{"resource", str()},
                          {"name", str()},
                          {"kind", one_of({"system_disk", "data_disk", "snapshot", "image"})},
                          {"size_gib", integer()},
                          {"why", str("Why it counts as idle")},
                          {"since", time()},
                          {"cost_per_day", money}});
  s["IdleList"] = answer({{"items", array_of(ref("IdleItem"))},
                          {"next_cursor", nullable(str())},
                          {"cost_per_day", money},
                          {"currency", str()}});
  s["Subscription"] = answer({{"instance", str("i-...")},
                              {"name", str()},
                              {"instance_state", str()},
                              {"gpu_model", nullable(str())},
                              {"gpu_count", integer()},
                              {"term", one_of({"weekly", "monthly"})},
                              {"status", one_of({"active", "ended"})},
                              {"started_at", nullable(time("The first running: terms count from it"))},
                              {"expires_at", nullable(time("The paid term's end (active only)"))},
                              {"auto_renew", boolean("Renewed at the price current then (active only)")},
                              {"payments", integer("Up-front payments: the first and each renewal")},
                              {"paid", integer("What the payments came to")},
                              {"refunded", integer("Refunds of unused terms")},
                              {"first_paid_at", nullable(time())},
                              {"last_paid_at", nullable(time())}});
  s["SubscriptionList"] = answer({{"items", array_of(ref("Subscription"))}, {"next_cursor", nullable(str())}, {"currency", str()}});
  s["Estimate"] = answer({{"currency", str()},
                          {"billing_mode", one_of({"hourly", "weekly", "monthly"})},
                          {"price_per_hour", money},
                          {"per_hour", money},
                          {"per_day", money},
                          {"per_week", money},
                          {"per_month", integer("30 days of the hourly price")},
                          {"upfront", integer("A subscription's price, paid at creation")},
                          {"subscription", answer({{"per_week", money}, {"per_month", money}})},
                          {"storage_per_hour_micros", integer("Millionths of the smallest unit")},
                          {"storage_per_day", money}});
  s["RevenueSummary"] = answer({{"month", str()},
                                {"timezone", str()},
                                {"currency", str()},
                                {"revenue", integer("Charged and paid for: charged less the month's growth of arrears")},
                                {"charged", integer("Charges net of refunds")},
                                {"by_kind", with(json::object{{"type", "object"}}, "additionalProperties", integer())},
                                {"refunds", integer("Refunds (already netted in charged)")},
                                {"received", integer("Money received: credits")},
                                {"credits", integer("Same as received")},
                                {"adjustments", integer("The operator's negative credits (not revenue)")},
                                {"arrears", integer("What users owed at the month's end (negative balances)")},
                                {"arrears_change", integer("Growth of arrears over the month")},
                                {"days", array_of(ref("RevenueDay"))}});
  s["RevenueDay"] = answer({{"day", str("YYYY-MM-DD in billing_timezone")},
                            {"charged", integer("Charges net of refunds, subscriptions included")},
                            {"by_kind", with(json::object{{"type", "object"}}, "additionalProperties", integer())},
                            {"usage", with(json::object{{"type", "object"}}, "additionalProperties",
                                           json::object{{"type", "number"}})},
                            {"refunds", integer()},
                            {"received", integer("Credits")},
                            {"adjustments", integer()}},
                           "One day of the month: what was charged by kind, what was used by meter kind (seconds of "
                           "compute, GiB-hours of storage), money received");
  s["AlertSet"] = object({{"threshold", with(integer("Alert when the balance falls below it"), "minimum", 0)},
                          {"webhook_url", nullable(str("http(s); private and loopback targets refused unless allowed"))}},
                         {"threshold"});
  s["CreditRequest"] = object({{"amount", integer("Smallest unit; negative: an adjustment")},
                               {"note", with(str(), "maxLength", 500)}},
                              {"amount"});
  s["ClockAdvance"] = object({{"advance_seconds", with(with(integer(), "minimum", 0), "maximum", 10LL * 365 * 86400)}},
                             {"advance_seconds"});
  return s;
}

const std::vector<OperationSpec>& operation_specs() {
  // Query parameters shared by the lists of api.md.
  const QueryParam limit{"limit", "integer", "Page size, 1-1000 (default 100)"};
  const QueryParam cursor{"cursor", "string", "The next_cursor of the previous page"};
  const QueryParam state{"state", "string", "Only instances in this state (default: all but released)",
                         {"creating", "running", "stopping", "stopped", "starting", "releasing", "released", "error"}};
  const std::vector<QueryParam> page{limit, cursor};
  const std::vector<QueryParam> events{
      {"since_seq", "integer", "Only events after this seq"},
      {"resource", "string", "Only events of this resource (id, or the caller's resource name)"}};
  static const std::vector<OperationSpec> specs{
      // system
      {.method = "GET", .pattern = "/healthz", .operation_id = "getHealth", .status = 200, .response = "Health"},
      {.method = "GET", .pattern = "/api/v1/healthz", .operation_id = "getApiHealth", .status = 200, .response = "Health"},
      {.method = "GET", .pattern = "/metrics", .operation_id = "getMetrics", .status = 200, .response = "",
       .media = "text/plain"},
      {.method = "GET", .pattern = "/api/v1/openapi.json", .operation_id = "getOpenApiDocument", .status = 200,
       .response = ""},
      // auth
      {.method = "POST", .pattern = "/api/v1/auth/register", .operation_id = "register", .status = 201, .response = "User",
       .request = "RegisterRequest", .errors = {400, 403, 409}},
      {.method = "POST", .pattern = "/api/v1/auth/login", .operation_id = "login", .status = 200, .response = "Session",
       .request = "LoginRequest", .errors = {400, 401, 429}},
      {.method = "POST", .pattern = "/api/v1/auth/logout", .operation_id = "logout", .status = 204, .response = ""},
      {.method = "GET", .pattern = "/api/v1/me", .operation_id = "getMe", .status = 200, .response = "User"},
      {.method = "PUT", .pattern = "/api/v1/me/password", .operation_id = "changePassword", .status = 204, .response = "",
       .request = "PasswordChange", .errors = {400}},
      {.method = "POST", .pattern = "/api/v1/auth/session", .operation_id = "createBrowserSession", .status = 200,
       .response = "BrowserSession", .request = "LoginRequest", .errors = {400, 401, 429}},
      {.method = "GET", .pattern = "/api/v1/auth/session", .operation_id = "getBrowserSession", .status = 200,
       .response = "BrowserSession"},
      {.method = "DELETE", .pattern = "/api/v1/auth/session", .operation_id = "deleteBrowserSession", .status = 204,
       .response = ""},
      // tokens
      {.method = "POST", .pattern = "/api/v1/tokens", .operation_id = "createToken", .status = 201,
       .response = "TokenCreated", .request = "TokenCreate", .idempotent = true, .errors = {400}},
      {.method = "GET", .pattern = "/api/v1/tokens", .operation_id = "listTokens", .status = 200, .response = "TokenList",
       .errors = {400}, .query = page},
      {.method = "DELETE", .pattern = "/api/v1/tokens/{id}", .operation_id = "deleteToken", .status = 204, .response = "",
       .errors = {404, 409},
       .id_description = "The token's id (tok-...), or its name when one live API token has it (409 when several do)"},
      // operator: remote agents' join tokens and certificates (issue 26)
      {.method = "POST", .pattern = "/api/v1/admin/hosts/join-token", .operation_id = "adminCreateJoinToken", .status = 201,
       .response = "JoinToken", .request = "JoinTokenCreate", .idempotent = true, .errors = {400, 409}},
      {.method = "POST", .pattern = "/api/v1/admin/hosts/{name}/revoke-certificate", .operation_id = "adminRevokeHostCertificate",
       .status = 200, .response = "CertificatesRevoked", .errors = {404}, .id_description = "The host's name"},
      // operator: users and clock
      {.method = "GET", .pattern = "/api/v1/admin/users", .operation_id = "adminListUsers", .status = 200,
       .response = "AdminUserList", .errors = {400}, .query = page},
      {.method = "POST", .pattern = "/api/v1/admin/users", .operation_id = "adminCreateUser", .status = 201,
       .response = "User", .request = "AdminUserCreate", .idempotent = true, .errors = {400, 409}},
      {.method = "PATCH", .pattern = "/api/v1/admin/users/{id}", .operation_id = "adminUpdateUser", .status = 200,
       .response = "User", .request = "AdminUserUpdate", .errors = {400, 404, 409},
       .id_description = "The user's id or username"},
      {.method = "POST", .pattern = "/api/v1/admin/clock", .operation_id = "adminAdvanceClock", .status = 200,
       .response = "Clock", .request = "ClockAdvance", .errors = {400}},
      // market
      {.method = "GET", .pattern = "/api/v1/zones", .operation_id = "listZones", .status = 200, .response = "ZoneList",
       .errors = {400}, .query = page},
      {.method = "GET", .pattern = "/api/v1/market", .operation_id = "listMarketOffers", .status = 200,
       .response = "MarketOfferList", .errors = {400}, .query = page},
      {.method = "POST", .pattern = "/api/v1/market/watches", .operation_id = "createMarketWatch", .status = 201,
       .response = "MarketWatch", .request = "MarketWatchCreate", .idempotent = true, .errors = {400}},
      {.method = "GET", .pattern = "/api/v1/market/watches", .operation_id = "listMarketWatches", .status = 200,
       .response = "MarketWatchList", .errors = {400}, .query = page},
      {.method = "DELETE", .pattern = "/api/v1/market/watches/{id}", .operation_id = "deleteMarketWatch", .status = 204,
       .response = "", .errors = {404}, .id_description = "The watch's id"},
      {.method = "GET", .pattern = "/api/v1/admin/hosts", .operation_id = "adminListHosts", .status = 200,
       .response = "HostList", .errors = {400},
       .query = {limit, cursor, {"include_removed", "boolean", "true: removed hosts are listed too"}}},
      {.method = "POST", .pattern = "/api/v1/admin/hosts/{name}/drain", .operation_id = "adminDrainHost", .status = 200,
       .response = "Host", .errors = {404}, .id_description = "The host's name or id"},
      {.method = "POST", .pattern = "/api/v1/admin/hosts/{name}/undrain", .operation_id = "adminUndrainHost",
       .status = 200, .response = "Host", .errors = {404}, .id_description = "The host's name or id"},
      {.method = "DELETE", .pattern = "/api/v1/admin/hosts/{name}", .operation_id = "adminRemoveHost", .status = 200,
       .response = "Host", .errors = {404, 409}, .id_description = "The host's name or id"},
      {.method = "GET", .pattern = "/api/v1/admin/prices", .operation_id = "adminGetPrices", .status = 200,
       .response = "PriceTable"},
      {.method = "PUT", .pattern = "/api/v1/admin/prices", .operation_id = "adminReplacePrices", .status = 200,
       .response = "PriceTable", .request = "PriceTableInput", .errors = {400}},
      // instances
      {.method = "POST", .pattern = "/api/v1/instances", .operation_id = "createInstance", .status = 202,
       .response = "Instance", .request = "InstanceCreate", .idempotent = true, .errors = {400, 403, 409}},
      {.method = "GET", .pattern = "/api/v1/instances", .operation_id = "listInstances", .status = 200,
       .response = "InstanceList", .errors = {400},
       .query = {limit, cursor, state,
                 {"all", "boolean", "true: the operator sees every user's instances; a user sees all their own, released too"}}},
      {.method = "GET", .pattern = "/api/v1/admin/instances", .operation_id = "adminListInstances", .status = 200,
       .response = "InstanceList", .errors = {400}, .query = {limit, cursor, state}},
      {.method = "GET", .pattern = "/api/v1/instances/{id}", .operation_id = "getInstance", .status = 200,
       .response = "Instance", .errors = {404}},
      {.method = "PATCH", .pattern = "/api/v1/instances/{id}", .operation_id = "updateInstance", .status = 200,
       .response = "Instance", .request = "InstanceUpdate", .errors = {400, 404, 409}},
      {.method = "DELETE", .pattern = "/api/v1/instances/{id}", .operation_id = "releaseInstance", .status = 202,
       .response = "Instance", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/stop", .operation_id = "stopInstance", .status = 202,
       .response = "Instance", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/start", .operation_id = "startInstance", .status = 202,
       .response = "Instance", .request = "InstanceStart", .request_required = false, .errors = {400, 403, 404, 409}},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/restart", .operation_id = "restartInstance", .status = 202,
       .response = "Instance", .errors = {404, 409}},
      {.method = "GET", .pattern = "/api/v1/instances/{id}/terminal", .operation_id = "openInstanceTerminal",
       .status = 101, .response = "", .errors = {400, 404, 409},
       .id_description = "The caller's own instance: id or name (not even the operator reaches another's)"},
      // the instance proxy (any answer of the service; WebSocket upgrades too)
      {.method = "GET", .pattern = "/api/v1/instances/{id}/jupyter/{path}", .operation_id = "getInstanceJupyterProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); Jupyter Notebook's path below its base URL"},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/jupyter/{path}", .operation_id = "postInstanceJupyterProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); Jupyter Notebook's path below its base URL"},
      {.method = "PUT", .pattern = "/api/v1/instances/{id}/jupyter/{path}", .operation_id = "putInstanceJupyterProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); Jupyter Notebook's path below its base URL"},
      {.method = "PATCH", .pattern = "/api/v1/instances/{id}/jupyter/{path}", .operation_id = "patchInstanceJupyterProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); Jupyter Notebook's path below its base URL"},
      {.method = "DELETE", .pattern = "/api/v1/instances/{id}/jupyter/{path}", .operation_id = "deleteInstanceJupyterProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); Jupyter Notebook's path below its base URL"},
      {.method = "GET", .pattern = "/api/v1/instances/{id}/proxy/{port}/{path}", .operation_id = "getInstancePortProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); a declared TCP port, then the path at the service"},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/proxy/{port}/{path}", .operation_id = "postInstancePortProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); a declared TCP port, then the path at the service"},
      {.method = "PUT", .pattern = "/api/v1/instances/{id}/proxy/{port}/{path}", .operation_id = "putInstancePortProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); a declared TCP port, then the path at the service"},
      {.method = "PATCH", .pattern = "/api/v1/instances/{id}/proxy/{port}/{path}", .operation_id = "patchInstancePortProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); a declared TCP port, then the path at the service"},
      {.method = "DELETE", .pattern = "/api/v1/instances/{id}/proxy/{port}/{path}", .operation_id = "deleteInstancePortProxy", .status = 200, .response = "",
       .errors = {404, 409, 503}, .media = "*/*",
       .id_description = "The caller's own instance (id or name); a declared TCP port, then the path at the service"},
      // SSH keys
      {.method = "POST", .pattern = "/api/v1/ssh-keys", .operation_id = "createSshKey", .status = 201, .response = "SshKey",
       .request = "SshKeyCreate", .idempotent = true, .errors = {400, 409}},
      {.method = "GET", .pattern = "/api/v1/ssh-keys", .operation_id = "listSshKeys", .status = 200,
       .response = "SshKeyList", .errors = {400}, .query = page},
      {.method = "GET", .pattern = "/api/v1/ssh-keys/{id}", .operation_id = "getSshKey", .status = 200,
       .response = "SshKey", .errors = {404}},
      {.method = "DELETE", .pattern = "/api/v1/ssh-keys/{id}", .operation_id = "deleteSshKey", .status = 204,
       .response = "", .errors = {404}},
      // security groups
      {.method = "POST", .pattern = "/api/v1/security-groups", .operation_id = "createSecurityGroup", .status = 201,
       .response = "SecurityGroup", .request = "SecurityGroupCreate", .idempotent = true, .errors = {400, 409}},
      {.method = "GET", .pattern = "/api/v1/security-groups", .operation_id = "listSecurityGroups", .status = 200,
       .response = "SecurityGroupList", .errors = {400}, .query = page},
      {.method = "GET", .pattern = "/api/v1/security-groups/{id}", .operation_id = "getSecurityGroup", .status = 200,
       .response = "SecurityGroup", .errors = {404}},
      {.method = "PUT", .pattern = "/api/v1/security-groups/{id}", .operation_id = "replaceSecurityGroupRules",
       .status = 200, .response = "SecurityGroup", .request = "SecurityGroupUpdate", .errors = {400, 404, 409}},
      {.method = "DELETE", .pattern = "/api/v1/security-groups/{id}", .operation_id = "deleteSecurityGroup",
       .status = 204, .response = "", .errors = {404, 409}},
      // images
      {.method = "GET", .pattern = "/api/v1/images", .operation_id = "listImages", .status = 200, .response = "ImageList",
       .errors = {400},
       .query = {limit, cursor, {"state", "string", "deleted: only your deleted, still restorable images", {"deleted"}}}},
      {.method = "GET", .pattern = "/api/v1/images/{id}", .operation_id = "getImage", .status = 200, .response = "Image",
       .errors = {404}},
      {.method = "DELETE", .pattern = "/api/v1/images/{id}", .operation_id = "deleteImage", .status = 200,
       .response = "Image", .errors = {403, 404, 409}},
      {.method = "POST", .pattern = "/api/v1/images/{id}/restore", .operation_id = "restoreImage", .status = 200,
       .response = "Image", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/instances/{id}/images", .operation_id = "saveInstanceImage", .status = 202,
       .response = "Image", .request = "ImageSave", .idempotent = true, .errors = {400, 403, 404, 409},
       .id_description = "The caller's instance: id or name"},
      // data disks and snapshots
      {.method = "POST", .pattern = "/api/v1/disks", .operation_id = "createDisk", .status = 202, .response = "Disk",
       .request = "DiskCreate", .idempotent = true, .errors = {400, 403, 409}},
      {.method = "GET", .pattern = "/api/v1/disks", .operation_id = "listDisks", .status = 200, .response = "DiskList",
       .errors = {400},
       .query = {limit, cursor,
                 {"state", "string", "Only disks in this state (default: all but deleted); deleted: the recycle bin",
                  {"creating", "available", "attached", "deleting", "deleted", "error"}},
                 {"all", "boolean", "true: the operator sees every user's disks"}}},
      {.method = "GET", .pattern = "/api/v1/disks/{id}", .operation_id = "getDisk", .status = 200, .response = "Disk",
       .errors = {404}},
      {.method = "DELETE", .pattern = "/api/v1/disks/{id}", .operation_id = "deleteDisk", .status = 202, .response = "Disk",
       .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/disks/{id}/attach", .operation_id = "attachDisk", .status = 200,
       .response = "Disk", .request = "DiskAttach", .errors = {400, 404, 409}},
      {.method = "POST", .pattern = "/api/v1/disks/{id}/detach", .operation_id = "detachDisk", .status = 200,
       .response = "Disk", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/disks/{id}/resize", .operation_id = "resizeDisk", .status = 202,
       .response = "Disk", .request = "DiskResize", .errors = {400, 403, 404, 409}},
      {.method = "POST", .pattern = "/api/v1/disks/{id}/restore", .operation_id = "restoreDisk", .status = 200,
       .response = "Disk", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/disks/{id}/snapshots", .operation_id = "createSnapshot", .status = 202,
       .response = "Snapshot", .request = "SnapshotCreate", .idempotent = true, .errors = {400, 404, 409}},
      {.method = "GET", .pattern = "/api/v1/snapshots", .operation_id = "listSnapshots", .status = 200,
       .response = "SnapshotList", .errors = {400},
       .query = {limit, cursor,
                 {"state", "string", "Only snapshots in this state (default: all but deleted)",
                  {"creating", "available", "deleting", "deleted", "error"}},
                 {"all", "boolean", "true: the operator sees every user's snapshots"}}},
      {.method = "GET", .pattern = "/api/v1/snapshots/{id}", .operation_id = "getSnapshot", .status = 200,
       .response = "Snapshot", .errors = {404}},
      {.method = "DELETE", .pattern = "/api/v1/snapshots/{id}", .operation_id = "deleteSnapshot", .status = 202,
       .response = "Snapshot", .errors = {404, 409}},
      {.method = "POST", .pattern = "/api/v1/snapshots/{id}/restore", .operation_id = "restoreSnapshot", .status = 200,
       .response = "Snapshot", .errors = {404, 409}},
      // quotas
      {.method = "GET", .pattern = "/api/v1/me/quota", .operation_id = "getMyQuota", .status = 200, .response = "MyQuota"},
      {.method = "GET", .pattern = "/api/v1/admin/users/{id}/quota", .operation_id = "adminGetUserQuota", .status = 200,
       .response = "UserQuota", .errors = {404}, .id_description = "The user's id or username"},
      {.method = "PUT", .pattern = "/api/v1/admin/users/{id}/quota", .operation_id = "adminSetUserQuota", .status = 200,
       .response = "UserQuota", .request = "QuotaUpdate", .errors = {400, 404},
       .id_description = "The user's id or username"},
      // monitoring
      {.method = "GET", .pattern = "/api/v1/instances/{id}/metrics", .operation_id = "getInstanceMetrics", .status = 200,
       .response = "InstanceMetrics", .errors = {400, 404},
       .query = {{"since", "string", "RFC 3339 time, or a duration before now (\"6h\"); default until - 1h"},
                 {"until", "string", "RFC 3339 time, or a duration before now; default now"},
                 {"step", "string", "Seconds (\"60\") or a duration (\"1m\"); default about 720 points"}}},
      // billing
      {.method = "GET", .pattern = "/api/v1/billing/account", .operation_id = "getBillingAccount", .status = 200,
       .response = "BillingAccount"},
      {.method = "GET", .pattern = "/api/v1/billing/ledger", .operation_id = "listLedgerEntries", .status = 200,
       .response = "LedgerEntryList", .errors = {400},
       .query = {limit, cursor, {"since", "string", "RFC 3339 time or YYYY-MM-DD (inclusive)"},
                 {"until", "string", "RFC 3339 time or YYYY-MM-DD (exclusive)"}}},
      {.method = "GET", .pattern = "/api/v1/billing/usage", .operation_id = "getUsage", .status = 200,
       .response = "UsageList", .errors = {400},
       .query = {{"since", "string", "RFC 3339 time or YYYY-MM-DD (inclusive)"},
                 {"until", "string", "RFC 3339 time or YYYY-MM-DD (exclusive)"},
                 {"group_by", "string", "resource (default) or day", {"resource", "day"}}}},
      {.method = "GET", .pattern = "/api/v1/billing/statements/{month}", .operation_id = "getStatement", .status = 200,
       .response = "Statement", .errors = {400}},
      {.method = "GET", .pattern = "/api/v1/billing/idle", .operation_id = "listIdleBilling", .status = 200,
       .response = "IdleList"},
      {.method = "GET", .pattern = "/api/v1/billing/subscriptions", .operation_id = "listSubscriptions", .status = 200,
       .response = "SubscriptionList", .errors = {400}, .query = {limit, cursor}},
      {.method = "PUT", .pattern = "/api/v1/billing/alert", .operation_id = "setBalanceAlert", .status = 200,
       .response = "BillingAccount", .request = "AlertSet", .errors = {400}},
      {.method = "DELETE", .pattern = "/api/v1/billing/alert", .operation_id = "clearBalanceAlert", .status = 204,
       .response = ""},
      {.method = "POST", .pattern = "/api/v1/billing/estimate", .operation_id = "estimateInstance", .status = 200,
       .response = "Estimate", .request = "InstanceCreate", .errors = {400}},
      {.method = "POST", .pattern = "/api/v1/admin/users/{id}/credit", .operation_id = "adminCreditUser", .status = 201,
       .response = "CreditEntry", .request = "CreditRequest", .idempotent = true, .errors = {400, 404, 409},
       .id_description = "The user's id or username"},
      {.method = "GET", .pattern = "/api/v1/admin/users/{id}/ledger", .operation_id = "adminUserLedger", .status = 200,
       .response = "LedgerEntryList", .errors = {400, 404},
       .query = {limit, cursor, {"since", "string", "RFC 3339 time or YYYY-MM-DD (inclusive)"},
                 {"until", "string", "RFC 3339 time or YYYY-MM-DD (exclusive)"}},
       .id_description = "The user's id or username"},
      {.method = "GET", .pattern = "/api/v1/admin/billing/summary", .operation_id = "adminRevenueSummary", .status = 200,
       .response = "RevenueSummary", .errors = {400}, .query = {{"month", "string", "YYYY-MM (default: this month)"}}},
      // events
      {.method = "GET", .pattern = "/api/v1/events", .operation_id = "listEvents", .status = 200, .response = "EventList",
       .errors = {400},
       .query = {events[0], events[1], limit, {"cursor", "string", "The next_cursor of the previous page (a seq)"}}},
      {.method = "GET", .pattern = "/api/v1/events/stream", .operation_id = "streamEvents", .status = 200,
       .response = "", .errors = {400}, .query = events, .media = "text/event-stream"},
  };
  return specs;
}

const OperationSpec* find_operation_spec(std::string_view method, std::string_view pattern) {
  for (const auto& spec : operation_specs())
    if (spec.method == method && spec.pattern == pattern) return &spec;
  return nullptr;
}

}  // namespace gpucloud::server::openapi
