#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "market/hosts.h"
#include "market/reservations.h"
#include "store/store.h"

namespace gpucloud::market {
namespace {
namespace fs = std::filesystem;

std::string temp_db() {
  static int n = 0;
  auto dir = fs::temp_directory_path() / ("gpucloud-rsv-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::create_directories(dir);
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

scheduler::PlacementRequest one_gpu() { return scheduler::PlacementRequest{"zone-a", "RTX 4090", 1, 8, 32}; }

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
    return db.run("INSERT INTO gpu_reservations (reservation_id, host_id, gpu_index, active) VALUES ('rsv-sneaky', ?, 0, 1)",
                  {id});
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
