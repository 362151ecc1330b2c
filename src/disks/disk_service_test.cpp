// Data disks and snapshots without an engine: the actions' rules (state, host, quota, paths),
// and DiskService driving a scripted fake agent through make, grow, snapshot, destroy, the
// recycle bin's clock, and an instance's own disks (made before its container starts, kept
// or binned at release).
#include <filesystem>

#include "billing/ledger.h"
#include "core/unique_temp_dir.h"
#include <memory>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "auth/accounts.h"
#include "auth/user_quotas.h"
#include "disks/disk_actions.h"
#include "disks/disk_service.h"
#include "events/events.h"
#include "instances/actions.h"
#include "instances/images.h"
#include "instances/lifecycle.h"
#include "policy/instances.h"
#include "market/hosts.h"
#include "market/prices.h"
#include "store/store.h"

namespace gpucloud::disks {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using instances::InstanceState;

std::string temp_db() {
  auto dir = gpucloud::testing::unique_temp_dir("gpucloud-disks");
  return (dir / "test.db").string();
}

// Keeps disks and snapshots as sizes, containers as running flags; can refuse disk.ensure.
class FakeAgent : public agent::HostAgent {
 public:
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    co_return std::vector<agent::HostInventory>{};
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)>) override {}
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int, int) override {
    co_return fail(ErrorCode::unavailable, "no terminals here");
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override {
    log.push_back(command);
    agent::CommandOutcome out;
    out.command_id = command.id;
    out.ok = true;
    const auto& d = command.desired;
    auto str = [&](const char* k) { return std::string(d.at(k).as_string()); };
    if (command.kind == "disk.ensure") {
      if (refuse_disks) {
        out.ok = false;
        out.error_code = "internal";
        out.error_detail = "mkfs.ext4: no space left on device";
        co_return out;
      }
      std::int64_t size = d.at("size_gib").as_int64();
      auto& have = disks[str("disk_id")];
      if (size < have) {
        out.ok = false;
        out.error_code = "invalid_argument";
        out.error_detail = "size_gib: disks only grow";
        co_return out;
      }
      have = size;
      out.observed = json::object{{"disk_id", str("disk_id")}, {"size_gib", size}, {"used_bytes", 4096}, {"driver", "fake"}};
    } else if (command.kind == "disk.remove") {
      disks.erase(str("disk_id"));
    } else if (command.kind == "disk.snapshot") {
      snapshots[str("snapshot_id")] = disks[str("disk_id")];
      out.observed = json::object{{"snapshot_id", str("snapshot_id")}, {"disk_id", str("disk_id")},
                                  {"size_gib", disks[str("disk_id")]}, {"used_bytes", 8192}};
    } else if (command.kind == "snapshot.remove") {
      snapshots.erase(str("snapshot_id"));
    } else if (command.kind == "disk.status") {
      json::array ds;
      for (const auto& [id, size] : disks) ds.push_back(json::object{{"disk_id", id}, {"size_gib", size}, {"used_bytes", 777}});
      json::array torn_ids;
      for (const auto& id : torn) torn_ids.emplace_back(id);
      out.observed = json::object{{"driver", "fake"},
                                  {"enforces_size", true},
                                  {"disks", std::move(ds)},
                                  {"snapshots", json::array{}},
                                  {"torn_snapshots", std::move(torn_ids)}};
    } else if (command.kind == "instance.ensure") {
      running[str("instance_id")] = d.at("state").as_string() == "running";
      out.observed = json::object{{"running", running[str("instance_id")]}, {"container_id", "c-1"}, {"ipv4", "10.88.0.2"},
                                  {"host_key", "ssh-ed25519 AAAA"}};
    } else if (command.kind == "instance.remove") {
      running.erase(str("instance_id"));
    } else if (command.kind == "instance.status") {
      out.observed = json::object{{"instances", json::array{}}, {"unknown_containers", json::array{}}};
    }
    co_return out;
  }
  std::vector<std::string> kinds() const {
    std::vector<std::string> k;
    for (const auto& c : log) k.push_back(c.kind);
    return k;
  }
  const agent::Command* last(const std::string& kind) const {
    for (auto it = log.rbegin(); it != log.rend(); ++it)
      if (it->kind == kind) return &*it;
    return nullptr;
  }
  std::vector<agent::Command> log;
  std::map<std::string, std::int64_t> disks, snapshots;
  std::vector<std::string> torn;  // disk.status: snapshots the host set aside after a crash
  std::map<std::string, bool> running;
  bool refuse_disks = false;
};

class DisksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = temp_db();
    auto s = store::Store::open(db_path_, 2);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    config_.public_host = "127.0.0.1";
    config_.zones.push_back(config::Zone{"zone-a", "local", ""});
    config_.offers.push_back(config::Offer{"RTX 4090", {}, 24, 8, 32, 198, 0, 0});
    config_.no_gpu_offer.cpu = 1;
    config_.no_gpu_offer.memory_gib = 2;
    config_.quotas.disk_gib = 500;
    config_.policy.recycle_days = 7;
    for (const char* name : {"node-1", "node-2"}) {
      agent::HostInventory h;
      h.name = name;
      h.zone = "zone-a";
      h.cpu = 64;
      h.memory_gib = 256;
      h.port_min = std::string(name) == "node-1" ? 30000 : 31000;
      h.port_max = h.port_min + 999;
      h.engine = "unix:///var/run/docker.sock";
      h.simulated = true;
      h.inventory_source = "simulated";
      // node-1 has more free GPUs, so a disk without a host goes there.
      int gpus = std::string(name) == "node-1" ? 2 : 1;
      for (int i = 0; i < gpus; ++i)
        h.gpus.push_back(agent::GpuInfo{i, std::string("GPU-") + name + "-" + std::to_string(i), "RTX 4090", 24LL << 30, "", "ok", true});
      config::Host hc;
      hc.name = name;
      hc.zone = "zone-a";
      config_.hosts.push_back(hc);
      ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
        if (auto r = market::upsert_host(db, h, config_, system_now()); !r) return fail(r.error());
        return ok();
      }));
    }
    ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
      if (auto s = instances::seed_public_images(db, config_, system_now()); !s) return s;
      auto u = auth::create_user(db, "alice", std::nullopt, "x", "user", system_now());
      if (!u) return fail(u.error());
      user_ = u->id;
      if (auto s = billing::open_account(db, u->id, "alice", 1000000, system_now()); !s) return s;
      auto b = auth::create_user(db, "bob", std::nullopt, "x", "user", system_now());
      if (!b) return fail(b.error());
      bob_ = b->id;
      if (auto s = billing::open_account(db, b->id, "bob", 1000000, system_now()); !s) return s;
      return ok();
    }));
    clock_ = std::make_unique<PlatformClock>(io_.get_executor(), true, system_now());
    disks_ = std::make_unique<DiskService>(io_.get_executor(), config_, *store_, *clock_, agent_);
    instances_ = std::make_unique<instances::InstanceService>(io_.get_executor(), config_, *store_, *clock_, agent_);
    instances_->use_disks(*disks_);
  }
  void TearDown() override {
    disks_->stop_background();
    instances_->stop_background();
    pump([] { return false; }, std::chrono::milliseconds(30));
    instances_.reset();
    disks_.reset();
    store_.reset();
    std::error_code ec;
    fs::remove_all(fs::path(db_path_).parent_path(), ec);
  }
  template <class Pred>
  bool pump(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      io_.restart();
      io_.run_for(std::chrono::milliseconds(2));
    }
    return done();
  }
  Actor alice() const { return Actor{user_, false}; }
  template <class F>
  auto write(F f) {
    return store_->write_now([&](store::Database& db) { return f(db); });
  }
  Disk disk(const std::string& id) {
    auto d = store_->read_now([&](store::Database& db) { return load_disk(db, id); });
    EXPECT_TRUE(d && *d);
    return **d;
  }
  instances::Instance instance(const std::string& id) {
    auto i = store_->read_now([&](store::Database& db) { return instances::load_instance(db, id); });
    EXPECT_TRUE(i && *i);
    return **i;
  }
  // A disk made on the agent and available.
  std::string made_disk(const std::string& name, std::int64_t gib, std::optional<std::string> host = std::nullopt) {
    CreateDiskRequest r;
    r.name = name;
    r.size_gib = gib;
    r.host = host;
    std::string id = "d-" + name;
    auto d = write([&](store::Database& db) { return create_disk(db, config_, alice(), id, r, clock_->now()); });
    EXPECT_TRUE(d) << d.error().detail;
    disks_->kick_disk(id);
    EXPECT_TRUE(pump([&] { return disk(id).state == DiskState::available; }));
    return id;
  }
  std::string create_instance(const std::string& name, std::vector<InstanceDataDisk> data_disks = {}) {
    policy::CreateInstanceRequest r;
    r.name = name;
    r.zone = "zone-a";
    r.image = instances::kBaseImageName;
    r.gpu_model = "RTX 4090";
    r.gpu_count = 1;
    r.cpu = 8;
    r.memory_gib = 32;
    r.data_disks = std::move(data_disks);
    for (const auto& d : r.data_disks)
      if (!d.existing) r.new_disk_ids.push_back("d-" + name + "-" + std::to_string(r.new_disk_ids.size()));
    std::string id = "i-" + name;
    auto created = write([&](store::Database& db) { return policy::create_instance(db, config_, alice(), id, r, clock_->now()); });
    EXPECT_TRUE(created) << created.error().detail;
    if (!created) return id;
    instances_->kick(id);
    EXPECT_TRUE(pump([&] {
      auto s = instance(id).state;
      return s == InstanceState::running || s == InstanceState::error;
    }));
    return id;
  }
  void stop(const std::string& id) {
    ASSERT_TRUE(write([&](store::Database& db) { return instances::stop_instance(db, alice(), id, clock_->now()); }));
    instances_->kick(id);
    ASSERT_TRUE(pump([&] { return instance(id).state == InstanceState::stopped; }));
  }
  void advance(std::chrono::seconds s) {
    bool done = false;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      (void)co_await clock_->advance(s);
      done = true;
    }, asio::detached);
    ASSERT_TRUE(pump([&] { return done; }));
  }
  std::vector<std::string> event_types(const std::string& id) {
    events::Query q;
    q.resource = id;
    q.limit = 1000;
    auto list = store_->read_now([&](store::Database& db) { return events::list(db, q); });
    std::vector<std::string> out;
    if (list)
      for (const auto& e : *list) out.push_back(e.type);
    return out;
  }
  void rearm() {
    bool done = false;
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      co_await disks_->rearm_recycle_bin();
      done = true;
    }, asio::detached);
    ASSERT_TRUE(pump([&] { return done; }));
  }
  bool has_event(const std::string& id, const std::string& type) {
    auto t = event_types(id);
    return std::find(t.begin(), t.end(), type) != t.end();
  }

  asio::io_context io_;
  std::string db_path_, user_, bob_;
  config::Config config_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<PlatformClock> clock_;
  FakeAgent agent_;
  std::unique_ptr<DiskService> disks_;
  std::unique_ptr<instances::InstanceService> instances_;
};

TEST(MountPathTest, RefusesRelativeRootSystemAndUnnormalisedPaths) {
  for (const char* bad : {"data", "", "/", "/etc", "/etc/x", "/usr", "/usr/local/lib", "/proc", "/dev/shm", "/sys",
                          "/root", "/root/.ssh", "/bin", "/run/x", "/root/data/", "/root//data", "/root/../etc",
                          "/root/./data", "/.gpucloud", "/root/da ta"})
    EXPECT_FALSE(validate_mount_path(bad, "mount_path")) << bad;
  for (const char* good : {"/root/data", "/data", "/root/data2", "/mnt/datasets", "/workspace", "/home/user/x"})
    EXPECT_TRUE(validate_mount_path(good, "mount_path")) << good;
  auto e = validate_mount_path("/etc", "data_disks[0].mount_path");
  EXPECT_NE(e.error().detail.find("data_disks[0].mount_path"), std::string::npos);
}

TEST_F(DisksTest, ADiskIsMadeOnTheHostWithMostFreeGpusAndReportsItsUse) {
  auto id = made_disk("data", 100);
  Disk d = disk(id);
  EXPECT_EQ(d.host_name, "node-1");
  EXPECT_EQ(d.applied_size_gib, 100);
  EXPECT_EQ(d.used_bytes, 4096);
  ASSERT_NE(agent_.last("disk.ensure"), nullptr);
  EXPECT_EQ(agent_.last("disk.ensure")->host_name, "node-1");
  EXPECT_TRUE(has_event(id, "disk.created"));
  EXPECT_TRUE(has_event(id, "disk.available"));
  // used_bytes follows the agent's reports.
  bool done = false;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    co_await disks_->reconcile();
    done = true;
  }, asio::detached);
  ASSERT_TRUE(pump([&] { return done; }));
  EXPECT_EQ(disk(id).used_bytes, 777);
}

TEST_F(DisksTest, BadRequestsAreRefusedAndChangeNothing) {
  auto id = made_disk("data", 100);
  auto count = [&] { return store_->read_now([&](store::Database& db) { return list_disks(db, user_, std::nullopt); })->size(); };
  CreateDiskRequest big{"huge", std::nullopt, std::nullopt, 401, std::nullopt};
  auto over = write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-huge", big, clock_->now()); });
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::quota_exceeded);
  CreateDiskRequest dup{"data", std::nullopt, std::nullopt, 1, std::nullopt};
  auto same = write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-dup", dup, clock_->now()); });
  ASSERT_FALSE(same);
  EXPECT_EQ(same.error().code, ErrorCode::conflict);
  auto shrink = write([&](store::Database& db) { return resize_disk(db, config_, alice(), id, 50, clock_->now()); });
  ASSERT_FALSE(shrink);
  EXPECT_EQ(shrink.error().code, ErrorCode::invalid_argument);
  auto grow_past = write([&](store::Database& db) { return resize_disk(db, config_, alice(), id, 501, clock_->now()); });
  ASSERT_FALSE(grow_past);
  EXPECT_EQ(grow_past.error().code, ErrorCode::quota_exceeded);
  // Another user's disk is not found, by id or by name.
  auto theirs = write([&](store::Database& db) { return delete_disk(db, config_, Actor{bob_, false}, id, clock_->now()); });
  ASSERT_FALSE(theirs);
  EXPECT_EQ(theirs.error().code, ErrorCode::not_found);
  EXPECT_EQ(count(), 1u);
  EXPECT_EQ(disk(id).size_gib, 100);
  EXPECT_EQ(disk(id).state, DiskState::available);
  // A per-user override binds too.
  ASSERT_TRUE(write([&](store::Database& db) { return auth::save_quota_overrides(db, user_, {std::nullopt, std::nullopt, 150, std::nullopt, std::nullopt}); }));
  auto past_override = write([&](store::Database& db) { return resize_disk(db, config_, alice(), id, 151, clock_->now()); });
  ASSERT_FALSE(past_override);
  EXPECT_EQ(past_override.error().code, ErrorCode::quota_exceeded);
}

TEST_F(DisksTest, GrowIsSentAndAFailedGrowIsUndoneInTheRecord) {
  auto id = made_disk("data", 10);
  ASSERT_TRUE(write([&](store::Database& db) { return resize_disk(db, config_, alice(), id, 20, clock_->now()); }));
  disks_->kick_disk(id);
  ASSERT_TRUE(pump([&] { return disk(id).applied_size_gib == 20; }));
  EXPECT_EQ(agent_.disks["d-data"], 20);
  EXPECT_TRUE(has_event(id, "disk.resized"));
  agent_.refuse_disks = true;
  ASSERT_TRUE(write([&](store::Database& db) { return resize_disk(db, config_, alice(), id, 30, clock_->now()); }));
  disks_->kick_disk(id);
  ASSERT_TRUE(pump([&] { return has_event(id, "disk.resize_failed"); }));
  EXPECT_EQ(disk(id).size_gib, 20);
  EXPECT_EQ(disk(id).state, DiskState::available);
}

TEST_F(DisksTest, AttachNeedsAStoppedInstanceOnTheDisksHostAndAFreePath) {
  auto i = create_instance("box");
  ASSERT_EQ(instance(i).state, InstanceState::running);
  const std::string here = instance(i).host_name.value_or(""), there = here == "node-1" ? "node-2" : "node-1";
  auto id = made_disk("data", 10, here);
  auto other = made_disk("far", 10, there);
  auto running = write([&](store::Database& db) { return attach_disk(db, alice(), id, i, "/root/data", clock_->now()); });
  ASSERT_FALSE(running);
  EXPECT_EQ(running.error().code, ErrorCode::conflict);
  stop(i);
  auto far = write([&](store::Database& db) { return attach_disk(db, alice(), other, i, "/root/data", clock_->now()); });
  ASSERT_FALSE(far);
  EXPECT_EQ(far.error().code, ErrorCode::conflict);
  EXPECT_NE(far.error().detail.find(there), std::string::npos);
  auto bad_path = write([&](store::Database& db) { return attach_disk(db, alice(), id, i, "/etc", clock_->now()); });
  ASSERT_FALSE(bad_path);
  EXPECT_EQ(bad_path.error().code, ErrorCode::invalid_argument);
  auto gen = instance(i).generation;
  // Nested paths are refused up front (the agent could not mount one inside the other).
  std::vector<InstanceDataDisk> nested{{std::nullopt, 1, "/root/data", false}, {std::nullopt, 1, "/root/data/sub", false}};
  auto both = store_->read_now([&](store::Database& db) { return check_instance_disks(db, config_, alice(), nested); });
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().code, ErrorCode::invalid_argument);
  ASSERT_TRUE(write([&](store::Database& db) { return attach_disk(db, alice(), id, i, "/root/data", clock_->now()); }));
  EXPECT_GT(instance(i).generation, gen);  // a racing start fails its compare-and-set
  EXPECT_EQ(disk(id).state, DiskState::attached);
  ASSERT_EQ(instance(i).data_disks.size(), 1u);
  EXPECT_EQ(instance(i).data_disks[0].mount_path, "/root/data");
  auto attached_delete = write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, clock_->now()); });
  ASSERT_FALSE(attached_delete);
  EXPECT_EQ(attached_delete.error().code, ErrorCode::conflict);
  // The next start mounts it.
  ASSERT_TRUE(write([&](store::Database& db) { return instances::start_instance(db, config_, alice(), i, false, clock_->now()); }));
  instances_->kick(i);
  ASSERT_TRUE(pump([&] { return instance(i).state == InstanceState::running; }));
  const auto* ensure = agent_.last("instance.ensure");
  ASSERT_NE(ensure, nullptr);
  auto disks = ensure->desired.at("data_disks").as_array();
  ASSERT_EQ(disks.size(), 1u);
  EXPECT_EQ(disks[0].at("disk_id").as_string(), id);
  EXPECT_EQ(disks[0].at("mount_path").as_string(), "/root/data");
  // Detach only when stopped.
  auto busy = write([&](store::Database& db) { return detach_disk(db, alice(), id, clock_->now()); });
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, ErrorCode::conflict);
  stop(i);
  ASSERT_TRUE(write([&](store::Database& db) { return detach_disk(db, alice(), id, clock_->now()); }));
  EXPECT_EQ(disk(id).state, DiskState::available);
  EXPECT_TRUE(instance(i).data_disks.empty());
}

TEST_F(DisksTest, AnInstancesNewDisksAreMadeBeforeItsContainerAndOutliveIt) {
  auto existing = made_disk("kept", 10, std::string("node-2"));
  std::vector<InstanceDataDisk> want{{existing, 0, "/root/data", false},
                                     {std::nullopt, 20, "/scratch", true},
                                     {std::nullopt, 30, "/root/data2", false}};
  agent_.log.clear();
  auto i = create_instance("trainer", want);
  ASSERT_EQ(instance(i).state, InstanceState::running) << instance(i).state_reason;
  // Placed on the existing disk's host, though node-1 has more free GPUs.
  EXPECT_EQ(instance(i).host_name.value_or(""), "node-2");
  auto kinds = agent_.kinds();
  auto first_ensure = std::find(kinds.begin(), kinds.end(), "instance.ensure");
  EXPECT_EQ(std::count(kinds.begin(), first_ensure, "disk.ensure"), 2);  // both new disks, before the container
  ASSERT_EQ(instance(i).data_disks.size(), 3u);
  auto scratch = disk("d-trainer-0"), data2 = disk("d-trainer-1");
  EXPECT_EQ(scratch.state, DiskState::attached);
  EXPECT_EQ(scratch.host_name, "node-2");
  EXPECT_EQ(scratch.name, "trainer-scratch");
  EXPECT_EQ(data2.size_gib, 30);
  ASSERT_TRUE(write([&](store::Database& db) { return instances::release_instance(db, alice(), i, clock_->now()); }));
  instances_->kick(i);
  ASSERT_TRUE(pump([&] { return instance(i).state == InstanceState::released; }));
  EXPECT_EQ(disk(existing).state, DiskState::available);
  EXPECT_EQ(disk("d-trainer-1").state, DiskState::available);
  EXPECT_FALSE(disk(existing).instance_id.has_value());
  // delete_on_release: into the bin, destroyed when its period ends (a warning a day before).
  EXPECT_EQ(disk("d-trainer-0").state, DiskState::deleted);
  ASSERT_TRUE(pump([&] { return clock_->pending_timers() > 0 && instances_->idle(i); }));  // the bin's timer is set
  advance(std::chrono::hours(24 * 6 + 1));
  EXPECT_TRUE(has_event("d-trainer-0", "disk.purge_warning"));
  EXPECT_EQ(disk("d-trainer-0").state, DiskState::deleted);
  advance(std::chrono::hours(24));
  ASSERT_TRUE(pump([&] { return disk("d-trainer-0").state == DiskState::destroyed; }));
  EXPECT_FALSE(agent_.disks.contains("d-trainer-0"));
  EXPECT_TRUE(agent_.disks.contains(existing));
}

TEST_F(DisksTest, AnInstanceWhoseDiskCannotBeMadeFailsWithTheReason) {
  agent_.refuse_disks = true;
  auto i = create_instance("broken", {{std::nullopt, 20, "/root/data", false}});
  EXPECT_EQ(instance(i).state, InstanceState::error);
  EXPECT_NE(instance(i).state_reason.find("no space left"), std::string::npos) << instance(i).state_reason;
  EXPECT_EQ(disk("d-broken-0").state, DiskState::error);
  EXPECT_FALSE(agent_.running.count(i) && agent_.running[i]);
}

TEST_F(DisksTest, DeletedDisksAreRestorableUntilTheBinsPeriodEnds) {
  auto id = made_disk("data", 10);
  ASSERT_TRUE(write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, clock_->now()); }));
  EXPECT_EQ(disk(id).state, DiskState::deleted);
  // Its name is free again, but it still counts against the quota.
  auto used = store_->read_now([&](store::Database& db) { return disk_gib_used(db, user_); });
  EXPECT_EQ(*used, 10);
  ASSERT_TRUE(write([&](store::Database& db) { return restore_disk(db, alice(), "data", clock_->now()); }));
  EXPECT_EQ(disk(id).state, DiskState::available);
  EXPECT_TRUE(agent_.disks.contains(id));
  ASSERT_TRUE(write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, clock_->now()); }));
  rearm();
  advance(std::chrono::hours(24 * 7));
  ASSERT_TRUE(pump([&] { return disk(id).state == DiskState::destroyed; }));
  EXPECT_TRUE(has_event(id, "disk.purge_warning"));
  EXPECT_FALSE(agent_.disks.contains(id));
  auto gone = write([&](store::Database& db) { return restore_disk(db, alice(), id, clock_->now()); });
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::not_found);
}

TEST_F(DisksTest, WithoutARecycleBinDeletionDestroysAtOnce) {
  config_.policy.recycle_days = 0;
  auto id = made_disk("data", 10);
  ASSERT_TRUE(write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, clock_->now()); }));
  EXPECT_EQ(disk(id).state, DiskState::deleting);
  disks_->kick_disk(id);
  ASSERT_TRUE(pump([&] { return disk(id).state == DiskState::destroyed; }));
  EXPECT_FALSE(agent_.disks.contains(id));
}

TEST_F(DisksTest, SnapshotsAndDisksMadeFromThem) {
  auto id = made_disk("data", 10);
  auto snap = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, "snap-aaaaaaaaaaaa", "before", clock_->now()); });
  ASSERT_TRUE(snap) << snap.error().detail;
  disks_->kick_snapshot(snap->id);
  ASSERT_TRUE(pump([&] {
    auto s = store_->read_now([&](store::Database& db) { return load_snapshot(db, snap->id); });
    return s && *s && (*s)->state == SnapshotState::available;
  }));
  EXPECT_TRUE(agent_.snapshots.contains(snap->id));
  CreateDiskRequest small{"copy", std::nullopt, std::nullopt, 5, std::string("before")};
  auto too_small = write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-copy", small, clock_->now()); });
  ASSERT_FALSE(too_small);
  EXPECT_EQ(too_small.error().code, ErrorCode::invalid_argument);
  CreateDiskRequest from{"copy", std::nullopt, std::nullopt, std::nullopt, std::string("before")};
  auto copy = write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-copy", from, clock_->now()); });
  ASSERT_TRUE(copy) << copy.error().detail;
  EXPECT_EQ(copy->size_gib, 10);
  EXPECT_EQ(copy->host_id, disk(id).host_id);
  disks_->kick_disk("d-copy");
  ASSERT_TRUE(pump([&] { return disk("d-copy").state == DiskState::available; }));
  EXPECT_EQ(agent_.last("disk.ensure")->desired.at("from_snapshot").as_string(), snap->id);
  // Bob cannot make a disk from Alice's snapshot.
  auto theirs = write([&](store::Database& db) { return create_disk(db, config_, Actor{bob_, false}, "d-bob", from, clock_->now()); });
  ASSERT_FALSE(theirs);
  EXPECT_EQ(theirs.error().code, ErrorCode::invalid_argument);
}

// A snapshot its host set aside as torn (the host went down before the copy was durable)
// goes to error at the next pass, with the reason, and stops billing; others are untouched.
TEST_F(DisksTest, ASnapshotTheHostReportsTornIsLostAndStopsBilling) {
  auto id = made_disk("data", 10);
  std::vector<std::string> snaps;
  for (const char* name : {"kept", "torn"}) {
    const std::string snap_id = std::string("snap-") + name + "aaaaaaaa";
    auto snap = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, snap_id, name, clock_->now()); });
    ASSERT_TRUE(snap) << snap.error().detail;
    disks_->kick_snapshot(snap->id);
    ASSERT_TRUE(pump([&] {
      auto s = store_->read_now([&](store::Database& db) { return load_snapshot(db, snap->id); });
      return s && *s && (*s)->state == SnapshotState::available;
    }));
    snaps.push_back(snap->id);
  }
  auto open_meter = [&](const std::string& snap) {
    auto row = store_->read_now([&](store::Database& db) {
      return db.one("SELECT COUNT(*) FROM meters WHERE resource = ? AND open_since IS NOT NULL", {snap});
    });
    return row && *row && (*row)->int64(0) == 1;
  };
  ASSERT_TRUE(open_meter(snaps[1]));
  agent_.torn = {snaps[1], "snap-unknownaaaa"};
  bool done = false;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    co_await disks_->reconcile();
    done = true;
  }, asio::detached);
  ASSERT_TRUE(pump([&] { return done; }));
  auto state_of = [&](const std::string& snap) {
    auto s = store_->read_now([&](store::Database& db) { return load_snapshot(db, snap); });
    EXPECT_TRUE(s && *s);
    return **s;
  };
  EXPECT_EQ(state_of(snaps[0]).state, SnapshotState::available);
  EXPECT_TRUE(open_meter(snaps[0]));
  const Snapshot lost = state_of(snaps[1]);
  EXPECT_EQ(lost.state, SnapshotState::error);
  EXPECT_NE(lost.state_reason.find("went down before the snapshot reached its disk"), std::string::npos) << lost.state_reason;
  EXPECT_FALSE(open_meter(snaps[1])) << "a lost snapshot no longer bills";
  EXPECT_TRUE(has_event(snaps[1], "snapshot.error"));
  // Reported again: nothing more happens (it is no longer available).
  done = false;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    co_await disks_->reconcile();
    done = true;
  }, asio::detached);
  ASSERT_TRUE(pump([&] { return done; }));
  EXPECT_EQ(state_of(snaps[1]).generation, lost.generation);
  // Deleted into the recycle bin and restored, a lost snapshot comes back lost: never
  // `available` (its data is not there) and never billing again.
  config_.policy.recycle_days = 7;
  ASSERT_TRUE(write([&](store::Database& db) { return delete_snapshot(db, config_, alice(), snaps[1], clock_->now()); }));
  auto restored = write([&](store::Database& db) { return restore_snapshot(db, alice(), snaps[1], clock_->now()); });
  ASSERT_TRUE(restored) << restored.error().detail;
  EXPECT_EQ(restored->state, SnapshotState::error);
  EXPECT_EQ(restored->state_reason, lost.state_reason);
  EXPECT_FALSE(open_meter(snaps[1]));
}

TEST_F(DisksTest, AHalfMadeDiskIsFinishedByTheNextPass) {
  CreateDiskRequest r{"data", std::nullopt, std::nullopt, 10, std::nullopt};
  ASSERT_TRUE(write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-data", r, clock_->now()); }));
  // No kick: as if gpucloudd died right after the commit.
  bool done = false;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    co_await disks_->reconcile();
    done = true;
  }, asio::detached);
  ASSERT_TRUE(pump([&] { return done && disk("d-data").state == DiskState::available; }));
}


// ---- issue 23: the host's disk pool, storage needs money, the snapshot quota, the bin's clock

namespace pool_tests {
Status set_pool(store::Database& db, const std::string& host_name, std::int64_t capacity_gib) {
  auto id = market::host_id_by_name(db, host_name);
  if (!id || !*id) return fail(ErrorCode::internal, "no host " + host_name);
  agent::DiskPool p{"/srv", capacity_gib * market::kGiB, 0, 0, capacity_gib * market::kGiB};
  auto r = market::record_disk_pool(db, **id, p);
  if (!r) return fail(r.error());
  return ok();
}
}  // namespace pool_tests

// Provisioned sizes never pass the pool's capacity: a create, a grow, a snapshot and an
// instance's new disks that would are refused with no_capacity naming the host and what is
// short, and change nothing; the recycle bin still holds its bytes; a destroyed disk frees them.
TEST_F(DisksTest, TheHostsDiskPoolRefusesWhatWouldPassItsCapacity) {
  config_.policy.recycle_days = 0;
  ASSERT_TRUE(write([&](store::Database& db) { return pool_tests::set_pool(db, "node-1", 25); }));
  auto provisioned = [&] {
    auto p = store_->read_now([&](store::Database& db) -> Result<std::int64_t> {
      auto id = market::host_id_by_name(db, "node-1");
      if (!id || !*id) return fail(ErrorCode::internal, "no host");
      auto pool = market::load_disk_pool(db, **id);
      if (!pool || !*pool) return fail(ErrorCode::internal, "no pool");
      return (*pool)->provisioned_bytes;
    });
    EXPECT_TRUE(p);
    return p ? *p / market::kGiB : -1;
  };
  auto a = made_disk("a", 10, "node-1");
  EXPECT_EQ(provisioned(), 10);
  CreateDiskRequest big{"big", std::nullopt, std::string("node-1"), 20, std::nullopt};
  auto refused = write([&](store::Database& db) { return create_disk(db, config_, alice(), "d-big", big, clock_->now()); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::no_capacity);
  EXPECT_NE(refused.error().detail.find("node-1"), std::string::npos) << refused.error().detail;
  EXPECT_NE(refused.error().detail.find("5 GiB short"), std::string::npos) << refused.error().detail;
  EXPECT_EQ(provisioned(), 10) << "a refusal changes nothing";
  // Another host's pool is its own.
  made_disk("elsewhere", 20, "node-2");
  EXPECT_EQ(provisioned(), 10);
  auto b = made_disk("b", 15, "node-1");
  EXPECT_EQ(provisioned(), 25);
  auto grow = write([&](store::Database& db) { return resize_disk(db, config_, alice(), a, 11, clock_->now()); });
  ASSERT_FALSE(grow);
  EXPECT_EQ(grow.error().code, ErrorCode::no_capacity);
  EXPECT_EQ(disk(a).size_gib, 10);
  auto snap = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), a, "snap-poolaaaaaaaa", "s", clock_->now()); });
  ASSERT_FALSE(snap);
  EXPECT_EQ(snap.error().code, ErrorCode::no_capacity);
  // Destroyed: its bytes come back, and what was refused now fits.
  ASSERT_TRUE(write([&](store::Database& db) { return delete_disk(db, config_, alice(), b, clock_->now()); }));
  disks_->kick_disk(b);
  ASSERT_TRUE(pump([&] { return disk(b).state == DiskState::destroyed; }));
  EXPECT_EQ(provisioned(), 10);
  auto fits = write([&](store::Database& db) { return resize_disk(db, config_, alice(), a, 25, clock_->now()); });
  ASSERT_TRUE(fits) << fits.error().detail;
  EXPECT_EQ(provisioned(), 25);
}

// Creating or growing storage needs a day of its price in the balance and none in arrears.
TEST_F(DisksTest, StorageNeedsADayOfItsPriceAndIsRefusedInArrears) {
  std::string carol;
  ASSERT_TRUE(write([&](store::Database& db) -> Status {
    auto u = auth::create_user(db, "carol", std::nullopt, "x", "user", system_now());
    if (!u) return fail(u.error());
    carol = u->id;
    if (auto s = market::seed_prices(db, config_); !s) return s;  // the config's storage prices
    return billing::open_account(db, u->id, "carol", 100, system_now());  // ¥1.00
  }));
  const Actor c{carol, false};
  // 10 GiB at 0.02 fen/GiB-hour: 4.8 fen a day, rounded up to 5: affordable.
  CreateDiskRequest small{"small", std::nullopt, std::string("node-1"), 10, std::nullopt};
  ASSERT_TRUE(write([&](store::Database& db) { return create_disk(db, config_, c, "d-small", small, clock_->now()); }));
  // 300 GiB: 144 fen a day > 100.
  CreateDiskRequest big{"big", std::nullopt, std::string("node-1"), 300, std::nullopt};
  auto refused = write([&](store::Database& db) { return create_disk(db, config_, c, "d-big", big, clock_->now()); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::insufficient_balance);
  EXPECT_NE(refused.error().detail.find("a day"), std::string::npos) << refused.error().detail;
  disks_->kick_disk("d-small");
  ASSERT_TRUE(pump([&] { return disk("d-small").state == DiskState::available; }));
  auto grow = write([&](store::Database& db) { return resize_disk(db, config_, c, "d-small", 300, clock_->now()); });
  ASSERT_FALSE(grow);
  EXPECT_EQ(grow.error().code, ErrorCode::insufficient_balance);
  // In arrears nothing is stored, however small.
  ASSERT_TRUE(write([&](store::Database& db) {
    return db.run("UPDATE billing_accounts SET balance = -1 WHERE id = (SELECT billing_account FROM users WHERE id = ?)",
                  {carol});
  }));
  CreateDiskRequest tiny{"tiny", std::nullopt, std::string("node-1"), 1, std::nullopt};
  auto arrears = write([&](store::Database& db) { return create_disk(db, config_, c, "d-tiny", tiny, clock_->now()); });
  ASSERT_FALSE(arrears);
  EXPECT_EQ(arrears.error().code, ErrorCode::insufficient_balance);
  EXPECT_NE(arrears.error().detail.find("arrears"), std::string::npos) << arrears.error().detail;
  auto snap = write([&](store::Database& db) { return snapshot_disk(db, config_, c, "d-small", "snap-carolaaaaaaa", "s", clock_->now()); });
  ASSERT_FALSE(snap);
  EXPECT_EQ(snap.error().code, ErrorCode::insufficient_balance);
}

// Snapshots count against [quotas] snapshots (the recycle bin's included); a per-user
// override binds instead.
TEST_F(DisksTest, SnapshotsCountAgainstTheSnapshotsQuota) {
  config_.quotas.snapshots = 2;
  auto id = made_disk("data", 10);
  for (const char* name : {"one", "two"}) {
    auto s = write([&](store::Database& db) {
      return snapshot_disk(db, config_, alice(), id, std::string("snap-") + name + "aaaaaaaaa", name, clock_->now());
    });
    ASSERT_TRUE(s) << s.error().detail;
  }
  auto third = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, "snap-threeaaaaaaa", "three", clock_->now()); });
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::quota_exceeded);
  EXPECT_NE(third.error().detail.find("at most 2 snapshots"), std::string::npos) << third.error().detail;
  ASSERT_TRUE(write([&](store::Database& db) {
    auth::QuotaOverrides o;
    o.snapshots = 3;
    return auth::save_quota_overrides(db, user_, o);
  }));
  auto allowed = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, "snap-threeaaaaaaa", "three", clock_->now()); });
  ASSERT_TRUE(allowed) << allowed.error().detail;
}

// The recycle bin's deadline is fixed at the first deletion: delete, restore, delete again
// keeps the first deletion's time, so the bin cannot be kept full for free.
TEST_F(DisksTest, TheBinsDeadlineIsFixedAtTheFirstDeletion) {
  auto id = made_disk("data", 10);
  const SysTime first = clock_->now();
  ASSERT_TRUE(write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, first); }));
  ASSERT_TRUE(write([&](store::Database& db) { return restore_disk(db, alice(), id, first + std::chrono::hours(24 * 5)); }));
  EXPECT_FALSE(disk(id).deleted_at);
  auto again = write([&](store::Database& db) { return delete_disk(db, config_, alice(), id, first + std::chrono::hours(24 * 6)); });
  ASSERT_TRUE(again) << again.error().detail;
  ASSERT_TRUE(disk(id).deleted_at);
  EXPECT_EQ(to_unix_micros(*disk(id).deleted_at), to_unix_micros(first)) << "the bin's clock restarted";
  // Snapshots likewise.
  auto snap = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, "snap-binaaaaaaaaa", "s", first); });
  // The disk is deleted: restore it first to take a snapshot.
  if (!snap) {
    ASSERT_TRUE(write([&](store::Database& db) { return restore_disk(db, alice(), id, first + std::chrono::hours(24 * 6)); }));
    snap = write([&](store::Database& db) { return snapshot_disk(db, config_, alice(), id, "snap-binaaaaaaaaa", "s", first); });
  }
  ASSERT_TRUE(snap) << snap.error().detail;
  disks_->kick_snapshot(snap->id);
  auto snapshot = [&] {
    auto s = store_->read_now([&](store::Database& db) { return load_snapshot(db, snap->id); });
    EXPECT_TRUE(s && *s);
    return **s;
  };
  ASSERT_TRUE(pump([&] { return snapshot().state == SnapshotState::available; }));
  const SysTime t1 = first + std::chrono::hours(1);
  ASSERT_TRUE(write([&](store::Database& db) { return delete_snapshot(db, config_, alice(), snap->id, t1); }));
  ASSERT_TRUE(write([&](store::Database& db) { return restore_snapshot(db, alice(), snap->id, t1 + std::chrono::hours(48)); }));
  ASSERT_TRUE(write([&](store::Database& db) { return delete_snapshot(db, config_, alice(), snap->id, t1 + std::chrono::hours(72)); }));
  ASSERT_TRUE(snapshot().deleted_at);
  EXPECT_EQ(to_unix_micros(*snapshot().deleted_at), to_unix_micros(t1));
}

// Where the host's engine enforces system disk sizes, an instance's system disk takes its size
// from the host's pool from its create until its release; an instance whose system disk the
// pool cannot hold is refused 409 and leaves nothing behind. Where the engine cannot enforce
// it (overlay2), the system disk is no provision.
TEST_F(DisksTest, AnEnforcedSystemDiskTakesItsSizeFromThePoolUntilRelease) {
  ASSERT_TRUE(write([&](store::Database& db) -> Status {
    for (const char* h : {"node-1", "node-2"})
      if (auto s = pool_tests::set_pool(db, h, 50); !s) return s;
    return db.run("UPDATE hosts SET system_disk_enforced = 1");
  }));
  auto provisioned = [&] {
    auto p = store_->read_now([&](store::Database& db) {
      return db.one("SELECT COALESCE(SUM(disk_pool_provisioned_bytes), 0) FROM hosts");
    });
    EXPECT_TRUE(p && *p);
    return (p && *p) ? (**p).int64(0) / market::kGiB : -1;
  };
  auto request = [&](const std::string& name, std::int64_t gib) {
    policy::CreateInstanceRequest r;
    r.name = name;
    r.zone = "zone-a";
    r.image = instances::kBaseImageName;
    r.gpu_model = "RTX 4090";
    r.gpu_count = 1;
    r.cpu = 8;
    r.memory_gib = 32;
    r.system_disk_gib = gib;
    return write([&](store::Database& db) { return policy::create_instance(db, config_, alice(), "i-" + name, r, clock_->now()); });
  };
  auto first = request("first", 40);
  ASSERT_TRUE(first) << first.error().detail;
  EXPECT_EQ(provisioned(), 40);
  auto big = request("big", 60);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ErrorCode::no_capacity);
  EXPECT_NE(big.error().detail.find("system disk"), std::string::npos) << big.error().detail;
  EXPECT_EQ(provisioned(), 40) << "a refused create takes nothing";
  ASSERT_TRUE(write([&](store::Database& db) { return instances::release_instance(db, alice(), "i-first", clock_->now()); }));
  instances_->kick("i-first");
  ASSERT_TRUE(pump([&] { return instance("i-first").state == InstanceState::released; }));
  EXPECT_EQ(provisioned(), 0);
  // Not enforced: not a provision.
  ASSERT_TRUE(write([&](store::Database& db) { return db.run("UPDATE hosts SET system_disk_enforced = 0"); }));
  auto loose = request("loose", 60);
  ASSERT_TRUE(loose) << loose.error().detail;
  EXPECT_EQ(provisioned(), 0);
}

}  // namespace
}  // namespace gpucloud::disks
