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

}  // namespace
}  // namespace gpucloud::agent
