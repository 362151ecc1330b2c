// Custom images and system disk sizes: the pure parts (names, own size, the recycle bin's
// times, StorageOpt, what a storage driver enforces) and the store's rules (names unique per
// owner among live images, never a public image's, delete/restore/purge as compare-and-set).
#include <unistd.h>

#include "billing/ledger.h"
#include "core/unique_temp_dir.h"

#include <filesystem>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/image_saver.h"
#include "agent/runtime/docker_engine_driver.h"
#include "auth/accounts.h"
#include "core/ids.h"
#include "instances/image_actions.h"
#include "instances/images.h"
#include "instances/system_disk.h"
#include "store/store.h"

namespace gpucloud::instances {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

TEST(CustomImages, OwnSizeIsTheBytesAddedOverTheBaseNeverNegative) {
  EXPECT_EQ(own_size_bytes(300, 200), 100);
  EXPECT_EQ(own_size_bytes(200, 200), 0);
  EXPECT_EQ(own_size_bytes(150, 200), 0) << "a flattened disk shares nothing; never a negative bill";
  EXPECT_EQ(own_size_bytes(150, 0), 150) << "unknown base: all of it";
  EXPECT_EQ(own_size_bytes(150, -5), 150);
}

TEST(CustomImages, PurgeIsRecycleDaysAfterTheDeleteAndItsWarningADayBefore) {
  const SysTime deleted = from_unix_micros(1'000'000'000'000);
  EXPECT_EQ(purge_due(deleted, 7) - deleted, std::chrono::hours(24 * 7));
  EXPECT_EQ(purge_warning_due(deleted, 7) - deleted, std::chrono::hours(24 * 6));
  EXPECT_EQ(purge_warning_due(deleted, 1), deleted) << "a one-day bin warns at once";
  EXPECT_EQ(purge_due(deleted, 0), deleted);
}

TEST(CustomImages, OverrunIsUsePastTheSize) {
  EXPECT_FALSE(system_disk_overrun(std::nullopt, 10));
  EXPECT_FALSE(system_disk_overrun(10 * kGiBBytes, 10));
  EXPECT_TRUE(system_disk_overrun(10 * kGiBBytes + 1, 10));
  EXPECT_FALSE(system_disk_overrun(5, 0)) << "no size: no overrun";
}

TEST(SystemDisk, BtrfsAndZfsEnforceInTheEngineOverlay2WithALayerFilesystem) {
  EXPECT_EQ(agent::system_disk_limit_for("btrfs").how(), "engine");
  EXPECT_EQ(agent::system_disk_limit_for("zfs", "").how(), "engine");
  auto overlay = agent::system_disk_limit_for("overlay2", "");
  EXPECT_TRUE(overlay.enforced);
  EXPECT_TRUE(overlay.layer_filesystem);
  EXPECT_EQ(overlay.how(), "layer_filesystem");
  auto off = agent::system_disk_limit_for("overlay2", "system disk filesystems need root (mount)");
  EXPECT_FALSE(off.enforced);
  EXPECT_EQ(off.how(), "none");
  EXPECT_NE(off.reason.find("overlay2"), std::string::npos) << off.reason;
  EXPECT_NE(off.reason.find("need root"), std::string::npos) << off.reason;
  EXPECT_FALSE(agent::system_disk_limit_for("vfs", "").enforced) << "only overlay2's layout is known";
  EXPECT_FALSE(agent::system_disk_limit_for("", "").enforced);
}

TEST(SystemDisk, StorageOptSizeIsRenderedInGibOnlyWhenAsked) {
  EXPECT_EQ(agent::storage_size_opt(30), "30G");
  boost::asio::io_context io;
  agent::DockerEngineDriver::Options options;
  options.init_path = "/x/init";
  agent::DockerEngineDriver driver(io.get_executor(), options);
  agent::ContainerSpec spec;
  spec.name = "gpucloud-x-i1";
  spec.image = "img";
  spec.cpus = 1;
  auto plain = driver.plan_create(spec);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->body.at("HostConfig").as_object().contains("StorageOpt"));
  spec.system_disk_gib = 1;
  auto limited = driver.plan_create(spec);
  ASSERT_TRUE(limited);
  EXPECT_EQ(json::serialize(limited->body.at("HostConfig").at("StorageOpt")), R"({"size":"1G"})");
  spec.network = "none";
  auto isolated = driver.plan_create(spec);
  ASSERT_TRUE(isolated);
  EXPECT_EQ(isolated->body.at("HostConfig").at("NetworkMode").as_string(), "none");
  EXPECT_FALSE(isolated->body.as_object().contains("NetworkingConfig"));
}

TEST(ImageSave, TheRequestNamesAGpucloudImageReference) {
  auto r = agent::save_request_from_json(json::object{{"instance_id", "i-1"}, {"image_id", "img-ABC"}}, "Inst1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ref, "gpucloud-image/inst1:img-abc");
  EXPECT_FALSE(agent::save_request_from_json(json::object{{"instance_id", "i-1"}}, "x"));
  EXPECT_FALSE(agent::save_request_from_json(
      json::object{{"instance_id", "i-1"}, {"image_id", "img-1"}, {"ref", "debian:12"}}, "x"))
      << "never another repository";
  EXPECT_FALSE(agent::save_request_from_json(
      json::object{{"instance_id", "i-1"}, {"image_id", "img-1"}, {"ref", "gpucloud-image/X:y"}}, "x"));
}

TEST(ImageSave, TheCleaningScriptRemovesHostKeysKeysAndThePassword) {
  const std::string& s = agent::sanitize_script();
  for (const char* part : {"/etc/ssh/ssh_host_*", "gpucloud managed keys", "usermod -p '*' root",
                           "/etc/profile.d/00-gpucloud-env.sh", "/etc/ssh/sshd_config.d/gpucloud.conf"})
    EXPECT_NE(s.find(part), std::string::npos) << part;
}

// ---- the store's rules ------------------------------------------------------------------

class CustomImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-images");
    auto s = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(s);
    store_ = std::move(*s);
    ASSERT_TRUE(store_->write_now([&](store::Database& db) -> Status {
      if (auto s = seed_public_images(db, config_, system_now()); !s) return s;
      for (const char* name : {"alice", "bob"}) {
        auto u = auth::create_user(db, name, std::nullopt, "x", "user", system_now());
        if (!u) return fail(u.error());
        users_.push_back(u->id);
        if (auto s = billing::open_account(db, u->id, name, 1000000, system_now()); !s) return s;
      }
      return ok();
    }));
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Status add(const std::string& owner, const std::string& name, const std::string& id, bool available = true) {
    return store_->write_now([&](store::Database& db) -> Status {
      if (auto s = check_custom_image_name(db, owner, name); !s) return s;
      Image i;
      i.id = id;
      i.name = name;
      i.owner = owner;
      i.created_at = system_now();
      if (auto s = insert_custom_image(db, i); !s) return s;
      if (!available) return ok();
      SaveResult r{true, "gpucloud-image/x:" + id, "", 300, 100};
      return finish_save_image(db, id, r, system_now());
    });
  }
  fs::path dir_;
  config::Config config_;
  std::unique_ptr<store::Store> store_;
  std::vector<std::string> users_;
};

TEST_F(CustomImageStoreTest, NamesAreUniquePerOwnerAndNeverAPublicImages) {
  ASSERT_TRUE(add(users_[0], "my-env", "img-a1"));
  auto again = add(users_[0], "my-env", "img-a2");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::conflict);
  EXPECT_TRUE(add(users_[1], "my-env", "img-b1")) << "another owner may use the name";
  auto taken = add(users_[0], kBaseImageName, "img-a3");
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, ErrorCode::conflict);
  EXPECT_NE(taken.error().detail.find("public"), std::string::npos);
  int n = 0;
  for (const std::string& bad : {std::string("My-Env"), std::string("1abc"), std::string(), new_id("img")}) {
    auto refused = add(users_[0], bad, "img-x" + std::to_string(n++));
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument) << bad;
  }
}

TEST_F(CustomImageStoreTest, OthersCannotSeeDeleteHidesRestoreBringsBackPurgeEndsIt) {
  ASSERT_TRUE(add(users_[0], "my-env", "img-a1"));
  auto seen = store_->read_now([&](store::Database& db) { return find_image(db, users_[1], "img-a1"); });
  ASSERT_FALSE(seen);
  EXPECT_EQ(seen.error().code, ErrorCode::not_found);
  auto own = store_->read_now([&](store::Database& db) { return find_image(db, users_[0], "my-env"); });
  ASSERT_TRUE(own);
  EXPECT_EQ(own->own_size_bytes, 100);
  EXPECT_EQ(own->state, "available");

  const SysTime now = system_now();
  auto deleted = store_->write_now([&](store::Database& db) {
    return delete_image(db, config_, Actor{users_[0]}, "my-env", now);
  });
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->state, "deleted");
  auto hidden = store_->read_now([&](store::Database& db) { return find_image(db, users_[0], "img-a1"); });
  EXPECT_FALSE(hidden) << "not usable for new instances";
  auto bin = store_->read_now([&](store::Database& db) { return list_images(db, users_[0], true); });
  ASSERT_TRUE(bin);
  ASSERT_EQ(bin->size(), 1u);
  EXPECT_TRUE(add(users_[0], "my-env", "img-a2")) << "a deleted image frees its name";
  auto clash = store_->write_now([&](store::Database& db) { return restore_image(db, config_, Actor{users_[0]}, "img-a1", now); });
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().code, ErrorCode::conflict);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) {
    return delete_image(db, config_, Actor{users_[0]}, "img-a2", now);
  }));
  auto restored = store_->write_now([&](store::Database& db) { return restore_image(db, config_, Actor{users_[0]}, "img-a1", now); });
  ASSERT_TRUE(restored) << restored.error().detail;
  EXPECT_EQ(restored->state, "available");

  // A timer armed for the first deletion does nothing to the restored image.
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return purge_image(db, "img-a1", *deleted->deleted_at, now); }));
  EXPECT_TRUE(store_->read_now([&](store::Database& db) { return find_image(db, users_[0], "img-a1"); }));
  // img-a2's own timer purges it: gone from the API, its engine copy due for removal.
  auto a2 = store_->read_now([&](store::Database& db) { return find_image_by_id(db, "img-a2"); });
  ASSERT_TRUE(a2 && a2->deleted_at);
  ASSERT_TRUE(store_->write_now([&](store::Database& db) { return purge_image(db, "img-a2", *a2->deleted_at, now); }));
  auto gone = store_->read_now([&](store::Database& db) { return find_image_for_view(db, users_[0], "img-a2"); });
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::not_found);
  auto due = store_->read_now([&](store::Database& db) { return engine_images_to_remove(db); });
  ASSERT_TRUE(due);
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ(due->front().id, "img-a2");
  auto count = store_->read_now([&](store::Database& db) { return custom_image_count(db, users_[0]); });
  EXPECT_EQ(*count, 1) << "purged images leave the quota";
}

TEST_F(CustomImageStoreTest, APublicImageCannotBeDeletedAndAnotherUsersIsNotFound) {
  ASSERT_TRUE(add(users_[0], "my-env", "img-a1"));
  auto pub = store_->write_now([&](store::Database& db) {
    return delete_image(db, config_, Actor{users_[0]}, kBaseImageName, system_now());
  });
  ASSERT_FALSE(pub);
  EXPECT_EQ(pub.error().code, ErrorCode::forbidden);
  auto theirs = store_->write_now([&](store::Database& db) {
    return delete_image(db, config_, Actor{users_[1]}, "img-a1", system_now());
  });
  ASSERT_FALSE(theirs);
  EXPECT_EQ(theirs.error().code, ErrorCode::not_found);
}

TEST_F(CustomImageStoreTest, WithNoRecycleBinADeleteIsFinal) {
  config_.policy.recycle_days = 0;
  ASSERT_TRUE(add(users_[0], "my-env", "img-a1"));
  ASSERT_TRUE(store_->write_now([&](store::Database& db) {
    return delete_image(db, config_, Actor{users_[0]}, "my-env", system_now());
  }));
  auto restored = store_->write_now([&](store::Database& db) {
    return restore_image(db, config_, Actor{users_[0]}, "img-a1", system_now());
  });
  ASSERT_FALSE(restored);
  EXPECT_EQ(restored.error().code, ErrorCode::not_found);
}

}  // namespace
}  // namespace gpucloud::instances
