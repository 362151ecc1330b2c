// Custom images end to end: a file on the system disk survives into an instance made from
// the image, which gets its own host key; the image holds no host key, no authorized keys,
// no password hash; another user can neither see nor use it; delete hides it, restore
// brings it back; on the test clock the recycle bin warns a day before and then purges it,
// and its engine copy goes with its last instance.
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "support/capabilities.h"
#include "support/test_daemon.h"
#include "support/wait.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;

std::string images_config() {
  static int base = 37000 + static_cast<int>(std::hash<std::string>{}(random_suffix()) % 20) * 100;
  return R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 10
[policy]
recycle_days = 2
)";
}

// A daemon per test: one test moves the test clock past the purge of a hidden image.
class CustomImageTest : public ::testing::Test {
 protected:
  CustomImageTest() : daemon_(DaemonOptions{images_config(), true}) {}
  void SetUp() override {
    GPUCLOUD_NEED_ENGINE();
    daemon_.start();
    alice_ = daemon_.register_and_login("alice");
    bob_ = daemon_.register_and_login("bob");
  }
  void TearDown() override {
    for (const auto& ref : engine_images_) docker_api("DELETE", "/images/" + ref + "?force=1");
  }
  std::string container_of(const json::value& instance) const {
    return "gpucloud-" + daemon_.installation_id() + "-" + std::string(instance.at("id").as_string());
  }
  std::string in_container(const json::value& instance, const std::string& command) const {
    return shell("docker exec " + container_of(instance) + " sh -c '" + command + "' 2>&1");
  }
  json::value image(const std::string& id, const std::string& token) const { return daemon_.get("/api/v1/images/" + id, token).json(); }
  bool has_event(const std::string& type, const std::string& resource) const {
    auto r = daemon_.get("/api/v1/events?resource=" + resource, alice_);
    return r.status == 200 && r.body.find("\"" + type + "\"") != std::string::npos;
  }
  bool has_unknown_container_event() const {
    auto r = daemon_.get("/api/v1/events?limit=1000", daemon_.admin_token());
    return r.body.find("\"host.unknown_container\"") != std::string::npos;
  }
  // What saves of this installation left on the engine: containers and images (tagged or
  // not) carrying the intermediates' label, and images of `image_id` other than `final_ref`.
  std::string save_leftovers(const std::string& image_id, const std::string& final_ref) const {
    const std::string install = daemon_.installation_id();
    auto filter = [](const std::string& label) {
      std::string f = R"({"label":[")" + label + R"("]})", out;
      for (char c : f) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') out += c;
        else {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
          out += hex;
        }
      }
      return out;
    };
    std::string found;
    auto containers = json::parse(docker_api("GET", "/containers/json?all=1&filters=" + filter("gpucloud.image-save=" + install)));
    for (const auto& c : containers.as_array()) found += "container " + std::string(c.at("Id").as_string()) + "\n";
    for (const auto& label : {"gpucloud.image-save=" + install, "gpucloud.image=" + image_id}) {
      auto images = json::parse(docker_api("GET", "/images/json?filters=" + filter(label)));
      for (const auto& i : images.as_array()) {
        bool is_final = false;
        if (const auto* tags = i.as_object().if_contains("RepoTags"); tags && tags->is_array())
          for (const auto& t : tags->as_array()) is_final = is_final || t.as_string() == final_ref;
        if (!is_final) found += "image " + std::string(i.at("Id").as_string()) + " (" + label + ")\n";
      }
    }
    return found;
  }
  void advance(std::int64_t seconds) const {
    auto r = daemon_.post("/api/v1/admin/clock", {{"advance_seconds", seconds}}, daemon_.admin_token());
    ASSERT_EQ(r.status, 200) << r.body;
  }

  TestDaemon daemon_;
  std::string alice_, bob_;
  std::vector<std::string> engine_images_;
};

TEST_F(CustomImageTest, DOCKER_ROOT_SaveUseHideRestoreAndPurgeACustomImage) {
  GPUCLOUD_NEED_ENGINE();  // in the test body: a skip in a helper would not stop the test
  // An instance with a key and a password, so the init writes both onto its system disk.
  const std::string key_dir = daemon_.dir() + "/key";
  shell("mkdir -p " + key_dir + " && ssh-keygen -q -t ed25519 -N '' -f " + key_dir + "/id");
  const std::string public_key = shell("cat " + key_dir + "/id.pub");
  ASSERT_EQ(daemon_.post("/api/v1/ssh-keys", {{"name", "k1"}, {"public_key", public_key}}, alice_).status, 201);
  auto created = daemon_.post("/api/v1/instances",
                              {{"name", "src"}, {"gpu_count", 0}, {"ssh_keys", json::array{"k1"}}, {"password", "pw-123456789"}},
                              alice_);
  ASSERT_EQ(created.status, 202) << created.body;
  auto src = daemon_.wait_for_state("src", "running", alice_);
  ASSERT_EQ(src.at("state").as_string(), "running") << src;
  const std::string src_key(src.at("ssh").at("host_key").as_string());
  ASSERT_TRUE(wait_until([&] { return in_container(src, "grep -c gpucloud /root/.ssh/authorized_keys") == "2\n"; },
                         std::chrono::seconds(10), "the init's managed keys"));
  in_container(src, "mkdir -p /opt/tool && echo installed > /opt/tool/marker");
  // A host key on the system disk itself, as an older init (or the user) left one: the save
  // must delete it, or the check below could not fail (the init's key lives in the config
  // directory, never on the system disk).
  in_container(src, "cp /.gpucloud/config/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key && "
                    "cp /.gpucloud/config/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_ed25519_key.pub");
  ASSERT_EQ(in_container(src, "ls /etc/ssh/ | grep -c ssh_host_"), "2\n") << "the planted host key";
  // The positive control for the layer grep below: a marker only the system disk holds.
  const std::string planted = "gpucloud-planted-" + random_suffix() + "-marker";
  in_container(src, "echo " + planted + " > /opt/tool/planted");

  // Saved while running.
  auto saved = daemon_.post("/api/v1/instances/src/images", {{"name", "my-env"}, {"description", "with a tool"}}, alice_);
  ASSERT_EQ(saved.status, 202) << saved.body;
  const std::string id(saved.json().at("id").as_string());
  EXPECT_EQ(saved.json().at("state").as_string(), "creating");
  EXPECT_EQ(saved.json().at("visibility").as_string(), "private");
  ASSERT_TRUE(wait_until([&] { return image(id, alice_).at("state").as_string() != "creating"; }, std::chrono::minutes(3),
                         "the image to be saved", std::chrono::milliseconds(250)));
  auto available = image(id, alice_);
  ASSERT_EQ(available.at("state").as_string(), "available") << available;
  const std::string ref(available.at("engine_image").as_string());
  engine_images_.push_back(ref);
  EXPECT_GT(available.at("own_size_bytes").as_int64(), 0) << available;
  EXPECT_LT(available.at("own_size_bytes").as_int64(), available.at("size_bytes").as_int64()) << available;
  EXPECT_TRUE(has_event("image.created", id));
  EXPECT_TRUE(has_event("image.available", id));
  EXPECT_EQ(in_container(src, "cat /opt/tool/marker"), "installed\n") << "the source keeps running as it was";
  EXPECT_EQ(in_container(src, "grep -c gpucloud /root/.ssh/authorized_keys"), "2\n") << "and keeps its keys";

  // What the image holds: the file, and nothing of the source's per-instance setup.
  auto inside = [&](const std::string& command) {
    return shell("docker run --rm --network none --entrypoint sh " + ref + " -c '" + command + "' 2>&1");
  };
  EXPECT_EQ(inside("cat /opt/tool/marker"), "installed\n");
  EXPECT_EQ(inside("ls /etc/ssh/ | grep -c ssh_host_ || true"), "0\n");
  EXPECT_EQ(inside("cat /root/.ssh/authorized_keys 2>/dev/null | grep -c ssh- || true"), "0\n");
  EXPECT_EQ(inside("grep ^root: /etc/shadow | cut -d: -f2"), "*\n");
  EXPECT_EQ(inside("grep ^root: /etc/shadow- | cut -d: -f2"), "*\n") << "nor in the shadow file's backup";
  EXPECT_EQ(inside("ls /etc/profile.d/00-gpucloud-env.sh 2>/dev/null | wc -l"), "0\n");
  // Nor anywhere in what the engine stores and exports of it, in any layer: the source's host
  // private key, its root password hash and the user's public key are not in `docker save`.
  const std::string needles = daemon_.dir() + "/secrets";
  shell("docker exec " + container_of(src) + " sh -c 'sed -n 2p /.gpucloud/config/ssh_host_ed25519_key; " +
        "grep ^root: /etc/shadow | cut -d: -f2' > " + needles + " && cut -d' ' -f2 " + key_dir + "/id.pub >> " + needles);
  ASSERT_EQ(shell("wc -l < " + needles), "3\n") << shell("cat " + needles);
  ASSERT_EQ(shell("grep -c '^\\$' " + needles + " || true"), "1\n") << "the second needle is a password hash";
  // The base's layers (shared with the base, stored once) plus one layer of what changed.
  const std::string base_image = shell("docker inspect --format '{{.Image}}' " + container_of(src) + " | tr -d '\\n'");
  const int base_layers = std::atoi(shell("docker image inspect --format '{{len .RootFS.Layers}}' " + base_image).c_str());
  ASSERT_GT(base_layers, 0) << base_image;
  EXPECT_EQ(std::atoi(shell("docker image inspect --format '{{len .RootFS.Layers}}' " + ref).c_str()), base_layers + 1)
      << "the base's layers plus one";
  const std::string base_json = shell("docker image inspect --format '{{json .RootFS.Layers}}' " + base_image);
  const std::string ref_json = shell("docker image inspect --format '{{json .RootFS.Layers}}' " + ref);
  EXPECT_EQ(ref_json.rfind(base_json.substr(0, base_json.find(']')) + ",", 0), 0u) << ref_json << " on " << base_json
                                                                                  << ": the base's layers first, unchanged";
  // What it adds to the engine is what changed (a few files), not a copy of the base.
  EXPECT_LT(available.at("own_size_bytes").as_int64(), 8 << 20) << available;
  EXPECT_EQ(available.at("size_bytes").as_int64() - available.at("own_size_bytes").as_int64(),
            std::atoll(shell("docker image inspect --format '{{.Size}}' " + base_image).c_str()))
      << available << ": its size is the base's plus its own layer";
  EXPECT_EQ(shell("docker inspect --format '{{.State.Status}}' " + container_of(src)), "running\n")
      << "the source runs on (paused only while its files were read)";
  // No instance's labels on it (a container made from it would pass for that instance's).
  const std::string labels = shell("docker image inspect --format '{{json .Config.Labels}}' " + ref);
  EXPECT_EQ(labels.find("gpucloud.installation"), std::string::npos) << labels;
  EXPECT_EQ(labels.find("gpucloud.instance"), std::string::npos) << labels;
  EXPECT_EQ(labels.find("gpucloud.image-save"), std::string::npos) << labels;
  EXPECT_FALSE(has_unknown_container_event()) << "the save's cleaner passed for an unknown container";
  // The grep can find what a layer holds (layers are uncompressed tars in `docker save`): the
  // planted marker is found, so "0" below is not a compressed layer passing vacuously.
  EXPECT_NE(shell("docker save " + ref + " | grep -a -c -F " + planted + " || true"), "0\n")
      << "the positive control: the planted marker must be found in the saved layers";
  EXPECT_EQ(shell("docker save " + ref + " | grep -a -c -F -f " + needles + " || true"), "0\n")
      << "a secret of the source is in the saved image's layers: "
      << shell("docker save " + ref + " | grep -a -o -F -f " + needles + " | sort | uniq -c");

  // Only its owner sees or uses it.
  EXPECT_EQ(daemon_.get("/api/v1/images/" + id, bob_).status, 404);
  EXPECT_EQ(daemon_.get("/api/v1/images", bob_).body.find(id), std::string::npos);
  EXPECT_NE(daemon_.get("/api/v1/images", alice_).body.find(id), std::string::npos);
  auto stolen = daemon_.post("/api/v1/instances", {{"name", "thief"}, {"gpu_count", 0}, {"image", id}}, bob_);
  EXPECT_EQ(stolen.status, 400) << stolen.body;
  EXPECT_EQ(daemon_.post("/api/v1/instances/src/images", {{"name", "bobs"}}, bob_).status, 404) << "not bob's instance";
  // Names: unique per owner, never a public image's.
  EXPECT_EQ(daemon_.post("/api/v1/instances/src/images", {{"name", "my-env"}}, alice_).status, 409);
  EXPECT_EQ(daemon_.post("/api/v1/instances/src/images", {{"name", "debian-12-base"}}, alice_).status, 409);
  EXPECT_EQ(daemon_.post("/api/v1/instances/src/images", {{"name", "Bad_Name"}}, alice_).status, 400);

  // A new instance from it (by name): the file is there; its host key is its own.
  auto copy_created = daemon_.post("/api/v1/instances", {{"name", "copy"}, {"gpu_count", 0}, {"image", "my-env"}}, alice_);
  ASSERT_EQ(copy_created.status, 202) << copy_created.body;
  auto copy = daemon_.wait_for_state("copy", "running", alice_);
  ASSERT_EQ(copy.at("state").as_string(), "running") << copy;
  EXPECT_EQ(copy.at("image").as_string(), id);
  EXPECT_EQ(in_container(copy, "cat /opt/tool/marker"), "installed\n");
  ASSERT_TRUE(copy.at("ssh").at("host_key").is_string()) << copy;
  EXPECT_NE(copy.at("ssh").at("host_key").as_string(), src_key);

  // Delete hides it at once (and stops its billing); restore brings it back.
  auto deleted = daemon_.request("DELETE", "/api/v1/images/my-env", "", alice_);
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(deleted.json().at("state").as_string(), "deleted");
  EXPECT_TRUE(deleted.json().at("deleted_at").is_string());
  EXPECT_EQ(daemon_.get("/api/v1/images", alice_).body.find(id), std::string::npos);
  EXPECT_NE(daemon_.get("/api/v1/images?state=deleted", alice_).body.find(id), std::string::npos);
  EXPECT_EQ(daemon_.post("/api/v1/instances", {{"name", "late"}, {"gpu_count", 0}, {"image", id}}, alice_).status, 400);
  EXPECT_EQ(in_container(copy, "cat /opt/tool/marker"), "installed\n") << "instances made from it keep working";
  auto restored = daemon_.post("/api/v1/images/" + id + "/restore", json::object{}, alice_);
  ASSERT_EQ(restored.status, 200) << restored.body;
  EXPECT_EQ(restored.json().at("state").as_string(), "available");
  EXPECT_TRUE(has_event("image.deleted", id));
  EXPECT_TRUE(has_event("image.restored", id));
  EXPECT_EQ(daemon_.request("DELETE", "/api/v1/images/debian-12-base", "", alice_).status, 403);

  // The recycle bin (2 days): a warning after one day, then the purge.
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/images/" + id, "", alice_).status, 200);
  advance(24 * 3600 + 1);
  EXPECT_TRUE(has_event("image.purge_warning", id));
  EXPECT_FALSE(has_event("image.purged", id));
  EXPECT_EQ(daemon_.get("/api/v1/images/" + id, alice_).status, 200) << "still restorable";
  advance(24 * 3600);
  EXPECT_TRUE(has_event("image.purged", id));
  EXPECT_EQ(daemon_.get("/api/v1/images/" + id, alice_).status, 404);
  EXPECT_EQ(daemon_.post("/api/v1/images/" + id + "/restore", json::object{}, alice_).status, 404);
  // The engine copy stays while `copy` runs from it, and goes with it.
  EXPECT_EQ(docker_api("GET", "/images/" + ref + "/json").find("No such image"), std::string::npos);
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/copy", "", alice_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("copy", "released", alice_).at("state").as_string(), "released");
  EXPECT_TRUE(wait_until([&] { return docker_api("GET", "/images/" + ref + "/json").find("No such image") != std::string::npos; },
                         std::chrono::seconds(75), "the engine copy to be removed", std::chrono::milliseconds(500)));
}

// A save killed (-9) at any step leaves nothing behind once the daemon is back: the save
// resumes from the start, the source container (paused while its files are read) runs again,
// no intermediate image or container exists, and the image holds no secret. The daemon's log
// proves the armed point fired. (The fallback path's points, agent.image_save.after_raw_commit
// and after_clean, fire only on engines whose files the agent does not read: other storage
// drivers.)
class CustomImageCrashTest : public CustomImageTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CustomImageCrashTest, DOCKER_ROOT_KillNineDuringASaveLeavesNoIntermediateImageOrContainer) {
  GPUCLOUD_NEED_ENGINE();
  const std::string point = GetParam();
  const std::string key_dir = daemon_.dir() + "/key";
  shell("mkdir -p " + key_dir + " && ssh-keygen -q -t ed25519 -N '' -f " + key_dir + "/id");
  ASSERT_EQ(daemon_.post("/api/v1/ssh-keys", {{"name", "k1"}, {"public_key", shell("cat " + key_dir + "/id.pub")}}, alice_).status, 201);
  ASSERT_EQ(daemon_.post("/api/v1/instances",
                         {{"name", "src"}, {"gpu_count", 0}, {"ssh_keys", json::array{"k1"}}, {"password", "pw-123456789"}},
                         alice_).status,
            202);
  auto src = daemon_.wait_for_state("src", "running", alice_);
  ASSERT_EQ(src.at("state").as_string(), "running") << src;

  daemon_.stop();
  daemon_.start(point);
  std::string id;
  try {
    auto saved = daemon_.post("/api/v1/instances/src/images", {{"name", "crashed"}}, alice_);
    if (saved.status == 202) id = std::string(saved.json().at("id").as_string());
  } catch (...) {
    // the connection may die with the daemon
  }
  ASSERT_TRUE(daemon_.killed_at(point));
  daemon_.start();
  if (id.empty()) {
    auto listed = daemon_.get("/api/v1/images", alice_).json();
    for (const auto& i : listed.at("items").as_array())
      if (i.at("name").as_string() == "crashed") id = std::string(i.at("id").as_string());
  }
  ASSERT_FALSE(id.empty()) << "the save was recorded before the crash";
  ASSERT_TRUE(wait_until([&] { return image(id, alice_).at("state").as_string() != "creating"; }, std::chrono::minutes(3),
                         "the resumed save to end", std::chrono::milliseconds(250)));
  auto done = image(id, alice_);
  ASSERT_EQ(done.at("state").as_string(), "available") << done;
  const std::string ref(done.at("engine_image").as_string());
  engine_images_.push_back(ref);
  EXPECT_EQ(save_leftovers(id, ref), "") << "intermediates of the killed save are still on the engine";
  EXPECT_TRUE(wait_until([&] { return shell("docker inspect --format '{{.State.Status}}' " + container_of(src)) == "running\n"; },
                         std::chrono::seconds(30), "the source to run unpaused"))
      << shell("docker inspect --format '{{.State.Status}}' " + container_of(src));
  EXPECT_EQ(shell("docker run --rm --network none --entrypoint sh " + ref + " -c 'grep ^root: /etc/shadow | cut -d: -f2; " +
                  "cat /root/.ssh/authorized_keys 2>/dev/null | grep -c gpucloud || true' 2>&1"),
            "*\n0\n")
      << "the resumed save's image is clean";
  const std::string labels = shell("docker image inspect --format '{{json .Config.Labels}}' " + ref);
  EXPECT_EQ(labels.find("gpucloud.installation"), std::string::npos) << labels;
  EXPECT_EQ(labels.find("gpucloud.instance"), std::string::npos) << labels;
  EXPECT_FALSE(has_unknown_container_event()) << "the save's cleaner passed for an unknown container";
}

INSTANTIATE_TEST_SUITE_P(FaultPoints, CustomImageCrashTest,
                         ::testing::Values("agent.image_save.while_paused", "agent.image_save.after_load"),
                         [](const auto& info) {
                           return std::string(info.param).find("paused") != std::string::npos ? std::string("while_paused")
                                                                                               : std::string("after_load");
                         });

// A stopped instance is saved too; a releasing one is refused naming its state.
TEST_F(CustomImageTest, DOCKER_ROOT_AStoppedInstanceIsSavedAndAReleasedOneIsRefused) {
  GPUCLOUD_NEED_ENGINE();
  ASSERT_EQ(daemon_.post("/api/v1/instances", {{"name", "s1"}, {"gpu_count", 0}}, alice_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("s1", "running", alice_).at("state").as_string(), "running");
  ASSERT_EQ(daemon_.post("/api/v1/instances/s1/stop", json::object{}, alice_).status, 202);
  ASSERT_EQ(daemon_.wait_for_state("s1", "stopped", alice_).at("state").as_string(), "stopped");
  auto saved = daemon_.post("/api/v1/instances/s1/images", {{"name", "from-stopped"}}, alice_);
  ASSERT_EQ(saved.status, 202) << saved.body;
  const std::string id(saved.json().at("id").as_string());
  ASSERT_TRUE(wait_until([&] { return image(id, alice_).at("state").as_string() != "creating"; }, std::chrono::minutes(3),
                         "the image to be saved", std::chrono::milliseconds(250)));
  auto done = image(id, alice_);
  ASSERT_EQ(done.at("state").as_string(), "available") << done;
  engine_images_.push_back(std::string(done.at("engine_image").as_string()));
  ASSERT_EQ(daemon_.request("DELETE", "/api/v1/instances/s1", "", alice_).status, 202);
  auto refused = daemon_.post("/api/v1/instances/s1/images", {{"name", "too-late"}}, alice_);
  EXPECT_TRUE(refused.status == 409 || refused.status == 404) << refused.body;
}

}  // namespace
}  // namespace gpucloud::testing
