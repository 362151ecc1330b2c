#include "agent/image_saver.h"

#include <cctype>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent_state.h"
#include "core/fault_points.h"

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
    if (b && *b) base_size = (*b)->size_bytes;
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
      co_return ok();  // a runtime without image listing: nothing more to find
    co_return fail(std::move(images.error()));
  }
  for (const auto& id : *images) {
    if (auto s = co_await driver_.remove_image(id); !s) co_return s;
    spdlog::info(R"({{"event":"image_save_leftover_removed","image":"{}"}})", id);
  }
  co_return ok();
}

awaitable<Result<json::object>> ImageSaver::save(std::string container_id, SaveImageRequest r) {
  // A repeat of a finished save (what it died before removing goes now).
  if (auto done = co_await driver_.image_inspect(r.ref); done && *done) {
    if (auto s = co_await sweep(r.image_id); !s) co_return fail(std::move(s.error()));
    co_return co_await sizes(r.ref, r.base);
  }
  if (r.max_used_bytes > 0) {
    auto used = co_await driver_.system_disk_used(container_id);
    if (used && *used > r.max_used_bytes)
      co_return fail(ErrorCode::invalid_argument, "the system disk holds " + std::to_string(*used) +
                                                      " bytes, more than its size (" + std::to_string(r.max_used_bytes) +
                                                      "); free some space first");
  }
  auto [repo, tag] = split_ref(r.ref);
  const std::string raw_tag = tag + "-raw", raw_ref = repo + ":" + raw_tag;
  // What an earlier attempt left (it died at any step: its raw copy, tagged or not since a
  // second commit moved the tag, and its cleaner) goes before anything is made again.
  if (auto s = co_await sweep(r.image_id); !s) co_return fail(std::move(s.error()));
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
