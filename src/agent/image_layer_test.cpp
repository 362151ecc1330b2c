// Save-image's layer writer (image_layer.h) on a fake container directory in a temp dir: the
// layer is checked byte for byte against its plan (size, sha256), for the absence of every
// secret, and by GNU tar extracting it (what it holds: cleaned files, whiteouts, a symlink, a
// hard link, a long path). And the image config / manifest the saver loads.
#include "agent/image_layer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/image_saver.h"

namespace gpucloud::agent::layer {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

const std::string kBegin(kManagedKeysBegin);
const std::string kEnd(kManagedKeysEnd);

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& content, mode_t mode = 0644) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
  ::chmod(p.c_str(), mode);
}

std::string sh(const std::string& command) {
  std::string out;
  FILE* f = ::popen(command.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  ::pclose(f);
  return out;
}

std::string read_all(const LayerPlan& plan, LayerReader& reader, std::size_t chunk = 7777) {
  std::string out;
  std::string buf(chunk, '\0');
  for (;;) {
    auto n = reader.read(buf.data(), buf.size());
    EXPECT_TRUE(n.has_value()) << (n ? "" : n.error().detail);
    if (!n || *n == 0) break;
    out.append(buf.data(), *n);
  }
  EXPECT_EQ(out.size(), plan.size);
  return out;
}

class LayerDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpucloud-layer-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ / "root";
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, root_;
};

TEST(ImageLayerCleaning, ManagedKeysAreStrippedLikeSed) {
  const std::string user = "ssh-ed25519 AAAAuser me@laptop\n";
  EXPECT_EQ(strip_managed_keys(user + kBegin + "\nssh-ed25519 AAAAmanaged k1 gpucloud\n" + kEnd + "\n"), user);
  EXPECT_EQ(strip_managed_keys(kBegin + "\nk\n" + kEnd + "\n" + user), user);
  EXPECT_EQ(strip_managed_keys(user + kBegin + "\nk\n"), user) << "an unterminated block goes to the end (sed's range)";
  EXPECT_EQ(strip_managed_keys(user), user);
  EXPECT_EQ(strip_managed_keys("no newline at end"), "no newline at end");
  EXPECT_EQ(strip_managed_keys(" " + kBegin + "\nkept\n"), " " + kBegin + "\nkept\n") << "the mark is a whole line";
}

TEST(ImageLayerCleaning, RootsPasswordFieldBecomesAStar) {
  EXPECT_EQ(clear_root_password("root:$6$salt$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"),
            "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n");
  EXPECT_EQ(clear_root_password("rooted:$6$x:1::\n"), "rooted:$6$x:1::\n");
  EXPECT_EQ(clear_root_password("root:$6$x"), "root:*");
  EXPECT_EQ(clear_root_password("root\n"), "root:*\n");
}

TEST(ImageLayerCleaning, SecretPaths) {
  EXPECT_EQ(secret_rule("/etc/ssh/ssh_host_ed25519_key"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/etc/ssh/ssh_host_rsa_key.pub"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/etc/ssh/sshd_config.d/gpucloud.conf"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/etc/profile.d/00-gpucloud-env.sh"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/root/.ssh/.authorized_keys.gpucloud.123"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/etc/.shadow.gpucloud.9"), SecretRule::drop);
  EXPECT_EQ(secret_rule("/root/.ssh/authorized_keys"), SecretRule::authorized_keys);
  EXPECT_EQ(secret_rule("/etc/shadow"), SecretRule::shadow);
  EXPECT_EQ(secret_rule("/etc/shadow-"), SecretRule::shadow_backup);
  EXPECT_EQ(secret_rule("/etc/ssh/sshd_config"), SecretRule::none);
  EXPECT_EQ(secret_rule("/etc/ssh/x/ssh_host_key"), SecretRule::none);
  EXPECT_EQ(secret_rule("/home/u/.ssh/authorized_keys"), SecretRule::none);
}

TEST(ImageLayerTar, HeadersAreUstarWithPaxWhenNeeded) {
  TarHeader h;
  h.name = "etc/hostname";
  h.size = 5;
  h.mtime = 1700000000;
  const auto plain = tar_header(h);
  ASSERT_EQ(plain.size(), 512u);
  EXPECT_EQ(plain.substr(257, 8), std::string("ustar\0" "00", 8));
  unsigned sum = 0;
  for (std::size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(plain[i]);
  EXPECT_EQ(std::strtoul(plain.substr(148, 7).c_str(), nullptr, 8), sum) << "the checksum";
  h.name = std::string(150, 'a') + "/file";
  h.size = 9ull << 30;  // over the 8 GiB an octal size field holds
  h.uid = 1u << 22;
  h.xattrs["security.capability"] = std::string("\x01\x00\x00\x02", 4);
  const auto pax = tar_header(h);
  EXPECT_EQ(pax[156], 'x');
  EXPECT_NE(pax.find("path=" + h.name + "\n"), std::string::npos);
  EXPECT_NE(pax.find(" size=" + std::to_string(9ull << 30) + "\n"), std::string::npos);
  EXPECT_NE(pax.find(" uid=" + std::to_string(1u << 22) + "\n"), std::string::npos);
  EXPECT_NE(pax.find("SCHILY.xattr.security.capability="), std::string::npos);
  EXPECT_EQ(pax.size() % 512, 0u);
}

TEST_F(LayerDir, ALayerHoldsTheChangesCleanedAndNothingOfTheSecrets) {
  const std::string hash = "$6$saltsalt$HASHHASHHASHsecretsecret";
  const std::string host_key = "-----BEGIN OPENSSH PRIVATE KEY-----\nHOSTKEYSECRETMATERIAL\n";
  const std::string managed_key = "ssh-ed25519 AAAAMANAGEDKEYSECRET k1 gpucloud";
  const std::string user_key = "ssh-ed25519 AAAAuserkey user@host\n";
  write(root_ / "etc/shadow", "root:" + hash + ":19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n", 0640);
  write(root_ / "etc/shadow-", "root:" + hash + ":18000:0:99999:7:::\n", 0600);
  write(root_ / "root/.ssh/authorized_keys", user_key + kBegin + "\n" + managed_key + "\n" + kEnd + "\n", 0600);
  write(root_ / "etc/ssh/ssh_host_ed25519_key", host_key, 0600);
  write(root_ / "etc/profile.d/00-gpucloud-env.sh", "export GPUCLOUD_SECRET_ENV=1\n");
  write(root_ / "opt/tool/marker", "installed\n", 0755);
  fs::create_symlink("/opt/tool/marker", root_ / "opt/tool/link");
  fs::create_hard_link(root_ / "opt/tool/marker", root_ / "opt/tool/hard");
  const std::string long_dir = "opt/" + std::string(60, 'd') + "/" + std::string(60, 'e');
  write(root_ / long_dir / "long-file-name", std::string(3000, 'x'));
  // A hard link to the shadow file under another name gets the cleaned content too.
  fs::create_hard_link(root_ / "etc/shadow", root_ / "opt/shadow-copy");
  fs::create_directories(root_ / "var/sock");
  std::vector<FileChange> changes{
      {"/etc", ChangeKind::modified},
      {"/etc/shadow", ChangeKind::modified},
      {"/etc/shadow-", ChangeKind::modified},
      {"/etc/ssh", ChangeKind::modified},
      {"/etc/ssh/ssh_host_ed25519_key", ChangeKind::added},
      {"/etc/profile.d", ChangeKind::modified},
      {"/etc/profile.d/00-gpucloud-env.sh", ChangeKind::added},
      {"/root", ChangeKind::modified},
      {"/root/.ssh", ChangeKind::added},
      {"/root/.ssh/authorized_keys", ChangeKind::added},
      {"/opt", ChangeKind::modified},
      {"/opt/tool", ChangeKind::added},
      {"/opt/tool/marker", ChangeKind::added},
      {"/opt/tool/link", ChangeKind::added},
      {"/opt/tool/hard", ChangeKind::added},
      {"/opt/shadow-copy", ChangeKind::added},
      {"/opt/" + std::string(60, 'd'), ChangeKind::added},
      {"/" + long_dir, ChangeKind::added},
      {"/" + long_dir + "/long-file-name", ChangeKind::added},
      {"/usr/share/doc/gone", ChangeKind::deleted},
      {"/usr/share/doc/gone/child", ChangeKind::deleted},  // under a deleted one: nothing
      {"/etc/profile.d/00-gpucloud-env.sh", ChangeKind::added},  // listed twice: once
  };
  auto plan = plan_layer(root_.string(), changes, 1700000000);
  ASSERT_TRUE(plan) << plan.error().detail;
  LayerReader reader(*plan);
  const std::string bytes = read_all(*plan, reader);
  EXPECT_EQ(reader.diff_id(), sha256_digest(bytes));
  EXPECT_EQ(bytes.size() % 512, 0u);
  for (const auto& secret : {std::string("HASHHASHHASHsecretsecret"), std::string("HOSTKEYSECRETMATERIAL"),
                             std::string("AAAAMANAGEDKEYSECRET"), std::string("GPUCLOUD_SECRET_ENV")})
    EXPECT_EQ(bytes.find(secret), std::string::npos) << secret << " is in the layer";
  EXPECT_NE(bytes.find("AAAAuserkey"), std::string::npos) << "the positive control: the user's own key is kept";
  EXPECT_NE(bytes.find("installed\n"), std::string::npos);

  // What GNU tar makes of it.
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  std::ofstream(dir_ / "layer.tar", std::ios::binary) << bytes;
  ASSERT_EQ(sh("tar -xf " + (dir_ / "layer.tar").string() + " -C " + out.string() + " 2>&1; echo rc=$?"), "rc=0\n");
  EXPECT_EQ(slurp(out / "etc/shadow"), "root:*:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n");
  EXPECT_EQ(slurp(out / "etc/shadow-"), slurp(out / "etc/shadow")) << "the backup is the cleaned shadow";
  EXPECT_EQ(slurp(out / "opt/shadow-copy"), slurp(out / "etc/shadow"));
  EXPECT_EQ(slurp(out / "root/.ssh/authorized_keys"), user_key);
  EXPECT_TRUE(fs::exists(out / "etc/ssh/.wh.ssh_host_ed25519_key"));
  EXPECT_FALSE(fs::exists(out / "etc/ssh/ssh_host_ed25519_key"));
  EXPECT_TRUE(fs::exists(out / "etc/profile.d/.wh.00-gpucloud-env.sh"));
  EXPECT_TRUE(fs::exists(out / "usr/share/doc/.wh.gone"));
  EXPECT_FALSE(fs::exists(out / "usr/share/doc/gone"));
  EXPECT_EQ(fs::read_symlink(out / "opt/tool/link"), "/opt/tool/marker");
  EXPECT_EQ(slurp(out / "opt/tool/marker"), "installed\n");
  struct stat a {}, b {};
  ASSERT_EQ(::stat((out / "opt/tool/marker").c_str(), &a), 0);
  ASSERT_EQ(::stat((out / "opt/tool/hard").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "a hard link stays one";
  EXPECT_EQ(a.st_mode & 07777, 0755u);
  EXPECT_EQ(slurp(out / long_dir / "long-file-name"), std::string(3000, 'x'));
  EXPECT_EQ(std::count(plan->cleaned.begin(), plan->cleaned.end(), "/etc/shadow"), 1);
  EXPECT_EQ(std::count(plan->cleaned.begin(), plan->cleaned.end(), "/etc/ssh/ssh_host_ed25519_key"), 1);
  // The listing: the mode of the shadow file kept, whiteouts listed.
  const std::string listing = sh("tar -tvf " + (dir_ / "layer.tar").string());
  EXPECT_NE(listing.find("-rw-r----- 0/0"), std::string::npos) << listing;
}

TEST_F(LayerDir, OnlyManagedKeysMeansNoAuthorizedKeysFileAndAnOpaqueDirectory) {
  write(root_ / "root/.ssh/authorized_keys", kBegin + "\nssh-ed25519 AAAAONLYMANAGED k\n" + kEnd + "\n", 0600);
  fs::create_directories(root_ / "srv/again");
  write(root_ / "srv/again/new", "n");
  auto plan = plan_layer(root_.string(),
                         {{"/root/.ssh/authorized_keys", ChangeKind::modified},
                          {"/srv/again", ChangeKind::deleted},  // deleted and made again (overlay's opaque dir)
                          {"/srv/again/new", ChangeKind::added}},
                         1);
  ASSERT_TRUE(plan) << plan.error().detail;
  LayerReader reader(*plan);
  const std::string bytes = read_all(*plan, reader);
  EXPECT_EQ(bytes.find("AAAAONLYMANAGED"), std::string::npos);
  std::ofstream(dir_ / "layer.tar", std::ios::binary) << bytes;
  const std::string names = sh("tar -tf " + (dir_ / "layer.tar").string());
  EXPECT_EQ(names, "root/.ssh/.wh.authorized_keys\nsrv/again/\nsrv/again/.wh..wh..opq\nsrv/again/new\n");
}

TEST_F(LayerDir, ASymlinkedShadowGetsItsTargetCleaned) {
  write(root_ / "etc/real-shadow", "root:$6$LINKEDHASHSECRET:1::\n");
  fs::create_directories(root_ / "etc");
  fs::create_symlink("real-shadow", root_ / "etc/shadow");
  auto plan = plan_layer(root_.string(), {{"/etc/shadow", ChangeKind::modified}, {"/etc/real-shadow", ChangeKind::added}}, 1);
  ASSERT_TRUE(plan) << plan.error().detail;
  LayerReader reader(*plan);
  const std::string bytes = read_all(*plan, reader);
  EXPECT_EQ(bytes.find("LINKEDHASHSECRET"), std::string::npos);
  EXPECT_NE(bytes.find("root:*:1::\n"), std::string::npos);
}

TEST_F(LayerDir, NoSymlinkLeadsTheReadsOutOfTheContainersFiles) {
  // The container points /x at the host's root and /etc/shadow through it.
  fs::create_directories(dir_ / "host");
  write(dir_ / "host/shadow", "root:x:1::\nhostuser:HOSTSECRETHASH:1::\n");
  write(dir_ / "host/data", "HOSTSECRETDATA");
  fs::create_symlink(dir_ / "host", root_ / "x");
  fs::create_directories(root_ / "etc");
  fs::create_symlink("/x/shadow", root_ / "etc/shadow");
  write(root_ / "etc/shadow-", "root:$6$own:1::\n");
  auto plan = plan_layer(root_.string(),
                         {{"/x", ChangeKind::added}, {"/etc/shadow", ChangeKind::modified}, {"/etc/shadow-", ChangeKind::modified}}, 1);
  ASSERT_TRUE(plan) << plan.error().detail;
  LayerReader reader(*plan);
  const std::string bytes = read_all(*plan, reader);
  EXPECT_EQ(bytes.find("HOSTSECRET"), std::string::npos);
  EXPECT_NE(bytes.find("root:*:1::"), std::string::npos) << "the backup cleaned from its own content";
  // Even a change listed through the link (no engine walk makes one) is not read.
  auto through = plan_layer(root_.string(), {{"/x/data", ChangeKind::added}}, 1);
  if (through) {
    LayerReader r2(*through);
    std::string buf(1 << 16, '\0');
    Result<std::size_t> n = 0;
    std::string got;
    do {
      n = r2.read(buf.data(), buf.size());
      if (n) got.append(buf.data(), *n);
    } while (n && *n > 0);
    EXPECT_FALSE(n) << "opened through a symlink";
    EXPECT_EQ(got.find("HOSTSECRETDATA"), std::string::npos);
  }
}

TEST_F(LayerDir, AFileThatShrankAfterThePlanFailsTheRead) {
  write(root_ / "data", std::string(100000, 'z'));
  auto plan = plan_layer(root_.string(), {{"/data", ChangeKind::added}}, 1);
  ASSERT_TRUE(plan) << plan.error().detail;
  ::truncate((root_ / "data").c_str(), 10);
  LayerReader reader(*plan);
  std::string buf(1 << 20, '\0');
  Result<std::size_t> n = 0;
  do n = reader.read(buf.data(), buf.size());
  while (n && *n > 0);
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().detail.find("shorter"), std::string::npos) << n.error().detail;
}

TEST(ImageLayerImage, ConfigAndManifestStackOneLayerOnTheBase) {
  SaveBase base;
  base.image_id = "sha256:base";
  base.architecture = "amd64";
  base.os = "linux";
  base.created = "2026-12-01T00:00:00Z";
  base.diff_ids = {"sha256:aaa", "sha256:bbb"};
  base.config = json::object{{"Cmd", json::array{"/bin/bash"}}, {"Labels", json::object{{"gpucloud.image", "img-1"}}}};
  const auto config = json::parse(saved_image_config(base, "sha256:ccc", "2026-12-04T00:00:00Z")).as_object();
  EXPECT_EQ(config.at("rootfs").at("diff_ids"), (json::array{"sha256:aaa", "sha256:bbb", "sha256:ccc"}));
  EXPECT_EQ(config.at("rootfs").at("type"), "layers");
  EXPECT_EQ(config.at("history").as_array().size(), 3u);
  EXPECT_EQ(config.at("config").at("Labels").at("gpucloud.image"), "img-1");
  EXPECT_EQ(config.at("architecture"), "amd64");
  const auto manifest = json::parse(saved_image_manifest(base, "gpucloud-image/x:y")).as_array();
  ASSERT_EQ(manifest.size(), 1u);
  EXPECT_EQ(manifest[0].at("RepoTags"), (json::array{"gpucloud-image/x:y"}));
  EXPECT_EQ(manifest[0].at("Layers").as_array().size(), 3u);
  EXPECT_EQ(manifest[0].at("Layers").as_array().back(), "layer.tar");
  EXPECT_EQ(manifest[0].at("Config"), "config.json");
}

TEST_F(LayerDir, TheRuntimesMountPointsAreLeftOut) {
  // What runc leaves in the upper dir for an instance's binds: empty files and directories.
  write(root_ / "usr/bin/nvidia-smi", "");
  write(root_ / "usr/lib/x86_64-linux-gnu/libcuda.so.1", "");
  fs::create_directories(root_ / "root/data");
  // A bind target the user really wrote before it was one (not empty), and an ordinary file.
  write(root_ / "opt/tool", "#!/bin/sh\n");
  write(root_ / "etc/motd", "");
  // A symlink at a target's place is never followed (it could lead out of the container).
  fs::create_directories(root_ / "x");
  fs::create_symlink("/", root_ / "x/escape");
  std::vector<FileChange> changes{{"/usr/bin/nvidia-smi", ChangeKind::added},
                                  {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", ChangeKind::added},
                                  {"/root/data", ChangeKind::added},
                                  {"/opt/tool", ChangeKind::added},
                                  {"/etc/motd", ChangeKind::added},
                                  {"/x/escape", ChangeKind::added},
                                  {"/usr/bin/gone", ChangeKind::deleted}};
  drop_mount_points(root_.string(), changes,
                    {"/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/root/data", "/opt/tool",
                     "/x/escape", "/usr/bin/gone"});
  std::vector<std::string> left;
  for (const auto& c : changes) left.push_back(c.path);
  EXPECT_EQ(left, (std::vector<std::string>{"/opt/tool", "/etc/motd", "/x/escape", "/usr/bin/gone"}));
}

}  // namespace
}  // namespace gpucloud::agent::layer
