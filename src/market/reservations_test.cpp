#include <algorithm>
#include <atomic>
#include <map>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "core/unique_temp_dir.h"
#include "events/events.h"
#include "market/hosts.h"
#include "market/reservations.h"
#include "market/watches.h"
#include "store/migrations.h"
#include "store/store.h"

namespace gpucloud::market {
namespace {
namespace fs = std::filesystem;

std::string temp_db() {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-rsv");
  return (dir / "test.db").string();
}

agent::HostInventory host(const std::string& name, int gpus, int cpu = 64, std::int64_t mem = 256) {
  agent::HostInventory h;
  h.name = name;
  h.zone = "zone-a";
  h.cpu = cpu;
  h.memory_gib = mem;
  h.port_min = 30000;
  h.port_max = 30999;
  h.engine = "unix:///var/run/docker.sock";
  h.simulated = true;
  h.inventory_source = "simulated";
  for (int i = 0; i < gpus; ++i)
    h.gpus.push_back(agent::GpuInfo{i, "GPU-sim-" + name + "-" + std::to_string(i), "RTX 4090", 24LL << 30, "", "ok", true});
  return h;
}

scheduler::PlacementRequest one_gpu() { return scheduler::PlacementRequest{"zone-a", "RTX 4090", 1, 8, 32, {}}; }

class ReservationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = temp_db();
    auto s = store::Store::open(path_, 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    config_.offers.push_back(config::Offer{"RTX 4090", {}, 24, 8, 32, 198, 0, 0});
  }
  void add_host(const agent::HostInventory& inv) {
    ASSERT_TRUE(store_->write_now([&](store::Database& db) { return upsert_host(db, inv, config_, system_now()); }));
  }
  std::string path_;
  std::unique_ptr<store::Store> store_;
  config::Config config_;
};

TEST_F(ReservationTest, ReserveRecordsGpusAndCapacityAndReleaseReturnsThem) {
  add_host(host("node-1", 2));
  auto r = store_->write_now([&](store::Database& db) { return reserve(db, "i-aaa", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->gpu_indices, std::vector<int>{0});
  auto hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
  EXPECT_EQ((*hosts)[0].cpu_used, 8);
  EXPECT_EQ((*hosts)[0].memory_gib_used, 32);
  EXPECT_EQ((*hosts)[0].gpus[0].reserved_by, std::optional<std::string>("i-aaa"));
  auto freed = store_->write_now([&](store::Database& db) { return release_reservation(db, "i-aaa", system_now()); });
  ASSERT_TRUE(freed);
  EXPECT_TRUE(*freed);
  hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
  EXPECT_EQ((*hosts)[0].cpu_used, 0);
  EXPECT_FALSE((*hosts)[0].gpus[0].reserved_by);
}

// "Notify me": a watch on a sold-out model fires once when a GPU of it frees up.
TEST_F(ReservationTest, AWatchOnASoldOutModelFiresOnceWhenAGpuFreesUp) {
  add_host(host("node-1", 1));
  std::string user;
  ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
    auto u = auth::create_user(db, "watcher", std::nullopt, "x", "user", system_now());
    if (!u) return fail(u.error());
    user = u->id;
    return ok();
  }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-one", one_gpu(), std::nullopt, system_now()); }));
  auto w = store_->write_now([&](store::Database& db) { return watch_model(db, user, "zone-a", "RTX 4090", system_now()); });
  ASSERT_TRUE(w) << w.error().detail;
  auto again = store_->write_now([&](store::Database& db) { return watch_model(db, user, "zone-a", "RTX 4090", system_now()); });
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, w->id) << "asking again is the same watch";
  EXPECT_FALSE(store_->write_now([&](store::Database& db) { return watch_model(db, user, "zone-a", "H100", system_now()); }))
      << "a model not sold in the zone";
  auto fired = [&] {
    auto events = store_->read_now([&](store::Database& db) { return events::list(db, events::Query{user, 0, {}, 100}); });
    return events ? std::count_if(events->begin(), events->end(),
                                  [](const events::Event& e) { return e.type == "market.gpu_available"; })
                  : -1;
  };
  EXPECT_EQ(fired(), 0);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-one", system_now()); }));
  EXPECT_EQ(fired(), 1);
  auto listed = store_->read_now([&](store::Database& db) { return list_watches(db, user); });
  ASSERT_TRUE(listed && listed->size() == 1u);
  EXPECT_TRUE(listed->front().fired_at);
  // Taken and freed again: the watch has fired, nothing more.
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-two", one_gpu(), std::nullopt, system_now()); }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-two", system_now()); }));
  EXPECT_EQ(fired(), 1);
  EXPECT_FALSE(store_->write_now([&](store::Database& db) { return delete_watch(db, "u-someone-else", w->id); }));
  EXPECT_TRUE(store_->write_now([&](store::Database& db) { return delete_watch(db, user, w->id); }));
}

TEST_F(ReservationTest, NoCapacityNamesWhatIsShort) {
  add_host(host("node-1", 1));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-one", one_gpu(), std::nullopt, system_now()); }));
  auto second = store_->write_now([&](store::Database& db) { return reserve(db, "i-two", one_gpu(), std::nullopt, system_now()); });
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::no_capacity);
  EXPECT_NE(second.error().detail.find("RTX 4090"), std::string::npos);
}

TEST_F(ReservationTest, ThreadsRacingForTheLastGpuOnSeparateConnectionsExactlyOneWins) {
  add_host(host("node-1", 1));
  constexpr int kRacers = 8;
  std::atomic<int> wins{0}, refused{0}, other{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> racers;
  for (int i = 0; i < kRacers; ++i) {
    racers.emplace_back([&, i] {
      auto db = store::Database::open(path_, false);  // its own real SQLite connection
      ASSERT_TRUE(db);
      while (!go) std::this_thread::yield();
      if (!(*db)->exec_script("BEGIN IMMEDIATE")) {
        ++other;
        return;
      }
      auto r = reserve(**db, "i-racer-" + std::to_string(i), one_gpu(), std::nullopt, system_now());
      if (r && (*db)->exec_script("COMMIT")) {
        ++wins;
      } else {
        (void)(*db)->exec_script("ROLLBACK");
        if (!r && r.error().code == ErrorCode::no_capacity) ++refused;
        else ++other;
      }
    });
  }
  go = true;
  for (auto& t : racers) t.join();
  EXPECT_EQ(wins, 1);
  EXPECT_EQ(refused, kRacers - 1);
  EXPECT_EQ(other, 0);
}

TEST_F(ReservationTest, SchemaRefusesADoubleBookingWrittenBehindTheSchedulersBack) {
  add_host(host("node-1", 1));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-first", one_gpu(), std::nullopt, system_now()); }));
  auto host_id = store_->read_now([](store::Database& db) { return db.one("SELECT id FROM hosts"); });
  std::string id = (*host_id)->text(0);
  auto sneaky = store_->write_now([&](store::Database& db) -> Status {
    if (auto s = db.run("INSERT INTO reservations (id, host_id, holder, cpu, memory_gib, active, created_at) "
                        "VALUES ('rsv-sneaky', ?, 'i-sneaky', 0, 0, 1, 0)", {id}); !s)
      return s;
    (void)id;
    return db.run("INSERT INTO gpu_reservations (reservation_id, gpu_uuid, active) VALUES ('rsv-sneaky', 'GPU-sim-node-1-0', 1)");
  });
  ASSERT_FALSE(sneaky);
  EXPECT_EQ(sneaky.error().code, ErrorCode::conflict);
  EXPECT_NE(sneaky.error().detail.find("UNIQUE"), std::string::npos);
  // And capacity cannot be overbooked behind its back either.
  auto overbook = store_->write_now([&](store::Database& db) {
    return db.run("UPDATE hosts SET cpu_used = cpu + 1 WHERE id = ?", {id});
  });
  EXPECT_FALSE(overbook);
}

TEST_F(ReservationTest, RestartOnTheSameHostOnly) {
  add_host(host("node-1", 1));
  add_host(host("node-2", 1));
  auto first = store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(first);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-a", system_now()); }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), first->host_id, system_now()); }));
  auto again = store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), first->host_id, system_now()); });
  ASSERT_FALSE(again);  // the other host has a free GPU, but start must use its own host
  EXPECT_EQ(again.error().code, ErrorCode::no_capacity);
}

TEST_F(ReservationTest, GpusThatSwapIndicesKeepTheirRecordsAndReservations) {
  auto inv = host("node-1", 2);
  add_host(inv);
  auto r = store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(r) << r.error().detail;
  ASSERT_EQ(r->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-0"});
  // The bus renumbered: GPU 0 now answers at index 1 and the other way round.
  std::swap(inv.gpus[0].index, inv.gpus[1].index);
  add_host(inv);
  auto hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
  ASSERT_TRUE(hosts);
  ASSERT_EQ((*hosts)[0].gpus.size(), 2u);
  for (const auto& g : (*hosts)[0].gpus) {
    EXPECT_TRUE(g.present);
    if (g.uuid == "GPU-sim-node-1-0") {
      EXPECT_EQ(g.index, 1);
      EXPECT_EQ(g.reserved_by, std::optional<std::string>("i-a"));
    } else {
      EXPECT_EQ(g.index, 0);
      EXPECT_FALSE(g.reserved_by);
    }
  }
  auto held = store_->read_now([](store::Database& db) { return active_reservation(db, "i-a"); });
  ASSERT_TRUE(held && *held);
  EXPECT_EQ((*held)->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-0"});
  EXPECT_EQ((*held)->gpu_indices, std::vector<int>{1});
  // And the next reservation takes the other physical GPU, not the reserved one.
  auto other = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(other) << other.error().detail;
  EXPECT_EQ(other->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-1"});
}

TEST_F(ReservationTest, AGpuTakingAnotherIndexOrAnotherGpusUuidNeverFailsRegistration) {
  auto inv = host("node-1", 2);
  add_host(inv);
  // A driver that reports one UUID at two indices is not refused either.
  auto twice = inv;
  twice.gpus[0].uuid = twice.gpus[1].uuid;
  add_host(twice);
  // GPU 0 was replaced by the card that used to be GPU 1, and GPU 1 fell off the bus.
  inv.gpus[0].uuid = inv.gpus[1].uuid;
  inv.gpus.pop_back();
  add_host(inv);
  auto hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
  ASSERT_TRUE(hosts);
  const auto& gpus = (*hosts)[0].gpus;
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].uuid, "GPU-sim-node-1-1");
  EXPECT_TRUE(gpus[0].present);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[1].uuid, "GPU-sim-node-1-0");
  EXPECT_FALSE(gpus[1].present);
  EXPECT_EQ(host_json((*hosts)[0]).at("gpus").as_array()[1].as_object().at("health").as_string(), "missing");
  // A GPU NVML could not name is recorded, unhealthy, and never placed.
  inv.gpus[0].uuid.clear();
  add_host(inv);
  auto r = store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::no_capacity);
}

TEST_F(ReservationTest, AMissingGpuIsNotPlacedAndAStartWithoutItNamesIt) {
  auto inv = host("node-1", 2);
  add_host(inv);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); }));
  auto b = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(b);
  ASSERT_EQ(b->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-1"});
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-b", system_now()); }));
  // i-b's GPU falls off the bus while i-b is stopped.
  inv.gpus.pop_back();
  add_host(inv);
  auto caps = store_->read_now([](store::Database& db) { return load_capacities(db); });
  ASSERT_TRUE(caps);
  ASSERT_EQ((*caps)[0].gpus.size(), 1u);
  auto start = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), (*caps)[0].id, system_now()); });
  ASSERT_FALSE(start);
  EXPECT_EQ(start.error().code, ErrorCode::no_capacity);
  EXPECT_NE(start.error().detail.find("GPU GPU-sim-node-1-1 (last seen as GPU 1) is missing from host node-1"), std::string::npos)
      << start.error().detail;
  // The reservation i-a holds is untouched.
  auto held = store_->read_now([](store::Database& db) { return active_reservation(db, "i-a"); });
  ASSERT_TRUE(held && *held);
  EXPECT_EQ((*held)->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-0"});
}

TEST_F(ReservationTest, AStartPrefersTheGpusTheHolderHadBefore) {
  add_host(host("node-1", 4));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); }));
  auto b = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), std::nullopt, system_now()); });
  ASSERT_TRUE(b);
  ASSERT_EQ(b->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-1"});
  // Both stop: GPU 0 is the lowest free one, yet i-b's start takes its GPU 1 again.
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-a", system_now()); }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-b", system_now()); }));
  auto again = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), b->host_id, system_now()); });
  ASSERT_TRUE(again) << again.error().detail;
  EXPECT_EQ(again->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-1"});
  // Taken by another meanwhile: a start still succeeds, on another GPU.
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return release_reservation(db, "i-b", system_now()); }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-c", one_gpu(), std::nullopt, system_now()); }));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-d", one_gpu(), std::nullopt, system_now()); }));
  auto moved = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", one_gpu(), b->host_id, system_now()); });
  ASSERT_TRUE(moved) << moved.error().detail;
  EXPECT_EQ(moved->gpu_uuids, std::vector<std::string>{"GPU-sim-node-1-2"});
}

// Each loss is found once, by whichever report shows it first, and names the holder; a
// beat changes only the GPUs of its own host that it names.
TEST_F(ReservationTest, AGpuLossAndItsRecoveryAreFoundOnce) {
  auto inv = host("node-1", 2);
  add_host(inv);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); }));
  add_host(host("node-2", 1));
  auto gone = inv;
  gone.gpus.erase(gone.gpus.begin());  // GPU 0, held by i-a, falls off the bus
  auto first = store_->write_now([&](store::Database& db) { return register_host(db, gone, config_, system_now()); });
  ASSERT_TRUE(first) << first.error().detail;
  ASSERT_EQ(first->changes.size(), 1u);
  EXPECT_EQ(first->changes[0].kind, GpuChange::Kind::lost);
  EXPECT_EQ(first->changes[0].uuid, "GPU-sim-node-1-0");
  EXPECT_EQ(first->changes[0].health, "missing");
  EXPECT_EQ(first->changes[0].holder, std::optional<std::string>("i-a"));
  auto again = store_->write_now([&](store::Database& db) { return register_host(db, gone, config_, system_now()); });
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->changes.empty());
  // node-2's beat naming node-1's GPU changes nothing of it; a UUID no host has joins node-2.
  auto foreign = store_->write_now([&](store::Database& db) {
    return record_gpu_health(db, "node-2", {inv.gpus[0], agent::GpuInfo{5, "GPU-x", "RTX 4090", 0, "", "ok", true}},
                             config_, system_now());
  });
  ASSERT_TRUE(foreign);
  ASSERT_EQ(foreign->size(), 1u);
  EXPECT_EQ((*foreign)[0].kind, GpuChange::Kind::added);
  EXPECT_EQ((*foreign)[0].uuid, "GPU-x");
  auto unknown_host =
      store_->write_now([&](store::Database& db) { return record_gpu_health(db, "node-9", inv.gpus, config_, system_now()); });
  ASSERT_TRUE(unknown_host);
  EXPECT_TRUE(unknown_host->empty());
  // node-1's own beat names it healthy: recovered, once.
  auto back =
      store_->write_now([&](store::Database& db) { return record_gpu_health(db, "node-1", inv.gpus, config_, system_now()); });
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].kind, GpuChange::Kind::recovered);
  EXPECT_TRUE((*back)[0].lost_at.has_value());
  auto same =
      store_->write_now([&](store::Database& db) { return record_gpu_health(db, "node-1", inv.gpus, config_, system_now()); });
  ASSERT_TRUE(same);
  EXPECT_TRUE(same->empty());
}

// A card replaced while the daemon runs: the old UUID is missing (its holder keeps its
// reservation on it), the new one is placeable at once, and the one that renumbered keeps
// its record under its new index; none of it needs a new registration.
TEST_F(ReservationTest, AHeartbeatAddsAReplacedCardAndFollowsARenumberedOne) {
  auto inv = host("node-1", 2);
  add_host(inv);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return reserve(db, "i-a", one_gpu(), std::nullopt, system_now()); }));
  auto two = scheduler::PlacementRequest{"zone-a", "RTX 4090", 2, 8, 32, {}};
  // GPU 0 (held by i-a) is gone; GPU 1 is now NVML's GPU 0; a new card is GPU 1.
  std::vector<agent::GpuInfo> beat{inv.gpus[0], inv.gpus[1],
                                   agent::GpuInfo{1, "GPU-new", "RTX 4090", 24LL << 30, "", "ok", false}};
  beat[0].health = kGpuMissing;
  beat[1].index = 0;
  auto changes = store_->write_now([&](store::Database& db) { return record_gpu_health(db, "node-1", beat, config_, system_now()); });
  ASSERT_TRUE(changes) << changes.error().detail;
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[0].kind, GpuChange::Kind::added);
  EXPECT_EQ((*changes)[0].uuid, "GPU-new");
  EXPECT_EQ((*changes)[0].model, "RTX 4090");
  EXPECT_EQ((*changes)[1].kind, GpuChange::Kind::lost);
  EXPECT_EQ((*changes)[1].uuid, "GPU-sim-node-1-0");
  EXPECT_EQ((*changes)[1].holder, std::optional<std::string>("i-a"));
  // The same beat again: nothing new.
  auto again = store_->write_now([&](store::Database& db) { return record_gpu_health(db, "node-1", beat, config_, system_now()); });
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->empty());
  auto hosts = store_->read_now([](store::Database& db) { return list_hosts(db); });
  ASSERT_TRUE(hosts);
  ASSERT_EQ(hosts->size(), 1u);
  std::map<std::string, GpuRecord> by_uuid;
  for (const auto& g : hosts->front().gpus) by_uuid[g.uuid] = g;
  ASSERT_EQ(by_uuid.size(), 3u);
  EXPECT_EQ(by_uuid["GPU-sim-node-1-1"].index, 0);
  EXPECT_EQ(by_uuid["GPU-new"].index, 1);
  EXPECT_EQ(by_uuid["GPU-sim-node-1-0"].reserved_by, std::optional<std::string>("i-a"));
  // Two free usable GPUs now: the survivor and the new card, never the missing one.
  auto placed = store_->write_now([&](store::Database& db) { return reserve(db, "i-b", two, std::nullopt, system_now()); });
  ASSERT_TRUE(placed) << placed.error().detail;
  auto got = placed->gpu_uuids;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"GPU-new", "GPU-sim-node-1-1"}));
}

TEST(GpuMigration, ReservationsByIndexBecomeReservationsByUuid) {
  auto db = store::Database::open(temp_db(), false);
  ASSERT_TRUE(db);
  auto all = store::schema_migrations();
  ASSERT_TRUE(store::apply_migrations(**db, all.first(5)));
  auto& d = **db;
  ASSERT_TRUE(d.run("INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, memory_gib, cpu_used, "
                    "memory_gib_used, port_min, port_max, created_at) VALUES ('h-1', 'node-1', 'z', 'ready', 1, 's', 'e', 8, 8, "
                    "1, 1, 1, 2, 0)"));
  ASSERT_TRUE(d.run("INSERT INTO gpus (host_id, idx, uuid, model, reported_name, memory_bytes, pci_bus_id, health, simulated) "
                    "VALUES ('h-1', 0, 'GPU-a', 'm', 'm', 1, '', 'ok', 1), ('h-1', 1, 'GPU-b', 'm', 'm', 1, '', 'ok', 1)"));
  ASSERT_TRUE(d.run("INSERT INTO reservations (id, host_id, holder, cpu, memory_gib, created_at) "
                    "VALUES ('rsv-1', 'h-1', 'i-a', 1, 1, 0)"));
  ASSERT_TRUE(d.run("INSERT INTO gpu_reservations (reservation_id, host_id, gpu_index) VALUES ('rsv-1', 'h-1', 1)"));
  auto v = store::apply_migrations(d, all);
  ASSERT_TRUE(v) << v.error().detail;
  auto held = active_reservation(d, "i-a");
  ASSERT_TRUE(held && *held) << (held ? "" : held.error().detail);
  EXPECT_EQ((*held)->gpu_uuids, std::vector<std::string>{"GPU-b"});
  EXPECT_EQ((*held)->gpu_indices, std::vector<int>{1});
  auto fk = d.all("PRAGMA foreign_key_check");
  ASSERT_TRUE(fk);
  EXPECT_TRUE(fk->empty());
}

TEST(AgentProtocol, MessagesRoundTripThroughJson) {
  auto inv = host("node-9", 2);
  inv.inventory_error = "NVML not available";
  auto back = agent::host_inventory_from_json(agent::to_json(inv));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, "node-9");
  ASSERT_EQ(back->gpus.size(), 2u);
  EXPECT_EQ(back->gpus[1].uuid, inv.gpus[1].uuid);
  EXPECT_EQ(back->inventory_error, "NVML not available");
  agent::Command c{"cmd-1", "node-9", "instance.ensure", boost::json::object{{"state", "running"}}};
  auto cb = agent::command_from_json(agent::to_json(c));
  ASSERT_TRUE(cb);
  EXPECT_EQ(cb->desired.at("state").as_string(), "running");
  auto bad = agent::command_from_json(boost::json::object{{"id", 3}});
  EXPECT_FALSE(bad);
  auto out = agent::failed_outcome("cmd-1", Error{ErrorCode::no_capacity, "short", {}, 0});
  auto ob = agent::command_outcome_from_json(agent::to_json(out));
  EXPECT_EQ(agent::outcome_error(*ob).code, ErrorCode::no_capacity);
}

}  // namespace
}  // namespace gpucloud::market
