// Malformed agent messages are error values naming what is wrong, never exceptions: a
// control plane reading a bad reply (reconcile, converge) must carry on.
#include "agent/agent_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace gpucloud::agent {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

json::value parsed(const char* text) { return json::parse(text); }

template <class F>
std::string error_of(F&& read, const json::value& v) {
  std::string out;
  EXPECT_NO_THROW({
    auto r = read(v);
    EXPECT_FALSE(r) << json::serialize(v);
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::internal);
      out = r.error().detail;
    }
  });
  return out;
}

const json::object kOutcome{{"command_id", "c1"}, {"ok", true}, {"error_code", ""},
                            {"error_detail", ""}, {"observed", json::object{{"running", true}}}};

json::value with(json::object o, const char* key, json::value v) {
  o[key] = std::move(v);
  return o;
}
json::value without(json::object o, const char* key) {
  o.erase(key);
  return o;
}

TEST(AgentProtocolMalformed, CommandOutcomeErrorsNameTheField) {
  auto read = [](const json::value& v) { return command_outcome_from_json(v); };
  ASSERT_TRUE(read(kOutcome));
  for (const char* text : {"null", "[]", "\"ok\"", "42", "true"}) {
    EXPECT_THAT(error_of(read, parsed(text)), HasSubstr("not a JSON object")) << text;
  }
  EXPECT_THAT(error_of(read, without(kOutcome, "ok")), HasSubstr("command outcome: ok: missing"));
  EXPECT_THAT(error_of(read, without(kOutcome, "command_id")), HasSubstr("command_id: missing"));
  EXPECT_THAT(error_of(read, with(kOutcome, "ok", "yes")), HasSubstr("ok: not a boolean"));
  EXPECT_THAT(error_of(read, with(kOutcome, "ok", nullptr)), HasSubstr("ok: not a boolean"));
  EXPECT_THAT(error_of(read, with(kOutcome, "command_id", 5)), HasSubstr("command_id: not a string"));
  EXPECT_THAT(error_of(read, with(kOutcome, "observed", json::array{})), HasSubstr("observed: not an object"));
  EXPECT_THAT(error_of(read, with(kOutcome, "observed", "running")), HasSubstr("observed: not an object"));
  EXPECT_THAT(error_of(read, with(kOutcome, "error_detail", json::object{})), HasSubstr("error_detail: not a string"));
}

TEST(AgentProtocolMalformed, CommandsHeartbeatsAndInventories) {
  const json::object command{{"id", "c1"}, {"host_name", "h"}, {"kind", "instance.ensure"}, {"desired", json::object{}}};
  auto read_command = [](const json::value& v) { return command_from_json(v); };
  ASSERT_TRUE(read_command(command));
  EXPECT_THAT(error_of(read_command, with(command, "desired", nullptr)), HasSubstr("desired: not an object"));
  EXPECT_THAT(error_of(read_command, without(command, "kind")), HasSubstr("kind: missing"));

  const json::object gpu{{"index", 0},          {"uuid", "GPU-1"}, {"model", "RTX 4090"}, {"memory_bytes", 1},
                         {"pci_bus_id", "0:1"}, {"health", "ok"},  {"simulated", true}};
  auto read_gpu = [](const json::value& v) { return gpu_info_from_json(v); };
  ASSERT_TRUE(read_gpu(gpu));
  EXPECT_THAT(error_of(read_gpu, with(gpu, "index", 1.5)), HasSubstr("index: not an integer"));
  EXPECT_THAT(error_of(read_gpu, with(gpu, "index", std::int64_t{1} << 40)), HasSubstr("index: out of range"));
  EXPECT_THAT(error_of(read_gpu, with(gpu, "memory_bytes", std::uint64_t{1} << 63)), HasSubstr("memory_bytes: not an integer"));
  EXPECT_THAT(error_of(read_gpu, with(gpu, "simulated", 1)), HasSubstr("simulated: not a boolean"));

  const json::object beat{{"host_name", "h"}, {"sequence", 3}, {"gpus", json::array{gpu}}};
  auto read_beat = [](const json::value& v) { return heartbeat_from_json(v); };
  ASSERT_TRUE(read_beat(beat));
  EXPECT_THAT(error_of(read_beat, with(beat, "sequence", -1)), HasSubstr("sequence: not a non-negative integer"));
  EXPECT_THAT(error_of(read_beat, with(beat, "gpus", json::object{})), HasSubstr("gpus: not an array"));

  HostInventory inventory;
  inventory.name = "h";
  inventory.gpus.push_back(*read_gpu(gpu));
  json::object inv = to_json(inventory);
  auto read_inventory = [](const json::value& v) { return host_inventory_from_json(v); };
  ASSERT_TRUE(read_inventory(inv));
  EXPECT_THAT(error_of(read_inventory, with(inv, "gpus", json::array{42})), HasSubstr("gpus: agent protocol: malformed gpu: not a JSON object"));
  EXPECT_THAT(error_of(read_inventory, with(inv, "cpu", "many")), HasSubstr("cpu: not an integer"));
}

TEST(AgentProtocolChanges, ReportRoundTripsAndMalformedOnesNameTheField) {
  ChangeReport report{"node-1", {"i-1", "i-2"}};
  auto back = change_report_from_json(json::parse(json::serialize(to_json(report))));
  ASSERT_TRUE(back) << back.error().detail;
  EXPECT_EQ(back->host_name, "node-1");
  EXPECT_THAT(back->instance_ids, ::testing::ElementsAre("i-1", "i-2"));
  auto everything = change_report_from_json(json::parse(json::serialize(to_json(ChangeReport{}))));
  ASSERT_TRUE(everything);
  EXPECT_TRUE(everything->instance_ids.empty());
  auto read = [](const json::value& v) { return change_report_from_json(v); };
  EXPECT_THAT(error_of(read, parsed(R"({"host_name":5,"instance_ids":[]})")), HasSubstr("host_name"));
  EXPECT_THAT(error_of(read, parsed(R"([])")), HasSubstr("change report"));
}

TEST(AgentProtocolMalformed, TextThatIsNotJsonIsAnError) {
  for (const char* text : {"", "{", "{\"ok\": tru}", "[1,2", "nul"}) {
    EXPECT_NO_THROW({
      auto r = parse_message(text);
      EXPECT_FALSE(r) << text;
    });
  }
  auto good = parse_message(json::serialize(kOutcome));
  ASSERT_TRUE(good);
  auto outcome = command_outcome_from_json(*good);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->command_id, "c1");
  EXPECT_TRUE(outcome->observed.at("running").as_bool());
}


SampleReport two_instance_report() {
  SampleReport r;
  r.host_name = "gpu-1";
  r.gpus = {{0, "GPU-a", 97, 3LL << 30, 80LL << 30}, {1, "GPU-b", 0, 0, 80LL << 30}};
  InstanceSample busy;
  busy.instance_id = "i-busy";
  busy.cpu_percent = 187.5;
  busy.memory_used_bytes = 512LL << 20;
  busy.memory_limit_bytes = 4LL << 30;
  busy.gpus = {r.gpus[0]};
  InstanceSample fresh;  // first reading: no rate yet, memory unreadable, simulated GPUs
  fresh.instance_id = "i-fresh";
  fresh.gpu_note = "simulated GPUs report no utilisation";
  r.instances = {busy, fresh};
  return r;
}

TEST(AgentProtocolSamples, ReportRoundTripsThroughText) {
  const SampleReport sent = two_instance_report();
  auto text = parse_message(json::serialize(to_json(sent)));
  ASSERT_TRUE(text);
  auto got = sample_report_from_json(*text);
  ASSERT_TRUE(got) << got.error().detail;
  EXPECT_EQ(got->host_name, "gpu-1");
  ASSERT_EQ(got->gpus.size(), 2u);
  EXPECT_EQ(got->gpus[0].uuid, "GPU-a");
  EXPECT_EQ(got->gpus[0].util_percent, 97);
  EXPECT_EQ(got->gpus[0].memory_used_bytes, 3LL << 30);
  EXPECT_EQ(got->gpus[1].index, 1);
  EXPECT_EQ(got->gpus[1].memory_total_bytes, 80LL << 30);
  ASSERT_EQ(got->instances.size(), 2u);
  const auto& busy = got->instances[0];
  EXPECT_EQ(busy.instance_id, "i-busy");
  ASSERT_TRUE(busy.cpu_percent);
  EXPECT_DOUBLE_EQ(*busy.cpu_percent, 187.5);
  EXPECT_EQ(busy.memory_used_bytes, std::optional<std::int64_t>(512LL << 20));
  EXPECT_EQ(busy.memory_limit_bytes, 4LL << 30);
  ASSERT_EQ(busy.gpus.size(), 1u);
  EXPECT_EQ(busy.gpus[0].uuid, "GPU-a");
  EXPECT_EQ(busy.gpu_note, "");
  const auto& fresh = got->instances[1];
  EXPECT_FALSE(fresh.cpu_percent);  // null stays null, not 0
  EXPECT_FALSE(fresh.memory_used_bytes);
  EXPECT_TRUE(fresh.gpus.empty());
  EXPECT_EQ(fresh.gpu_note, "simulated GPUs report no utilisation");
  // A whole number of percent comes back as a number too (JSON has no int/double split).
  json::object whole = to_json(sent);
  whole["instances"].as_array()[0].as_object()["cpu_percent"] = 100;
  auto whole_back = sample_report_from_json(whole);
  ASSERT_TRUE(whole_back);
  EXPECT_DOUBLE_EQ(*whole_back->instances[0].cpu_percent, 100.0);
}

TEST(AgentProtocolMalformed, SampleReportsNameTheField) {
  auto read = [](const json::value& v) { return sample_report_from_json(v); };
  const json::object report = to_json(two_instance_report());
  auto with_instance = [&](const char* key, json::value v) {
    json::object r = report;
    r["instances"].as_array()[0].as_object()[key] = std::move(v);
    return r;
  };
  auto with_gpu = [&](const char* key, json::value v) {
    json::object r = report;
    r["gpus"].as_array()[0].as_object()[key] = std::move(v);
    return r;
  };
  EXPECT_THAT(error_of(read, parsed("[]")), HasSubstr("sample report: not a JSON object"));
  EXPECT_THAT(error_of(read, without(report, "host_name")), HasSubstr("host_name: missing"));
  EXPECT_THAT(error_of(read, with(report, "instances", json::object{})), HasSubstr("instances: not an array"));
  EXPECT_THAT(error_of(read, with(report, "instances", json::array{7})), HasSubstr("instances: agent protocol: malformed instance sample: not a JSON object"));
  EXPECT_THAT(error_of(read, with_instance("cpu_percent", "high")), HasSubstr("cpu_percent: not a number or null"));
  EXPECT_THAT(error_of(read, with_instance("cpu_percent", -3)), HasSubstr("cpu_percent: out of range"));
  EXPECT_THAT(error_of(read, with_instance("memory_used_bytes", -1)), HasSubstr("memory_used_bytes: out of range"));
  EXPECT_THAT(error_of(read, with_instance("memory_used_bytes", 1.5)), HasSubstr("memory_used_bytes: not an integer"));
  EXPECT_THAT(error_of(read, with_instance("gpu_note", nullptr)), HasSubstr("gpu_note: not a string"));
  EXPECT_THAT(error_of(read, with_gpu("util_percent", 101)), HasSubstr("gpus: agent protocol: malformed gpu reading: util_percent: out of range"));
  EXPECT_THAT(error_of(read, with_gpu("uuid", 3)), HasSubstr("uuid: not a string"));
  json::object no_rate = report;
  no_rate["instances"].as_array()[0].as_object().erase("cpu_percent");
  EXPECT_THAT(error_of(read, no_rate), HasSubstr("cpu_percent: missing"));
}

}  // namespace
}  // namespace gpucloud::agent
