// Host states (issue 26): drain, undrain and remove against the real store, placement and
// market; the agent fields GET /admin/hosts shows.
#include "market/host_admin.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "core/unique_temp_dir.h"
#include "events/events.h"
#include "instances/instance_record.h"
#include "market/host_agents.h"
#include "market/hosts.h"
#include "market/offers.h"
#include "market/prices.h"
#include "market/reservations.h"
#include "store/store.h"

namespace gpucloud::market {
namespace {

agent::HostInventory host_admin_inventory(const std::string& name, int gpus) {
  agent::HostInventory h;
  h.name = name;
  h.zone = "zone-a";
  h.cpu = 64;
  h.memory_gib = 256;
  h.port_min = 30000;
  h.port_max = 30999;
  h.engine = "unix:///var/run/docker.sock";
  h.simulated = true;
  h.inventory_source = "simulated";
  for (int i = 0; i < gpus; ++i)
    h.gpus.push_back(agent::GpuInfo{i, "GPU-adm-" + name + "-" + std::to_string(i), "RTX 4090", 24LL << 30, "", "ok", true});
  return h;
}

scheduler::PlacementRequest host_admin_one_gpu() { return scheduler::PlacementRequest{"zone-a", "RTX 4090", 1, 8, 32, {}}; }

class HostAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = gpucloud::testing::unique_temp_dir("gpucloud-hostadmin");
    auto s = store::Store::open((dir / "test.db").string(), 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    config_.zones.push_back(config::Zone{"zone-a", "", ""});
    config_.offers.push_back(config::Offer{"RTX 4090", {}, 24, 8, 32, 198, 0, 0});
    add_host("node-1", 2);
    auto id = store_->read_now([](store::Database& db) { return host_id_by_name(db, "node-1"); });
    ASSERT_TRUE(id && *id);
    host_id_ = **id;
  }
  void add_host(const std::string& name, int gpus) {
    ASSERT_TRUE(store_->write_now([&](store::Database& db) {
      return upsert_host(db, host_admin_inventory(name, gpus), config_, system_now());
    }));
  }
  HostRecord host(const std::string& name) {
    auto h = store_->read_now([&](store::Database& db) { return find_host(db, name); });
    EXPECT_TRUE(h && *h);
    return h && *h ? **h : HostRecord{};
  }
  Result<Reservation> reserve_for(const std::string& holder, const std::optional<std::string>& only_host) {
    return store_->write_now(
        [&](store::Database& db) { return reserve(db, holder, host_admin_one_gpu(), only_host, system_now()); });
  }
  Result<HostAdminChange> act(Result<HostAdminChange> (*step)(store::Database&, const std::string&, SysTime),
                              const std::string& name) {
    return store_->write_now([&](store::Database& db) { return step(db, name, system_now()); });
  }
  std::vector<std::string> event_types() {
    auto page = store_->read_now([](store::Database& db) { return events::list(db, events::Query{}); });
    std::vector<std::string> out;
    if (page)
      for (const auto& e : *page) out.push_back(e.type);
    return out;
  }
  std::int64_t market_free() {
    auto hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
    auto prices = store_->read_now([](store::Database& db) { return load_prices(db); });
    if (!hosts || !prices) return -1;
    for (const auto& o : market_offers(config_, *hosts, *prices))
      if (o.as_object().at("gpu_model").is_string()) return o.as_object().at("gpus_free").as_int64();
    return -1;
  }

  std::unique_ptr<store::Store> store_;
  config::Config config_;
  std::string host_id_;
};

TEST_F(HostAdminTest, ADrainedHostTakesNoNewPlacementButItsOwnInstanceStartsThereAgain) {
  ASSERT_TRUE(reserve_for("i-lives", std::nullopt));
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return release_reservation(db, "i-lives", system_now()); }));
  EXPECT_EQ(market_free(), 2);

  auto drained = act(&drain_host, "node-1");
  ASSERT_TRUE(drained) << drained.error().detail;
  EXPECT_TRUE(drained->changed);
  EXPECT_EQ(drained->host.state, "draining");
  EXPECT_EQ(drained->host.liveness, "ready");
  EXPECT_EQ(drained->host.admin_state, "draining");
  auto again = act(&drain_host, "node-1");
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->changed);

  auto fresh = reserve_for("i-new", std::nullopt);
  ASSERT_FALSE(fresh);
  EXPECT_EQ(fresh.error().code, ErrorCode::no_capacity);
  // A new instance pinned to the host (by its data disks) is a new placement too.
  auto pinned = reserve_for("i-pinned", host_id_);
  ASSERT_FALSE(pinned);
  EXPECT_EQ(pinned.error().code, ErrorCode::no_capacity);
  // Its free GPUs are not offered; the ones there still count in the total.
  EXPECT_EQ(market_free(), 0);
  // The instance that lived there starts there again: not a new placement.
  auto restart = reserve_for("i-lives", host_id_);
  ASSERT_TRUE(restart) << restart.error().detail;
  EXPECT_EQ(restart->host_id, host_id_);

  // A registration (a restart of the daemon) keeps it drained; liveness is its own.
  add_host("node-1", 2);
  EXPECT_EQ(host("node-1").state, "draining");
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return set_host_state(db, "node-1", "unreachable", std::nullopt); }));
  EXPECT_EQ(host("node-1").state, "draining");
  EXPECT_EQ(host("node-1").liveness, "unreachable");
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return set_host_state(db, "node-1", "ready", system_now()); }));

  auto undrained = act(&undrain_host, "node-1");
  ASSERT_TRUE(undrained) << undrained.error().detail;
  EXPECT_TRUE(undrained->changed);
  EXPECT_EQ(undrained->host.state, "ready");
  ASSERT_TRUE(reserve_for("i-new", std::nullopt));
  auto types = event_types();
  EXPECT_EQ(std::count(types.begin(), types.end(), "host.drained"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "host.undrained"), 1);
  EXPECT_EQ(act(&drain_host, "no-such-host").error().code, ErrorCode::not_found);
}

TEST_F(HostAdminTest, RemoveIsRefusedWhileAReservationOrADiskLivesThere) {
  ASSERT_TRUE(reserve_for("i-held", std::nullopt));
  auto refused = act(&remove_host, "node-1");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);
  EXPECT_NE(refused.error().detail.find("i-held"), std::string::npos) << refused.error().detail;
  EXPECT_NE(refused.error().detail.find("active reservations"), std::string::npos) << refused.error().detail;
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return release_reservation(db, "i-held", system_now()); }));

  // A data disk in the recycle bin still lives there (it can be restored).
  ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
    auto u = auth::create_user(db, "diskowner", std::nullopt, "x", "user", system_now());
    if (!u) return fail(u.error());
    return db.run("INSERT INTO disks (id, owner, name, zone, host_id, size_gib, state, created_at) "
                  "VALUES ('d-binned', ?, 'data', 'zone-a', ?, 10, 'deleted', 1)",
                  {u->id, host_id_});
  }));
  refused = act(&remove_host, "node-1");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);
  EXPECT_NE(refused.error().detail.find("d-binned"), std::string::npos) << refused.error().detail;
  bool counted = false;
  for (const auto& [name, n] : refused.error().numbers)
    if (name == "data_disks") counted = n == 1;
  EXPECT_TRUE(counted);
  EXPECT_EQ(host("node-1").state, "ready");

  ASSERT_TRUE(store_->write_now([](store::Database& db) { return db.run("UPDATE disks SET state = 'destroyed'"); }));
  auto removed = act(&remove_host, "node-1");
  ASSERT_TRUE(removed) << removed.error().detail;
  EXPECT_EQ(removed->host.state, "removed");
}

// An instance on the host: a remove names it; while the host is unreachable the instance
// keeps its state and says so (host_unreachable), drained or not.
TEST_F(HostAdminTest, AnInstanceThereRefusesRemoveAndShowsItsHostUnreachable) {
  ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
    auto u = auth::create_user(db, "hostowner", std::nullopt, "x", "user", system_now());
    if (!u) return fail(u.error());
    if (auto s = db.run("INSERT INTO images (id, name, engine_image, visibility, state, created_at) "
                        "VALUES ('img-ha', 'ha', 'ha:1', 'public', 'available', 0)");
        !s)
      return s;
    instances::Instance i;
    i.id = "i-onhost";
    i.owner = u->id;
    i.name = "onhost";
    i.zone = "zone-a";
    i.host_id = host_id_;
    i.cpu = 1;
    i.memory_gib = 1;
    i.image_id = "img-ha";
    i.state = instances::InstanceState::running;
    i.created_at = system_now();
    return instances::insert_instance(db, i);
  }));
  auto refused = act(&remove_host, "node-1");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);
  EXPECT_NE(refused.error().detail.find("1 instances not released (i-onhost)"), std::string::npos) << refused.error().detail;

  auto shown = [&] {
    auto i = store_->read_now([](store::Database& db) { return instances::load_instance(db, "i-onhost"); });
    EXPECT_TRUE(i && *i);
    return instances::instance_json(**i, instances::ViewContext{"127.0.0.1", "CNY", 15}, 0);
  };
  EXPECT_FALSE(shown().at("host_unreachable").as_bool());
  ASSERT_TRUE(act(&drain_host, "node-1"));
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return set_host_state(db, "node-1", "unreachable", std::nullopt); }));
  auto o = shown();
  EXPECT_TRUE(o.at("host_unreachable").as_bool());
  EXPECT_EQ(o.at("state").as_string(), "running");
  ASSERT_TRUE(store_->write_now([](store::Database& db) { return set_host_state(db, "node-1", "ready", system_now()); }));
  EXPECT_FALSE(shown().at("host_unreachable").as_bool());
}

TEST_F(HostAdminTest, ARemovedHostIsHiddenNeverPlacedAndItsNameJoinsAgainReady) {
  add_host("node-2", 1);
  auto removed = act(&remove_host, "node-1");
  ASSERT_TRUE(removed) << removed.error().detail;
  EXPECT_TRUE(removed->changed);
  auto listed = store_->read_now([](store::Database& db) { return list_hosts(db); });
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().name, "node-2");
  auto all = store_->read_now([](store::Database& db) { return list_hosts(db, true); });
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(all->front().state, "removed");
  EXPECT_EQ(market_free(), 1);  // node-2's only
  // Drain and undrain do not reach it; a second remove changes nothing.
  EXPECT_EQ(act(&drain_host, "node-1").error().code, ErrorCode::not_found);
  auto twice = act(&remove_host, "node-1");
  ASSERT_TRUE(twice);
  EXPECT_FALSE(twice->changed);
  // Never placed on, even for a holder that lived there.
  auto pinned = reserve_for("i-x", host_id_);
  ASSERT_FALSE(pinned);
  EXPECT_EQ(pinned.error().code, ErrorCode::no_capacity);
  auto r = reserve_for("i-y", std::nullopt);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host_name, "node-2");

  add_host("node-1", 2);  // the name registers again
  EXPECT_EQ(host("node-1").state, "ready");
  EXPECT_EQ(host("node-1").admin_state, "active");
  auto back = reserve_for("i-z", host_id_);
  ASSERT_TRUE(back) << back.error().detail;
  auto types = event_types();
  EXPECT_EQ(std::count(types.begin(), types.end(), "host.removed"), 1);
}

TEST_F(HostAdminTest, TheAgentFieldsFollowConnectionsHeartbeatsAndTheNewestUnrevokedCertificate) {
  auto json_of = [&](const std::string& name) { return host_json(host(name)).at("agent").as_object(); };
  EXPECT_TRUE(json_of("node-1").at("kind").is_null());

  const SysTime connected = from_unix_micros(1'800'000'000'000'000);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) {
    return record_agent_connected(db, "node-1", kAgentRemote, "0.2.0", std::string("10.0.0.5:7443"), connected);
  }));
  auto a = json_of("node-1");
  EXPECT_EQ(a.at("kind").as_string(), "remote");
  EXPECT_EQ(a.at("version").as_string(), "0.2.0");
  EXPECT_EQ(a.at("address").as_string(), "10.0.0.5:7443");
  EXPECT_EQ(a.at("connected_since").as_string(), format_rfc3339(connected));
  EXPECT_EQ(a.at("last_heartbeat_at").as_string(), format_rfc3339(connected));
  EXPECT_TRUE(a.at("certificate_expires_at").is_null());

  const SysTime beat = connected + std::chrono::seconds(5);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) {
    return record_heartbeats(db, {{"node-1", beat}, {"no-such-host", beat}, {"node-1", connected}});
  }));
  EXPECT_EQ(json_of("node-1").at("last_heartbeat_at").as_string(), format_rfc3339(beat));

  // The newest certificate not revoked: an older one and a newer revoked one do not count.
  ASSERT_TRUE(store_->write_now([](store::Database& db) {
    return db.exec_script(
        "INSERT INTO host_certificates (serial, host_name, not_after, issued_at, revoked_at) VALUES "
        "('s1', 'node-1', 1900000000000000, 1000, NULL), ('s2', 'node-1', 1950000000000000, 2000, NULL), "
        "('s3', 'node-1', 1990000000000000, 3000, 3500), ('s4', 'node-2', 1999000000000000, 4000, NULL)");
  }));
  EXPECT_EQ(json_of("node-1").at("certificate_expires_at").as_string(),
            format_rfc3339(from_unix_micros(1'950'000'000'000'000)));

  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return record_agent_disconnected(db, "node-1", beat); }));
  a = json_of("node-1");
  EXPECT_TRUE(a.at("connected_since").is_null());
  EXPECT_EQ(a.at("kind").as_string(), "remote");
  auto missing = store_->write_now([&](store::Database& db) { return record_agent_disconnected(db, "nope", beat); });
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  auto bad = store_->write_now(
      [&](store::Database& db) { return record_agent_connected(db, "node-1", "sideways", "1", std::nullopt, beat); });
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace gpucloud::market
