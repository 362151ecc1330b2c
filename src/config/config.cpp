// Parsing of the TOML configuration into Config. Every table is checked against the keys it
// may hold, so a misspelt key is an error (naming its full path) rather than a silent default.
// Cross-field checks live in config_validation.cpp.
#include "config/config.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <new>
#include <sstream>
#include <system_error>

#include <toml++/toml.h>

namespace gpucloud::config {

namespace {

bool is_bare_key(std::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Keys that need quoting in TOML are shown as TOML literal keys so the path stays unambiguous.
std::string join(std::string_view path, std::string_view key) {
  std::string shown = is_bare_key(key) ? std::string(key) : "'" + std::string(key) + "'";
  if (path.empty()) return shown;
  return std::string(path) + "." + shown;
}

std::string indexed(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string shortest(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return r.ec == std::errc() ? std::string(buf, r.ptr) : std::string("?");
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::string location(std::string_view source, const toml::source_region& where) {
  if (where.begin.line == 0) return std::string(source) + ": ";
  return std::string(source) + ":" + std::to_string(where.begin.line) + ":" +
         std::to_string(where.begin.column) + ": ";
}

constexpr std::string_view kPortRangeRule = "is not LOW-HIGH with 1024<=LOW<=HIGH<=65535";
constexpr std::string_view kDurationRule = R"(is not a duration like "30m", "24h", "7d")";

// Reads one document, collecting every error (an operator fixes them all in one go).
class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  const std::vector<std::string>& errors() const { return errors_; }

  void read(const toml::table& root, Config& c) {
    check_keys(root, "",
               {"listen", "data_dir", "currency", "registration", "public_host", "session_ttl",
                "billing_timezone", "store", "zones", "hosts", "images", "offers",
                "no_gpu_offer", "storage_prices", "quotas", "alerts", "policy", "server", "billing", "monitoring", "agent",
                "metrics", "agents"});
    get_string(root, "", "listen", c.listen);
    get_string(root, "", "data_dir", c.data_dir);
    get_string(root, "", "currency", c.currency);
    std::string registration;
    if (const toml::node* n = get_string(root, "", "registration", registration)) {
      if (registration == "open") {
        c.registration_open = true;
      } else if (registration == "closed") {
        c.registration_open = false;
      } else {
        error(n->source(), "registration", R"(must be "open" or "closed", not )" + quote(registration));
      }
    }
    get_string(root, "", "public_host", c.public_host);
    get_duration(root, "", "session_ttl", c.session_ttl);
    get_string(root, "", "billing_timezone", c.billing_timezone);

    if (const toml::table* t = get_table(root, "", "store")) {
      check_keys(*t, "store", {"url", "password_file"});
      get_string(*t, "store", "url", c.store_url);
      get_string(*t, "store", "password_file", c.store_password_file);
    }
    for_each_table(root, "", "zones", [&](const toml::table& t, const std::string& path) {
      c.zones.push_back(read_zone(t, path));
    });
    for_each_table(root, "", "hosts", [&](const toml::table& t, const std::string& path) {
      c.hosts.push_back(read_host(t, path));
    });
    for_each_table(root, "", "images", [&](const toml::table& t, const std::string& path) {
      c.images.push_back(read_image(t, path));
    });
    for_each_table(root, "", "offers", [&](const toml::table& t, const std::string& path) {
      c.offers.push_back(read_offer(t, path));
    });
    if (const toml::table* t = get_table(root, "", "no_gpu_offer")) {
      check_keys(*t, "no_gpu_offer", {"cpu", "memory_gib", "price_per_hour"});
      get_int(*t, "no_gpu_offer", "cpu", c.no_gpu_offer.cpu);
      get_int(*t, "no_gpu_offer", "memory_gib", c.no_gpu_offer.memory_gib);
      get_money(*t, "no_gpu_offer", "price_per_hour", c.no_gpu_offer.price_per_hour);
    }
    if (const toml::table* t = get_table(root, "", "storage_prices")) read_storage(*t, c.storage_prices);
    if (const toml::table* t = get_table(root, "", "quotas")) {
      check_keys(*t, "quotas", {"gpus", "instances", "disk_gib", "images", "snapshots"});
      get_int(*t, "quotas", "gpus", c.quotas.gpus);
      get_int(*t, "quotas", "instances", c.quotas.instances);
      get_int(*t, "quotas", "disk_gib", c.quotas.disk_gib);
      get_int(*t, "quotas", "snapshots", c.quotas.snapshots);
      get_int(*t, "quotas", "images", c.quotas.images);
    }
    if (const toml::table* t = get_table(root, "", "billing")) {
      check_keys(*t, "billing", {"signup_credit", "settle_interval"});
      get_money(*t, "billing", "signup_credit", c.billing.signup_credit);
      get_duration(*t, "billing", "settle_interval", c.billing.settle_interval);
    }
    if (const toml::table* t = get_table(root, "", "monitoring")) {
      check_keys(*t, "monitoring", {"sample_interval", "raw_retention", "downsampled_retention"});
      get_duration(*t, "monitoring", "sample_interval", c.monitoring.sample_interval);
      get_duration(*t, "monitoring", "raw_retention", c.monitoring.raw_retention);
      get_duration(*t, "monitoring", "downsampled_retention", c.monitoring.downsampled_retention);
    }
    if (const toml::table* t = get_table(root, "", "agent")) {
      check_keys(*t, "agent", {"network_holders", "network_pool_size", "disk_overcommit", "gpu_injection",
                               "nvidia_driver_root", "dev_root", "lxcfs_dir", "system_disk_filesystems"});
      get_string(*t, "agent", "gpu_injection", c.agent.gpu_injection);
      get_bool(*t, "agent", "system_disk_filesystems", c.agent.system_disk_filesystems);
      get_string(*t, "agent", "nvidia_driver_root", c.agent.nvidia_driver_root);
      get_string(*t, "agent", "dev_root", c.agent.dev_root);
      get_string(*t, "agent", "lxcfs_dir", c.agent.lxcfs_dir);
      get_bool(*t, "agent", "network_holders", c.agent.network_holders);
      get_int(*t, "agent", "network_pool_size", c.agent.network_pool_size);
      if (const toml::node* n = t->get("disk_overcommit")) {
        if (const auto* f = n->as_floating_point()) c.agent.disk_overcommit = f->get();
        else if (const auto* i = n->as_integer()) c.agent.disk_overcommit = static_cast<double>(i->get());
        else type_error(*n, "agent.disk_overcommit", "a number");
      }
    }
    if (const toml::table* t = get_table(root, "", "agents")) read_agents(*t, c.agents);
    if (const toml::table* t = get_table(root, "", "alerts")) {
      check_keys(*t, "alerts", {"allow_private_webhook_targets"});
      get_bool(*t, "alerts", "allow_private_webhook_targets", c.alerts.allow_private_webhook_targets);
    }
    if (const toml::table* t = get_table(root, "", "policy")) {
      check_keys(*t, "policy",
                 {"release_stopped_after_days", "arrears_release_instances_after_days",
                  "arrears_delete_disks_after_days", "recycle_days"});
      get_int(*t, "policy", "release_stopped_after_days", c.policy.release_stopped_after_days);
      get_int(*t, "policy", "arrears_release_instances_after_days",
              c.policy.arrears_release_instances_after_days);
      get_int(*t, "policy", "arrears_delete_disks_after_days", c.policy.arrears_delete_disks_after_days);
      get_int(*t, "policy", "recycle_days", c.policy.recycle_days);
    }
    if (const toml::table* t = get_table(root, "", "metrics")) {
      check_keys(*t, "metrics", {"token"});
      get_string(*t, "metrics", "token", c.metrics.token);
    }
    if (const toml::table* t = get_table(root, "", "server")) {
      check_keys(*t, "server",
                 {"max_body_bytes", "proxy_max_body_bytes", "read_timeout", "idle_timeout", "header_timeout", "max_connections",
                  "worker_threads", "login_failures_allowed", "login_window", "metrics_require_auth", "console_dir"});
      get_int(*t, "server", "max_body_bytes", c.server.max_body_bytes);
      get_int(*t, "server", "proxy_max_body_bytes", c.server.proxy_max_body_bytes);
      get_duration(*t, "server", "read_timeout", c.server.read_timeout);
      get_duration(*t, "server", "idle_timeout", c.server.idle_timeout);
      get_duration(*t, "server", "header_timeout", c.server.header_timeout);
      get_int(*t, "server", "max_connections", c.server.max_connections);
      get_int(*t, "server", "worker_threads", c.server.worker_threads);
      get_int(*t, "server", "login_failures_allowed", c.server.login_failures_allowed);
      get_duration(*t, "server", "login_window", c.server.login_window);
      get_bool(*t, "server", "metrics_require_auth", c.server.metrics_require_auth);
      get_string(*t, "server", "console_dir", c.server.console_dir);
    }
  }

 private:
  Zone read_zone(const toml::table& t, const std::string& path) {
    Zone z;
    check_keys(t, path, {"name", "region", "description"});
    get_string(t, path, "name", z.name);
    get_string(t, path, "region", z.region);
    get_string(t, path, "description", z.description);
    return z;
  }

  Host read_host(const toml::table& t, const std::string& path) {
    Host h;
    check_keys(t, path,
               {"name", "zone", "engine", "cpu", "memory_gib", "port_range", "simulated_gpus", "disk_driver",
                "public_address"});
    get_string(t, path, "name", h.name);
    get_string(t, path, "public_address", h.public_address);
    get_string(t, path, "disk_driver", h.disk_driver);
    get_string(t, path, "zone", h.zone);
    get_string(t, path, "engine", h.engine);
    get_int(t, path, "cpu", h.cpu);
    get_int(t, path, "memory_gib", h.memory_gib);
    std::string range;
    if (const toml::node* n = get_string(t, path, "port_range", range)) {
      if (!parse_port_range(range, h.port_min, h.port_max)) {
        error(n->source(), join(path, "port_range"), quote(range) + " " + std::string(kPortRangeRule));
      }
    }
    for_each_table(t, path, "simulated_gpus", [&](const toml::table& g, const std::string& gpath) {
      SimulatedGpu gpu;
      check_keys(g, gpath, {"model", "memory_gib", "count"});
      get_string(g, gpath, "model", gpu.model);
      get_int(g, gpath, "memory_gib", gpu.memory_gib);
      get_int(g, gpath, "count", gpu.count);
      h.simulated_gpus.push_back(std::move(gpu));
    });
    return h;
  }

  Image read_image(const toml::table& t, const std::string& path) {
    Image img;
    check_keys(t, path,
               {"name", "engine_image", "description", "os", "python", "cuda", "frameworks", "ssh", "jupyter"});
    get_bool(t, path, "ssh", img.ssh);
    get_bool(t, path, "jupyter", img.jupyter);
    get_string(t, path, "name", img.name);
    get_string(t, path, "engine_image", img.engine_image);
    get_string(t, path, "description", img.description);
    get_string(t, path, "os", img.os);
    get_string(t, path, "python", img.python);
    get_string(t, path, "cuda", img.cuda);
    // Framework names are free (torch, tensorflow, jax, ...); only their values are checked.
    if (const toml::table* f = get_table(t, path, "frameworks")) {
      std::string fpath = join(path, "frameworks");
      for (auto&& [key, node] : *f) {
        std::string version;
        if (expect_string(node, join(fpath, key.str()), version)) img.frameworks[std::string(key.str())] = version;
      }
    }
    return img;
  }

  Offer read_offer(const toml::table& t, const std::string& path) {
    Offer o;
    check_keys(t, path,
               {"gpu_model", "nvml_names", "gpu_memory_gib", "cpu_per_gpu", "memory_gib_per_gpu",
                "price_per_gpu_hour", "price_per_gpu_week", "price_per_gpu_month"});
    get_string(t, path, "gpu_model", o.gpu_model);
    if (const toml::node* n = t.get("nvml_names")) {
      std::string npath = join(path, "nvml_names");
      if (const toml::array* a = n->as_array()) {
        for (std::size_t i = 0; i < a->size(); ++i) {
          std::string name;
          if (expect_string(*a->get(i), indexed(npath, i), name)) o.nvml_names.push_back(name);
        }
      } else {
        error(n->source(), npath, "expected an array of strings, got " + std::string(type_name(*n)));
      }
    }
    get_int(t, path, "gpu_memory_gib", o.gpu_memory_gib);
    get_int(t, path, "cpu_per_gpu", o.cpu_per_gpu);
    get_int(t, path, "memory_gib_per_gpu", o.memory_gib_per_gpu);
    get_money(t, path, "price_per_gpu_hour", o.price_per_gpu_hour);
    get_money(t, path, "price_per_gpu_week", o.price_per_gpu_week);
    get_money(t, path, "price_per_gpu_month", o.price_per_gpu_month);
    return o;
  }

  void read_storage(const toml::table& t, StoragePrices& s) {
    const char* path = "storage_prices";
    check_keys(t, path,
               {"system_disk_free_gib", "system_disk_per_gib_hour", "data_disk_per_gib_hour",
                "snapshot_per_gib_hour", "image_per_gib_hour"});
    get_int(t, path, "system_disk_free_gib", s.system_disk_free_gib);
    bool data_set = get_micros(t, path, "data_disk_per_gib_hour", s.data_disk_per_gib_hour_micros);
    // The system disk costs what a data disk costs unless the operator prices it apart.
    if (!get_micros(t, path, "system_disk_per_gib_hour", s.system_disk_per_gib_hour_micros) && data_set) {
      s.system_disk_per_gib_hour_micros = s.data_disk_per_gib_hour_micros;
    }
    get_micros(t, path, "snapshot_per_gib_hour", s.snapshot_per_gib_hour_micros);
    get_micros(t, path, "image_per_gib_hour", s.image_per_gib_hour_micros);
  }

  // [agents] (issue 26): the remote agents' TLS listener.
  void read_agents(const toml::table& t, AgentsConfig& a) {
    const char* path = "agents";
    check_keys(t, path,
               {"listen", "url", "server_names", "certificate_days", "join_token_ttl", "heartbeat_interval",
                "unreachable_after", "reconnect_grace", "journal_key_file"});
    get_string(t, path, "listen", a.listen);
    get_string(t, path, "journal_key_file", a.journal_key_file);
    get_string(t, path, "url", a.url);
    if (const toml::node* n = t.get("server_names")) {
      std::string npath = join(path, "server_names");
      if (const toml::array* arr = n->as_array()) {
        for (std::size_t i = 0; i < arr->size(); ++i) {
          std::string name;
          if (expect_string(*arr->get(i), indexed(npath, i), name)) a.server_names.push_back(name);
        }
      } else {
        error(n->source(), npath, "expected an array of strings, got " + std::string(type_name(*n)));
      }
    }
    get_int(t, path, "certificate_days", a.certificate_days);
    get_duration(t, path, "join_token_ttl", a.join_token_ttl);
    get_duration(t, path, "heartbeat_interval", a.heartbeat_interval);
    get_duration(t, path, "unreachable_after", a.unreachable_after);
    get_duration(t, path, "reconnect_grace", a.reconnect_grace);
  }

  static bool parse_port_range(std::string_view s, int& low, int& high) {
    auto dash = s.find('-');
    if (dash == std::string_view::npos) return false;
    auto number = [](std::string_view d, int& out) {
      if (d.empty() || d.size() > 9) return false;  // 9 digits cannot overflow int
      for (char c : d)
        if (c < '0' || c > '9') return false;
      out = std::stoi(std::string(d));
      return true;
    };
    return number(s.substr(0, dash), low) && number(s.substr(dash + 1), high);
  }

  void error(const toml::source_region& where, std::string_view path, std::string_view why) {
    errors_.push_back(location(source_, where) + std::string(path) + ": " + std::string(why));
  }

  void type_error(const toml::node& n, std::string_view path, std::string_view expected) {
    error(n.source(), path, "expected " + std::string(expected) + ", got " + std::string(type_name(n)));
  }

  void check_keys(const toml::table& t, std::string_view path,
                  std::initializer_list<std::string_view> allowed) {
    for (auto&& [key, node] : t) {
      bool known = false;
      for (std::string_view a : allowed) known = known || key.str() == a;
      if (!known) {
        errors_.push_back(location(source_, key.source()) + "unknown key " + quote(join(path, key.str())));
      }
    }
  }

  bool expect_string(const toml::node& n, const std::string& path, std::string& out) {
    if (const auto* s = n.as_string()) {
      out = s->get();
      return true;
    }
    type_error(n, path, "a string");
    return false;
  }

  // Each getter leaves `out` (the default) alone when the key is absent, and returns the node
  // (or true) only when the key is present with the right type.
  const toml::node* get_string(const toml::table& t, std::string_view path, std::string_view key,
                               std::string& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return nullptr;
    return expect_string(*n, join(path, key), out) ? n : nullptr;
  }

  template <class Int>
  bool get_int(const toml::table& t, std::string_view path, std::string_view key, Int& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return false;
    const auto* i = n->as_integer();
    if (i == nullptr) {
      type_error(*n, join(path, key), "an integer");
      return false;
    }
    std::int64_t v = i->get();
    if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max()) {
      error(n->source(), join(path, key), std::to_string(v) + " is out of range");
      return false;
    }
    out = static_cast<Int>(v);
    return true;
  }

  // Money is an integer count of the smallest unit: a float here would be a price in yuan.
  bool get_money(const toml::table& t, std::string_view path, std::string_view key, std::int64_t& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return false;
    if (const auto* i = n->as_integer()) {
      out = i->get();
      return true;
    }
    error(n->source(), join(path, key),
          "expected an integer count of the smallest currency unit (e.g. fen: 198 = 1.98), got " +
              std::string(type_name(*n)));
    return false;
  }

  bool get_micros(const toml::table& t, std::string_view path, std::string_view key, std::int64_t& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return false;
    std::optional<std::int64_t> micros;
    std::string shown;
    if (const auto* i = n->as_integer()) {
      shown = std::to_string(i->get());
      micros = decimal_to_micros(std::string_view(shown));
    } else if (const auto* f = n->as_floating_point()) {
      shown = shortest(f->get());
      micros = decimal_to_micros(f->get());
    } else {
      type_error(*n, join(path, key), "a decimal number");
      return false;
    }
    if (!micros) {
      error(n->source(), join(path, key),
            shown + " is not a decimal >= 0 with at most 6 decimals (millionths of the smallest unit)");
      return false;
    }
    out = *micros;
    return true;
  }

  bool get_bool(const toml::table& t, std::string_view path, std::string_view key, bool& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return false;
    if (const auto* b = n->as_boolean()) {
      out = b->get();
      return true;
    }
    type_error(*n, join(path, key), "true or false");
    return false;
  }

  // Durations are strings with a unit: a bare number would leave the unit to guesswork.
  bool get_duration(const toml::table& t, std::string_view path, std::string_view key,
                    std::chrono::seconds& out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return false;
    if (const auto* s = n->as_string()) {
      if (auto d = parse_duration(s->get())) {
        out = *d;
        return true;
      }
      error(n->source(), join(path, key), quote(s->get()) + " " + std::string(kDurationRule));
      return false;
    }
    type_error(*n, join(path, key), R"(a duration string like "30m", "24h", "7d")");
    return false;
  }

  const toml::table* get_table(const toml::table& t, std::string_view path, std::string_view key) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return nullptr;
    if (const auto* tt = n->as_table()) return tt;
    type_error(*n, join(path, key), "a table");
    return nullptr;
  }

  // [[key]] arrays of tables, and arrays of inline tables ([ { ... }, { ... } ]).
  template <class Fn>
  void for_each_table(const toml::table& t, std::string_view path, std::string_view key, Fn&& fn) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    std::string apath = join(path, key);
    const toml::array* a = n->as_array();
    if (a == nullptr) {
      type_error(*n, apath, "an array of tables ([[" + std::string(key) + "]] or [ { ... } ])");
      return;
    }
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      std::string epath = indexed(apath, i);
      if (const auto* et = e.as_table()) {
        fn(*et, epath);
      } else {
        type_error(e, epath, "a table");
      }
    }
  }

  std::string source_;
  std::vector<std::string> errors_;
};

std::string join_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += "; ";
    out += e;
  }
  return out;
}

Result<Config> parse_document(std::string_view text, std::string_view source_name) {
  toml::table root;
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    return fail(ErrorCode::invalid_argument, location(source_name, e.source()) + std::string(e.description()));
  }
#else
  toml::parse_result parsed = toml::parse(text, source_name);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    return fail(ErrorCode::invalid_argument, location(source_name, e.source()) + std::string(e.description()));
  }
  root = std::move(parsed).table();
#endif
  Config config;
  Parser parser(source_name);
  parser.read(root, config);
  if (!parser.errors().empty()) return fail(ErrorCode::invalid_argument, join_errors(parser.errors()));
  apply_defaults(config);
  if (auto valid = validate(config); !valid) {
    Error e = valid.error();
    e.detail = std::string(source_name) + ": " + e.detail;
    return fail(std::move(e));
  }
  return config;
}

}  // namespace

Result<Config> parse_config(std::string_view toml_text, std::string_view source_name) {
  try {
    return parse_document(toml_text, source_name);
  } catch (const std::bad_alloc&) {
    return fail(ErrorCode::internal, std::string(source_name) + ": out of memory reading the configuration");
  } catch (const std::exception& e) {
    // toml++ reports syntax errors by throwing; nothing may escape as an exception.
    return fail(ErrorCode::invalid_argument, std::string(source_name) + ": " + e.what());
  }
}

Result<Config> load_config_file(const std::string& path) {
  std::error_code dir_ec;
  if (std::filesystem::is_directory(path, dir_ec)) {  // opening a directory "succeeds" on Linux
    return fail(ErrorCode::invalid_argument, "cannot read config file " + path + ": it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec(errno, std::generic_category());
    return fail(ErrorCode::invalid_argument, "cannot read config file " + path + ": " + ec.message());
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return fail(ErrorCode::invalid_argument, "cannot read config file " + path);
  }
  return parse_config(text.str(), path);
}

std::optional<std::chrono::seconds> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  // Ten years is far beyond any sensible setting and keeps every sum far from overflow.
  constexpr std::int64_t kMax = 10LL * 366 * 86400;
  std::int64_t total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::int64_t n = 0;
    std::size_t digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (++digits > 12) return std::nullopt;
      n = n * 10 + (text[i] - '0');
      ++i;
    }
    if (digits == 0 || i == text.size()) return std::nullopt;
    std::int64_t unit = 0;
    switch (text[i]) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: return std::nullopt;
    }
    ++i;
    if (n > kMax / unit) return std::nullopt;
    total += n * unit;
    if (total > kMax) return std::nullopt;
  }
  return std::chrono::seconds(total);
}

std::optional<std::int64_t> decimal_to_micros(std::string_view text) {
  auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() || (dot != std::string_view::npos && frac.empty())) return std::nullopt;  // ".5", "5."
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);  // 0.020 == 0.02
  if (frac.size() > 6) return std::nullopt;
  constexpr std::int64_t kMaxWhole = std::numeric_limits<std::int64_t>::max() / 1000000 - 1;
  std::int64_t w = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return std::nullopt;
    w = w * 10 + (c - '0');
    if (w > kMaxWhole) return std::nullopt;
  }
  std::int64_t f = 0;
  for (std::size_t k = 0; k < 6; ++k) {
    char c = k < frac.size() ? frac[k] : '0';
    if (c < '0' || c > '9') return std::nullopt;
    f = f * 10 + (c - '0');
  }
  return w * 1000000 + f;
}

std::optional<std::int64_t> decimal_to_micros(double value) {
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  if (value == 0) return 0;  // also -0.0
  // The shortest text that reads back as the same double is the decimal the operator wrote
  // (or a shorter one), so 0.02 converts to exactly 20000, with no binary rounding.
  char buf[512];
  auto r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed);
  if (r.ec != std::errc()) return std::nullopt;
  return decimal_to_micros(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

}  // namespace gpucloud::config
