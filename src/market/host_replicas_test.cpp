// Which replica serves a host (issue 27, store/replicas.h): the leader for an in-process host,
// the replica holding a remote agent's link for a remote one, and a link's end recorded by
// another replica never undoes a newer link's record.
#include <filesystem>

#include <gtest/gtest.h>

#include "config/config.h"
#include "core/unique_temp_dir.h"
#include "market/host_agents.h"
#include "market/hosts.h"
#include "store/leader_lease.h"
#include "store/replicas.h"
#include "store/store.h"

namespace gpucloud::market {
namespace {

class HostReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-host-replicas");
    auto s = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    for (const char* name : {"local-1", "remote-1"}) {
      agent::HostInventory h;
      h.name = name;
      h.zone = "zone-a";
      h.cpu = 8;
      h.memory_gib = 32;
      h.port_min = 30000;
      h.port_max = 30999;
      h.inventory_source = "simulated";
      auto r = store_->write_now([&](store::Database& db) { return register_host(db, h, config_, system_now()); });
      ASSERT_TRUE(r) << r.error().detail;
    }
    write([](store::Database& db) {
      return record_agent_connected(db, "local-1", kAgentInProcess, "1", std::nullopt, system_now());
    });
    for (const auto& [holder, url] : {std::pair{"a/1/x", "http://10.0.0.1:8080"}, std::pair{"b/2/y", "http://10.0.0.2:8080"}})
      write([holder = holder, url = url](store::Database& db) { return store::record_replica(db, holder, url, system_now()); });
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  template <typename F>
  void write(F f) {
    auto s = store_->write_now([&](store::Database& db) -> Status { return f(db); });
    ASSERT_TRUE(s) << s.error().detail;
  }
  std::string serving(const std::string& host) {
    auto r = store_->read_now([&](store::Database& db) { return store::replica_serving_host(db, host); });
    EXPECT_TRUE(r) << r.error().detail;
    return r && *r ? (*r)->holder + " " + (*r)->api_url : "none";
  }
  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
};

TEST_F(HostReplicasTest, AnInProcessHostIsServedByTheLeaderAndARemoteOneByItsLinksReplica) {
  EXPECT_EQ(serving("local-1"), "none") << "no leader yet";
  EXPECT_EQ(serving("remote-1"), "none") << "no agent connected yet";
  write([](store::Database& db) -> Status {
    auto c = store::claim_lease(db, store::kBackgroundLease, "a/1/x", std::nullopt, true, 60'000'000);
    if (!c) return fail(c.error());
    return ok();
  });
  EXPECT_EQ(serving("local-1"), "a/1/x http://10.0.0.1:8080");
  write([](store::Database& db) {
    return record_agent_connected(db, "remote-1", kAgentRemote, "1", std::string("192.0.2.7"), system_now(),
                                  std::string("b/2/y"));
  });
  EXPECT_EQ(serving("remote-1"), "b/2/y http://10.0.0.2:8080");
  // The agent dialled replica a again; b's late record of the old link's end changes nothing.
  write([](store::Database& db) {
    return record_agent_connected(db, "remote-1", kAgentRemote, "1", std::string("192.0.2.7"), system_now(),
                                  std::string("a/1/x"));
  });
  write([](store::Database& db) { return record_agent_disconnected(db, "remote-1", system_now(), std::string("b/2/y")); });
  EXPECT_EQ(serving("remote-1"), "a/1/x http://10.0.0.1:8080");
  // a's own record of its end: nobody serves it until the agent is back.
  write([](store::Database& db) { return record_agent_disconnected(db, "remote-1", system_now(), std::string("a/1/x")); });
  EXPECT_EQ(serving("remote-1"), "none");
  // A replica restarted under the same name moves its address.
  write([](store::Database& db) { return store::record_replica(db, "a/1/x", "http://10.0.0.9:8081", system_now()); });
  EXPECT_EQ(serving("local-1"), "a/1/x http://10.0.0.9:8081");
}

}  // namespace
}  // namespace gpucloud::market
