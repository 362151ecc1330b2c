#include "config/config.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpucloud::config {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// config.md's example, verbatim.
constexpr std::string_view kSpecExample = R"toml(
listen       = "127.0.0.1:8080"
data_dir     = "/var/lib/gpucloud"
currency     = "CNY"
registration = "open"                 # or "closed": only the operator creates users
public_host  = "127.0.0.1"            # the address users are told to SSH to
session_ttl  = "24h"
billing_timezone = "UTC"               # statement months, usage days, subscription months

[store]
url = "sqlite://DATA_DIR/gpucloud.db" # or "postgresql://user@host:5432/gpucloud"

[[zones]]
name   = "zone-a"
region = "local"

# All-in-one: each [[hosts]] entry is a host served by the in-process agent, all on this
# machine's engine. With no [[hosts]] entry, one host named after the machine is created,
# with its GPUs from NVML (none if there is no NVIDIA driver).
[[hosts]]
name       = "node-1"
zone       = "zone-a"
engine     = "unix:///var/run/docker.sock"
cpu        = 64                       # cores the platform may hand out on this host
memory_gib = 256
port_range = "30000-30999"            # host ports for instances' declared ports
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 8 } ]
# Hosts on one engine must not share port ranges, and at most one of them may take its GPUs
# from NVML (the others declare simulated_gpus): both are refused at start.

[[images]]                            # operator images for the image market
name         = "pytorch-2.3-cuda12.1"
engine_image = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"   # pulled or already present
description  = "PyTorch 2.3.0, CUDA 12.1, cuDNN 8, Python 3.10, Ubuntu 22.04"
os = "Ubuntu 22.04"
python = "3.10"
cuda = "12.1"
frameworks = { torch = "2.3.0" }
# the base image built by the set-up command is always listed, with no entry needed

[[offers]]                            # the market: one per GPU model
gpu_model          = "RTX 4090"
nvml_names         = ["NVIDIA GeForce RTX 4090"]   # real GPUs NVML reports under these names
cpu_per_gpu        = 8
memory_gib_per_gpu = 32
price_per_gpu_hour  = 198             # smallest currency unit (fen): ¥1.98
price_per_gpu_week  = 26600
price_per_gpu_month = 99800

[no_gpu_offer]
cpu = 1
memory_gib = 2
price_per_hour = 10

[storage_prices]                      # per GiB per hour in the smallest unit; decimals here,
system_disk_free_gib = 30             #   integer millionths (…_micros) in the API and store
data_disk_per_gib_hour = 0.02
snapshot_per_gib_hour  = 0.01
image_per_gib_hour     = 0.01

[quotas]                              # per-user defaults; the operator overrides per user
gpus = 8
instances = 10
disk_gib = 2000
images = 10

[alerts]
allow_private_webhook_targets = false # true lets webhooks reach loopback/private addresses

[policy]
recycle_days = 7
release_stopped_after_days = 15
arrears_release_instances_after_days = 15
arrears_delete_disks_after_days = 30
)toml";

// A valid base the refusal tests add to: one zone, one simulated host, its offer.
constexpr std::string_view kBase = R"toml(
[[zones]]
name = "zone-a"

[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 8
memory_gib_per_gpu = 32
price_per_gpu_hour = 198

[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 32
memory_gib = 128
port_range = "30000-30999"
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 4 } ]
)toml";

// The error detail of parsing `text`, or "" when it parses.
std::string error_of(std::string_view text) {
  auto r = parse_config(text, "test.toml");
  return r ? std::string() : r.error().detail;
}

std::string with_base(std::string_view extra) { return std::string(kBase) + "\n" + std::string(extra); }

std::filesystem::path example_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
#ifdef GPUCLOUD_SOURCE_DIR
  candidates.push_back(fs::path(GPUCLOUD_SOURCE_DIR) / "examples/gpucloud.toml");
#endif
  // This file is src/config/config_test.cpp; CMake compiles it by absolute path.
  candidates.push_back(fs::path(__FILE__).parent_path().parent_path().parent_path() / "examples/gpucloud.toml");
  candidates.push_back(fs::path("examples/gpucloud.toml"));
  candidates.push_back(fs::path("../examples/gpucloud.toml"));
  for (const auto& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  return candidates.front();
}

TEST(Config, SpecExampleParsesWithItsValues) {
  auto r = parse_config(kSpecExample);
  ASSERT_TRUE(r) << r.error().detail;
  const Config& c = *r;
  EXPECT_EQ(c.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.data_dir, "/var/lib/gpucloud");
  EXPECT_EQ(c.currency, "CNY");
  EXPECT_TRUE(c.registration_open);
  EXPECT_EQ(c.public_host, "127.0.0.1");
  EXPECT_EQ(c.session_ttl, 24h);
  EXPECT_EQ(c.billing_timezone, "UTC");
  EXPECT_EQ(c.store_url, "sqlite://DATA_DIR/gpucloud.db");
  EXPECT_EQ(c.store_path(), "/var/lib/gpucloud/gpucloud.db");
  EXPECT_FALSE(c.store_is_postgres());

  ASSERT_EQ(c.zones.size(), 1u);
  EXPECT_EQ(c.zones[0].name, "zone-a");
  EXPECT_EQ(c.zones[0].region, "local");

  ASSERT_EQ(c.hosts.size(), 1u);
  const Host& h = c.hosts[0];
  EXPECT_EQ(h.name, "node-1");
  EXPECT_EQ(h.zone, "zone-a");
  EXPECT_EQ(h.engine, "unix:///var/run/docker.sock");
  EXPECT_EQ(h.cpu, 64);
  EXPECT_EQ(h.memory_gib, 256);
  EXPECT_EQ(h.port_min, 30000);
  EXPECT_EQ(h.port_max, 30999);
  EXPECT_EQ(h.port_range(), "30000-30999");
  EXPECT_FALSE(h.uses_nvml());
  ASSERT_EQ(h.simulated_gpus.size(), 1u);
  EXPECT_EQ(h.simulated_gpus[0].model, "RTX 4090");
  EXPECT_EQ(h.simulated_gpus[0].memory_gib, 24);
  EXPECT_EQ(h.simulated_gpus[0].count, 8);

  ASSERT_EQ(c.images.size(), 1u);
  const Image& img = c.images[0];
  EXPECT_EQ(img.name, "pytorch-2.3-cuda12.1");
  EXPECT_EQ(img.engine_image, "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime");
  EXPECT_EQ(img.description, "PyTorch 2.3.0, CUDA 12.1, cuDNN 8, Python 3.10, Ubuntu 22.04");
  EXPECT_EQ(img.os, "Ubuntu 22.04");
  EXPECT_EQ(img.python, "3.10");
  EXPECT_EQ(img.cuda, "12.1");
  EXPECT_EQ(img.frameworks, (std::map<std::string, std::string>{{"torch", "2.3.0"}}));

  ASSERT_EQ(c.offers.size(), 1u);
  const Offer& o = c.offers[0];
  EXPECT_EQ(o.gpu_model, "RTX 4090");
  EXPECT_EQ(o.nvml_names, std::vector<std::string>{"NVIDIA GeForce RTX 4090"});
  EXPECT_EQ(o.gpu_memory_gib, 0);
  EXPECT_EQ(o.cpu_per_gpu, 8);
  EXPECT_EQ(o.memory_gib_per_gpu, 32);
  EXPECT_EQ(o.price_per_gpu_hour, 198);
  EXPECT_EQ(o.price_per_gpu_week, 26600);
  EXPECT_EQ(o.price_per_gpu_month, 99800);
  EXPECT_EQ(c.offer_for_nvml_name("NVIDIA GeForce RTX 4090"), &c.offers[0]);
  EXPECT_EQ(c.offer_for_nvml_name("NVIDIA H100"), nullptr);

  EXPECT_EQ(c.no_gpu_offer.cpu, 1);
  EXPECT_EQ(c.no_gpu_offer.memory_gib, 2);
  EXPECT_EQ(c.no_gpu_offer.price_per_hour, 10);

  EXPECT_EQ(c.storage_prices.system_disk_free_gib, 30);
  EXPECT_EQ(c.storage_prices.data_disk_per_gib_hour_micros, 20000);
  EXPECT_EQ(c.storage_prices.system_disk_per_gib_hour_micros, 20000);
  EXPECT_EQ(c.storage_prices.snapshot_per_gib_hour_micros, 10000);
  EXPECT_EQ(c.storage_prices.image_per_gib_hour_micros, 10000);

  EXPECT_EQ(c.quotas.gpus, 8);
  EXPECT_EQ(c.quotas.instances, 10);
  EXPECT_EQ(c.quotas.disk_gib, 2000);
  EXPECT_EQ(c.quotas.images, 10);
  EXPECT_FALSE(c.alerts.allow_private_webhook_targets);
  EXPECT_EQ(c.policy.recycle_days, 7);
  EXPECT_EQ(c.policy.release_stopped_after_days, 15);
  EXPECT_EQ(c.policy.arrears_release_instances_after_days, 15);
  EXPECT_EQ(c.policy.arrears_delete_disks_after_days, 30);
}

TEST(Config, ExampleFileLoads) {
  auto path = example_path();
  auto r = load_config_file(path.string());
  ASSERT_TRUE(r) << r.error().detail;
  const Config& c = *r;
  ASSERT_EQ(c.zones.size(), 1u);
  EXPECT_EQ(c.zones[0].name, "zone-a");
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[0].name, "node-1");
  ASSERT_EQ(c.hosts[0].simulated_gpus.size(), 1u);
  EXPECT_EQ(c.hosts[0].simulated_gpus[0].model, "RTX 4090");
  EXPECT_EQ(c.hosts[0].simulated_gpus[0].count, 4);
  EXPECT_EQ(c.hosts[0].simulated_gpus[0].memory_gib, 24);
  EXPECT_EQ(c.hosts[0].cpu, 32);
  EXPECT_EQ(c.hosts[0].memory_gib, 128);
  EXPECT_EQ(c.hosts[1].name, "node-2");
  EXPECT_EQ(c.hosts[1].port_range(), "31000-31999");
  ASSERT_EQ(c.hosts[1].simulated_gpus.size(), 1u);
  EXPECT_EQ(c.hosts[1].simulated_gpus[0].model, "A100");
  EXPECT_EQ(c.hosts[1].simulated_gpus[0].memory_gib, 80);
  EXPECT_EQ(c.hosts[1].simulated_gpus[0].count, 2);
  EXPECT_NE(c.find_offer("RTX 4090"), nullptr);
  EXPECT_NE(c.find_offer("A100"), nullptr);
  EXPECT_TRUE(c.images.empty());
  EXPECT_EQ(c.server.idle_timeout, 2min);
  EXPECT_EQ(c.server.login_window, 15min);
  EXPECT_EQ(c.billing.signup_credit, 10000);
  EXPECT_EQ(c.billing.settle_interval, 1h);
}

TEST(Config, AgentSectionDefaultsAndRefusals) {
  auto d = parse_config("");
  ASSERT_TRUE(d) << d.error().detail;
  EXPECT_TRUE(d->agent.network_holders) << "instances join pre-started network holders unless turned off";
  EXPECT_EQ(d->agent.network_pool_size, 2);
  auto c = parse_config("[agent]\nnetwork_holders = false\nnetwork_pool_size = 5\n");
  ASSERT_TRUE(c) << c.error().detail;
  EXPECT_FALSE(c->agent.network_holders);
  EXPECT_EQ(c->agent.network_pool_size, 5);
  auto unknown = parse_config("[agent]\nnetwork_holder = true\n");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().detail.find("agent.network_holder"), std::string::npos) << unknown.error().detail;
  auto wrong_type = parse_config("[agent]\nnetwork_holders = \"yes\"\n");
  ASSERT_FALSE(wrong_type);
  EXPECT_NE(wrong_type.error().detail.find("agent.network_holders"), std::string::npos) << wrong_type.error().detail;
  for (const char* bad : {"-1", "65"}) {
    auto r = parse_config(std::string("[agent]\nnetwork_pool_size = ") + bad + "\n");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().detail.find("agent.network_pool_size"), std::string::npos) << r.error().detail;
  }
}

TEST(Config, AgentGpuInjectionAndLxcfsKeys) {
  auto d = parse_config("");
  ASSERT_TRUE(d) << d.error().detail;
  EXPECT_EQ(d->agent.gpu_injection, "auto");
  EXPECT_EQ(d->agent.nvidia_driver_root, "");
  EXPECT_EQ(d->agent.dev_root, "/dev");
  EXPECT_EQ(d->agent.lxcfs_dir, "");
  auto c = parse_config(
      "[agent]\ngpu_injection = \"builtin\"\nnvidia_driver_root = \"/usr/local/nvidia\"\n"
      "dev_root = \"/tmp/fake-dev\"\nlxcfs_dir = \"/run/gpucloud/lxcfs\"\n");
  ASSERT_TRUE(c) << c.error().detail;
  EXPECT_EQ(c->agent.gpu_injection, "builtin");
  EXPECT_EQ(c->agent.nvidia_driver_root, "/usr/local/nvidia");
  EXPECT_EQ(c->agent.dev_root, "/tmp/fake-dev");
  EXPECT_EQ(c->agent.lxcfs_dir, "/run/gpucloud/lxcfs");
  for (const char* mode : {"toolkit", "none", "auto"}) {
    auto m = parse_config(std::string("[agent]\ngpu_injection = \"") + mode + "\"\n");
    ASSERT_TRUE(m) << mode << ": " << m.error().detail;
  }
  auto bad_mode = parse_config("[agent]\ngpu_injection = \"cdi\"\n");
  ASSERT_FALSE(bad_mode);
  EXPECT_THAT(bad_mode.error().detail, HasSubstr("agent.gpu_injection"));
  for (const char* key : {"nvidia_driver_root", "dev_root", "lxcfs_dir"}) {
    auto r = parse_config(std::string("[agent]\n") + key + " = \"relative/dir\"\n");
    ASSERT_FALSE(r) << key;
    EXPECT_THAT(r.error().detail, HasSubstr(std::string("agent.") + key));
  }
  auto wrong_type = parse_config("[agent]\ngpu_injection = 1\n");
  ASSERT_FALSE(wrong_type);
  EXPECT_THAT(wrong_type.error().detail, HasSubstr("agent.gpu_injection"));
}

TEST(Config, BillingSectionDefaultsAndRefusals) {
  auto d = parse_config("");
  ASSERT_TRUE(d) << d.error().detail;
  EXPECT_EQ(d->billing.signup_credit, 0) << "new users start at zero unless the operator says otherwise";
  EXPECT_EQ(d->billing.settle_interval, 1h);
  auto c = parse_config("[billing]\nsignup_credit = 500\nsettle_interval = \"15m\"\n");
  ASSERT_TRUE(c) << c.error().detail;
  EXPECT_EQ(c->billing.signup_credit, 500);
  EXPECT_EQ(c->billing.settle_interval, 15min);
  auto unknown = parse_config("[billing]\nfree_money = 1\n");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().detail.find("billing.free_money"), std::string::npos) << unknown.error().detail;
  auto negative = parse_config("[billing]\nsignup_credit = -5\n");
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.error().detail.find("billing.signup_credit"), std::string::npos) << negative.error().detail;
}

TEST(Config, DefaultsWhenKeysAbsent) {
  auto r = parse_config("");
  ASSERT_TRUE(r) << r.error().detail;
  const Config& c = *r;
  EXPECT_EQ(c.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.data_dir, "/var/lib/gpucloud");
  EXPECT_EQ(c.currency, "CNY");
  EXPECT_TRUE(c.registration_open);
  EXPECT_EQ(c.public_host, "127.0.0.1");
  EXPECT_EQ(c.session_ttl, 24h);
  EXPECT_EQ(c.billing_timezone, "UTC");
  EXPECT_EQ(c.store_url, "");
  EXPECT_EQ(c.store_path(), "/var/lib/gpucloud/gpucloud.db");
  ASSERT_EQ(c.zones.size(), 1u);  // the default zone
  EXPECT_EQ(c.zones[0].name, "zone-a");
  EXPECT_EQ(c.zones[0].region, "local");
  EXPECT_TRUE(c.hosts.empty());
  EXPECT_TRUE(c.images.empty());
  EXPECT_TRUE(c.offers.empty());
  EXPECT_EQ(c.no_gpu_offer.cpu, 1);
  EXPECT_EQ(c.no_gpu_offer.memory_gib, 2);
  EXPECT_EQ(c.no_gpu_offer.price_per_hour, 10);
  EXPECT_EQ(c.storage_prices.system_disk_free_gib, 30);
  EXPECT_EQ(c.storage_prices.system_disk_per_gib_hour_micros, 20000);
  EXPECT_EQ(c.storage_prices.data_disk_per_gib_hour_micros, 20000);
  EXPECT_EQ(c.storage_prices.snapshot_per_gib_hour_micros, 10000);
  EXPECT_EQ(c.storage_prices.image_per_gib_hour_micros, 10000);
  EXPECT_EQ(c.quotas.gpus, 8);
  EXPECT_EQ(c.quotas.images, 10);
  EXPECT_EQ(c.policy.arrears_delete_disks_after_days, 30);
  EXPECT_EQ(c.server.max_body_bytes, 1 << 20);
  EXPECT_EQ(c.server.proxy_max_body_bytes, 64 << 20);
  EXPECT_EQ(c.server.read_timeout, 30s);
  EXPECT_EQ(c.server.idle_timeout, 120s);
  EXPECT_EQ(c.server.header_timeout, 10s);
  EXPECT_EQ(c.server.max_connections, 10000);
  EXPECT_EQ(c.server.worker_threads, 4);
  EXPECT_EQ(c.server.login_failures_allowed, 5);
  EXPECT_EQ(c.server.login_window, 900s);
  EXPECT_FALSE(c.server.metrics_require_auth);

  // Host defaults: engine, port range, NVML, and the only zone.
  auto h = parse_config("[[hosts]]\nname = \"gpu-box\"\ncpu = 4\nmemory_gib = 8\n");
  ASSERT_TRUE(h) << h.error().detail;
  ASSERT_EQ(h->hosts.size(), 1u);
  EXPECT_EQ(h->hosts[0].zone, "zone-a");
  EXPECT_EQ(h->hosts[0].engine, "unix:///var/run/docker.sock");
  EXPECT_EQ(h->hosts[0].port_range(), "30000-30999");
  EXPECT_TRUE(h->hosts[0].uses_nvml());
}

TEST(Config, OverridesOfEveryTopLevelKey) {
  auto r = parse_config(R"(
listen = "0.0.0.0:9000"
data_dir = "/srv/gc/"
currency = "USD"
registration = "closed"
public_host = "gpu.example.org"
session_ttl = "7d"
store = { url = "sqlite://DATA_DIR/state/x.db" }
[alerts]
allow_private_webhook_targets = true
[server]
metrics_require_auth = true
worker_threads = 8
header_timeout = "3s"
max_connections = 50
)");
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->listen, "0.0.0.0:9000");
  EXPECT_EQ(r->currency, "USD");
  EXPECT_FALSE(r->registration_open);
  EXPECT_EQ(r->public_host, "gpu.example.org");
  EXPECT_EQ(r->session_ttl, 7 * 24h);
  EXPECT_EQ(r->store_path(), "/srv/gc/state/x.db");
  EXPECT_TRUE(r->alerts.allow_private_webhook_targets);
  EXPECT_TRUE(r->server.metrics_require_auth);
  EXPECT_EQ(r->server.worker_threads, 8);
  EXPECT_EQ(r->server.header_timeout, 3s);
  EXPECT_EQ(r->server.max_connections, 50);
}

TEST(Config, StorePath) {
  Config c;
  c.data_dir = "/data";
  EXPECT_EQ(c.store_path(), "/data/gpucloud.db");
  c.store_url = "sqlite:///abs/state.db";
  EXPECT_EQ(c.store_path(), "/abs/state.db");
  c.store_url = "sqlite://DATA_DIR/other.db";
  EXPECT_EQ(c.store_path(), "/data/other.db");
  c.data_dir = "/";
  EXPECT_EQ(c.store_path(), "/other.db");
  c.store_url = "postgresql://gc@db:5432/gpucloud";
  EXPECT_EQ(c.store_path(), "");
  EXPECT_TRUE(c.store_is_postgres());
  EXPECT_TRUE(validate(c));
}

TEST(Config, StorageDecimalsConvertExactly) {
  auto r = parse_config(R"(
[storage_prices]
data_disk_per_gib_hour = 0.07
snapshot_per_gib_hour = 1
image_per_gib_hour = 0.000001
system_disk_free_gib = 0
)");
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->storage_prices.data_disk_per_gib_hour_micros, 70000);
  EXPECT_EQ(r->storage_prices.system_disk_per_gib_hour_micros, 70000);  // follows the data disk price
  EXPECT_EQ(r->storage_prices.snapshot_per_gib_hour_micros, 1000000);
  EXPECT_EQ(r->storage_prices.image_per_gib_hour_micros, 1);
  EXPECT_EQ(r->storage_prices.system_disk_free_gib, 0);

  auto s = parse_config("[storage_prices]\ndata_disk_per_gib_hour = 0.02\nsystem_disk_per_gib_hour = 0.015\n");
  ASSERT_TRUE(s) << s.error().detail;
  EXPECT_EQ(s->storage_prices.system_disk_per_gib_hour_micros, 15000);
  EXPECT_EQ(s->storage_prices.data_disk_per_gib_hour_micros, 20000);

  EXPECT_THAT(error_of("[storage_prices]\ndata_disk_per_gib_hour = 0.0000001\n"),
              HasSubstr("storage_prices.data_disk_per_gib_hour: 1e-07 is not a decimal >= 0 with at most 6 decimals"));
  EXPECT_THAT(error_of("[storage_prices]\nsnapshot_per_gib_hour = -0.01\n"),
              HasSubstr("storage_prices.snapshot_per_gib_hour: -0.01 is not a decimal >= 0"));
  EXPECT_THAT(error_of("[storage_prices]\nimage_per_gib_hour = -1\n"),
              HasSubstr("storage_prices.image_per_gib_hour: -1 is not a decimal >= 0"));
  EXPECT_THAT(error_of("[storage_prices]\nimage_per_gib_hour = nan\n"),
              HasSubstr("storage_prices.image_per_gib_hour: nan is not a decimal"));
  EXPECT_THAT(error_of("[storage_prices]\nimage_per_gib_hour = \"0.01\"\n"),
              HasSubstr("storage_prices.image_per_gib_hour: expected a decimal number, got a string"));

  for (auto [value, micros] : std::vector<std::pair<double, std::int64_t>>{
           {0.02, 20000}, {0.01, 10000}, {0.1, 100000}, {0.3, 300000}, {1.1, 1100000},
           {123.456789, 123456789}, {0.000001, 1}, {0.0, 0}, {-0.0, 0}, {2e-2, 20000},
           {9007199.254740, 9007199254740}}) {
    EXPECT_EQ(decimal_to_micros(value), micros) << value;
  }
  EXPECT_EQ(decimal_to_micros(0.0000005), std::nullopt);
  EXPECT_EQ(decimal_to_micros(0.1234567), std::nullopt);
  EXPECT_EQ(decimal_to_micros(-0.5), std::nullopt);
  EXPECT_EQ(decimal_to_micros(1e300), std::nullopt);
  EXPECT_EQ(decimal_to_micros(std::string_view("0.020")), 20000);
  EXPECT_EQ(decimal_to_micros(std::string_view("12")), 12000000);
  EXPECT_EQ(decimal_to_micros(std::string_view(".5")), std::nullopt);
  EXPECT_EQ(decimal_to_micros(std::string_view("5.")), std::nullopt);
  EXPECT_EQ(decimal_to_micros(std::string_view("1e3")), std::nullopt);
}

TEST(Config, Durations) {
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("30m"), 30min);
  EXPECT_EQ(parse_duration("24h"), 24h);
  EXPECT_EQ(parse_duration("7d"), 7 * 24h);
  EXPECT_EQ(parse_duration("1h30m"), 90min);
  EXPECT_EQ(parse_duration("0s"), 0s);
  for (std::string_view bad : {"", "24", "h", "24x", "24H", "1.5h", "-1h", " 1h", "1h ", "99999999999999d"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
  auto r = parse_config("session_ttl = \"45m\"\n[server]\nread_timeout = \"10s\"\nlogin_window = \"1h\"\n");
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->session_ttl, 45min);
  EXPECT_EQ(r->server.read_timeout, 10s);
  EXPECT_EQ(r->server.login_window, 1h);

  EXPECT_THAT(error_of("session_ttl = \"24x\"\n"),
              HasSubstr(R"(session_ttl: "24x" is not a duration like "30m", "24h", "7d")"));
  EXPECT_THAT(error_of("session_ttl = 86400\n"),
              HasSubstr(R"(session_ttl: expected a duration string like "30m", "24h", "7d", got an integer)"));
  EXPECT_THAT(error_of("session_ttl = \"0s\"\n"), HasSubstr("session_ttl: must be longer than 0s"));
  EXPECT_THAT(error_of("[server]\nidle_timeout = \"2 m\"\n"), HasSubstr("server.idle_timeout: \"2 m\" is not a duration"));
}

TEST(Config, UnknownKeysNameTheirPath) {
  EXPECT_THAT(error_of("lisen = \"127.0.0.1:8080\"\n"), HasSubstr(R"(unknown key "lisen")"));
  EXPECT_THAT(error_of("[store]\nuri = \"sqlite://x\"\n"), HasSubstr(R"(unknown key "store.uri")"));
  EXPECT_THAT(error_of("[[zones]]\nname = \"zone-a\"\nregoin = \"x\"\n"), HasSubstr(R"(unknown key "zones[0].regoin")"));
  EXPECT_THAT(error_of(with_base("[[hosts]]\nname = \"node-2\"\ncpu = 1\nmemory_gib = 1\nport_rnge = \"31000-31999\"\n")),
              HasSubstr(R"(unknown key "hosts[1].port_rnge")"));
  std::string inline_typo(kBase);
  inline_typo.replace(inline_typo.find("{ model =") + 2, 5, "modle");
  EXPECT_THAT(error_of(inline_typo), HasSubstr(R"(unknown key "hosts[0].simulated_gpus[0].modle")"));
  EXPECT_THAT(error_of(with_base("[[offers]]\ngpu_model = \"A100\"\nprice_per_hour = 1\n")),
              HasSubstr(R"(unknown key "offers[1].price_per_hour")"));
  EXPECT_THAT(error_of("[[images]]\nname = \"x\"\nengine_image = \"x\"\ntag = \"1\"\n"),
              HasSubstr(R"(unknown key "images[0].tag")"));
  EXPECT_THAT(error_of("[no_gpu_offer]\ngpus = 0\n"), HasSubstr(R"(unknown key "no_gpu_offer.gpus")"));
  EXPECT_THAT(error_of("[storage_prices]\ndata_disk_per_gib_hour_micros = 1\n"),
              HasSubstr(R"(unknown key "storage_prices.data_disk_per_gib_hour_micros")"));
  EXPECT_THAT(error_of("[quotas]\ngpu = 1\n"), HasSubstr(R"(unknown key "quotas.gpu")"));
  EXPECT_THAT(error_of("[alerts]\nallow = true\n"), HasSubstr(R"(unknown key "alerts.allow")"));
  EXPECT_THAT(error_of("[policy]\nrelease_after_days = 1\n"), HasSubstr(R"(unknown key "policy.release_after_days")"));
  EXPECT_THAT(error_of("[server]\nthreads = 1\n"), HasSubstr(R"(unknown key "server.threads")"));
  EXPECT_THAT(error_of("[serve]\nthreads = 1\n"), HasSubstr(R"(unknown key "serve")"));
  // The location of the offending key comes first.
  EXPECT_THAT(error_of("listen = \"127.0.0.1:8080\"\n\nlisen = \"x\"\n"), HasSubstr("test.toml:3:1: unknown key"));
}

TEST(Config, WrongTypesNameTheKey) {
  EXPECT_THAT(error_of("listen = 8080\n"), HasSubstr("listen: expected a string, got an integer"));
  EXPECT_THAT(error_of("[[hosts]]\nname = \"n\"\ncpu = \"8\"\nmemory_gib = 1\n"),
              HasSubstr("hosts[0].cpu: expected an integer, got a string"));
  EXPECT_THAT(error_of("[alerts]\nallow_private_webhook_targets = \"yes\"\n"),
              HasSubstr("alerts.allow_private_webhook_targets: expected true or false, got a string"));
  EXPECT_THAT(error_of("[no_gpu_offer]\nprice_per_hour = 0.1\n"),
              HasSubstr("no_gpu_offer.price_per_hour: expected an integer count of the smallest currency unit"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A100\"\ncpu_per_gpu = 1\nmemory_gib_per_gpu = 1\nprice_per_gpu_hour = 7.98\n"),
              HasSubstr("offers[0].price_per_gpu_hour: expected an integer count"));
  EXPECT_THAT(error_of("[zones]\nname = \"zone-a\"\n"), HasSubstr("zones: expected an array of tables"));
  EXPECT_THAT(error_of("store = \"sqlite://x\"\n"), HasSubstr("store: expected a table, got a string"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A\"\nnvml_names = [\"a\", 3]\n"),
              HasSubstr("offers[0].nvml_names[1]: expected a string, got an integer"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A\"\nnvml_names = \"a\"\n"),
              HasSubstr("offers[0].nvml_names: expected an array of strings, got a string"));
  EXPECT_THAT(error_of("[[images]]\nname = \"x\"\nengine_image = \"x\"\nframeworks = { torch = 2 }\n"),
              HasSubstr("images[0].frameworks.torch: expected a string, got an integer"));
  EXPECT_THAT(error_of("[[hosts]]\nname = \"n\"\nsimulated_gpus = [ \"RTX 4090\" ]\n"),
              HasSubstr("hosts[0].simulated_gpus[0]: expected a table, got a string"));
  EXPECT_THAT(error_of("[quotas]\ngpus = 1.5\n"), HasSubstr("quotas.gpus: expected an integer, got a float"));
  EXPECT_THAT(error_of("[policy]\nrecycle_days = -1\n"), HasSubstr("policy.recycle_days"));
  EXPECT_THAT(error_of("[policy]\nrelease_stopped_after_days = 99999999999\n"),
              HasSubstr("policy.release_stopped_after_days: 99999999999 is out of range"));
}

TEST(Config, BadValuesNameTheKeyAndWhy) {
  EXPECT_THAT(error_of("registration = \"invite\"\n"), HasSubstr(R"(registration: must be "open" or "closed")"));
  for (std::string_view range : {"30000-29000", "80-1000", "30000-70000", "30000", "a-b", "30000-", "-1-5"}) {
    std::string text(kBase);
    text.replace(text.find("30000-30999"), 11, range);
    EXPECT_THAT(error_of(text), HasSubstr("hosts[0].port_range: \"" + std::string(range) +
                                          "\" is not LOW-HIGH with 1024<=LOW<=HIGH<=65535"))
        << range;
  }
  for (std::string_view listen : {"8080", "localhost", ":8080", "127.0.0.1:99999", "127.0.0.1:http", "[::1:80", "a b:80"}) {
    EXPECT_THAT(error_of("listen = \"" + std::string(listen) + "\"\n"),
                HasSubstr("listen: \"" + std::string(listen) + "\" is not HOST:PORT"))
        << listen;
  }
  for (std::string_view listen : {"0.0.0.0:80", "[::]:8080", "[::1]:8080", "localhost:0", "gpu.example.org:443"}) {
    EXPECT_EQ(error_of("listen = \"" + std::string(listen) + "\"\n"), "") << listen;
  }
  EXPECT_THAT(error_of("billing_timezone = \"Mars/Olympus\"\n"),
              HasSubstr(R"(billing_timezone: "Mars/Olympus" is not "UTC" or a time zone)"));
  EXPECT_THAT(error_of("billing_timezone = \"../../etc/passwd\"\n"), HasSubstr("billing_timezone: "));
  EXPECT_THAT(error_of("billing_timezone = \"zone.tab\"\n"), HasSubstr("billing_timezone: "));
  EXPECT_THAT(error_of("billing_timezone = \"Asia\"\n"), HasSubstr("billing_timezone: "));
  if (std::filesystem::exists("/usr/share/zoneinfo/Asia/Shanghai")) {
    EXPECT_EQ(error_of("billing_timezone = \"Asia/Shanghai\"\n"), "");
  }
  EXPECT_THAT(error_of("[store]\nurl = \"mysql://db/gc\"\n"), HasSubstr(R"(store.url: "mysql://db/gc" is not sqlite://PATH or postgresql://)"));
  EXPECT_THAT(error_of("[store]\nurl = \"sqlite://\"\n"), HasSubstr("store.url: "));
  EXPECT_EQ(error_of("[store]\nurl = \"postgresql://user@host:5432/gpucloud\"\n"), "");
  EXPECT_THAT(error_of("currency = \"rmb\"\n"), HasSubstr(R"(currency: "rmb" is not a 3-letter ISO 4217 code)"));
  EXPECT_THAT(error_of("data_dir = \"\"\n"), HasSubstr("data_dir: must not be empty"));
  EXPECT_THAT(error_of("public_host = \"http://x/\"\n"), HasSubstr("public_host: "));
  EXPECT_THAT(error_of("[no_gpu_offer]\nprice_per_hour = -1\n"), HasSubstr("no_gpu_offer.price_per_hour: must be >= 0, not -1"));
  EXPECT_THAT(error_of("[no_gpu_offer]\ncpu = 0\n"), HasSubstr("no_gpu_offer.cpu: must be > 0"));
  EXPECT_THAT(error_of("[quotas]\ngpus = -1\n"), HasSubstr("quotas.gpus: must be >= 0"));
  EXPECT_THAT(error_of("[policy]\narrears_delete_disks_after_days = 10\n"),
              HasSubstr("policy.arrears_delete_disks_after_days: 10 must be >= arrears_release_instances_after_days (15)"));
  EXPECT_THAT(error_of("[server]\nworker_threads = 0\n"), HasSubstr("server.worker_threads: must be between 1 and 1024"));
  EXPECT_THAT(error_of("[server]\nmax_body_bytes = 10\n"), HasSubstr("server.max_body_bytes: must be >= 1024"));
  EXPECT_THAT(error_of("[server]\nmax_body_bytes = 4096\nproxy_max_body_bytes = 2048\n"),
              HasSubstr("server.proxy_max_body_bytes: must be >= server.max_body_bytes (4096)"));
  EXPECT_THAT(error_of("[server]\nmax_connections = 0\n"), HasSubstr("server.max_connections"));
  EXPECT_THAT(error_of("[server]\nheader_timeout = \"0s\"\n"), HasSubstr("server.header_timeout"));
  EXPECT_THAT(error_of(with_base("[[offers]]\ngpu_model = \"A100\"\ncpu_per_gpu = 8\nmemory_gib_per_gpu = 32\nprice_per_gpu_week = -5\n")),
              HasSubstr("offers[1].price_per_gpu_week: must be >= 0, not -5"));
}

TEST(Config, SyntaxErrorsCarryLineAndColumn) {
  auto r = parse_config("listen = \"127.0.0.1:8080\"\ncpu = = 3\n", "bad.toml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(r.error().detail, HasSubstr("bad.toml:2:"));
  auto dup = parse_config("listen = \"a:1\"\nlisten = \"b:2\"\n", "dup.toml");
  ASSERT_FALSE(dup);
  EXPECT_THAT(dup.error().detail, HasSubstr("dup.toml:2:"));
}

TEST(Config, MissingFileNamesThePath) {
  auto r = load_config_file("/nonexistent/gpucloud.toml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(r.error().detail, HasSubstr("/nonexistent/gpucloud.toml"));
  auto dir = load_config_file("/");
  ASSERT_FALSE(dir);
  EXPECT_THAT(dir.error().detail, HasSubstr("cannot read config file /"));
}

TEST(Config, ZoneChecks) {
  EXPECT_THAT(error_of("[[zones]]\nname = \"zone-a\"\n[[zones]]\nname = \"zone-a\"\n"),
              HasSubstr(R"(zones[1].name: "zone-a" is already the name of zones[0])"));
  EXPECT_THAT(error_of("[[zones]]\nname = \"Zone_A\"\n"), HasSubstr(R"(zones[0].name: "Zone_A" is not a name)"));
  EXPECT_THAT(error_of("[[zones]]\nregion = \"x\"\n"), HasSubstr(R"(zones[0].name: "" is not a name)"));
  std::string bad_zone(kBase);
  bad_zone.replace(bad_zone.find("zone = \"zone-a\""), 15, "zone = \"zone-b\"");
  EXPECT_THAT(error_of(bad_zone), HasSubstr(R"(hosts[0].zone: zone "zone-b" is not declared in [[zones]])"));
  // With two zones a host must say which.
  EXPECT_THAT(error_of("[[zones]]\nname = \"a\"\n[[zones]]\nname = \"b\"\n[[hosts]]\nname = \"n\"\ncpu = 1\nmemory_gib = 1\n"),
              HasSubstr("hosts[0].zone: required"));
}

TEST(Config, HostChecks) {
  EXPECT_THAT(error_of(with_base("[[hosts]]\nname = \"node-1\"\ncpu = 1\nmemory_gib = 1\nport_range = \"40000-40999\"\n"
                                 "simulated_gpus = [ { model = \"RTX 4090\", memory_gib = 24, count = 1 } ]\n")),
              HasSubstr(R"(hosts[1].name: "node-1" is already the name of hosts[0])"));
  EXPECT_THAT(error_of("[[hosts]]\ncpu = 1\nmemory_gib = 1\n"), HasSubstr("hosts[0].name: required"));
  EXPECT_THAT(error_of("[[hosts]]\nname = \"n\"\nmemory_gib = 1\n"), HasSubstr("hosts[0].cpu: must be > 0"));
  EXPECT_THAT(error_of("[[hosts]]\nname = \"n\"\ncpu = 1\n"), HasSubstr("hosts[0].memory_gib: must be > 0"));
  EXPECT_THAT(error_of("[[hosts]]\nname = \"n\"\ncpu = 1\nmemory_gib = 1\nengine = \"tcp://x:2375\"\n"),
              HasSubstr(R"(hosts[0].engine: "tcp://x:2375" is not unix:///)"));

  // Overlapping port ranges on one engine: both hosts named.
  std::string overlap = with_base(
      "[[hosts]]\nname = \"node-2\"\ncpu = 1\nmemory_gib = 1\nport_range = \"30500-31500\"\n"
      "simulated_gpus = [ { model = \"RTX 4090\", memory_gib = 24, count = 1 } ]\n");
  EXPECT_THAT(error_of(overlap), HasSubstr("hosts[1].port_range: hosts \"node-1\" (30000-30999) and \"node-2\" (30500-31500)"));
  EXPECT_THAT(error_of(overlap), HasSubstr("overlapping port ranges"));
  // The same ranges on different engines are fine.
  std::string other_engine = with_base(
      "[[hosts]]\nname = \"node-2\"\nengine = \"unix:///run/other.sock\"\ncpu = 1\nmemory_gib = 1\n"
      "port_range = \"30500-31500\"\n");
  EXPECT_EQ(error_of(other_engine), "");

  // Two NVML hosts on one engine: both named.
  std::string two_nvml =
      "[[hosts]]\nname = \"a\"\ncpu = 1\nmemory_gib = 1\nport_range = \"30000-30099\"\n"
      "[[hosts]]\nname = \"b\"\ncpu = 1\nmemory_gib = 1\nport_range = \"30100-30199\"\n";
  EXPECT_THAT(error_of(two_nvml), HasSubstr(R"(hosts[1]: hosts "a" and "b" both take their GPUs from NVML)"));
  EXPECT_EQ(error_of(with_base("[[hosts]]\nname = \"real\"\ncpu = 1\nmemory_gib = 1\nport_range = \"32000-32999\"\n")), "");

  // Simulated GPUs: an offer must exist, counts and memory positive.
  std::string no_offer(kBase);
  no_offer.replace(no_offer.find("{ model = \"RTX 4090\"") + 2, 18, "model = \"H100\"");
  EXPECT_THAT(error_of(no_offer), HasSubstr(R"(hosts[0].simulated_gpus[0].model: "H100" has no [[offers]] entry)"));
  std::string zero_count(kBase);
  zero_count.replace(zero_count.find("count = 4"), 9, "count = 0");
  EXPECT_THAT(error_of(zero_count), HasSubstr("hosts[0].simulated_gpus[0].count: must be > 0, not 0"));
  std::string zero_memory(kBase);
  zero_memory.replace(zero_memory.find("memory_gib = 24"), 15, "memory_gib = 0");
  EXPECT_THAT(error_of(zero_memory), HasSubstr("hosts[0].simulated_gpus[0].memory_gib: must be > 0"));
}

TEST(Config, OfferAndImageChecks) {
  EXPECT_THAT(error_of(with_base("[[offers]]\ngpu_model = \"RTX 4090\"\ncpu_per_gpu = 1\nmemory_gib_per_gpu = 1\n")),
              HasSubstr(R"(offers[1].gpu_model: "RTX 4090" already has an offer: offers[0])"));
  EXPECT_THAT(error_of("[[offers]]\ncpu_per_gpu = 1\nmemory_gib_per_gpu = 1\n"), HasSubstr("offers[0].gpu_model: required"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A\"\nmemory_gib_per_gpu = 1\n"), HasSubstr("offers[0].cpu_per_gpu: must be > 0"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A\"\ncpu_per_gpu = 1\n"), HasSubstr("offers[0].memory_gib_per_gpu: must be > 0"));
  EXPECT_THAT(error_of("[[offers]]\ngpu_model = \"A\"\ncpu_per_gpu = 1\nmemory_gib_per_gpu = 1\nnvml_names = [\"X\"]\n"
                       "[[offers]]\ngpu_model = \"B\"\ncpu_per_gpu = 1\nmemory_gib_per_gpu = 1\nnvml_names = [\"X\"]\n"),
              HasSubstr(R"(offers[1].nvml_names[0]: "X" is also listed by offers[0])"));

  EXPECT_THAT(error_of("[[images]]\nname = \"base\"\nengine_image = \"a\"\n[[images]]\nname = \"base\"\nengine_image = \"b\"\n"),
              HasSubstr(R"(images[1].name: "base" is already the name of images[0])"));
  EXPECT_THAT(error_of("[[images]]\nname = \"PyTorch\"\nengine_image = \"a\"\n"), HasSubstr(R"(images[0].name: "PyTorch" is not an image name)"));
  EXPECT_THAT(error_of("[[images]]\nname = \"torch\"\n"), HasSubstr("images[0].engine_image: required"));
}

TEST(Config, ReportsEveryErrorAtOnce) {
  std::string detail = error_of("lisen = 1\nsession_ttl = \"1y\"\nregistration = \"maybe\"\n");
  EXPECT_THAT(detail, HasSubstr(R"(unknown key "lisen")"));
  EXPECT_THAT(detail, HasSubstr("session_ttl: "));
  EXPECT_THAT(detail, HasSubstr("registration: "));
}

TEST(Config, ValidateAgainAfterOverrides) {
  auto r = parse_config(kSpecExample);
  ASSERT_TRUE(r);
  Config c = *r;
  c.listen = "0.0.0.0:9090";
  c.data_dir = "/tmp/gc";
  EXPECT_TRUE(validate(c));
  EXPECT_EQ(c.store_path(), "/tmp/gc/gpucloud.db");
  c.listen = "nowhere";
  auto v = validate(c);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::invalid_argument);
  EXPECT_THAT(v.error().detail, HasSubstr("listen: \"nowhere\" is not HOST:PORT"));

  // A Config built in code with no zones stands for the default zone.
  Config bare;
  bare.hosts.push_back(Host{"h", "zone-a", "unix:///var/run/docker.sock", 1, 1, 30000, 30999, {}});
  EXPECT_TRUE(validate(bare));
  apply_defaults(bare);
  ASSERT_EQ(bare.zones.size(), 1u);
  EXPECT_EQ(bare.zones[0].name, "zone-a");
}

TEST(Config, AgentsSectionDefaultsAndChecks) {
  // Absent: no listener, nothing filled in.
  auto off = parse_config(kSpecExample);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->agents.enabled());
  EXPECT_EQ(off->agents.url, "");
  EXPECT_TRUE(off->agents.server_names.empty());

  auto on = parse_config("[agents]\nlisten = \"10.0.0.5:8443\"\n");
  ASSERT_TRUE(on) << on.error().detail;
  EXPECT_TRUE(on->agents.enabled());
  EXPECT_EQ(on->agents.url, "https://10.0.0.5:8443");
  std::string host = machine_hostname();
  std::vector<std::string> names;
  for (std::string n : {host, std::string("localhost"), std::string("127.0.0.1"), std::string("10.0.0.5")})
    if (is_valid_certificate_name(n) && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  EXPECT_EQ(on->agents.server_names, names);
  EXPECT_EQ(on->agents.certificate_days, 30);
  EXPECT_EQ(on->agents.join_token_ttl, 1h);
  EXPECT_EQ(on->agents.heartbeat_interval, 10s);
  EXPECT_EQ(on->agents.unreachable_after, 30s);
  EXPECT_EQ(on->agents.reconnect_grace, 60s);
  EXPECT_EQ(on->agents.renew_after(), std::chrono::seconds(20 * 86400));

  // A wildcard listen address: the URL names this machine.
  auto any = parse_config("[agents]\nlisten = \"0.0.0.0:8443\"\n");
  ASSERT_TRUE(any);
  EXPECT_EQ(any->agents.url, "https://" + host + ":8443");
  EXPECT_EQ(std::count(any->agents.server_names.begin(), any->agents.server_names.end(), "0.0.0.0"), 0);
  EXPECT_EQ(default_agents_url("[::1]:8443", "h"), "https://[::1]:8443");
  EXPECT_EQ(default_agents_url("[::]:8443", "h"), "https://h:8443");

  auto set = parse_config(
      "[agents]\nlisten = \"0.0.0.0:9443\"\nurl = \"https://cp.example:443\"\nserver_names = [\"cp.example\", \"::1\"]\n"
      "certificate_days = 7\njoin_token_ttl = \"30m\"\nheartbeat_interval = \"5s\"\nunreachable_after = \"20s\"\n"
      "reconnect_grace = \"0s\"\n");
  ASSERT_TRUE(set) << set.error().detail;
  EXPECT_EQ(set->agents.url, "https://cp.example:443");
  EXPECT_EQ(set->agents.server_names, (std::vector<std::string>{"cp.example", "::1"}));
  EXPECT_EQ(set->agents.certificate_days, 7);
  EXPECT_EQ(set->agents.join_token_ttl, 30min);
  EXPECT_EQ(set->agents.reconnect_grace, 0s);

  EXPECT_THAT(error_of("[agents]\nlisten = \"nowhere\"\n"), HasSubstr(R"(agents.listen: "nowhere" is not HOST:PORT)"));
  EXPECT_THAT(error_of("[agents]\nlisten = \"127.0.0.1:8080\"\n"), HasSubstr("agents.listen: \"127.0.0.1:8080\" is the API's own"));
  EXPECT_THAT(error_of("[agents]\nlisten = \"0.0.0.0:1\"\nurl = \"http://x:1\"\n"), HasSubstr("agents.url: \"http://x:1\" is not an https URL"));
  EXPECT_THAT(error_of("[agents]\nlisten = \"0.0.0.0:1\"\nserver_names = [\"a,b\"]\n"),
              HasSubstr(R"(agents.server_names[0]: "a,b" is not a DNS name or an IP address)"));
  EXPECT_THAT(error_of("[agents]\nserver_names = \"x\"\n"), HasSubstr("agents.server_names: expected an array of strings"));
  EXPECT_THAT(error_of("[agents]\ncertificate_days = 0\n"), HasSubstr("agents.certificate_days: must be from 1 to 365"));
  EXPECT_THAT(error_of("[agents]\njoin_token_ttl = \"10s\"\n"), HasSubstr("agents.join_token_ttl: must be from 1m to 7d"));
  EXPECT_THAT(error_of("[agents]\njoin_token_ttl = 60\n"), HasSubstr("agents.join_token_ttl: expected a duration string"));
  EXPECT_THAT(error_of("[agents]\nheartbeat_interval = \"0s\"\n"), HasSubstr("agents.heartbeat_interval: must be from 1s to 300s"));
  EXPECT_THAT(error_of("[agents]\nunreachable_after = \"10s\"\n"),
              HasSubstr("agents.unreachable_after: must be longer than agents.heartbeat_interval"));
  EXPECT_THAT(error_of("[agents]\nreconnect_grace = \"2h\"\n"), HasSubstr("agents.reconnect_grace: must be at most 1h"));
  EXPECT_THAT(error_of("[agents]\nlisten_on = \"x\"\n"), HasSubstr(R"(unknown key "agents.listen_on")"));

  EXPECT_TRUE(is_valid_certificate_name("a.example"));
  EXPECT_TRUE(is_valid_certificate_name("fe80::1"));
  EXPECT_TRUE(is_valid_certificate_name("192.168.1.1"));
  EXPECT_FALSE(is_valid_certificate_name("300.1.1.1"));
  EXPECT_FALSE(is_valid_certificate_name("-a.example"));
  EXPECT_FALSE(is_valid_certificate_name("a..example"));
  EXPECT_FALSE(is_valid_certificate_name("a_b"));
  EXPECT_TRUE(is_valid_host_name("node_1.rack-2"));
  EXPECT_FALSE(is_valid_host_name("-node"));
}

TEST(Config, NameRule) {
  EXPECT_TRUE(is_valid_name("zone-a"));
  EXPECT_TRUE(is_valid_name("a"));
  EXPECT_TRUE(is_valid_name(std::string(63, 'a')));
  EXPECT_FALSE(is_valid_name(std::string(64, 'a')));
  EXPECT_FALSE(is_valid_name("1zone"));
  EXPECT_FALSE(is_valid_name("zone_a"));
  EXPECT_FALSE(is_valid_name(""));
}

}  // namespace
}  // namespace gpucloud::config
