#include "agent/image_saver.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent_state.h"
#include "agent/image_layer.h"
#include "core/fault_points.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
using net::awaitable;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// repo[:tag] → (repo, tag); the tag is what follows the last ':' after the last '/'.
std::pair<std::string, std::string> split_ref(const std::string& ref) {
  const auto slash = ref.rfind('/');
  const auto colon = ref.rfind(':');
  if (colon == std::string::npos || (slash != std::string::npos && colon < slash)) return {ref, "latest"};
  return {ref.substr(0, colon), ref.substr(colon + 1)};
}

bool valid_ref(const std::string& ref) {
  if (!ref.starts_with(kImageRepoPrefix) || ref.size() > 200) return false;
  auto [repo, tag] = split_ref(ref);
  if (repo.size() <= kImageRepoPrefix.size() || tag.empty() || tag.size() > 100) return false;
  for (char c : repo)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '/' ||
          c == '-' || c == '_' || c == '.'))
      return false;
  for (char c : tag)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

std::string string_of(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

const std::string& sanitize_script() {
  // The managed block's marks are the init's (scripts/instance-init/gpucloud-init.sh).
  static const std::string script = R"sh(
BEGIN_MARK='# --- gpucloud managed keys: edits between these lines are replaced at boot ---'
END_MARK='# --- end of gpucloud managed keys ---'
rm -f /etc/ssh/ssh_host_* /etc/ssh/sshd_config.d/gpucloud.conf /etc/profile.d/00-gpucloud-env.sh \
  /root/.ssh/.authorized_keys.gpucloud.* /etc/.shadow.gpucloud.* || exit 1
ak=/root/.ssh/authorized_keys
if [ -f "$ak" ]; then
  sed "/^$BEGIN_MARK\$/,/^$END_MARK\$/d" "$ak" >"$ak.gpucloud-save" && cat "$ak.gpucloud-save" >"$ak" || exit 1
  rm -f "$ak.gpucloud-save"
  [ -s "$ak" ] || rm -f "$ak"
fi
if [ -f /etc/shadow ] && grep -q '^root:' /etc/shadow; then
  if command -v usermod >/dev/null 2>&1; then
    usermod -p '*' root || exit 1
  else
    awk -F: -v OFS=: '$1 == "root" { $2 = "*" } { print }' /etc/shadow >/etc/.shadow.gpucloud-save &&
      cat /etc/.shadow.gpucloud-save >/etc/shadow || exit 1
    rm -f /etc/.shadow.gpucloud-save
  fi
fi
# usermod (and passwd, chpasswd) keep the file as it was in /etc/shadow-: with the hash.
if [ -f /etc/shadow- ]; then cat /etc/shadow >/etc/shadow- || exit 1; fi
echo gpucloud-save: clean
)sh";
  return script;
}

Result<SaveImageRequest> save_request_from_json(const json::object& desired, const std::string& installation_id) {
  SaveImageRequest r;
  r.instance_id = string_of(desired, "instance_id");
  if (!is_valid_instance_id(r.instance_id))
    return fail(ErrorCode::invalid_argument, "instance_id is required: 1-64 of [A-Za-z0-9_.-]");
  r.image_id = string_of(desired, "image_id");
  if (!is_valid_instance_id(r.image_id))
    return fail(ErrorCode::invalid_argument, "image_id is required: 1-64 of [A-Za-z0-9_.-]");
  r.ref = string_of(desired, "ref");
  if (r.ref.empty()) r.ref = std::string(kImageRepoPrefix) + lower(installation_id) + ":" + lower(r.image_id);
  if (!valid_ref(r.ref))
    return fail(ErrorCode::invalid_argument, "ref must be gpucloud-image/REPO:TAG (lower case), not " + r.ref);
  r.base = string_of(desired, "base");
  if (const auto* m = desired.if_contains("max_used_bytes"); m && m->is_int64()) r.max_used_bytes = m->as_int64();
  return r;
}

awaitable<Result<json::object>> ImageSaver::sizes(std::string ref, std::string base) {
  auto info = co_await driver_.image_inspect(ref);
  if (!info) co_return fail(std::move(info.error()));
  if (!*info) co_return fail(ErrorCode::internal, "the engine lost " + ref + " right after saving it");
  std::int64_t base_size = 0;
  if (!base.empty()) {
    auto b = co_await driver_.image_inspect(base);
    // What the image really occupies: less the base only when it is stacked on the base's
    // layers (the engine stores them once); a flattened one (the fallback) shares nothing.
    const auto& mine = (*info)->diff_ids;
    if (b && *b) {
      const auto& theirs = (*b)->diff_ids;
      const bool stacked = theirs.empty() || mine.empty() ||
                           (mine.size() > theirs.size() && std::equal(theirs.begin(), theirs.end(), mine.begin()));
      if (stacked) base_size = (*b)->size_bytes;
    }
  }
  const std::int64_t size = (*info)->size_bytes;
  const std::int64_t own = std::max<std::int64_t>(0, size - base_size);
  co_return json::object{{"engine_image", ref},
                         {"engine_image_id", (*info)->id},
                         {"size_bytes", size},
                         {"own_size_bytes", own},
                         {"base_size_bytes", base_size}};
}

awaitable<Status> ImageSaver::sweep(std::string image_id) {
  std::map<std::string, std::string> filter{{std::string(kImageSaveLabel), installation_id_}};
  if (!image_id.empty()) filter[std::string(kImageLabel)] = image_id;
  // Containers first: an image a container was made from cannot be removed.
  auto containers = co_await driver_.list(filter);
  if (!containers) co_return fail(std::move(containers.error()));
  for (const auto& c : *containers) {
    if (auto s = co_await driver_.remove(c.id); !s) co_return s;
    spdlog::info(R"({{"event":"image_save_leftover_removed","container":"{}"}})", c.id);
  }
  auto images = co_await driver_.list_images(filter);
  if (!images) {
    if (images.error().code == ErrorCode::unavailable && images.error().detail.find("does not list") != std::string::npos)
      co_return co_await unpause_leftovers(image_id);  // a runtime without image listing
    co_return fail(std::move(images.error()));
  }
  for (const auto& id : *images) {
    if (auto s = co_await driver_.remove_image(id); !s) co_return s;
    spdlog::info(R"({{"event":"image_save_leftover_removed","image":"{}"}})", id);
  }
  co_return co_await unpause_leftovers(image_id);
}

awaitable<Status> ImageSaver::unpause_leftovers(std::string image_id) {
  if (!image_id.empty()) co_return ok();  // a save in flight may hold its container paused
  // gpucloud pauses a container only while it saves it: one paused now was left by a save
  // that died (the save's retry would take it over, but the instance must not wait for that).
  std::map<std::string, std::string> filter{{"gpucloud.installation", installation_id_}};
  auto containers = co_await driver_.list(filter);
  if (!containers) co_return fail(std::move(containers.error()));
  for (const auto& c : *containers) {
    if (c.state != "paused") continue;
    if (auto s = co_await driver_.unpause(c.id); !s) co_return s;
    spdlog::info(R"({{"event":"image_save_leftover_unpaused","container":"{}"}})", c.id);
  }
  co_return ok();
}

awaitable<Result<json::object>> ImageSaver::save(std::string container_id, SaveImageRequest r) {
  // A repeat of a finished save (what it died before removing goes now).
  if (auto done = co_await driver_.image_inspect(r.ref); done && *done) {
    if (auto s = co_await sweep(r.image_id); !s) co_return fail(std::move(s.error()));
    // A save killed after its load may have left the container paused.
    if (auto c = co_await driver_.inspect(container_id); c && c->state == "paused") (void)co_await driver_.unpause(container_id);
    co_return co_await sizes(r.ref, r.base);
  }
  if (r.max_used_bytes > 0) {
    auto used = co_await driver_.system_disk_used(container_id);
    if (used && *used > r.max_used_bytes)
      co_return fail(ErrorCode::invalid_argument, "the system disk holds " + std::to_string(*used) +
                                                      " bytes, more than its size (" + std::to_string(r.max_used_bytes) +
                                                      "); free some space first");
  }
  // What an earlier attempt of the fallback left (it died at any step: its raw copy, tagged or
  // not since a second commit moved the tag, and its cleaner) goes before anything is made again.
  if (auto s = co_await sweep(r.image_id); !s) co_return fail(std::move(s.error()));
  std::map<std::string, std::string> labels{{std::string(kImageLabel), r.image_id},
                                            {std::string(kImageInstallationLabel), installation_id_}};
  auto where = co_await driver_.layer_dir(container_id);
  Result<SaveBase> base = fail(ErrorCode::unavailable, "not asked");
  if (where) base = co_await driver_.save_base(container_id, labels);
  if (where && base && base->diff_ids.size() < kMaxStackedLayers && !base->diff_ids.empty())
    co_return co_await save_layered(std::move(container_id), std::move(r), std::move(*where), std::move(*base));
  const std::string why = !where ? where.error().detail
                          : !base ? base.error().detail
                                  : "the base has " + std::to_string(base->diff_ids.size()) + " layers";
  spdlog::info(R"({{"event":"image_save_flattened","image":"{}","why":{}}})", r.ref, json::serialize(json::value(why)));
  co_return co_await save_flattened(std::move(container_id), std::move(r));
}

namespace {

std::string utc_now_rfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A member of the image tar POST /images/load reads (docker save's format).
std::string outer_member(const std::string& name, std::uint64_t size, std::int64_t mtime) {
  layer::TarHeader h;
  h.name = name;
  h.size = size;
  h.mode = 0644;
  h.mtime = mtime;
  return layer::tar_header(h);
}

}  // namespace

std::string saved_image_config(const SaveBase& base, const std::string& diff_id, const std::string& created) {
  json::array diff_ids;
  json::array history;
  for (const auto& d : base.diff_ids) {
    diff_ids.emplace_back(d);
    history.emplace_back(json::object{{"created", base.created.empty() ? created : base.created},
                                      {"comment", "layer of " + base.image_id}});
  }
  diff_ids.emplace_back(diff_id);
  history.emplace_back(json::object{{"created", created}, {"created_by", "gpucloud save-image"}});
  json::object config{{"architecture", base.architecture},
                      {"os", base.os},
                      {"created", created},
                      {"config", base.config},
                      {"rootfs", json::object{{"type", "layers"}, {"diff_ids", std::move(diff_ids)}}},
                      {"history", std::move(history)}};
  if (!base.variant.empty()) config["variant"] = base.variant;
  return json::serialize(config);
}

std::string saved_image_manifest(const SaveBase& base, const std::string& ref) {
  json::array layers;
  // The base's layers are the engine's already: the load finds them by chain id and never
  // opens these paths.
  for (std::size_t i = 0; i < base.diff_ids.size(); ++i) layers.emplace_back("base-" + std::to_string(i) + "/layer.tar");
  layers.emplace_back("layer.tar");
  return json::serialize(json::array{json::object{{"Config", "config.json"}, {"RepoTags", json::array{json::value(ref)}},
                                                  {"Layers", std::move(layers)}}});
}

namespace {

// The layer's bytes read (and hashed) ahead on the pool while the loop sends what is ready, a
// few chunks at most in memory. The loop never blocks on it: it polls with a short timer that
// the producer cancels whenever it has made progress.
class ReadAhead : public std::enable_shared_from_this<ReadAhead> {
 public:
  static constexpr std::size_t kChunk = 1u << 20, kDepth = 8;
  ReadAhead(layer::LayerPlan plan, net::any_io_executor loop, std::shared_ptr<std::atomic<bool>> stopping)
      : plan_(std::move(plan)), reader_(plan_), wake_(std::move(loop)), stopping_(std::move(stopping)) {}
  const layer::LayerPlan& plan() const { return plan_; }

  // On the pool: the whole layer, chunk by chunk, until it is read, fails or is cancelled.
  void produce() {
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock lock(mutex_);
        while (!cancelled_ && !*stopping_ && queued_.size() >= kDepth) ready_.wait_for(lock, std::chrono::milliseconds(200));
        if (cancelled_ || *stopping_) return;
        if (!spare_.empty()) {
          chunk = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      if (!chunk.data) chunk.data = std::make_unique_for_overwrite<char[]>(kChunk);
      auto n = reader_.read(chunk.data.get(), kChunk);
      std::lock_guard lock(mutex_);
      if (!n) {
        error_ = n.error();
        done_ = true;
      } else if (*n == 0) {
        diff_id_ = reader_.diff_id();
        done_ = true;
      } else {
        chunk.size = *n;
        queued_.push_back(std::move(chunk));
      }
      net::post(wake_.get_executor(), [self = shared_from_this()] { self->wake_.cancel(); });
      if (done_) return;
    }
  }

  // On the loop: the next piece (valid until the next call), empty at the end.
  awaitable<Result<std::string_view>> next() {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (current_.data) spare_.push_back(std::move(current_));
        if (!queued_.empty()) {
          current_ = std::move(queued_.front());
          queued_.pop_front();
          ready_.notify_all();
          co_return std::string_view(current_.data.get(), current_.size);
        }
        if (done_) {
          if (error_) co_return fail(*error_);
          co_return std::string_view();
        }
      }
      wake_.expires_after(std::chrono::milliseconds(20));
      boost::system::error_code ec;
      co_await wake_.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }
  std::string diff_id() {
    std::lock_guard lock(mutex_);
    return diff_id_;
  }
  void cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    ready_.notify_all();
  }

 private:
  struct Chunk {
    std::unique_ptr<char[]> data;
    std::size_t size = 0;
  };
  const layer::LayerPlan plan_;
  layer::LayerReader reader_;  // the producer's alone
  net::steady_timer wake_;     // the loop's alone
  std::shared_ptr<std::atomic<bool>> stopping_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Chunk> queued_, spare_;
  Chunk current_;
  bool done_ = false, cancelled_ = false;
  std::optional<Error> error_;
  std::string diff_id_;
};

struct CancelOnExit {
  std::shared_ptr<ReadAhead> ahead;
  ~CancelOnExit() {
    if (ahead) ahead->cancel();
  }
};

}  // namespace

ImageSaver::~ImageSaver() { *stopping_ = true; }

awaitable<Result<json::object>> ImageSaver::save_layered(std::string container_id, SaveImageRequest r, ContainerLayerDir where,
                                                         SaveBase base) {
  const auto started = std::chrono::steady_clock::now();
  // 1. Frozen while it runs (a paused one was frozen by a save that died: this one takes it over).
  auto state = co_await driver_.inspect(container_id);
  if (!state) co_return fail(std::move(state.error()));
  bool frozen = state->state == "paused";
  if (!frozen && state->running) {
    if (auto s = co_await driver_.pause(container_id); !s) co_return fail(std::move(s.error()));
    frozen = true;
  }
  bool thawed = false;
  auto thaw = [&]() -> awaitable<Status> {
    if (!frozen || thawed) co_return ok();
    thawed = true;
    co_return co_await driver_.unpause(container_id);
  };

  std::shared_ptr<ReadAhead> ahead;
  CancelOnExit guard;
  std::string tail;  // what follows the layer: padding, config, manifest, end blocks
  std::string diff_id;
  auto layer_read = started, planned_at = started;
  auto work = [&]() -> awaitable<Result<std::string>> {
    fault_point("agent.image_save.while_paused");
    // 2. What changed, and the layer's plan (sizes known before a byte is sent).
    std::vector<FileChange> listed;
    if (!where.walk_upper) {
      auto changes = co_await driver_.changes(container_id);
      if (!changes) co_return fail(std::move(changes.error()));
      listed = std::move(*changes);
    }
    auto plan_job = [where, listed = std::move(listed), targets = state->mount_targets]() mutable -> Result<layer::LayerPlan> {
      std::string root = where.dir;
      if (!where.mount_id_file.empty()) {
        std::ifstream in(where.mount_id_file);
        std::string mount_id;
        if (!(in >> mount_id) || mount_id.empty() || mount_id.find('/') != std::string::npos)
          return fail(ErrorCode::unavailable, "no mount id in " + where.mount_id_file);
        root += "/" + mount_id;
      }
      if (where.walk_upper) {
        auto walked = layer::upper_dir_changes(root);
        if (!walked) return fail(std::move(walked.error()));
        listed = std::move(*walked);
      }
      layer::drop_mount_points(root, listed, targets);
      return layer::plan_layer(root, std::move(listed), static_cast<std::int64_t>(std::time(nullptr)));
    };
    auto planned = co_await offload<Result<layer::LayerPlan>>(pool_.get_executor(), std::move(plan_job));
    if (!planned) co_return fail(std::move(planned.error()));
    planned_at = std::chrono::steady_clock::now();
    const std::uint64_t layer_size = planned->size;
    ahead = std::make_shared<ReadAhead>(std::move(*planned), co_await net::this_coro::executor, stopping_);
    guard.ahead = ahead;
    net::post(pool_.get_executor(), [ahead] { ahead->produce(); });
    const std::int64_t now = std::time(nullptr);
    // 3. The image tar: layer.tar (the layer, streamed), config.json, manifest.json.
    // stage 0: layer.tar's header, 1: the layer, 2: the rest, 3: done
    std::string head = outer_member("layer.tar", layer_size, now);
    RuntimeDriver::BodySource source = [&, head = std::move(head), stage = 0]() mutable -> awaitable<Result<std::string_view>> {
      if (stage == 0) {
        stage = 1;
        co_return std::string_view(head);
      }
      if (stage == 1) {
        auto piece = co_await ahead->next();
        if (!piece) co_return fail(std::move(piece.error()));
        if (!piece->empty()) co_return *piece;
        // Every byte of the container's files is read: it runs on while the engine stores them.
        if (auto s = co_await thaw(); !s) co_return fail(std::move(s.error()));
        layer_read = std::chrono::steady_clock::now();
        diff_id = ahead->diff_id();
        const std::string config = saved_image_config(base, diff_id, utc_now_rfc3339());
        const std::string manifest = saved_image_manifest(base, r.ref);
        tail.assign(layer::tar_padding(layer_size), '\0');
        tail += outer_member("config.json", config.size(), now) + config;
        tail.append(layer::tar_padding(config.size()), '\0');
        tail += outer_member("manifest.json", manifest.size(), now) + manifest;
        tail.append(layer::tar_padding(manifest.size()), '\0');
        tail.append(1024, '\0');
        stage = 2;
        co_return std::string_view(tail);
      }
      co_return std::string_view();
    };
    const std::chrono::milliseconds timeout = std::chrono::minutes(60);
    co_return co_await driver_.load_image(std::move(source), timeout);
  };
  auto loaded = co_await work();
  if (auto s = co_await thaw(); !s)
    spdlog::warn(R"({{"event":"image_save_unpause_failed","container":"{}","error":{}}})", container_id,
                 json::serialize(json::value(s.error().detail)));
  if (!loaded) co_return fail(std::move(loaded.error()));
  fault_point("agent.image_save.after_load");
  auto out = co_await sizes(r.ref, r.base);
  auto ms = [&](auto t) { return std::chrono::duration_cast<std::chrono::milliseconds>(t - started).count(); };
  // planned_ms: paused, changes listed, the layer planned; paused_ms: every byte read (the
  // container runs again); ms: the engine has stored the image.
  if (out && ahead) {
    const auto& plan = ahead->plan();
    spdlog::info(
        R"({{"event":"image_saved","instance":"{}","image":"{}","layer_bytes":{},"entries":{},"cleaned":{},"skipped":{},"planned_ms":{},"paused_ms":{},"ms":{}}})",
        r.instance_id, r.ref, plan.size, plan.entries, plan.cleaned.size(), plan.skipped.size(), ms(planned_at), ms(layer_read),
        ms(std::chrono::steady_clock::now()));
  }
  co_return out;
}

awaitable<Result<json::object>> ImageSaver::save_flattened(std::string container_id, SaveImageRequest r) {
  // Not a structured binding: clang 14 cannot use one across a co_await.
  std::string repo, tag;
  std::tie(repo, tag) = split_ref(r.ref);
  const std::string raw_tag = tag + "-raw", raw_ref = repo + ":" + raw_tag;
  // The intermediates carry kImageSaveLabel (sweep finds them by it); the final image not.
  std::map<std::string, std::string> labels{{std::string(kImageLabel), r.image_id},
                                            {std::string(kImageInstallationLabel), installation_id_}};
  std::map<std::string, std::string> raw_labels = labels;
  raw_labels[std::string(kImageSaveLabel)] = installation_id_;
  // 1. The system disk as it is (the engine pauses a running container for the commit).
  auto raw = co_await driver_.commit(container_id, repo, raw_tag, raw_labels);
  if (!raw) co_return fail(std::move(raw.error()));
  fault_point("agent.image_save.after_raw_commit");
  // 2. Cleaned by a short-lived container of its own.
  ContainerSpec cs;
  cs.name = "gpucloud-save-" + lower(installation_id_) + "-" + lower(r.image_id);
  cs.image = raw_ref;
  cs.labels = {{std::string(kImageSaveLabel), installation_id_}, {std::string(kImageLabel), r.image_id}};
  cs.command = {"/bin/sh", "-c", sanitize_script()};
  cs.network = "none";
  cs.memory_bytes = 256LL << 20;
  cs.cpus = 1;
  if (auto old = co_await driver_.inspect(cs.name); old && old->exists) (void)co_await driver_.remove(old->id);
  auto made = co_await driver_.create(cs);
  if (!made) {
    (void)co_await sweep(r.image_id);
    co_return fail(std::move(made.error()));
  }
  const std::string cleaner = made->id;
  Result<json::object> out = fail(ErrorCode::internal, "not run");
  auto clean_and_commit = [&]() -> awaitable<Result<json::object>> {
    if (auto s = co_await driver_.start(cleaner); !s) co_return fail(std::move(s.error()));
    const std::chrono::milliseconds clean_timeout = std::chrono::minutes(2);  // (named: g++ 12)
    auto ended = co_await driver_.wait(cleaner, clean_timeout);
    if (!ended) co_return fail(std::move(ended.error()));
    if (ended->running) co_return fail(ErrorCode::unavailable, "cleaning the saved image took over 2 minutes");
    if (ended->exit_code != 0) {
      const int tail = 20;
      auto log = co_await driver_.logs(cleaner, tail);
      co_return fail(ErrorCode::internal, "cleaning the saved image failed (exit " + std::to_string(ended->exit_code) +
                                              "): " + (log ? log->substr(0, 500) : std::string()));
    }
    fault_point("agent.image_save.after_clean");
    // 3. The clean filesystem as REF, in one layer: a commit would stack it on REF-raw's
    // layer, where the deleted secrets would still be (under whiteouts, in every export).
    auto final_image = co_await driver_.flatten(cleaner, repo, tag, labels);
    if (!final_image) co_return fail(std::move(final_image.error()));
    co_return co_await sizes(r.ref, r.base);
  };
  out = co_await clean_and_commit();
  (void)co_await driver_.remove(cleaner);
  // Nothing is built on REF-raw: removing it deletes its layer, secrets and all.
  if (auto s = co_await driver_.remove_image(raw_ref); !s)
    spdlog::warn(R"({{"event":"image_raw_not_untagged","image":"{}","error":"{}"}})", raw_ref, s.error().detail);
  if (auto s = co_await sweep(r.image_id); !s)
    spdlog::warn(R"({{"event":"image_save_leftovers","image":"{}","error":"{}"}})", r.ref, s.error().detail);
  if (out) spdlog::info(R"({{"event":"image_saved","instance":"{}","image":"{}"}})", r.instance_id, r.ref);
  co_return out;
}

awaitable<Result<json::object>> ImageSaver::remove(json::object desired) {
  const std::string ref = string_of(desired, "ref");
  if (!valid_ref(ref)) co_return fail(ErrorCode::invalid_argument, "ref must be a gpucloud-image/ reference");
  auto present = co_await driver_.image_inspect(ref);
  if (!present) co_return fail(std::move(present.error()));
  if (!*present) co_return json::object{{"removed", false}};
  if (auto s = co_await driver_.remove_image(ref); !s) co_return fail(std::move(s.error()));
  spdlog::info(R"({{"event":"image_removed","image":"{}"}})", ref);
  co_return json::object{{"removed", true}};
}

}  // namespace gpucloud::agent
