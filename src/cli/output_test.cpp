#include "cli/output.h"

#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "cli/commands.h"

namespace gpucloud::cli {
namespace {

namespace json = boost::json;

TEST(CliOutput, DisplayWidthCountsColumnsNotBytes) {
  EXPECT_EQ(display_width("abc"), 3u);
  EXPECT_EQ(display_width("¥12.34"), 6u);
  EXPECT_EQ(display_width("creating…"), 9u);
  EXPECT_EQ(display_width("×"), 1u);
  EXPECT_EQ(display_width("九天"), 4u);
  EXPECT_EQ(display_width(""), 0u);
}

TEST(CliOutput, TableAlignsColumnsWithoutTrailingSpaces) {
  Table t({"NAME", "PRICE/H", "FREE"});
  t.add_row({"a", "¥1.98", "3/8"});
  t.add_row({"longer-name", "¥12.00", ""});
  EXPECT_EQ(t.render(),
            "NAME         PRICE/H  FREE\n"
            "a            ¥1.98    3/8\n"
            "longer-name  ¥12.00\n");
  EXPECT_EQ(t.rows(), 2u);
}

TEST(CliOutput, TableDetailsFollowTheirRowAndShortRowsArePadded) {
  Table t({"A", "B"});
  t.add_row({"x"});
  t.add_detail("  detail of x");
  t.add_row({"yy", "z"});
  EXPECT_EQ(t.render(), "A   B\nx\n  detail of x\nyy  z\n");
  EXPECT_EQ(t.render(false), "x\n  detail of x\nyy  z\n");
}

TEST(CliOutput, KeyValuesAlign) {
  KeyValues kv;
  kv.add("name", "train-1");
  kv.add("ssh", "ssh -p 30022 root@10.0.0.1");
  kv.add("host key", "");
  EXPECT_EQ(kv.render(),
            "name:     train-1\n"
            "ssh:      ssh -p 30022 root@10.0.0.1\n"
            "host key:\n");
}

TEST(CliOutput, FieldReadersTolerateMissingAndNull) {
  json::value v = json::parse(R"({"s":"x","n":3,"b":true,"z":null,"e":"","big":18446744073709551615})");
  EXPECT_EQ(text(v, "s"), "x");
  EXPECT_EQ(text(v, "n"), "3");
  EXPECT_EQ(text(v, "b"), "true");
  EXPECT_EQ(text(v, "z"), "-");
  EXPECT_EQ(text(v, "e"), "-");
  EXPECT_EQ(text(v, "missing", "?"), "?");
  EXPECT_EQ(integer(v, "n"), 3);
  EXPECT_FALSE(integer(v, "s").has_value());
  EXPECT_FALSE(integer(v, "big").has_value());
  EXPECT_TRUE(flag(v, "b"));
  EXPECT_FALSE(flag(v, "z"));
  EXPECT_EQ(items_of(json::parse(R"({"items":[1,2]})")).size(), 2u);
  EXPECT_EQ(items_of(json::parse(R"([1])")).size(), 1u);
  EXPECT_EQ(items_of(json::parse(R"({"x":1})")).size(), 0u);
  EXPECT_EQ(currency_of(json::parse(R"({"currency":"USD"})")), "USD");
  EXPECT_EQ(currency_of(json::parse(R"({})")), "CNY");
}

TEST(CliOutput, SizesAndDurations) {
  EXPECT_EQ(format_gib(24), "24 GiB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(300LL * 1024 * 1024), "300 MiB");
  EXPECT_EQ(format_bytes(3LL * 1024 * 1024 * 1024 / 2), "1.5 GiB");
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(125), "2m 05s");
  EXPECT_EQ(format_duration(7500), "2h 05m");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600 + 5), "3d 4h");
}

TEST(CliOutput, PrintJsonIsValidJson) {
  json::value v = json::parse(R"({"items":[{"a":1,"b":[true,null]}],"next_cursor":null,"e":{}})");
  std::ostringstream out;
  print_json(out, v);
  EXPECT_EQ(json::parse(out.str()), v);
  EXPECT_EQ(out.str().back(), '\n');
}

TEST(CliOutput, MarketTableMarksSimulatedOffersAndShowsTheNoGpuOffer) {
  json::value market = json::parse(R"({"items":[
    {"zone":"zone-a","gpu_model":"RTX 4090","gpu_memory_gib":24,"simulated":true,
     "cpu_per_gpu":8,"memory_gib_per_gpu":32,"price_per_gpu_hour":198,
     "price_per_gpu_week":26600,"price_per_gpu_month":99800,"gpus_total":8,"gpus_free":3,
     "max_gpus_per_instance":3},
    {"zone":"zone-a","gpu_model":null,"cpu":1,"memory_gib":2,"price_per_hour":10},
    {"zone":"zone-b","gpu_model":"A100","gpu_memory_gib":80,"simulated":false,
     "cpu_per_gpu":16,"memory_gib_per_gpu":120,"price_per_gpu_hour":1200,"gpus_total":4,
     "gpus_free":0,"max_gpus_per_instance":0}
  ],"next_cursor":null})");
  EXPECT_EQ(render_market(market),
            "ZONE    GPU                   MEMORY  CPU/GPU  MEM/GPU  PRICE/H  FREE/TOTAL  MAX\n"
            "zone-a  RTX 4090 (simulated)  24 GiB  8        32 GiB   ¥1.98    3/8         3\n"
            "zone-b  A100                  80 GiB  16       120 GiB  ¥12.00   0/4         0\n"
            "zone-a  no GPU                -       1        2 GiB    ¥0.10    -           -\n");
}

TEST(CliOutput, InstanceTableShowsSshOnlyWhenRunning) {
  json::value list = json::parse(R"({"items":[
    {"name":"train-1","owner":"alice","state":"running","zone":"zone-a","host":"node-1",
     "gpu_model":"RTX 4090","gpu_count":2,"gpus":[{"index":0,"simulated":true}],
     "ssh":{"command":"ssh -p 30022 root@10.0.0.1"}},
    {"name":"prep","owner":"bob","state":"stopped","state_reason":"exited 1","zone":"zone-a",
     "host":"node-1","gpu_count":0,"no_gpu":true,"ssh":{"command":"ssh -p 30023 root@10.0.0.1"}}
  ]})");
  EXPECT_EQ(render_instances(list, false),
            "NAME     STATE               GPU                      ZONE    HOST    SSH\n"
            "train-1  running             RTX 4090 ×2 (simulated)  zone-a  node-1  ssh -p 30022 root@10.0.0.1\n"
            "prep     stopped (exited 1)  no GPU                   zone-a  node-1  -\n");
  EXPECT_NE(render_instances(list, true).find("NAME     OWNER  STATE"), std::string::npos);
}

TEST(CliOutput, HostTableListsEachGpu) {
  json::value hosts = json::parse(R"({"items":[
    {"id":"h-1","name":"node-1","zone":"zone-a","state":"ready","simulated":true,"cpu":64,
     "memory_gib":256,"gpus":[
       {"index":0,"uuid":"GPU-aaaa","model":"RTX 4090","memory_gib":24,"health":"ok",
        "instance":"i-1","reserved_by":null},
       {"index":1,"uuid":"GPU-bbbb","model":"RTX 4090","memory_gib":24,"health":"ok",
        "instance":null,"reserved_by":"i-2"},
       {"index":2,"uuid":"GPU-cccc","model":"RTX 4090","memory_gib":24,"health":"ok",
        "instance":null,"reserved_by":null}]},
    {"id":"h-2","name":"cpu-box","zone":"zone-b","state":"unreachable","cpu":8,
     "memory_gib":16,"gpus":[]}
  ]})");
  EXPECT_EQ(render_hosts(hosts),
            "NAME     ZONE    STATE        CPU  MEM      GPUS\n"
            "node-1   zone-a  ready        64   256 GiB  3 × RTX 4090 (simulated)\n"
            "    gpu 0  RTX 4090  GPU-aaaa  simulated  instance i-1\n"
            "    gpu 1  RTX 4090  GPU-bbbb  simulated  reserved by i-2\n"
            "    gpu 2  RTX 4090  GPU-cccc  simulated  free\n"
            "cpu-box  zone-b  unreachable  8    16 GiB   none\n");
}

TEST(CliOutput, HostTableSaysHowGpusAreGivenAndWhetherLxcfsServes) {
  json::value hosts = json::parse(R"({"items":[
    {"id":"h-1","name":"node-1","zone":"zone-a","state":"ready","cpu":16,"memory_gib":128,"gpus":[],
     "gpu_injection":{"mode":"builtin","reason":"the engine has no nvidia runtime; driver 580.159.04","driver_version":"580.159.04"},
     "lxcfs":{"available":false,"reason":"lxcfs is not mounted on /var/run/gpucloud/lxcfs"}}
  ]})");
  EXPECT_EQ(render_hosts(hosts),
            "NAME    ZONE    STATE  CPU  MEM      GPUS\n"
            "node-1  zone-a  ready  16   128 GiB  none\n"
            "    gpu injection: builtin (the engine has no nvidia runtime; driver 580.159.04)\n"
            "    lxcfs: not available (lxcfs is not mounted on /var/run/gpucloud/lxcfs)\n");
}

// Issue 26: who serves each host, and an instance whose host stopped answering.
TEST(CliOutput, HostTableNamesTheAgentAndInstancesSayTheirHostIsUnreachable) {
  json::value hosts = json::parse(R"({"items":[
    {"id":"h-1","name":"node-1","zone":"zone-a","state":"draining","cpu":16,"memory_gib":128,"gpus":[],
     "agent":{"kind":"remote","version":"0.1.0","address":"10.0.0.5:7443","connected_since":"2026-12-05T01:00:00Z",
              "last_heartbeat_at":"2026-12-05T02:00:00Z","certificate_expires_at":"2027-12-05T00:00:00Z"}},
    {"id":"h-2","name":"node-2","zone":"zone-a","state":"ready","cpu":16,"memory_gib":128,"gpus":[],
     "agent":{"kind":"in_process","version":"0.1.0","address":null,"connected_since":null,
              "last_heartbeat_at":null,"certificate_expires_at":null}},
    {"id":"h-3","name":"node-3","zone":"zone-a","state":"ready","cpu":16,"memory_gib":128,"gpus":[],
     "agent":{"kind":null,"version":null,"address":null,"connected_since":null,"last_heartbeat_at":null,
              "certificate_expires_at":null}}
  ]})");
  EXPECT_EQ(render_hosts(hosts),
            "NAME    ZONE    STATE     CPU  MEM      GPUS\n"
            "node-1  zone-a  draining  16   128 GiB  none\n"
            "    agent: remote 0.1.0 at 10.0.0.5:7443, connected since 2026-12-05T01:00:00Z, last heartbeat "
            "2026-12-05T02:00:00Z, certificate expires 2027-12-05T00:00:00Z\n"
            "node-2  zone-a  ready     16   128 GiB  none\n"
            "    agent: in_process 0.1.0, not connected, last heartbeat -\n"
            "node-3  zone-a  ready     16   128 GiB  none\n");
  json::value list = json::parse(R"({"items":[
    {"name":"train-1","state":"running","zone":"zone-a","host":"node-1","host_unreachable":true,
     "gpu_model":"RTX 4090","gpu_count":1,"gpus":[{"index":0,"simulated":true}],"ssh":null},
    {"name":"prep","state":"stopped","state_reason":"exited 1","zone":"zone-a","host":"node-1",
     "host_unreachable":true,"gpu_count":0,"no_gpu":true,"ssh":null}
  ]})");
  const std::string table = render_instances(list, false);
  EXPECT_NE(table.find("running (host unreachable)"), std::string::npos) << table;
  EXPECT_NE(table.find("stopped (exited 1; host unreachable)"), std::string::npos) << table;
}

TEST(CliOutput, DurationsForTheTestClock) {
  EXPECT_EQ(parse_duration_seconds("3600").value(), 3600);
  EXPECT_EQ(parse_duration_seconds("90m").value(), 5400);
  EXPECT_EQ(parse_duration_seconds("2h").value(), 7200);
  EXPECT_EQ(parse_duration_seconds("30d").value(), 30 * 86400);
  EXPECT_EQ(parse_duration_seconds("0").value(), 0);
  for (const char* bad : {"", "-5", "h", "1.5h", "5w", "1 h"}) {
    auto r = parse_duration_seconds(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().exit_code, kExitUsage);
  }
}

}  // namespace
}  // namespace gpucloud::cli
