// ImageSaver's layered save against a fake driver whose container files are a temp dir: what
// it loads (image tar: layer.tar, config.json with the base's diff ids + the layer's sha256,
// manifest.json tagging REF), that the container is paused exactly while its files are read
// and unpaused on every way out (also when the load fails), and that sweep() unpauses a
// container a dead save left paused.
#include "agent/image_saver.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agent/image_layer.h"

namespace gpucloud::agent::image_saver_test {
namespace {

namespace net = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using net::awaitable;

struct Member {
  std::string name;
  std::string data;
};
// The members of a plain tar (enough for what the saver writes: ustar, no PAX at this level).
std::vector<Member> untar(const std::string& tar) {
  std::vector<Member> out;
  std::size_t at = 0;
  while (at + 512 <= tar.size() && tar[at] != '\0') {
    Member m;
    m.name = std::string(tar.c_str() + at);
    const auto size = std::stoull(tar.substr(at + 124, 11), nullptr, 8);
    m.data = tar.substr(at + 512, size);
    out.push_back(std::move(m));
    at += 512 + size + layer::tar_padding(size);
  }
  return out;
}

class FakeDriver : public RuntimeDriver {
 public:
  std::string upper;           // the container's files
  std::string state = "running";
  std::vector<std::string> calls;  // pause, unpause, load-start, layer-end, load-end
  bool fail_load = false;
  std::string loaded;          // the body the load got
  std::set<std::string> images{"base"};

  awaitable<Status> ping() override { co_return ok(); }
  awaitable<Result<DriverInfo>> fingerprint() override { co_return DriverInfo{}; }
  awaitable<Result<NetworkInfo>> ensure_network(NetworkSpec) override { co_return NetworkInfo{}; }
  awaitable<Status> remove_network(std::string) override { co_return ok(); }
  awaitable<Result<bool>> image_present(std::string ref) override { co_return images.contains(ref); }
  std::map<std::string, std::vector<std::string>> layers_of;  // RootFS.Layers, when known
  awaitable<Result<std::optional<ImageInfo>>> image_inspect(std::string ref) override {
    if (!images.contains(ref)) co_return std::optional<ImageInfo>();
    ImageInfo info{"sha256:" + ref, ref == "base" ? 1000 : 1500, 1, {}};
    if (auto it = layers_of.find(ref); it != layers_of.end()) info.diff_ids = it->second;
    co_return std::optional<ImageInfo>(std::move(info));
  }
  awaitable<Status> pull_image(std::string, std::chrono::milliseconds) override { co_return ok(); }
  awaitable<Result<CreatedContainer>> create(ContainerSpec) override { co_return fail(ErrorCode::internal, "no"); }
  awaitable<Status> start(std::string) override { co_return ok(); }
  awaitable<Status> stop(std::string, std::chrono::seconds) override { co_return ok(); }
  awaitable<Status> remove(std::string) override { co_return ok(); }
  ContainerStatus status() const {
    ContainerStatus s;
    s.id = "c1";
    s.state = state;
    s.running = state == "running" || state == "paused";
    s.labels = {{"gpucloud.installation", "inst"}};
    return s;
  }
  awaitable<Result<ContainerStatus>> inspect(std::string) override { co_return status(); }
  awaitable<Result<std::vector<ContainerStatus>>> list(std::map<std::string, std::string> filter) override {
    if (filter.contains("gpucloud.installation")) co_return std::vector<ContainerStatus>{status()};
    co_return std::vector<ContainerStatus>{};
  }
  awaitable<Result<ContainerStatus>> recover(DriverState) override { co_return status(); }
  awaitable<Result<ContainerStatus>> wait(std::string, std::chrono::milliseconds) override { co_return status(); }
  awaitable<Result<std::string>> logs(std::string, int) override { co_return std::string(); }
  awaitable<Result<ExecResult>> exec_run(std::string, std::vector<std::string>, std::chrono::milliseconds) override {
    co_return ExecResult{};
  }
  awaitable<Result<std::string>> exec_capture(std::string, std::vector<std::string>) override { co_return std::string(); }
  awaitable<Result<std::unique_ptr<TerminalSession>>> exec_tty(std::string, std::vector<std::string>, int, int,
                                                               std::vector<std::string>) override {
    co_return fail(ErrorCode::unavailable, "no");
  }
  awaitable<Result<std::string>> commit(std::string, std::string, std::string, std::map<std::string, std::string>) override {
    co_return fail(ErrorCode::unavailable, "the layered save never commits");
  }
  awaitable<Status> remove_image(std::string ref) override {
    images.erase(ref);
    co_return ok();
  }
  awaitable<Result<std::vector<std::string>>> list_images(std::map<std::string, std::string>) override {
    co_return std::vector<std::string>{};
  }
  awaitable<Result<double>> update(std::string, double cpus, std::int64_t) override { co_return cpus; }
  awaitable<Result<std::string>> flatten(std::string, std::string, std::string, std::map<std::string, std::string>) override {
    co_return fail(ErrorCode::unavailable, "the layered save never flattens");
  }

  awaitable<Status> pause(std::string) override {
    calls.push_back("pause");
    state = "paused";
    co_return ok();
  }
  awaitable<Status> unpause(std::string) override {
    calls.push_back("unpause");
    if (state == "paused") state = "running";
    co_return ok();
  }
  awaitable<Result<ContainerLayerDir>> layer_dir(std::string) override {
    ContainerLayerDir d;
    d.storage_driver = "overlay2";
    d.dir = upper;
    d.walk_upper = true;
    co_return d;
  }
  awaitable<Result<SaveBase>> save_base(std::string, std::map<std::string, std::string> labels) override {
    SaveBase b;
    b.image_id = "sha256:base";
    b.architecture = "amd64";
    b.os = "linux";
    b.diff_ids = {"sha256:1111"};
    json::object l;
    for (const auto& [k, v] : labels) l[k] = v;
    b.config = json::object{{"Labels", std::move(l)}};
    co_return b;
  }
  awaitable<Result<std::string>> load_image(BodySource source, std::chrono::milliseconds) override {
    calls.push_back("load-start");
    for (;;) {
      auto piece = co_await source();
      if (!piece) co_return fail(std::move(piece.error()));
      if (piece->empty()) break;
      loaded.append(piece->data(), piece->size());
      if (fail_load && loaded.size() > 4096) co_return fail(ErrorCode::unavailable, "the engine went away");
    }
    calls.push_back(state == "paused" ? "load-end-paused" : "load-end");
    const auto members = untar(loaded);
    for (const auto& m : members)
      if (m.name == "manifest.json") images.insert(std::string(json::parse(m.data).at(0).at("RepoTags").at(0).as_string()));
    co_return std::string("Loaded image");
  }
};

template <class T>
T run(net::io_context& ioc, awaitable<T> work) {
  auto f = net::co_spawn(ioc, std::move(work), net::use_future);
  ioc.restart();
  ioc.run();
  return f.get();
}

class ImageSaverLayered : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpucloud-saver-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "opt");
    std::ofstream(dir_ / "opt/marker") << std::string(300000, 'm');
    fs::create_directories(dir_ / "etc");
    std::ofstream(dir_ / "etc/shadow") << "root:$6$SAVERTESTHASH:1::\n";
    driver_.upper = dir_.string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  SaveImageRequest request() const {
    auto r = save_request_from_json(json::object{{"instance_id", "i1"}, {"image_id", "img1"}, {"base", "base"}}, "inst");
    EXPECT_TRUE(r);
    return *r;
  }
  fs::path dir_;
  FakeDriver driver_;
  net::io_context ioc_;
};

TEST_F(ImageSaverLayered, LoadsTheBasesLayersPlusOneCleanLayerAndPausesOnlyWhileReading) {
  ImageSaver saver(driver_, "inst");
  auto out = run(ioc_, saver.save("c1", request()));
  ASSERT_TRUE(out) << out.error().detail;
  EXPECT_EQ(driver_.calls, (std::vector<std::string>{"pause", "load-start", "unpause", "load-end"}))
      << "unpaused once the layer was read, before the engine finished";
  EXPECT_EQ(driver_.state, "running");
  const auto members = untar(driver_.loaded);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].name, "layer.tar");
  EXPECT_EQ(members[1].name, "config.json");
  EXPECT_EQ(members[2].name, "manifest.json");
  EXPECT_EQ(driver_.loaded.find("SAVERTESTHASH"), std::string::npos);
  const auto config = json::parse(members[1].data);
  EXPECT_EQ(config.at("rootfs").at("diff_ids"), (json::array{"sha256:1111", json::value(layer::sha256_digest(members[0].data))}));
  EXPECT_EQ(config.at("config").at("Labels").at("gpucloud.image"), "img1");
  EXPECT_EQ(config.at("config").at("Labels").at("gpucloud.image-installation"), "inst");
  const std::string ref = "gpucloud-image/inst:img1";
  EXPECT_EQ(json::parse(members[2].data).at(0).at("RepoTags").at(0).as_string(), ref);
  EXPECT_EQ(out->at("engine_image").as_string(), ref);
  EXPECT_EQ(out->at("own_size_bytes"), 500) << "the image's size less the base's";
  // A repeat finds it saved and only reports.
  driver_.calls.clear();
  auto again = run(ioc_, saver.save("c1", request()));
  ASSERT_TRUE(again) << again.error().detail;
  EXPECT_TRUE(driver_.calls.empty());
}

TEST_F(ImageSaverLayered, OwnSizeIsLessTheBaseOnlyWhenStackedOnIt) {
  ImageSaver saver(driver_, "inst");
  const std::string ref = "gpucloud-image/inst:img1";
  driver_.images.insert(ref);  // saved already: the repeat only reports
  driver_.layers_of["base"] = {"sha256:1111"};
  driver_.layers_of[ref] = {"sha256:1111", "sha256:2222"};
  auto stacked = run(ioc_, saver.save("c1", request()));
  ASSERT_TRUE(stacked) << stacked.error().detail;
  EXPECT_EQ(stacked->at("own_size_bytes"), 500);
  driver_.layers_of[ref] = {"sha256:flat"};  // the fallback's one flattened layer: all its own
  auto flat = run(ioc_, saver.save("c1", request()));
  ASSERT_TRUE(flat) << flat.error().detail;
  EXPECT_EQ(flat->at("own_size_bytes"), 1500);
}

TEST_F(ImageSaverLayered, AFailedLoadUnpausesTheContainer) {
  driver_.fail_load = true;
  ImageSaver saver(driver_, "inst");
  auto out = run(ioc_, saver.save("c1", request()));
  ASSERT_FALSE(out);
  EXPECT_EQ(driver_.state, "running");
  EXPECT_EQ(driver_.calls.front(), "pause");
  EXPECT_EQ(driver_.calls.back(), "unpause");
}

TEST_F(ImageSaverLayered, AStoppedContainerIsNotPausedAndALeftPausedOneIsTakenOver) {
  driver_.state = "exited";
  {
    ImageSaver saver(driver_, "inst");
    ASSERT_TRUE(run(ioc_, saver.save("c1", request())));
  }
  EXPECT_EQ(driver_.calls, (std::vector<std::string>{"load-start", "load-end"}));
  driver_.images.erase("gpucloud-image/inst:img1");
  driver_.calls.clear();
  driver_.state = "paused";  // a save died holding it
  ImageSaver saver(driver_, "inst");
  ASSERT_TRUE(run(ioc_, saver.save("c1", request())));
  EXPECT_EQ(driver_.state, "running");
  EXPECT_EQ(driver_.calls, (std::vector<std::string>{"load-start", "unpause", "load-end"}));
}

TEST_F(ImageSaverLayered, TheStartSweepUnpausesWhatADeadSaveLeftPaused) {
  driver_.state = "paused";
  ImageSaver saver(driver_, "inst");
  ASSERT_TRUE(run(ioc_, saver.sweep("img1")));
  EXPECT_EQ(driver_.state, "paused") << "a save's own sweep leaves containers alone";
  ASSERT_TRUE(run(ioc_, saver.sweep()));
  EXPECT_EQ(driver_.state, "running");
}

}  // namespace
}  // namespace gpucloud::agent::image_saver_test
