#include "cli/instance_spec.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A decimal integer in [min, max], or nullopt.
std::optional<std::int64_t> parse_int(std::string_view s, std::int64_t min, std::int64_t max) {
  s = trim(s);
  if (s.empty() || s.size() > 12) return std::nullopt;
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

struct Mount {
  json::object disk;
  std::string path;  // empty: pick a default
};

Expected<std::string> check_mount_path(std::string_view flag, std::string_view value,
                                       std::string_view path) {
  if (path.empty() || path.front() != '/' || path == "/") {
    return usage_error(fmt::format("{} {}: the mount path must be an absolute path below /",
                                   flag, value));
  }
  if (path.find("/../") != std::string_view::npos || path.ends_with("/..")) {
    return usage_error(fmt::format("{} {}: the mount path may not contain ..", flag, value));
  }
  std::string p(path);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

Expected<json::array> build_port_list(const std::vector<std::string>& flags) {
  // The API's forms: a number is tcp, "53/udp" names the protocol.
  json::array ports{22};
  std::set<std::pair<std::int64_t, std::string>> seen{{22, "tcp"}};
  for (const auto& p : flags) {
    const auto slash = p.find('/');
    const std::string protocol = slash == std::string::npos ? "tcp" : p.substr(slash + 1);
    auto port = parse_int(std::string_view(p).substr(0, slash), 1, 65535);
    if (!port || (protocol != "tcp" && protocol != "udp")) {
      return usage_error(fmt::format("--port {}: expected PORT or PORT/udp, a port number 1-65535", p));
    }
    if (!seen.insert({*port, protocol}).second) continue;
    if (protocol == "tcp") {
      ports.push_back(*port);
    } else {
      ports.push_back(json::string(fmt::format("{}/udp", *port)));
    }
  }
  if (ports.size() > 10) return usage_error("at most 10 ports (22 included)");
  return ports;
}

Expected<GpuSpec> parse_gpu_spec(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return usage_error(fmt::format("--gpu \"{}\": {}; expected MODEL:COUNT, e.g. \"RTX 4090:1\"",
                                   text, why));
  };
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("the GPU count is missing");
  GpuSpec spec;
  spec.model = std::string(trim(text.substr(0, colon)));
  if (spec.model.empty()) return bad("the GPU model is missing");
  auto count = parse_int(text.substr(colon + 1), 1, 1024);
  if (!count) return bad("the GPU count must be a whole number of at least 1");
  spec.count = static_cast<int>(*count);
  return spec;
}

void add_instance_flags(CLI::App& cmd, InstanceArgs& a, bool for_create) {
  auto* name = cmd.add_option("NAME", a.name, "instance name ([a-z][a-z0-9-]{0,62}, its hostname)");
  if (for_create) name->required();
  auto* gpu = cmd.add_option("--gpu", a.gpu, "GPU model and count, e.g. \"RTX 4090:1\"");
  auto* no_gpu = cmd.add_flag("--no-gpu", a.no_gpu, "no GPU (cheap CPU-only size, for data work)");
  gpu->excludes(no_gpu);
  cmd.add_option("--image", a.image, "image name or id (see `gpucloud images`; default: the base image)");
  cmd.add_option("--zone", a.zone, "zone (default: the platform picks)");
  cmd.add_option("--system-disk", a.system_disk, "system disk size in GiB (default 30)");
  cmd.add_option("--port", a.ports,
                 "a port the instance serves, in addition to 22: 8888 (tcp) or 53/udp (repeatable, at most 10 in all)")
      ->allow_extra_args(false);  // one value per flag: `--port 8888 NAME` leaves NAME alone
  cmd.add_option("--key", a.keys, "SSH key name or id to authorize (repeatable)")
      ->allow_extra_args(false);
  cmd.add_flag("--password-stdin", a.password_stdin,
               "read a root password for SSH from the first line of standard input");
  cmd.add_option("--billing", a.billing, "hourly (pay as you go), weekly or monthly")
      ->check(CLI::IsMember({"hourly", "weekly", "monthly"}));
  cmd.add_flag("--no-auto-renew", a.no_auto_renew,
               "do not renew a weekly/monthly subscription at expiry");
  cmd.add_option("--autostop-idle", a.autostop_idle,
                 "stop after this many minutes with the GPUs idle");
  cmd.add_option("--data-disk", a.data_disks,
                 "new data disk SIZE_GIB[:MOUNT_PATH] (default path /root/data; repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--attach", a.attach,
                 "attach an existing data disk DISK[:MOUNT_PATH] (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--sg", a.security_group, "security group (default: your `default` group)");
  cmd.add_flag("--no-wait", a.no_wait,
               for_create ? "return at once instead of waiting for `running`"
                          : "accepted for symmetry with create; ignored");
}

Expected<json::object> build_instance_body(const InstanceArgs& a,
                                           const std::optional<std::string>& password) {
  json::object body;
  if (!a.name.empty()) body["name"] = a.name;

  if (a.gpu.empty() && !a.no_gpu) {
    return usage_error("give --gpu MODEL:COUNT (e.g. --gpu \"RTX 4090:1\") or --no-gpu");
  }
  if (!a.gpu.empty() && a.no_gpu) return usage_error("--gpu and --no-gpu exclude each other");
  if (a.no_gpu) {
    body["gpu_count"] = 0;
  } else {
    auto spec = parse_gpu_spec(a.gpu);
    if (!spec) return tl::unexpected(spec.error());
    body["gpu_model"] = spec->model;
    body["gpu_count"] = spec->count;
  }

  if (!a.image.empty()) body["image"] = a.image;  // else the server's base image
  if (!a.zone.empty()) body["zone"] = a.zone;

  if (!a.system_disk.empty()) {
    auto gib = parse_int(a.system_disk, 1, 65536);
    if (!gib) {
      return usage_error(fmt::format("--system-disk {}: expected a size in GiB, e.g. 30",
                                     a.system_disk));
    }
    body["system_disk_gib"] = *gib;
  }

  if (!a.ports.empty()) {
    auto ports = build_port_list(a.ports);
    if (!ports) return tl::unexpected(std::move(ports.error()));
    body["ports"] = std::move(*ports);
  }

  if (!a.keys.empty()) {
    json::array keys;
    for (const auto& k : a.keys) keys.push_back(json::string(k));
    body["ssh_keys"] = std::move(keys);
  }
  if (password) body["password"] = *password;

  // Data disks: new ones, then attached ones. A disk without a path gets /root/data, then
  // /root/data2, /root/data3, ... skipping the paths given explicitly.
  std::vector<Mount> mounts;
  for (const auto& d : a.data_disks) {
    auto colon = d.find(':');
    auto size = parse_int(std::string_view(d).substr(0, colon), 1, 1 << 24);
    if (!size) {
      return usage_error(fmt::format(
          "--data-disk {}: expected SIZE_GIB[:MOUNT_PATH], e.g. 100 or 100:/root/data", d));
    }
    Mount m;
    m.disk = json::object{{"size_gib", *size}, {"delete_on_release", false}};
    if (colon != std::string::npos) {
      auto path = check_mount_path("--data-disk", d, std::string_view(d).substr(colon + 1));
      if (!path) return tl::unexpected(path.error());
      m.path = *path;
    }
    mounts.push_back(std::move(m));
  }
  for (const auto& d : a.attach) {
    auto colon = d.find(':');
    std::string disk = std::string(trim(std::string_view(d).substr(0, colon)));
    if (disk.empty()) {
      return usage_error(fmt::format("--attach {}: expected DISK[:MOUNT_PATH]", d));
    }
    Mount m;
    m.disk = json::object{{"id", disk}};
    if (colon != std::string::npos) {
      auto path = check_mount_path("--attach", d, std::string_view(d).substr(colon + 1));
      if (!path) return tl::unexpected(path.error());
      m.path = *path;
    }
    mounts.push_back(std::move(m));
  }
  if (!mounts.empty()) {
    std::set<std::string> used;
    for (const auto& m : mounts) {
      if (!m.path.empty() && !used.insert(m.path).second) {
        return usage_error(fmt::format("two data disks mount at {}", m.path));
      }
    }
    int next = 1;
    json::array disks;
    for (auto& m : mounts) {
      if (m.path.empty()) {
        do {
          m.path = next == 1 ? "/root/data" : fmt::format("/root/data{}", next);
          ++next;
        } while (used.count(m.path) > 0);
        used.insert(m.path);
      }
      m.disk["mount_path"] = m.path;
      disks.push_back(std::move(m.disk));
    }
    body["data_disks"] = std::move(disks);
  }

  if (!a.security_group.empty()) body["security_group"] = a.security_group;

  if (!a.billing.empty()) {
    if (a.billing != "hourly" && a.billing != "weekly" && a.billing != "monthly") {
      return usage_error(fmt::format("--billing {}: expected hourly, weekly or monthly",
                                     a.billing));
    }
    body["billing"] = json::object{{"mode", a.billing},
                                   {"auto_renew", a.billing != "hourly" && !a.no_auto_renew}};
  } else if (a.no_auto_renew) {
    return usage_error("--no-auto-renew applies to --billing weekly or monthly");
  }

  if (!a.autostop_idle.empty()) {
    auto minutes = parse_int(a.autostop_idle, 1, 60 * 24 * 366);
    if (!minutes) {
      return usage_error(fmt::format("--autostop-idle {}: expected a number of minutes, e.g. 30",
                                     a.autostop_idle));
    }
    body["autostop"] = json::object{{"idle_minutes", *minutes}, {"gpu_util_below_percent", 5}};
  }
  return body;
}

}  // namespace gpucloud::cli
