// Value and cross-field checks on a Config. They work on the struct (not the TOML), so they
// apply equally after command-line overrides (--listen, --data-dir) and to configs built in code.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "config/config.h"

namespace gpucloud::config {

namespace {

constexpr std::string_view kDefaultStoreUrl = "sqlite://DATA_DIR/gpucloud.db";
constexpr std::string_view kZoneinfoDir = "/usr/share/zoneinfo";

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string quote_for_message(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  out += '"';
  return out;
}

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Image names of the market may carry versions ("pytorch-2.3-cuda12.1", as in config.md),
// so they also allow dots; otherwise the same shape as resource names.
bool is_valid_image_name(std::string_view name) {
  if (name.empty() || name.size() > 63 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return is_lower_alnum(c) || c == '-' || c == '.'; });
}

bool is_valid_listen(std::string_view s) {
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view host = s.substr(0, colon);
  std::string_view port = s.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), is_digit)) return false;
  if (std::stoi(std::string(port)) > 65535) return false;  // 0 = any free port (tests)
  if (host.empty()) return false;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    std::string_view inner = host.substr(1, host.size() - 2);
    return std::all_of(inner.begin(), inner.end(), [](char c) {
      return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
    });
  }
  return std::all_of(host.begin(), host.end(), [](char c) { return is_alnum(c) || c == '-' || c == '.'; });
}

// "UTC" or a TZif file under /usr/share/zoneinfo; the name may not climb out of that folder.
bool is_valid_timezone(std::string_view name) {
  if (name == "UTC") return true;
  if (name.empty() || name.front() == '/' || name.size() > 128) return false;
  for (char c : name) {
    if (!(is_alnum(c) || c == '/' || c == '_' || c == '-' || c == '+')) return false;
  }
  if (name.find("//") != std::string_view::npos) return false;  // "." and ".." need dots: refused above
  std::error_code ec;
  std::filesystem::path file = std::filesystem::path(kZoneinfoDir) / std::string(name);
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "TZif";  // not zone.tab, leapseconds, ...
}

bool is_valid_store_url(std::string_view url) {
  if (url.empty()) return true;
  for (std::string_view scheme : {"sqlite://", "postgresql://", "postgres://"}) {
    if (starts_with(url, scheme)) return url.size() > scheme.size();
  }
  return false;
}

// postgresql://USER:PASSWORD@HOST/...: a colon in the part before '@'.
bool url_has_password(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return false;
  std::string_view rest = url.substr(scheme + 3);
  auto at = rest.find('@');
  if (at == std::string_view::npos) return false;
  auto slash = rest.find('/');
  if (slash != std::string_view::npos && slash < at) return false;
  return rest.substr(0, at).find(':') != std::string_view::npos;
}

bool is_valid_engine(std::string_view engine) {
  // The agent speaks the Docker Engine API over its unix socket only.
  return starts_with(engine, "unix:///") && engine.size() > 8;
}

std::string range_text(int low, int high) { return std::to_string(low) + "-" + std::to_string(high); }

class Checker {
 public:
  void error(std::string path, std::string_view why) { errors_.push_back(path + ": " + std::string(why)); }

  void positive(const std::string& path, std::int64_t v) {
    if (v <= 0) error(path, "must be > 0, not " + std::to_string(v));
  }
  void non_negative(const std::string& path, std::int64_t v) {
    if (v < 0) error(path, "must be >= 0, not " + std::to_string(v));
  }
  void positive(const std::string& path, std::chrono::seconds d) {
    if (d.count() <= 0) error(path, "must be longer than 0s");
  }

  Status result() const {
    if (errors_.empty()) return ok();
    std::string out;
    for (const auto& e : errors_) {
      if (!out.empty()) out += "; ";
      out += e;
    }
    return fail(ErrorCode::invalid_argument, out);
  }

 private:
  std::vector<std::string> errors_;
};

std::string at(std::string_view array, std::size_t i) {
  return std::string(array) + "[" + std::to_string(i) + "]";
}

void check_top_level(const Config& c, Checker& k) {
  if (!is_valid_listen(c.listen)) {
    k.error("listen", quote_for_message(c.listen) + R"( is not HOST:PORT like "127.0.0.1:8080", "0.0.0.0:8080" or "[::1]:8080")");
  }
  if (c.data_dir.empty()) k.error("data_dir", "must not be empty");
  bool currency_ok = c.currency.size() == 3 &&
                     std::all_of(c.currency.begin(), c.currency.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; });
  if (!currency_ok) k.error("currency", quote_for_message(c.currency) + R"( is not a 3-letter ISO 4217 code like "CNY")");
  bool host_ok = !c.public_host.empty() &&
                 std::all_of(c.public_host.begin(), c.public_host.end(), [](char ch) {
                   return is_alnum(ch) || ch == '-' || ch == '.' || ch == ':' || ch == '[' || ch == ']';
                 });
  if (!host_ok) {
    k.error("public_host", quote_for_message(c.public_host) + " is not a host name or address (users SSH to it)");
  }
  k.positive("session_ttl", c.session_ttl);
  k.positive("billing.settle_interval", c.billing.settle_interval);
  if (c.agent.network_pool_size < 0 || c.agent.network_pool_size > 64)
    k.error("agent.network_pool_size", "must be from 0 to 64");
  if (!(c.agent.disk_overcommit >= 0.1 && c.agent.disk_overcommit <= 100))
    k.error("agent.disk_overcommit", "must be from 0.1 to 100 (1.0: provision no more than the disk holds)");
  if (c.agent.gpu_injection != "auto" && c.agent.gpu_injection != "toolkit" &&
      c.agent.gpu_injection != "builtin" && c.agent.gpu_injection != "none")
    k.error("agent.gpu_injection", "must be \"auto\", \"toolkit\", \"builtin\" or \"none\"");
  if (!c.agent.nvidia_driver_root.empty() && c.agent.nvidia_driver_root.front() != '/')
    k.error("agent.nvidia_driver_root", "must be an absolute path");
  if (c.agent.dev_root.empty() || c.agent.dev_root.front() != '/')
    k.error("agent.dev_root", "must be an absolute path");
  if (!c.agent.lxcfs_dir.empty() && c.agent.lxcfs_dir.front() != '/')
    k.error("agent.lxcfs_dir", "must be an absolute path");
  if (c.monitoring.sample_interval < std::chrono::seconds(1) || c.monitoring.sample_interval > std::chrono::seconds(300))
    k.error("monitoring.sample_interval", "must be from 1s to 300s");
  if (c.monitoring.raw_retention < std::chrono::hours(1))
    k.error("monitoring.raw_retention", "must be at least 1h");
  if (c.monitoring.downsampled_retention < c.monitoring.raw_retention)
    k.error("monitoring.downsampled_retention", "must be at least monitoring.raw_retention");
  if (c.billing.signup_credit < 0) k.error("billing.signup_credit", "must not be negative");
  if (!is_valid_timezone(c.billing_timezone)) {
    k.error("billing_timezone",
            quote_for_message(c.billing_timezone) + R"( is not "UTC" or a time zone under /usr/share/zoneinfo like "Asia/Shanghai")");
  }
  if (!is_valid_store_url(c.store_url)) {
    k.error("store.url", quote_for_message(c.store_url) + " is not sqlite://PATH or postgresql://USER@HOST:PORT/DB");
  } else if (c.store_is_postgres() && url_has_password(c.store_url)) {
    // Said without the URL: its text holds the secret.
    k.error("store.url", "holds a password: put it in [store] password_file or GPUCLOUD_STORE_PASSWORD");
  }
  if (!c.store_password_file.empty() && !c.store_is_postgres())
    k.error("store.password_file", "is only for a postgresql:// store.url");
}

void check_zones(const Config& c, Checker& k) {
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < c.zones.size(); ++i) {
    const Zone& z = c.zones[i];
    if (!is_valid_name(z.name)) {
      k.error(at("zones", i) + ".name", quote_for_message(z.name) + " is not a name like \"zone-a\" ([a-z][a-z0-9-]{0,62})");
    } else if (auto [it, inserted] = seen.emplace(z.name, i); !inserted) {
      k.error(at("zones", i) + ".name", quote_for_message(z.name) + " is already the name of " + at("zones", it->second));
    }
    if (z.region.empty()) k.error(at("zones", i) + ".region", "must not be empty");
  }
}

void check_offers(const Config& c, Checker& k) {
  std::map<std::string, std::size_t> models;
  std::map<std::string, std::size_t> nvml;
  for (std::size_t i = 0; i < c.offers.size(); ++i) {
    const Offer& o = c.offers[i];
    std::string p = at("offers", i);
    if (o.gpu_model.empty()) {
      k.error(p + ".gpu_model", "required");
    } else if (auto [it, inserted] = models.emplace(o.gpu_model, i); !inserted) {
      k.error(p + ".gpu_model", quote_for_message(o.gpu_model) + " already has an offer: " + at("offers", it->second));
    }
    for (std::size_t j = 0; j < o.nvml_names.size(); ++j) {
      const std::string& n = o.nvml_names[j];
      std::string np = p + ".nvml_names" + "[" + std::to_string(j) + "]";
      if (n.empty()) {
        k.error(np, "must not be empty");
      } else if (auto [it, inserted] = nvml.emplace(n, i); !inserted && it->second != i) {
        // A real GPU must match exactly one offer.
        k.error(np, quote_for_message(n) + " is also listed by " + at("offers", it->second));
      }
    }
    k.non_negative(p + ".gpu_memory_gib", o.gpu_memory_gib);
    k.positive(p + ".cpu_per_gpu", o.cpu_per_gpu);
    k.positive(p + ".memory_gib_per_gpu", o.memory_gib_per_gpu);
    k.non_negative(p + ".price_per_gpu_hour", o.price_per_gpu_hour);
    k.non_negative(p + ".price_per_gpu_week", o.price_per_gpu_week);
    k.non_negative(p + ".price_per_gpu_month", o.price_per_gpu_month);
  }
}

void check_hosts(const Config& c, Checker& k) {
  std::map<std::string, std::size_t> names;
  std::map<std::string, std::size_t> nvml_host_by_engine;
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const Host& h = c.hosts[i];
    std::string p = at("hosts", i);
    if (h.name.empty()) {
      k.error(p + ".name", "required");
    } else if (!is_valid_host_name(h.name)) {
      k.error(p + ".name", quote_for_message(h.name) + " is not a host name (letters, digits, '-', '.', '_'; at most 63)");
    } else if (auto [it, inserted] = names.emplace(h.name, i); !inserted) {
      k.error(p + ".name", quote_for_message(h.name) + " is already the name of " + at("hosts", it->second));
    }
    // An empty zones list stands for the default zone apply_defaults() adds.
    bool zone_known = c.zones.empty() ? h.zone == "zone-a" : c.find_zone(h.zone) != nullptr;
    if (h.zone.empty()) {
      k.error(p + ".zone", "required when there is more than one zone");
    } else if (!zone_known) {
      k.error(p + ".zone", "zone " + quote_for_message(h.zone) + " is not declared in [[zones]]");
    }
    if (!h.public_address.empty() &&
        !std::all_of(h.public_address.begin(), h.public_address.end(), [](char ch) {
          return is_alnum(ch) || ch == '-' || ch == '.' || ch == ':' || ch == '[' || ch == ']';
        }))
      k.error(p + ".public_address",
              quote_for_message(h.public_address) + " is not a host name or address (users SSH to it)");
    if (!is_valid_engine(h.engine)) {
      k.error(p + ".engine", quote_for_message(h.engine) + " is not unix:///PATH/TO/docker.sock");
    }
    if (std::find(std::begin(kDiskDrivers), std::end(kDiskDrivers), h.disk_driver) == std::end(kDiskDrivers)) {
      k.error(p + ".disk_driver", quote_for_message(h.disk_driver) + " is not a disk driver (loop-ext4 or btrfs)");
    }
    k.positive(p + ".cpu", h.cpu);
    k.positive(p + ".memory_gib", h.memory_gib);
    if (!(1024 <= h.port_min && h.port_min <= h.port_max && h.port_max <= 65535)) {
      k.error(p + ".port_range", quote_for_message(range_text(h.port_min, h.port_max)) + " is not LOW-HIGH with 1024<=LOW<=HIGH<=65535");
    }
    for (std::size_t g = 0; g < h.simulated_gpus.size(); ++g) {
      const SimulatedGpu& gpu = h.simulated_gpus[g];
      std::string gp = p + ".simulated_gpus[" + std::to_string(g) + "]";
      if (gpu.model.empty()) {
        k.error(gp + ".model", "required");
      } else if (c.find_offer(gpu.model) == nullptr) {
        // Without an offer the GPUs could be neither priced nor rented.
        k.error(gp + ".model", quote_for_message(gpu.model) + " has no [[offers]] entry with gpu_model = " + quote_for_message(gpu.model));
      }
      k.positive(gp + ".memory_gib", gpu.memory_gib);
      k.positive(gp + ".count", gpu.count);
    }
    // Hosts sharing one engine share its GPUs: only one may claim them through NVML.
    if (h.uses_nvml() && !h.engine.empty()) {
      auto [it, inserted] = nvml_host_by_engine.emplace(h.engine, i);
      if (!inserted) {
        const Host& other = c.hosts[it->second];
        k.error(p, "hosts " + quote_for_message(other.name) + " and " + quote_for_message(h.name) + " both take their GPUs from NVML on engine " +
                       h.engine + "; at most one host per engine may, the others must declare simulated_gpus");
      }
    }
  }
  // Host ports are published on the engine's machine: two hosts there cannot hand out the same one.
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    for (std::size_t j = i + 1; j < c.hosts.size(); ++j) {
      const Host& a = c.hosts[i];
      const Host& b = c.hosts[j];
      if (a.engine != b.engine || a.port_min > a.port_max || b.port_min > b.port_max) continue;
      if (a.port_min <= b.port_max && b.port_min <= a.port_max) {
        k.error(at("hosts", j) + ".port_range",
                "hosts " + quote_for_message(a.name) + " (" + a.port_range() + ") and " + quote_for_message(b.name) + " (" + b.port_range() +
                    ") on engine " + a.engine + " have overlapping port ranges");
      }
    }
  }
}

// "HOST:PORT" split at its last colon, the brackets of an IPv6 literal removed.
std::pair<std::string, std::string> split_listen(std::string_view listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string_view::npos) return {};
  std::string host(listen.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::string(listen.substr(colon + 1))};
}

bool is_wildcard_address(std::string_view host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

bool is_valid_https_url(std::string_view url) {
  constexpr std::string_view scheme = "https://";
  if (!starts_with(url, scheme) || url.size() == scheme.size() || url.size() > 2048) return false;
  for (char ch : url)
    if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f || ch == '"' || ch == '\\') return false;
  return url[scheme.size()] != '/' && url[scheme.size()] != ':';
}

void check_agents(const Config& c, Checker& k) {
  const AgentsConfig& a = c.agents;
  if (!a.listen.empty()) {
    if (!is_valid_listen(a.listen)) {
      k.error("agents.listen", quote_for_message(a.listen) + R"( is not HOST:PORT like "0.0.0.0:8443")");
    } else if (a.listen == c.listen && split_listen(a.listen).second != "0") {
      k.error("agents.listen", quote_for_message(a.listen) + " is the API's own listen address");
    }
  }
  if (!a.url.empty() && !is_valid_https_url(a.url))
    k.error("agents.url", quote_for_message(a.url) + R"( is not an https URL like "https://control.example:8443")");
  for (std::size_t i = 0; i < a.server_names.size(); ++i) {
    if (!is_valid_certificate_name(a.server_names[i]))
      k.error(at("agents.server_names", i), quote_for_message(a.server_names[i]) + " is not a DNS name or an IP address");
  }
  if (a.certificate_days < 1 || a.certificate_days > 365)
    k.error("agents.certificate_days", "must be from 1 to 365, not " + std::to_string(a.certificate_days));
  if (a.join_token_ttl < std::chrono::minutes(1) || a.join_token_ttl > std::chrono::hours(24 * 7))
    k.error("agents.join_token_ttl", "must be from 1m to 7d");
  if (a.heartbeat_interval < std::chrono::seconds(1) || a.heartbeat_interval > std::chrono::seconds(300))
    k.error("agents.heartbeat_interval", "must be from 1s to 300s");
  if (a.unreachable_after <= a.heartbeat_interval)
    k.error("agents.unreachable_after", "must be longer than agents.heartbeat_interval");
  if (a.reconnect_grace > std::chrono::hours(1)) k.error("agents.reconnect_grace", "must be at most 1h");
}

void check_images(const Config& c, Checker& k) {
  std::map<std::string, std::size_t> names;
  for (std::size_t i = 0; i < c.images.size(); ++i) {
    const Image& img = c.images[i];
    std::string p = at("images", i);
    if (!is_valid_image_name(img.name)) {
      k.error(p + ".name", quote_for_message(img.name) + " is not an image name ([a-z][a-z0-9.-]{0,62})");
    } else if (auto [it, inserted] = names.emplace(img.name, i); !inserted) {
      k.error(p + ".name", quote_for_message(img.name) + " is already the name of " + at("images", it->second));
    }
    if (img.engine_image.empty()) k.error(p + ".engine_image", "required");
  }
}

void check_sections(const Config& c, Checker& k) {
  k.positive("no_gpu_offer.cpu", c.no_gpu_offer.cpu);
  k.positive("no_gpu_offer.memory_gib", c.no_gpu_offer.memory_gib);
  k.non_negative("no_gpu_offer.price_per_hour", c.no_gpu_offer.price_per_hour);

  const StoragePrices& s = c.storage_prices;
  k.non_negative("storage_prices.system_disk_free_gib", s.system_disk_free_gib);
  k.non_negative("storage_prices.system_disk_per_gib_hour", s.system_disk_per_gib_hour_micros);
  k.non_negative("storage_prices.data_disk_per_gib_hour", s.data_disk_per_gib_hour_micros);
  k.non_negative("storage_prices.snapshot_per_gib_hour", s.snapshot_per_gib_hour_micros);
  k.non_negative("storage_prices.image_per_gib_hour", s.image_per_gib_hour_micros);

  k.non_negative("quotas.gpus", c.quotas.gpus);
  k.non_negative("quotas.instances", c.quotas.instances);
  k.non_negative("quotas.disk_gib", c.quotas.disk_gib);
  k.non_negative("quotas.images", c.quotas.images);
  k.non_negative("quotas.snapshots", c.quotas.snapshots);

  k.non_negative("policy.recycle_days", c.policy.recycle_days);
  k.positive("policy.release_stopped_after_days", c.policy.release_stopped_after_days);
  k.positive("policy.arrears_release_instances_after_days", c.policy.arrears_release_instances_after_days);
  k.positive("policy.arrears_delete_disks_after_days", c.policy.arrears_delete_disks_after_days);
  // Disks go in a second, longer grace: never before the instances using them.
  if (c.policy.arrears_delete_disks_after_days < c.policy.arrears_release_instances_after_days) {
    k.error("policy.arrears_delete_disks_after_days",
            std::to_string(c.policy.arrears_delete_disks_after_days) +
                " must be >= arrears_release_instances_after_days (" +
                std::to_string(c.policy.arrears_release_instances_after_days) + ")");
  }

  if (c.server.max_body_bytes < 1024) {
    k.error("server.max_body_bytes", "must be >= 1024, not " + std::to_string(c.server.max_body_bytes));
  }
  if (c.server.proxy_max_body_bytes < c.server.max_body_bytes) {
    k.error("server.proxy_max_body_bytes", "must be >= server.max_body_bytes (" + std::to_string(c.server.max_body_bytes) +
                                               "), not " + std::to_string(c.server.proxy_max_body_bytes));
  }
  k.positive("server.read_timeout", c.server.read_timeout);
  k.positive("server.idle_timeout", c.server.idle_timeout);
  k.positive("server.header_timeout", c.server.header_timeout);
  k.positive("server.max_connections", c.server.max_connections);
  if (c.server.worker_threads < 1 || c.server.worker_threads > 1024) {
    k.error("server.worker_threads", "must be between 1 and 1024, not " + std::to_string(c.server.worker_threads));
  }
  k.positive("server.login_failures_allowed", c.server.login_failures_allowed);
  k.positive("server.login_window", c.server.login_window);
  if (!c.server.console_dir.empty() && c.server.console_dir.front() != '/')
    k.error("server.console_dir", "must be an absolute path, not \"" + c.server.console_dir + "\"");
  // A scrape token is a secret: long enough not to be guessed (the value is never echoed).
  if (!c.metrics.token.empty() && c.metrics.token.size() < 16)
    k.error("metrics.token", "must be at least 16 characters");
}

}  // namespace

// Host names end up in logs, metrics labels and the host list: hostname characters only.
bool is_valid_host_name(std::string_view name) {
  if (name.empty() || name.size() > 63 || !is_alnum(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return is_alnum(c) || c == '-' || c == '.' || c == '_'; });
}

bool is_valid_name(std::string_view name) {
  if (name.empty() || name.size() > 63 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return is_lower_alnum(c) || c == '-'; });
}

std::string Host::port_range() const { return range_text(port_min, port_max); }

std::string Config::store_path() const {
  std::string_view url = store_url.empty() ? kDefaultStoreUrl : std::string_view(store_url);
  constexpr std::string_view scheme = "sqlite://";
  if (!starts_with(url, scheme)) return "";
  std::string_view path = url.substr(scheme.size());
  constexpr std::string_view placeholder = "DATA_DIR";
  if (!starts_with(path, placeholder)) return std::string(path);
  std::string_view rest = path.substr(placeholder.size());
  std::string dir = data_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // no "//" in the joined path
  if (rest.empty()) return dir;
  if (rest.front() != '/') return dir + "/" + std::string(rest);
  if (dir == "/") return std::string(rest);
  return dir + std::string(rest);
}

bool Config::store_is_postgres() const {
  return starts_with(store_url, "postgresql://") || starts_with(store_url, "postgres://");
}

const Zone* Config::find_zone(std::string_view name) const {
  for (const Zone& z : zones)
    if (z.name == name) return &z;
  return nullptr;
}

const Offer* Config::find_offer(std::string_view gpu_model) const {
  for (const Offer& o : offers)
    if (o.gpu_model == gpu_model) return &o;
  return nullptr;
}

const Offer* Config::offer_for_nvml_name(std::string_view nvml_name) const {
  for (const Offer& o : offers)
    for (const std::string& n : o.nvml_names)
      if (n == nvml_name) return &o;
  return find_offer(nvml_name);
}

bool is_valid_certificate_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  if (name.find(':') != std::string_view::npos || std::all_of(name.begin(), name.end(), [](char ch) {
        return is_digit(ch) || ch == '.';
      })) {
    std::string text(name);
    unsigned char buf[sizeof(struct in6_addr)];
    return ::inet_pton(AF_INET, text.c_str(), buf) == 1 || ::inet_pton(AF_INET6, text.c_str(), buf) == 1;
  }
  std::size_t label = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char ch = name[i];
    if (ch == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!(is_alnum(ch) || ch == '-') || ++label > 63) return false;
    if (ch == '-' && (label == 1 || i + 1 == name.size() || name[i + 1] == '.')) return false;
  }
  return label > 0;
}

std::string machine_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string default_agents_url(std::string_view listen, std::string_view hostname) {
  auto [host, port] = split_listen(listen);
  if (port.empty()) return "";
  if (is_wildcard_address(host)) host = std::string(hostname);
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "https://" + host + ":" + port;
}

void apply_defaults(Config& c) {
  if (!c.agents.listen.empty()) {
    std::string hostname = machine_hostname();
    if (c.agents.url.empty()) c.agents.url = default_agents_url(c.agents.listen, hostname);
    if (c.agents.server_names.empty()) {
      std::vector<std::string> names{hostname, "localhost", "127.0.0.1"};
      std::string host = split_listen(c.agents.listen).first;
      if (!is_wildcard_address(host)) names.push_back(host);
      for (auto& n : names) {
        if (is_valid_certificate_name(n) &&
            std::find(c.agents.server_names.begin(), c.agents.server_names.end(), n) == c.agents.server_names.end())
          c.agents.server_names.push_back(n);
      }
    }
  }
  if (c.zones.empty()) c.zones.push_back(Zone{"zone-a", "local", ""});
  if (c.zones.size() == 1) {
    for (Host& h : c.hosts)
      if (h.zone.empty()) h.zone = c.zones.front().name;
  }
}

Status validate(const Config& c) {
  Checker k;
  check_top_level(c, k);
  check_zones(c, k);
  check_offers(c, k);
  check_hosts(c, k);
  check_images(c, k);
  check_sections(c, k);
  check_agents(c, k);
  return k.result();
}

}  // namespace gpucloud::config
