#include "agent/runtime/docker_engine_driver.h"

#include <charconv>

#include <csignal>
#include <sys/types.h>

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include "agent/runtime/btrfs_qgroup_usage.h"
#include "agent/runtime/engine_pipe.h"
#include "core/offload.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
using docker::EngineClient;
using docker::Method;
using docker::url_encode;
using net::awaitable;
using net::redirect_error;
using net::use_awaitable;
using local = net::local::stream_protocol;

namespace {

constexpr std::string_view kNvidiaVisible = "NVIDIA_VISIBLE_DEVICES";

// ---- small JSON readers (the engine's answers are trusted but not assumed complete) ----

const json::object* object_at(const json::object* o, std::string_view key) {
  if (!o) return nullptr;
  const auto* child = o->if_contains(key);
  return child && child->is_object() ? &child->as_object() : nullptr;
}
std::string string_at(const json::object* o, std::string_view key) {
  if (!o) return {};
  const auto* child = o->if_contains(key);
  return child && child->is_string() ? std::string(child->as_string()) : std::string();
}
std::int64_t int_at(const json::object* o, std::string_view key) {
  if (!o) return 0;
  const auto* child = o->if_contains(key);
  if (!child) return 0;
  if (child->is_int64()) return child->as_int64();
  if (child->is_uint64()) return static_cast<std::int64_t>(child->as_uint64());
  return 0;
}
bool bool_at(const json::object* o, std::string_view key) {
  if (!o) return false;
  const auto* child = o->if_contains(key);
  return child && child->is_bool() && child->as_bool();
}
std::map<std::string, std::string> labels_at(const json::object* o, std::string_view key) {
  std::map<std::string, std::string> out;
  if (const auto* labels = object_at(o, key)) {
    for (const auto& [k, v] : *labels) {
      if (v.is_string()) out.emplace(std::string(k), std::string(v.as_string()));
    }
  }
  return out;
}
json::array string_array(const std::vector<std::string>& items) {
  json::array out;
  for (const auto& s : items) out.emplace_back(s);
  return out;
}
json::object string_map(const std::map<std::string, std::string>& items) {
  json::object out;
  for (const auto& [k, v] : items) out[k] = v;
  return out;
}

// The engine writes "0001-01-01T00:00:00Z" for "never".
std::string engine_time(std::string t) {
  if (t.empty() || t.rfind("0001-01-01", 0) == 0) return {};
  return t;
}

ContainerStatus parse_container(const json::value& v) {
  ContainerStatus s;
  const json::object* root = v.if_object();
  s.id = string_at(root, "Id");
  s.name = string_at(root, "Name");
  if (!s.name.empty() && s.name.front() == '/') s.name.erase(0, 1);
  const auto* config = object_at(root, "Config");
  s.image = string_at(config, "Image");
  s.labels = labels_at(config, "Labels");
  const auto* state = object_at(root, "State");
  s.state = string_at(state, "Status");
  s.running = bool_at(state, "Running");
  s.exit_code = static_cast<int>(int_at(state, "ExitCode"));
  s.oom_killed = bool_at(state, "OOMKilled");
  s.started_at = engine_time(string_at(state, "StartedAt"));
  s.finished_at = engine_time(string_at(state, "FinishedAt"));
  s.pid = s.running ? static_cast<int>(std::clamp<std::int64_t>(int_at(state, "Pid"), 0, INT32_MAX)) : 0;
  const auto* host = object_at(root, "HostConfig");
  s.nano_cpus = int_at(host, "NanoCpus");
  s.memory_bytes = int_at(host, "Memory");
  s.network_mode = string_at(host, "NetworkMode");
  if (const auto* mounts = root ? root->if_contains("Mounts") : nullptr; mounts && mounts->is_array()) {
    for (const auto& m : mounts->as_array()) {
      std::string target = string_at(m.if_object(), "Destination");
      if (!target.empty()) s.mount_targets.push_back(std::move(target));
    }
  }
  // A stopped container has no IPAddress; its fixed address is still in IPAMConfig.
  if (const auto* networks = object_at(object_at(root, "NetworkSettings"), "Networks")) {
    for (const auto& [name, net] : *networks) {
      const json::object* endpoint = net.if_object();
      std::string ip = string_at(endpoint, "IPAddress");
      if (ip.empty()) ip = string_at(object_at(endpoint, "IPAMConfig"), "IPv4Address");
      if (!ip.empty()) {
        s.ipv4 = ip;
        break;
      }
    }
  }
  return s;
}

bool valid_container_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || !std::isalnum(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

bool looks_secret(std::string_view env_name) {
  std::string upper(env_name);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (std::string_view word : {"PASSWORD", "PASSWD", "SECRET", "TOKEN", "PRIVATE_KEY"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

std::int64_t own_nofile_hard_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_max == RLIM_INFINITY) return 0;
  return static_cast<std::int64_t>(limit.rlim_max);
}

json::object bind_mount(const std::string& source, std::string_view target, bool read_only) {
  return json::object{{"Type", "bind"},
                      {"Source", source},
                      {"Target", target},
                      {"ReadOnly", read_only}};
}

// A call answering no content. `also_ok`: a status other than 2xx meaning "already so" for
// an idempotent call (304 not modified, 404 gone). (A scalar, not a list: g++ 12 mishandles
// braced lists inside co_await expressions.)
awaitable<Status> expect(EngineClient& engine, Method method, std::string target,
                         std::optional<json::value> body, unsigned also_ok,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) {
  auto res = co_await engine.request(method, std::move(target), std::move(body), timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status >= 200 && res->status < 300) co_return ok();
  if (res->status == also_ok) co_return ok();
  co_return fail(docker::engine_error(res->status, res->body));
}

awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::steady_timer timer(co_await net::this_coro::executor, d);
  boost::system::error_code ec;
  co_await timer.async_wait(redirect_error(use_awaitable, ec));
}

// ---- the TTY exec ---------------------------------------------------------------------

class DockerTerminal final : public TerminalSession {
 public:
  DockerTerminal(EngineClient engine, std::string exec_id, docker::HijackedConnection conn)
      : engine_(std::move(engine)),
        exec_id_(std::move(exec_id)),
        socket_(std::move(conn.socket)),
        pending_(std::move(conn.buffered)) {}
  ~DockerTerminal() override { close(); }

  awaitable<Result<std::string>> read() override {
    if (!pending_.empty()) co_return std::exchange(pending_, std::string());
    std::string chunk(16 * 1024, '\0');
    boost::system::error_code ec;
    const std::size_t n =
        co_await socket_.async_read_some(net::buffer(chunk), redirect_error(use_awaitable, ec));
    if (n > 0) {
      chunk.resize(n);
      co_return chunk;
    }
    if (ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == net::error::bad_descriptor) {
      co_return std::string();
    }
    co_return fail(ErrorCode::unavailable, "terminal: " + ec.message());
  }

  awaitable<Status> write(std::string data) override {
    boost::system::error_code ec;
    co_await net::async_write(socket_, net::buffer(data), redirect_error(use_awaitable, ec));
    if (ec) co_return fail(ErrorCode::unavailable, "terminal: " + ec.message());
    co_return ok();
  }

  awaitable<Status> resize(int rows, int cols) override {
    co_return co_await engine_.exec_resize(exec_id_, rows, cols);
  }

  awaitable<Result<int>> exit_code() override {
    for (int i = 0; i < 100; ++i) {
      auto inspect = co_await engine_.exec_inspect(exec_id_);
      if (!inspect) co_return fail(std::move(inspect.error()));
      if (!inspect->running) co_return inspect->exit_code;
      co_await sleep_for(std::chrono::milliseconds(10));
    }
    co_return fail(ErrorCode::conflict, "terminal: the process is still running");
  }

  void close() override {
    boost::system::error_code ignored;
    if (socket_.is_open()) {
      socket_.shutdown(local::socket::shutdown_both, ignored);
      socket_.close(ignored);
      // The engine leaves a TTY exec running when its client goes (a closed browser tab):
      // hang its shell up, as a terminal would, and kill it if it ignores that.
      net::co_spawn(socket_.get_executor(), hang_up(engine_, exec_id_), net::detached);
    }
  }

 private:
  static awaitable<void> hang_up(EngineClient engine, std::string exec_id) {
    auto inspect = co_await engine.exec_inspect(exec_id);
    if (!inspect || !inspect->running || inspect->pid <= 1) co_return;
    ::kill(static_cast<pid_t>(inspect->pid), SIGHUP);
    for (int i = 0; i < 20; ++i) {
      co_await sleep_for(std::chrono::milliseconds(50));
      auto again = co_await engine.exec_inspect(exec_id);
      if (!again || !again->running) co_return;
    }
    ::kill(static_cast<pid_t>(inspect->pid), SIGKILL);
  }

  EngineClient engine_;
  std::string exec_id_;
  local::socket socket_;
  std::string pending_;
};

}  // namespace

DockerEngineDriver::DockerEngineDriver(net::any_io_executor executor, Options options)
    : engine_(std::move(executor), options.engine), options_(std::move(options)) {}

Result<DockerEngineDriver::CreatePlan> DockerEngineDriver::plan_create(
    const ContainerSpec& spec) const {
  auto invalid = [](std::string detail) { return fail(ErrorCode::invalid_argument, std::move(detail)); };
  if (!valid_container_name(spec.name)) return invalid("container name '" + spec.name + "' is not valid");
  if (spec.image.empty()) return invalid("no image");
  if (spec.hostname.size() > 63) return invalid("hostname longer than 63 characters");
  if (!std::isfinite(spec.cpus) || spec.cpus <= 0) return invalid("cpus must be positive");
  if (spec.memory_bytes < 0 || (spec.memory_bytes > 0 && spec.memory_bytes < 6 * kMiB)) {
    return invalid("memory limit must be at least 6 MiB");
  }
  if (spec.pids_limit < 0 || spec.shm_bytes < 0 || spec.nofile_limit < 0) {
    return invalid("limits cannot be negative");
  }
  if (!spec.ipv4.empty() && spec.network.empty()) return invalid("a fixed address needs a network");
  if (!spec.join_network_of.empty()) {
    if (!spec.network.empty() || !spec.ipv4.empty()) {
      return invalid("a container joining another's network has no network or address of its own");
    }
    if (!valid_container_name(spec.join_network_of)) {
      return invalid("container to join '" + spec.join_network_of + "' is not valid");
    }
  }
  if (spec.command.empty() && options_.init_path.empty()) {
    return invalid("no command and no init configured");
  }
  for (const auto& uuid : spec.gpu_uuids) {
    if (uuid.empty() || !std::all_of(uuid.begin(), uuid.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '/';
        })) {
      return invalid("GPU UUID '" + uuid + "' is not valid");
    }
  }
  for (const auto& d : spec.devices) {
    if (d.path_on_host.empty() || d.path_on_host.front() != '/' || !d.path_in_container.starts_with("/dev/")) {
      return invalid("device " + d.path_on_host + " -> " + d.path_in_container + " is not a device path");
    }
  }

  CreatedContainer adjusted;
  // The engine refuses a CPU limit above the host's cores; cap it and say so.
  int host_cpus = options_.host_cpus > 0 ? options_.host_cpus
                                         : static_cast<int>(std::thread::hardware_concurrency());
  if (host_cpus <= 0) host_cpus = 1;
  adjusted.cpus = std::min(spec.cpus, static_cast<double>(host_cpus));
  adjusted.cpus_capped = spec.cpus > host_cpus;
  const auto nano_cpus = static_cast<std::int64_t>(std::llround(adjusted.cpus * 1e9));
  if (nano_cpus < 10'000'000) return invalid("cpus must be at least 0.01");

  // A nofile limit above the agent's own hard limit makes the container's start fail
  // (root may lack CAP_SYS_RESOURCE): clamp it.
  if (spec.nofile_limit > 0) {
    const std::int64_t hard =
        options_.nofile_hard_limit > 0 ? options_.nofile_hard_limit : own_nofile_hard_limit();
    adjusted.nofile_limit = hard > 0 ? std::min(spec.nofile_limit, hard) : spec.nofile_limit;
    adjusted.nofile_clamped = adjusted.nofile_limit < spec.nofile_limit;
  }

  json::array env;
  for (const auto& entry : spec.env) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) return invalid("environment entry '" + entry + "' is not KEY=VALUE");
    const std::string_view key(entry.data(), eq);
    if (looks_secret(key)) {
      return invalid("environment variable " + std::string(key) +
                     " looks like a secret; secrets go through the init's config directory");
    }
    if (key == kNvidiaVisible) continue;  // always ours, below
    env.emplace_back(entry);
  }
  // CUDA images default to "all": always say which GPUs, or none.
  std::string visible;
  for (const auto& uuid : spec.gpu_uuids) visible += (visible.empty() ? "" : ",") + uuid;
  env.emplace_back(std::string(kNvidiaVisible) + "=" + (visible.empty() ? "void" : visible));

  json::array mounts;
  if (!options_.init_path.empty() && !spec.network_holder) {
    mounts.emplace_back(bind_mount(options_.init_path, kInitPathInContainer, true));
  }
  if (!spec.init_config_dir.empty()) {
    mounts.emplace_back(bind_mount(spec.init_config_dir, kInitConfigDirInContainer, true));
  }
  for (const auto& m : spec.mounts) {
    if (m.source.empty() || m.source.front() != '/' || m.target.empty() || m.target.front() != '/') {
      return invalid("mount paths must be absolute");
    }
    if (m.target == "/" || m.target.rfind("/.gpucloud", 0) == 0) {
      return invalid("mount target " + m.target + " is reserved");
    }
    mounts.emplace_back(bind_mount(m.source, m.target, m.read_only));
  }

  json::object host;
  host["NanoCpus"] = nano_cpus;
  if (spec.memory_bytes > 0) {
    host["Memory"] = spec.memory_bytes;
    host["MemorySwap"] = spec.memory_bytes;  // equal: no swap beyond the limit
  }
  if (spec.pids_limit > 0) host["PidsLimit"] = spec.pids_limit;
  host["ShmSize"] = spec.shm_bytes > 0      ? spec.shm_bytes
                    : spec.memory_bytes > 0 ? std::max<std::int64_t>(spec.memory_bytes / 2, kMiB)
                                            : 64 * kMiB;
  host["Init"] = true;
  host["RestartPolicy"] = json::object{{"Name", "no"}};
  host["Privileged"] = false;
  host["ReadonlyRootfs"] = false;
  host["IpcMode"] = "private";
  host["NetworkMode"] = !spec.join_network_of.empty() ? "container:" + spec.join_network_of
                        : spec.network.empty()          ? std::string("default")
                                                        : spec.network;
  if (spec.system_disk_gib > 0) host["StorageOpt"] = json::object{{"size", storage_size_opt(spec.system_disk_gib)}};
  host["Mounts"] = std::move(mounts);
  host["LogConfig"] = json::object{
      {"Type", "json-file"}, {"Config", json::object{{"max-size", "10m"}, {"max-file", "2"}}}};
  if (adjusted.nofile_limit > 0) {
    host["Ulimits"] = json::array{json::object{
        {"Name", "nofile"}, {"Soft", adjusted.nofile_limit}, {"Hard", adjusted.nofile_limit}}};
  }
  if (!spec.devices.empty()) {
    json::array devices;
    for (const auto& d : spec.devices) {
      devices.emplace_back(json::object{{"PathOnHost", d.path_on_host},
                                        {"PathInContainer", d.path_in_container},
                                        {"CgroupPermissions", "rwm"}});
    }
    host["Devices"] = std::move(devices);
  }
  if (!spec.gpu_uuids.empty() && spec.gpu_device_request) {
    host["DeviceRequests"] = json::array{json::object{
        {"Driver", "nvidia"},
        {"DeviceIDs", string_array(spec.gpu_uuids)},
        {"Capabilities", json::array{json::array{"gpu", "compute", "utility"}}}}};
  }
  // Of the engine's default capabilities, an instance keeps what sshd and a root user's apt
  // need: SETUID/SETGID/SYS_CHROOT/AUDIT_WRITE/KILL (sshd's privilege separation, sessions,
  // PAM records), CHOWN/DAC_OVERRIDE/FOWNER/FSETID/SETFCAP (dpkg unpacking, file
  // capabilities of packages), NET_BIND_SERVICE (sshd on 22, a user's server on 80 where the
  // engine leaves ip_unprivileged_port_start alone). It drops NET_RAW (raw and packet
  // sockets: ARP spoofing of its neighbours on the shared bridge), MKNOD (device nodes) and
  // SETPCAP. ping keeps working through ICMP datagram sockets, which ping_group_range opens
  // to every group (Docker 20.10 sets it too; other engines may not).
  host["CapDrop"] = spec.network_holder ? json::array{"ALL"}
                                        : json::array(kDroppedCapabilities.begin(), kDroppedCapabilities.end());
  // A joined container's sysctl is written into the joined namespace (the holder's, which
  // has it already).
  host["Sysctls"] = json::object{{"net.ipv4.ping_group_range", "0 2147483647"}};
  // Deliberately absent: CapAdd, SecurityOpt (the default seccomp profile stays), Devices
  // beyond the instance's own GPUs' nodes (builtin GPU injection),
  // PidMode/IpcMode/NetworkMode "host", PortBindings (gpucloud publishes with nftables).

  json::object body;
  body["Image"] = spec.image;
  if (!spec.hostname.empty() && spec.join_network_of.empty()) body["Hostname"] = spec.hostname;
  body["Labels"] = string_map(spec.labels);
  body["Env"] = std::move(env);
  body["Entrypoint"] = json::array{};  // empty, not absent: the image's ENTRYPOINT is not used
  body["Cmd"] = spec.command.empty()
                    ? json::array{"/bin/sh", json::string(kInitPathInContainer)}
                    : string_array(spec.command);
  body["Tty"] = false;
  body["OpenStdin"] = false;
  body["HostConfig"] = std::move(host);
  if (!spec.network.empty() && spec.network != "none" && spec.join_network_of.empty()) {
    json::object endpoint;
    if (!spec.ipv4.empty()) endpoint["IPAMConfig"] = json::object{{"IPv4Address", spec.ipv4}};
    body["NetworkingConfig"] =
        json::object{{"EndpointsConfig", json::object{{spec.network, std::move(endpoint)}}}};
  }
  return CreatePlan{json::value(std::move(body)), std::move(adjusted)};
}

awaitable<Status> DockerEngineDriver::ping() {
  const std::chrono::milliseconds timeout(5000);
  auto res = co_await engine_.request(Method::get, "/_ping", std::nullopt, timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status != 200) co_return fail(docker::engine_error(res->status, res->body));
  co_return ok();
}

awaitable<Result<DriverInfo>> DockerEngineDriver::fingerprint() {
  auto res = co_await engine_.call(Method::get, "/info");
  if (!res) co_return fail(std::move(res.error()));
  const json::object* info = res->if_object();
  DriverInfo out;
  out.engine = "docker " + string_at(info, "ServerVersion");
  out.api_version = engine_.options().api_version;
  out.cgroup_version = std::atoi(string_at(info, "CgroupVersion").c_str());
  out.cpus = static_cast<int>(int_at(info, "NCPU"));
  out.memory_bytes = int_at(info, "MemTotal");
  out.live_restore = bool_at(info, "LiveRestoreEnabled");
  if (const auto* runtimes = object_at(info, "Runtimes")) out.nvidia_runtime = runtimes->contains("nvidia");
  out.storage_driver = string_at(info, "Driver");
  co_return out;
}

awaitable<Result<std::int64_t>> DockerEngineDriver::system_disk_used(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/json?size=1";
  auto res = co_await engine_.call(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  const json::object* o = res->if_object();
  if (o == nullptr || !o->contains("SizeRw")) co_return fail(ErrorCode::unavailable, "the engine reported no SizeRw");
  const std::int64_t size_rw = int_at(o, "SizeRw");
  if (size_rw >= 0) co_return size_rw;
  // -1: the engine could not measure. On btrfs with simple quotas that is every container at
  // its limit (the engine re-applies the limit on inspect, which a full qgroup refuses):
  // the subvolume's own quota group says what it holds.
  auto layer = co_await layer_dir(std::move(id));
  if (!layer) co_return fail(std::move(layer.error()));
  if (layer->storage_driver != "btrfs")
    co_return fail(ErrorCode::unavailable, "the engine could not measure the container (SizeRw -1)");
  auto read_usage = [dir = layer->dir, mount_id_file = layer->mount_id_file]() -> Result<std::int64_t> {
    std::ifstream in(mount_id_file);
    std::string mount_id;
    if (!(in >> mount_id) || mount_id.find('/') != std::string::npos || mount_id.find("..") != std::string::npos)
      return fail(ErrorCode::unavailable, "no layer mount id in " + mount_id_file);
    return btrfs_subvolume_usage(dir + "/" + mount_id);
  };
  co_return co_await offload<Result<std::int64_t>>(blocking_.get_executor(), std::move(read_usage));
}

awaitable<Result<NetworkInfo>> DockerEngineDriver::ensure_network(NetworkSpec spec) {
  if (spec.name.empty()) co_return fail(ErrorCode::invalid_argument, "network has no name");
  if (spec.bridge_name.size() > 15) {
    co_return fail(ErrorCode::invalid_argument, "bridge name longer than 15 characters");
  }
  bool created = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::string target = "/networks/" + url_encode(spec.name);
    auto res = co_await engine_.request(Method::get, std::move(target));
    if (!res) co_return fail(std::move(res.error()));
    json::value found;
    if (res->status == 200) {
      boost::system::error_code ec;
      found = json::parse(res->body, ec);
      // The engine also matches id prefixes; only an exact name is ours.
      if (ec || string_at(found.if_object(), "Name") != spec.name) found = nullptr;
    } else if (res->status != 404) {
      co_return fail(docker::engine_error(res->status, res->body));
    }

    if (found.is_object()) {
      const json::object* net = found.if_object();
      NetworkInfo info;
      info.id = string_at(net, "Id");
      info.name = spec.name;
      info.created = created;
      if (const auto* ipam = object_at(net, "IPAM")) {
        if (const auto* configs = ipam->if_contains("Config"); configs && configs->is_array()) {
          for (const auto& c : configs->as_array()) {
            if (info.subnet.empty()) {
              info.subnet = string_at(c.if_object(), "Subnet");
              info.gateway = string_at(c.if_object(), "Gateway");
            }
          }
        }
      }
      const auto* options = object_at(net, "Options");
      info.bridge_name = string_at(options, "com.docker.network.bridge.name");
      if (const std::string mtu = string_at(options, "com.docker.network.driver.mtu"); !mtu.empty()) {
        int v = 0;
        auto [p, ec] = std::from_chars(mtu.data(), mtu.data() + mtu.size(), v);
        if (ec == std::errc() && p == mtu.data() + mtu.size()) info.mtu = v;
      }
      if (info.bridge_name.empty() && info.id.size() >= 12) info.bridge_name = "br-" + info.id.substr(0, 12);
      if (string_at(net, "Driver") != "bridge") {
        co_return fail(ErrorCode::conflict, "network " + spec.name + " exists and is not a bridge");
      }
      if (!spec.subnet.empty() && info.subnet != spec.subnet) {
        co_return fail(ErrorCode::conflict, "network " + spec.name + " exists with subnet " +
                                                info.subnet + ", not " + spec.subnet);
      }
      const bool icc = string_at(options, "com.docker.network.bridge.enable_icc") != "false";
      if (icc != spec.icc) {
        co_return fail(ErrorCode::conflict,
                       "network " + spec.name + " exists with inter-container traffic " +
                           (icc ? "on" : "off"));
      }
      co_return info;
    }

    json::object ipam_config;
    if (!spec.subnet.empty()) ipam_config["Subnet"] = spec.subnet;
    if (!spec.gateway.empty()) ipam_config["Gateway"] = spec.gateway;
    json::object options{{"com.docker.network.bridge.enable_icc", spec.icc ? "true" : "false"}};
    if (!spec.bridge_name.empty()) options["com.docker.network.bridge.name"] = spec.bridge_name;
    if (spec.mtu > 0) options["com.docker.network.driver.mtu"] = std::to_string(spec.mtu);
    json::object body{
        {"Name", spec.name},
        {"Driver", "bridge"},
        {"CheckDuplicate", true},
        {"Internal", false},
        {"EnableIPv6", false},
        {"Attachable", false},
        {"Options", std::move(options)},
        {"Labels", string_map(spec.labels)},
    };
    if (!ipam_config.empty()) {
      body["IPAM"] = json::object{{"Driver", "default"}, {"Config", json::array{std::move(ipam_config)}}};
    }
    std::optional<json::value> request_body(std::move(body));
    auto made = co_await engine_.request(Method::post, "/networks/create", std::move(request_body));
    if (!made) co_return fail(std::move(made.error()));
    if (made->status == 201 || made->status == 200) {
      created = true;
    } else if (made->status != 409) {  // 409: someone else created it meanwhile; look again
      co_return fail(docker::engine_error(made->status, made->body));
    }
  }
  co_return fail(ErrorCode::unavailable, "network " + spec.name + " could not be created");
}

awaitable<Status> DockerEngineDriver::remove_network(std::string name) {
  std::string target = "/networks/" + url_encode(name);
  co_return co_await expect(engine_, Method::del, std::move(target), std::nullopt, 404);
}

awaitable<Result<bool>> DockerEngineDriver::image_present(std::string ref) {
  // The reference is one path segment, encoded whole ('/' too: the engine decodes it), so a
  // '?', '#' or "../" in it can never reach another endpoint or add query parameters.
  std::string target = "/images/" + url_encode(ref) + "/json";
  auto res = co_await engine_.request(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status == 200) co_return true;
  if (res->status == 404) co_return false;
  co_return fail(docker::engine_error(res->status, res->body));
}

awaitable<Result<std::optional<ImageInfo>>> DockerEngineDriver::image_inspect(std::string ref) {
  std::string target = "/images/" + url_encode(ref) + "/json";
  auto res = co_await engine_.request(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status == 404) co_return std::optional<ImageInfo>{};
  if (res->status != 200) co_return fail(docker::engine_error(res->status, res->body));
  boost::system::error_code ec;
  json::value doc = json::parse(res->body, ec);
  if (ec || !doc.is_object()) co_return fail(ErrorCode::internal, "docker engine: image inspect answered no JSON object");
  ImageInfo info;
  info.id = string_at(&doc.as_object(), "Id");
  info.size_bytes = int_at(&doc.as_object(), "Size");
  if (const auto* rootfs = object_at(&doc.as_object(), "RootFS"))
    if (const auto* layers = rootfs->if_contains("Layers"); layers && layers->is_array()) {
      info.layers = static_cast<int>(layers->as_array().size());
      for (const auto& l : layers->as_array())
        if (l.is_string()) info.diff_ids.emplace_back(l.as_string());
    }
  co_return std::optional<ImageInfo>{std::move(info)};
}

awaitable<Status> DockerEngineDriver::pull_image(std::string ref, std::chrono::milliseconds timeout) {
  // fromImage + tag, as the Engine API wants them; a digest reference goes whole.
  std::string from = ref, tag;
  if (ref.find('@') == std::string::npos) {
    auto colon = ref.rfind(':');
    auto slash = ref.rfind('/');
    if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
      from = ref.substr(0, colon);
      tag = ref.substr(colon + 1);
    } else {
      tag = "latest";
    }
  }
  std::string target = "/images/create?fromImage=" + url_encode(from) + (tag.empty() ? "" : "&tag=" + url_encode(tag));
  auto messages = co_await engine_.call_stream(Method::post, std::move(target), std::nullopt, timeout);
  if (!messages) co_return fail(ErrorCode::unavailable, "pulling " + ref + ": " + messages.error().detail);
  // The engine answers 200 and reports a failed pull inside the progress stream.
  for (const auto& m : *messages) {
    if (!m.is_object()) continue;
    if (auto e = string_at(&m.as_object(), "error"); !e.empty()) co_return fail(ErrorCode::unavailable, "pulling " + ref + ": " + e);
  }
  co_return ok();
}

awaitable<Result<CreatedContainer>> DockerEngineDriver::create(ContainerSpec spec) {
  auto plan = plan_create(spec);
  if (!plan) co_return fail(std::move(plan.error()));
  std::string target = "/containers/create?name=" + url_encode(spec.name);
  std::optional<json::value> body(std::move(plan->body));
  auto res = co_await engine_.call(Method::post, std::move(target), std::move(body));
  if (!res) co_return fail(std::move(res.error()));
  CreatedContainer out = std::move(plan->adjusted);
  out.id = string_at(res->if_object(), "Id");
  if (out.id.empty()) co_return fail(ErrorCode::internal, "docker engine: create answered no Id");
  if (const auto* warnings = res->is_object() ? res->as_object().if_contains("Warnings") : nullptr;
      warnings && warnings->is_array()) {
    for (const auto& w : warnings->as_array()) {
      if (w.is_string()) out.warnings.emplace_back(w.as_string());
    }
  }
  co_return out;
}

awaitable<Status> DockerEngineDriver::start(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/start";
  co_return co_await expect(engine_, Method::post, std::move(target), std::nullopt, 304);
}

awaitable<Status> DockerEngineDriver::stop(std::string id, std::chrono::seconds grace) {
  const auto t = std::max<std::int64_t>(0, grace.count());
  std::string target = "/containers/" + url_encode(id) + "/stop?t=" + std::to_string(t);
  const std::chrono::milliseconds timeout = std::chrono::seconds(t + 30);
  co_return co_await expect(engine_, Method::post, std::move(target), std::nullopt, 304, timeout);
}

awaitable<Status> DockerEngineDriver::remove(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "?force=1&v=1";
  const std::chrono::milliseconds timeout = std::chrono::seconds(60);
  co_return co_await expect(engine_, Method::del, std::move(target), std::nullopt, 404, timeout);
}

awaitable<Result<ContainerStatus>> DockerEngineDriver::inspect(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/json";
  auto res = co_await engine_.request(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status == 404) {
    ContainerStatus gone;
    gone.exists = false;
    co_return gone;
  }
  if (res->status != 200) co_return fail(docker::engine_error(res->status, res->body));
  boost::system::error_code ec;
  json::value parsed = json::parse(res->body, ec);
  if (ec) co_return fail(ErrorCode::internal, "docker engine: inspect answer is not JSON");
  co_return parse_container(parsed);
}

awaitable<Result<std::vector<ContainerStatus>>> DockerEngineDriver::list(
    std::map<std::string, std::string> label_filter) {
  json::array labels;
  for (const auto& [k, v] : label_filter) labels.emplace_back(k + "=" + v);
  std::string target = "/containers/json?all=1";
  if (!labels.empty()) {
    target += "&filters=" + url_encode(json::serialize(json::object{{"label", std::move(labels)}}));
  }
  auto res = co_await engine_.call(Method::get, target);
  if (!res) co_return fail(std::move(res.error()));
  std::vector<ContainerStatus> out;
  if (!res->is_array()) co_return out;
  // The summary lacks exit codes and times: inspect each (a host holds tens, not thousands).
  for (const auto& entry : res->as_array()) {
    const std::string id = string_at(entry.if_object(), "Id");
    if (id.empty()) continue;
    auto status = co_await inspect(id);
    if (!status) co_return fail(std::move(status.error()));
    if (status->exists) out.push_back(std::move(*status));  // removed meanwhile: skip
  }
  co_return out;
}

awaitable<Result<ContainerStatus>> DockerEngineDriver::recover(DriverState state) {
  if (!state.container_id.empty()) {
    auto by_id = co_await inspect(state.container_id);
    if (!by_id || by_id->exists) co_return by_id;
  }
  if (!state.container_name.empty()) {
    auto by_name = co_await inspect(state.container_name);
    // A name is reused only by us; still check it is the same instance when we can tell.
    if (!by_name) co_return by_name;
    if (by_name->exists && by_name->name == state.container_name) co_return by_name;
  }
  if (!state.labels.empty()) {
    auto found = co_await list(state.labels);
    if (!found) co_return fail(std::move(found.error()));
    if (found->size() == 1) co_return std::move(found->front());
    if (found->size() > 1) {
      co_return fail(ErrorCode::conflict,
                     std::to_string(found->size()) + " containers carry this instance's labels");
    }
  }
  ContainerStatus gone;
  gone.exists = false;
  co_return gone;
}

awaitable<Result<ContainerStatus>> DockerEngineDriver::wait(std::string id,
                                                             std::chrono::milliseconds timeout) {
  // Answers when the container stops; a timeout (transport error) just ends the wait.
  std::string target = "/containers/" + url_encode(id) + "/wait?condition=not-running";
  if (timeout < std::chrono::milliseconds(1)) timeout = std::chrono::milliseconds(1);
  auto res = co_await engine_.request(Method::post, std::move(target), std::nullopt, timeout);
  if (res && res->status != 200 && res->status != 404) {
    co_return fail(docker::engine_error(res->status, res->body));
  }
  co_return co_await inspect(std::move(id));
}

awaitable<Result<std::string>> DockerEngineDriver::logs(std::string id, int tail) {
  // (No conditional operator inside the co_await expression: g++ 12 destroys its
  // temporary twice.)
  std::string target = "/containers/" + url_encode(id) + "/logs?stdout=1&stderr=1&tail=";
  if (tail > 0) {
    target += std::to_string(tail);
  } else {
    target += "all";
  }
  auto res = co_await engine_.request(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status != 200) co_return fail(docker::engine_error(res->status, res->body));
  // Non-TTY containers (ours) answer multiplexed frames; a TTY container raw text.
  auto demuxed = docker::demux_stream(res->body);
  if (!demuxed.complete) co_return std::move(res->body);
  co_return demuxed.out + demuxed.err;
}

awaitable<Result<ExecResult>> DockerEngineDriver::exec_run(std::string id,
                                                           std::vector<std::string> argv,
                                                           std::chrono::milliseconds timeout) {
  if (argv.empty()) co_return fail(ErrorCode::invalid_argument, "exec needs a command");
  docker::ExecConfig config;
  config.cmd = std::move(argv);
  auto exec_id = co_await engine_.exec_create(id, std::move(config));
  if (!exec_id) co_return fail(std::move(exec_id.error()));
  auto conn = co_await engine_.exec_start_hijacked(*exec_id, false);
  if (!conn) co_return fail(std::move(conn.error()));

  // The timer's handler owns the socket too, so it can never outlive it.
  auto socket = std::make_shared<local::socket>(std::move(conn->socket));
  auto timed_out = std::make_shared<bool>(false);
  net::steady_timer timer(socket->get_executor(), timeout);
  timer.async_wait([socket, timed_out](const boost::system::error_code& ec) {
    if (ec) return;
    *timed_out = true;
    boost::system::error_code ignored;
    socket->close(ignored);
  });

  std::string data = std::move(conn->buffered);
  std::string chunk(16 * 1024, '\0');
  for (;;) {
    boost::system::error_code ec;
    const std::size_t n =
        co_await socket->async_read_some(net::buffer(chunk), redirect_error(use_awaitable, ec));
    data.append(chunk.data(), n);
    if (ec) break;
  }
  timer.cancel();
  if (*timed_out) {
    co_return fail(ErrorCode::unavailable,
                   "exec did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  boost::system::error_code ignored;
  socket->close(ignored);

  ExecResult out;
  auto demuxed = docker::demux_stream(data);
  out.out = std::move(demuxed.out);
  out.err = std::move(demuxed.err);
  // The stream ends when the process does; the engine records the exit code a moment later.
  for (int i = 0;; ++i) {
    auto inspect = co_await engine_.exec_inspect(*exec_id);
    if (!inspect) co_return fail(std::move(inspect.error()));
    if (!inspect->running) {
      out.exit_code = inspect->exit_code;
      break;
    }
    if (i >= 200) co_return fail(ErrorCode::unavailable, "exec output ended but the process runs on");
    co_await sleep_for(std::chrono::milliseconds(5));
  }
  co_return out;
}

awaitable<Result<std::string>> DockerEngineDriver::exec_capture(std::string id,
                                                                std::vector<std::string> argv) {
  const std::string what = argv.empty() ? std::string() : argv.front();
  auto res = co_await exec_run(std::move(id), std::move(argv), options_.exec_timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->exit_code != 0) {
    co_return fail(ErrorCode::internal, "exec " + what + " exited " + std::to_string(res->exit_code) +
                                            ": " + res->err.substr(0, 1000));
  }
  co_return std::move(res->out);
}

awaitable<Result<std::unique_ptr<TerminalSession>>> DockerEngineDriver::exec_tty(
    std::string id, std::vector<std::string> argv, int rows, int cols,
    std::vector<std::string> env) {
  if (argv.empty()) co_return fail(ErrorCode::invalid_argument, "exec needs a command");
  docker::ExecConfig config;
  config.cmd = std::move(argv);
  config.tty = true;
  config.attach_stdin = true;
  const bool has_term = std::any_of(env.begin(), env.end(),
                                    [](const std::string& e) { return e.rfind("TERM=", 0) == 0; });
  if (!has_term) env.emplace_back("TERM=xterm-256color");
  config.env = std::move(env);
  auto exec_id = co_await engine_.exec_create(id, std::move(config));
  if (!exec_id) co_return fail(std::move(exec_id.error()));
  auto conn = co_await engine_.exec_start_hijacked(*exec_id, true);
  if (!conn) co_return fail(std::move(conn.error()));
  auto session = std::make_unique<DockerTerminal>(engine_, *exec_id, std::move(*conn));
  // API 1.41 has no initial console size: resize right after start (the process may need a
  // moment to exist, hence the retries).
  if (rows > 0 && cols > 0) {
    Status resized;
    for (int i = 0; i < 20; ++i) {
      resized = co_await engine_.exec_resize(*exec_id, rows, cols);
      if (resized || resized.error().code == ErrorCode::invalid_argument) break;
      co_await sleep_for(std::chrono::milliseconds(10));
    }
    if (!resized) co_return fail(std::move(resized.error()));
  }
  co_return std::unique_ptr<TerminalSession>(std::move(session));
}

namespace {
// Labels that say which installation, instance or save a container belongs to: never carried
// into an image (a container made from it would look like another's, e.g. an unknown one).
constexpr std::string_view kPerContainerLabels[] = {"gpucloud.installation", "gpucloud.instance",
                                                     "gpucloud.network-holder", "gpucloud.image-save"};
bool per_container_label(std::string_view key) {
  return std::find(std::begin(kPerContainerLabels), std::end(kPerContainerLabels), key) != std::end(kPerContainerLabels);
}
}  // namespace

awaitable<Result<json::object>> DockerEngineDriver::parent_config(std::string id,
                                                                 std::map<std::string, std::string> labels,
                                                                 bool for_commit) {
  // The engine would merge the container's own config into the image (its env with this
  // instance's GPUs, its labels, the init as command). Start instead from the config of the
  // image the container came from, so a saved image looks like its parent plus the files.
  std::string container_target = "/containers/" + url_encode(id) + "/json";
  auto container = co_await engine_.call(Method::get, std::move(container_target));
  if (!container) co_return fail(std::move(container.error()));
  const std::string parent = string_at(container->if_object(), "Image");
  std::string image_target = "/images/" + url_encode(parent) + "/json";
  auto image = co_await engine_.call(Method::get, std::move(image_target));
  if (!image) co_return fail(std::move(image.error()));
  json::object config;
  if (const auto* c = object_at(image->if_object(), "Config")) config = *c;
  json::object merged_labels;
  if (const auto* l = config.if_contains("Labels"); l && l->is_object()) merged_labels = l->as_object();
  for (const auto& key : kPerContainerLabels) merged_labels.erase(key);
  for (const auto& [k, v] : labels) merged_labels[k] = v;
  if (for_commit) {
    // The engine's commit adds every label of the container that the given config lacks
    // (its installation's and instance's among them). It cannot drop one: those that are
    // per-container are given empty, so they match no installation's filter.
    if (const auto* own = object_at(object_at(container->if_object(), "Config"), "Labels")) {
      for (const auto& [k, v] : *own) {
        if (!merged_labels.contains(k) && per_container_label(std::string_view(k.data(), k.size()))) merged_labels[k] = "";
      }
    }
  }
  config["Labels"] = std::move(merged_labels);
  if (!config.contains("Cmd") || config["Cmd"].is_null()) config["Cmd"] = json::array{"/bin/bash"};
  if (!config.contains("Entrypoint") || config["Entrypoint"].is_null()) config["Entrypoint"] = json::array{};
  if (!config.contains("Env") || config["Env"].is_null()) config["Env"] = json::array{};
  config["Hostname"] = "";
  co_return config;
}

awaitable<Result<std::string>> DockerEngineDriver::commit(std::string id, std::string repo,
                                                          std::string tag,
                                                          std::map<std::string, std::string> labels) {
  auto config = co_await parent_config(id, std::move(labels), true);
  if (!config) co_return fail(std::move(config.error()));
  std::string target = "/commit?container=" + url_encode(id) + "&repo=" + url_encode(repo) +
                       "&tag=" + url_encode(tag) + "&pause=true";
  std::optional<json::value> body(std::move(*config));
  const std::chrono::milliseconds timeout = std::chrono::minutes(30);
  auto res = co_await engine_.call(Method::post, std::move(target), std::move(body), timeout);
  if (!res) co_return fail(std::move(res.error()));
  const std::string image_id = string_at(res->if_object(), "Id");
  if (image_id.empty()) co_return fail(ErrorCode::internal, "docker engine: commit answered no Id");
  co_return image_id;
}

namespace {
// A Dockerfile string in double quotes: what ENV and LABEL values with spaces need.
std::string dockerfile_quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\' || c == '$') out += '\\';  // $ too: ENV would expand it
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::vector<std::string> DockerEngineDriver::import_changes(const json::object& config) {
  std::vector<std::string> changes;
  if (const auto* env = config.if_contains("Env"); env && env->is_array()) {
    for (const auto& e : env->as_array()) {
      if (!e.is_string()) continue;
      const std::string entry(e.as_string());
      const auto eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      changes.push_back("ENV " + entry.substr(0, eq) + "=" + dockerfile_quoted(std::string_view(entry).substr(eq + 1)));
    }
  }
  // JSON (exec) form: the arguments exactly as they were.
  for (const char* key : {"Cmd", "Entrypoint"}) {
    const auto* v = config.if_contains(key);
    if (v == nullptr || !v->is_array()) continue;
    std::string instruction = std::string(key) == "Cmd" ? "CMD " : "ENTRYPOINT ";
    changes.push_back(instruction + json::serialize(*v));
  }
  if (auto wd = string_at(&config, "WorkingDir"); !wd.empty()) changes.push_back("WORKDIR " + wd);
  if (auto user = string_at(&config, "User"); !user.empty()) changes.push_back("USER " + user);
  if (const auto* labels = object_at(&config, "Labels")) {
    for (const auto& [k, v] : *labels) {
      if (!v.is_string()) continue;
      changes.push_back("LABEL " + dockerfile_quoted(std::string_view(k.data(), k.size())) + "=" +
                        dockerfile_quoted(std::string_view(v.as_string())));
    }
  }
  return changes;
}

awaitable<Result<std::string>> DockerEngineDriver::flatten(std::string id, std::string repo,
                                                           std::string tag,
                                                           std::map<std::string, std::string> labels) {
  auto config = co_await parent_config(id, std::move(labels), false);
  if (!config) co_return fail(std::move(config.error()));
  std::string import_target = "/images/create?fromSrc=-&repo=" + url_encode(repo) + "&tag=" + url_encode(tag);
  for (const auto& change : import_changes(*config)) import_target += "&changes=" + url_encode(change);
  const std::chrono::milliseconds timeout = std::chrono::minutes(60);
  // Streamed engine to engine: the loop only moves pieces, it never holds the filesystem.
  std::string export_target = "/containers/" + url_encode(id) + "/export";
  std::string tar_type = "application/x-tar";
  auto res = co_await docker::pipe_between(engine_.executor(), engine_.options(), std::move(export_target),
                                           std::move(import_target), std::move(tar_type), timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status < 200 || res->status >= 300) co_return fail(docker::engine_error(res->status, res->body));
  auto messages = docker::parse_message_stream(res->body);
  if (!messages) co_return fail(std::move(messages.error()));
  std::string image_id;
  for (const auto& m : *messages) {
    const std::string status = string_at(m.if_object(), "status");
    if (status.starts_with("sha256:")) image_id = status;
  }
  if (image_id.empty()) co_return fail(ErrorCode::internal, "docker engine: import answered no image id");
  co_return image_id;
}

double DockerEngineDriver::capped_cpus(double cpus) const {
  int host_cpus = options_.host_cpus > 0 ? options_.host_cpus
                                         : static_cast<int>(std::thread::hardware_concurrency());
  if (host_cpus <= 0) host_cpus = 1;
  return std::min(cpus, static_cast<double>(host_cpus));
}

awaitable<Result<double>> DockerEngineDriver::update(std::string id, double cpus, std::int64_t memory_bytes) {
  if (!std::isfinite(cpus) || cpus <= 0) co_return fail(ErrorCode::invalid_argument, "cpus must be positive");
  if (memory_bytes < 0 || (memory_bytes > 0 && memory_bytes < 6 * kMiB))
    co_return fail(ErrorCode::invalid_argument, "memory limit must be at least 6 MiB");
  const double applied = capped_cpus(cpus);
  // NanoCpus, as at create: the engine refuses CpuQuota on a container made with NanoCpus.
  // Memory and MemorySwap together, or a larger Memory than the old MemorySwap is refused.
  // (ShmSize cannot change: /dev/shm keeps the size it was created with.)
  json::object body{{"NanoCpus", static_cast<std::int64_t>(std::llround(applied * 1e9))}};
  if (memory_bytes > 0) {
    body["Memory"] = memory_bytes;
    body["MemorySwap"] = memory_bytes;
  }
  std::string target = "/containers/" + url_encode(id) + "/update";
  std::optional<json::value> request_body(std::move(body));
  auto res = co_await engine_.call(Method::post, std::move(target), std::move(request_body));
  if (!res) co_return fail(std::move(res.error()));
  co_return applied;
}

std::optional<EngineEvent> DockerEngineDriver::parse_event(std::string_view line) {
  boost::system::error_code ec;
  auto value = json::parse(line, ec);
  if (ec || !value.is_object()) return std::nullopt;
  const auto& o = value.as_object();
  if (string_at(&o, "Type") != "container") return std::nullopt;
  EngineEvent event;
  event.action = string_at(&o, "Action");
  const auto* actor = object_at(&o, "Actor");
  event.id = string_at(actor, "ID");
  if (event.action.empty() || event.id.empty()) return std::nullopt;
  if (const auto* attributes = object_at(actor, "Attributes"))
    for (const auto& [k, v] : *attributes)
      if (v.is_string()) event.attributes.emplace(std::string(k), std::string(v.as_string()));
  return event;
}

awaitable<Status> DockerEngineDriver::watch_events(std::map<std::string, std::string> labels,
                                                   std::function<void(EngineEvent)> on_event,
                                                   std::function<void()> connected) {
  json::array label_filter;
  for (const auto& [k, v] : labels) label_filter.emplace_back(k + "=" + v);
  json::object filters{{"type", json::array{"container"}},
                       {"event", json::array{"start", "die", "oom", "destroy"}},
                       {"label", std::move(label_filter)}};
  std::string target = "/events?filters=" + url_encode(json::serialize(filters));
  auto on_line = [on_event = std::move(on_event)](std::string_view line) {
    if (auto event = parse_event(line)) on_event(std::move(*event));
  };
  co_return co_await engine_.follow(std::move(target), std::move(on_line), std::move(connected));
}

awaitable<Result<std::vector<std::string>>> DockerEngineDriver::list_images(std::map<std::string, std::string> labels) {
  json::array wanted;
  for (const auto& [k, v] : labels) wanted.emplace_back(k + "=" + v);
  // Untagged (dangling) images are listed too: a raw copy whose tag moved is one of them.
  std::string target = "/images/json?all=0";
  if (!wanted.empty()) target += "&filters=" + url_encode(json::serialize(json::object{{"label", std::move(wanted)}}));
  auto res = co_await engine_.call(Method::get, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  std::vector<std::string> ids;
  if (res->is_array()) {
    for (const auto& entry : res->as_array()) {
      if (auto id = string_at(entry.if_object(), "Id"); !id.empty()) ids.push_back(id);
    }
  }
  co_return ids;
}

awaitable<Status> DockerEngineDriver::remove_image(std::string ref) {
  std::string target = "/images/" + url_encode(ref);
  co_return co_await expect(engine_, Method::del, std::move(target), std::nullopt, 404);
}

// ---- save-image's parts (image_saver.h) -----------------------------------------------------

awaitable<Status> DockerEngineDriver::pause(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/pause";
  auto res = co_await engine_.request(Method::post, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status >= 200 && res->status < 300) co_return ok();
  // Paused already: the engine answers 409 "... is already paused".
  if (res->status == 409 && res->body.find("already paused") != std::string::npos) co_return ok();
  co_return fail(docker::engine_error(res->status, res->body));
}

awaitable<Status> DockerEngineDriver::unpause(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/unpause";
  auto res = co_await engine_.request(Method::post, std::move(target));
  if (!res) co_return fail(std::move(res.error()));
  if (res->status >= 200 && res->status < 300) co_return ok();
  if (res->status == 409 && res->body.find("not paused") != std::string::npos) co_return ok();
  co_return fail(docker::engine_error(res->status, res->body));
}

awaitable<Result<std::vector<FileChange>>> DockerEngineDriver::changes(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/changes";
  const std::chrono::milliseconds timeout = std::chrono::minutes(10);  // a naive diff walks both trees
  auto res = co_await engine_.call(Method::get, std::move(target), std::nullopt, timeout);
  if (!res) co_return fail(std::move(res.error()));
  std::vector<FileChange> out;
  if (const auto* list = res->if_array()) {
    out.reserve(list->size());
    for (const auto& entry : *list) {
      const auto* o = entry.if_object();
      FileChange c;
      c.path = string_at(o, "Path");
      const auto kind = int_at(o, "Kind");
      if (c.path.empty() || kind < 0 || kind > 2) co_return fail(ErrorCode::internal, "docker engine: a change without path or kind");
      c.kind = static_cast<ChangeKind>(kind);
      out.push_back(std::move(c));
    }
  }
  co_return out;
}

awaitable<Result<ContainerLayerDir>> DockerEngineDriver::layer_dir(std::string id) {
  std::string target = "/containers/" + url_encode(id) + "/json";
  auto container = co_await engine_.call(Method::get, std::move(target));
  if (!container) co_return fail(std::move(container.error()));
  const auto* graph = object_at(container->if_object(), "GraphDriver");
  ContainerLayerDir out;
  out.storage_driver = string_at(graph, "Name");
  if (out.storage_driver == "overlay2") {
    out.dir = string_at(object_at(graph, "Data"), "UpperDir");
    if (out.dir.empty()) co_return fail(ErrorCode::unavailable, "docker engine: overlay2 container without UpperDir");
    // Without the native diff (redirect_dir or metacopy on), the upper dir may lack a changed
    // file's data: it is not read then.
    auto info = co_await engine_.call(Method::get, "/info");
    if (!info) co_return fail(std::move(info.error()));
    bool native = false;
    if (const auto* status = info->if_object() ? info->as_object().if_contains("DriverStatus") : nullptr; status && status->is_array()) {
      for (const auto& pair : status->as_array()) {
        const auto* kv = pair.if_array();
        if (kv && kv->size() == 2 && (*kv)[0] == "Native Overlay Diff" && (*kv)[1] == "true") native = true;
      }
    }
    if (!native) co_return fail(ErrorCode::unavailable, "overlay2 without the native diff: the upper dir is not read");
    out.walk_upper = true;
    co_return out;
  }
  if (out.storage_driver == "btrfs") {
    // The subvolume is named by the layer's mount id (not the container id), which only the
    // engine's layer database records.
    auto info = co_await engine_.call(Method::get, "/info");
    if (!info) co_return fail(std::move(info.error()));
    const std::string root = string_at(info->if_object(), "DockerRootDir");
    const std::string full_id = string_at(container->if_object(), "Id");
    if (root.empty() || full_id.empty()) co_return fail(ErrorCode::unavailable, "docker engine: no DockerRootDir or Id");
    out.dir = root + "/btrfs/subvolumes";
    out.mount_id_file = root + "/image/btrfs/layerdb/mounts/" + full_id + "/mount-id";
    co_return out;
  }
  co_return fail(ErrorCode::unavailable, "the engine's storage driver " + out.storage_driver + " is not read directly");
}

awaitable<Result<SaveBase>> DockerEngineDriver::save_base(std::string id, std::map<std::string, std::string> labels) {
  auto config = co_await parent_config(id, std::move(labels), false);
  if (!config) co_return fail(std::move(config.error()));
  std::string container_target = "/containers/" + url_encode(id) + "/json";
  auto container = co_await engine_.call(Method::get, std::move(container_target));
  if (!container) co_return fail(std::move(container.error()));
  SaveBase out;
  out.image_id = string_at(container->if_object(), "Image");
  std::string image_target = "/images/" + url_encode(out.image_id) + "/json";
  auto image = co_await engine_.call(Method::get, std::move(image_target));
  if (!image) co_return fail(std::move(image.error()));
  const auto* o = image->if_object();
  out.config = std::move(*config);
  out.architecture = string_at(o, "Architecture");
  out.os = string_at(o, "Os");
  out.variant = string_at(o, "Variant");
  out.created = string_at(o, "Created");
  if (const auto* rootfs = object_at(o, "RootFS")) {
    if (const auto* layers = rootfs->if_contains("Layers"); layers && layers->is_array())
      for (const auto& l : layers->as_array())
        if (l.is_string()) out.diff_ids.emplace_back(l.as_string());
  }
  if (out.os.empty()) out.os = "linux";
  if (out.architecture.empty()) co_return fail(ErrorCode::internal, "docker engine: image " + out.image_id + " has no Architecture");
  co_return out;
}

awaitable<Result<std::string>> DockerEngineDriver::load_image(BodySource source, std::chrono::milliseconds timeout) {
  std::string target = "/images/load?quiet=1";
  std::string tar_type = "application/x-tar";
  auto res = co_await docker::post_streamed(engine_.executor(), engine_.options(), std::move(target), std::move(tar_type),
                                            std::move(source), timeout);
  if (!res) co_return fail(std::move(res.error()));
  if (res->status < 200 || res->status >= 300) co_return fail(docker::engine_error(res->status, res->body));
  auto messages = docker::parse_message_stream(res->body);
  if (!messages) co_return fail(std::move(messages.error()));
  std::string loaded;
  for (const auto& m : *messages) {
    const std::string stream = string_at(m.if_object(), "stream");
    if (stream.starts_with("Loaded image")) loaded = stream;
  }
  while (!loaded.empty() && (loaded.back() == '\n' || loaded.back() == ' ')) loaded.pop_back();
  if (loaded.empty()) co_return fail(ErrorCode::internal, "docker engine: the load answered no loaded image: " + res->body.substr(0, 300));
  co_return loaded;
}

}  // namespace gpucloud::agent
