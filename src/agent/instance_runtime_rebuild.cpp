#include "agent/instance_runtime.h"

// What an instance's container is made with (its spec: network, GPUs, system disk, lxcfs),
// how a stopped one that no longer fits the desired spec is rebuilt (drift, update, commit or
// flatten), and what system disks the engine can limit.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "agent/gpu/gpu_injector.h"
#include "agent/instance_runtime_internal.h"
#include "agent/lxcfs.h"
#include "agent/runtime/layer_filesystems.h"
#include "core/offload.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

namespace {

// Data disks in a canonical order: the same set in another order is no change.
std::vector<disks::DataDiskAttachment> sorted_disks(std::vector<disks::DataDiskAttachment> d) {
  std::sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.disk_id < b.disk_id; });
  return d;
}

}  // namespace

// ---- the container's spec ----------------------------------------------------------------

std::vector<std::string> InstanceRuntime::effective_gpus(const InstanceSpec& spec) const {
  if (!spec.gpus_simulated) return spec.gpu_uuids;
  if (options_.gpu_injector) {
    auto mode = options_.gpu_injector->host_mode(spec.host);
    if (mode && mode->mode == gpu::InjectionMode::builtin) return spec.gpu_uuids;
  }
  return {};
}

Result<ContainerSpec> InstanceRuntime::instance_container_spec(const InstanceRecord& record, const InstanceSpec& spec,
                                                               std::vector<Mount> mounts) const {
  const std::string& id = spec.instance_id;
  ContainerSpec cs;
  cs.name = container_name(id);
  cs.image = record.system_images.empty() ? spec.image : record.system_images.back();
  cs.hostname = spec.name;
  cs.labels = {{std::string(kInstallationLabel), installation_id_}, {std::string(kInstanceLabel), id}};
  cs.cpus = spec.cpu;
  cs.memory_bytes = spec.memory_gib * kGiB;
  if (record.holder.id.empty()) {
    cs.network = network_name_;
    cs.ipv4 = record.ipv4;
  } else {
    cs.join_network_of = record.holder.id;  // the engine sends no Hostname in this mode
  }
  cs.init_config_dir = store_.config_dir(id);
  cs.gpu_uuids = effective_gpus(spec);
  // The engine holds the size (btrfs, zfs); a layer filesystem is made after the create.
  if (system_disk_ && system_disk_->enforced && !system_disk_->layer_filesystem) cs.system_disk_gib = spec.system_disk_gib;
  cs.mounts = std::move(mounts);
  if (options_.gpu_injector) {
    auto plan = options_.gpu_injector->plan(spec.host, cs.gpu_uuids);
    if (!plan) return fail(std::move(plan.error()));
    if (plan->mode == gpu::InjectionMode::builtin) {
      cs.gpu_device_request = false;
      for (const auto& d : plan->devices) cs.devices.push_back({d.path_on_host, d.path_in_container});
      for (const auto& m : plan->mounts) cs.mounts.push_back(Mount{m.host_path, m.container_path, true});
      for (const auto& e : plan->env) cs.env.push_back(e);
    }
  }
  if (!options_.lxcfs_dir.empty()) {
    auto lxcfs = probe_lxcfs(options_.lxcfs_dir);
    for (auto& m : lxcfs.mounts) cs.mounts.push_back(std::move(m));
  }
  return cs;
}

// ---- drift and rebuilds -------------------------------------------------------------------

std::vector<std::string> InstanceRuntime::drift_of(const CreatedWith& cw, const InstanceSpec& spec) const {
  std::vector<std::string> drift;
  if (!cw.image.empty() && cw.image != spec.image) drift.emplace_back("image");
  if (!cw.hostname.empty() && cw.hostname != spec.name) drift.emplace_back("name");
  if (cw.cpu > 0 && std::fabs(cw.cpu - spec.cpu) > 1e-9) drift.emplace_back("cpu");
  if (cw.memory_gib > 0 && cw.memory_gib != spec.memory_gib) drift.emplace_back("memory_gib");
  if (cw.gpu_uuids != effective_gpus(spec)) drift.emplace_back("gpu_uuids");
  if (sorted_disks(cw.data_disks) != sorted_disks(spec.data_disks)) drift.emplace_back("data_disks");
  return drift;
}

int InstanceRuntime::default_max_system_image_layers() {
  if (const char* v = std::getenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != nullptr && *end == '\0' && n > 0 && n < 1000) return static_cast<int>(n);
  }
  return 100;
}

InstanceRuntime::Rebuild InstanceRuntime::rebuild_for(const std::vector<std::string>& drift, int image_layers,
                                                      int max_layers) {
  // The image is what the engine resolved at create; a newer tag never forces a rebuild.
  auto has = [&](std::string_view d) { return std::find(drift.begin(), drift.end(), d) != drift.end(); };
  if (has("name") || has("gpu_uuids") || has("data_disks")) {
    // A commit adds one layer on top of the image the container came from.
    return image_layers + 1 > max_layers ? Rebuild::flatten : Rebuild::commit;
  }
  if (has("cpu") || has("memory_gib")) return Rebuild::update;
  return Rebuild::none;
}

awaitable<int> InstanceRuntime::system_image_layers(const InstanceRecord& record, const InstanceSpec& spec) {
  const std::string image = !record.system_images.empty()      ? record.system_images.back()
                            : !record.created_with.image.empty() ? record.created_with.image
                                                                  : spec.image;
  auto info = co_await driver_->image_inspect(image);
  if (!info || !*info) co_return 0;  // unknown: a commit, as before; the next rebuild sees it
  co_return (*info)->layers;
}

awaitable<Result<std::string>> InstanceRuntime::commit_system_disk(const InstanceRecord& record, bool flatten) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string repo = "gpucloud-system/" + lower(installation_id_) + "-" + lower(record.desired.instance_id);
  const std::string tag = "r" + std::to_string(record.system_images.size() + 1);
  std::map<std::string, std::string> labels{{std::string(kInstallationLabel), installation_id_},
                                            {std::string(kInstanceLabel), record.desired.instance_id}};
  Result<std::string> made;
  if (flatten) {
    made = co_await driver_->flatten(record.container_id, repo, tag, std::move(labels));
  } else {
    made = co_await driver_->commit(record.container_id, repo, tag, std::move(labels));
  }
  if (!made) co_return fail(std::move(made.error()));
  co_return repo + ":" + tag;
}

// ---- system disks --------------------------------------------------------------------------

awaitable<void> InstanceRuntime::detect_system_disk_limit() {
  if (system_disk_) co_return;
  auto info = co_await driver_->fingerprint();
  if (!info) co_return;  // asked again next time
  storage_driver_ = info->storage_driver;
  std::string layer_fs_unavailable = "[agent] system_disk_filesystems is false";
  if (options_.layer_filesystems && info->storage_driver == "overlay2") {
    auto check = [filesystems = options_.layer_filesystems]() { return filesystems->check(); };
    auto can = co_await offload<Status>(layer_fs_pool_.get_executor(), std::move(check));
    layer_fs_unavailable = can ? std::string() : can.error().detail;
  }
  system_disk_ = system_disk_limit_for(info->storage_driver, layer_fs_unavailable);
  if (options_.gpu_injector) options_.gpu_injector->set_engine_nvidia_runtime(info->nvidia_runtime);
  spdlog::info(R"({{"event":"system_disk_limit","storage_driver":{},"how":"{}","reason":{}}})", q(storage_driver_),
               system_disk_->how(), q(system_disk_->reason));
}

awaitable<Status> InstanceRuntime::make_layer_filesystem(std::string container_id, std::int64_t gib) {
  if (!system_disk_ || !system_disk_->layer_filesystem || gib <= 0) co_return ok();
  auto layer = co_await driver_->layer_dir(container_id);
  if (!layer) co_return fail(std::move(layer.error()));
  if (layer->storage_driver != "overlay2") co_return fail(ErrorCode::internal, "system disk filesystem on " + layer->storage_driver);
  auto make = [filesystems = options_.layer_filesystems, container_id, upper = layer->dir, gib]() {
    return filesystems->make(container_id, upper, gib);
  };
  co_return co_await offload<Status>(layer_fs_pool_.get_executor(), std::move(make));
}

awaitable<Status> InstanceRuntime::mount_layer_filesystem(std::string container_id, std::int64_t make_gib) {
  if (!system_disk_ || !system_disk_->layer_filesystem) co_return ok();
  auto layer = co_await driver_->layer_dir(container_id);
  if (!layer) co_return fail(std::move(layer.error()));
  if (layer->storage_driver != "overlay2") co_return ok();
  auto prepare = [filesystems = options_.layer_filesystems, container_id, upper = layer->dir, make_gib]() -> Status {
    if (filesystems->has(container_id)) return filesystems->mount(container_id, upper);
    if (make_gib > 0) return filesystems->make(container_id, upper, make_gib);
    return ok();  // a container made before system disk filesystems: it keeps no limit
  };
  co_return co_await offload<Status>(layer_fs_pool_.get_executor(), std::move(prepare));
}

awaitable<Status> InstanceRuntime::remove_container(std::string container_id) {
  if (auto s = co_await driver_->remove(container_id); !s) co_return s;
  if (!options_.layer_filesystems) co_return ok();
  auto forget = [filesystems = options_.layer_filesystems, container_id]() { return filesystems->forget(container_id); };
  auto forgotten = co_await offload<Status>(layer_fs_pool_.get_executor(), std::move(forget));
  if (!forgotten)
    spdlog::warn(R"({{"event":"system_disk_filesystem_not_removed","container":"{}","error":{}}})", container_id,
                 q(forgotten.error().detail));
  co_return ok();
}

}  // namespace gpucloud::agent
