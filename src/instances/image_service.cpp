#include "instances/image_service.h"

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "instances/image_actions.h"
#include "instances/instance_record.h"
#include "instances/system_disk.h"
#include "market/hosts.h"

namespace gpucloud::instances {
namespace asio = boost::asio;
namespace json = boost::json;

ImageService::ImageService(asio::any_io_executor loop, const config::Config& config, store::Store& store,
                           PlatformClock& clock, agent::HostAgent& agent)
    : loop_(loop), config_(config), store_(store), clock_(clock), agent_(agent), sweep_timer_(loop) {}

ImageService::~ImageService() { sweep_timer_.cancel(); }

void ImageService::stop() {
  stopped_ = true;
  sweep_timer_.cancel();
}

asio::awaitable<void> ImageService::start() {
  background_ = true;
  to_leader_ = nullptr;
  auto load = [](store::Database& db) -> Result<std::pair<std::vector<std::string>, std::vector<Image>>> {
    auto rows = db.all("SELECT id FROM images WHERE visibility = 'private' AND state = 'creating'");
    if (!rows) return fail(rows.error());
    std::vector<std::string> creating;
    for (const auto& r : *rows) creating.push_back(r.text(0));
    auto deleted = deleted_custom_images(db);
    if (!deleted) return fail(deleted.error());
    return std::make_pair(std::move(creating), std::move(*deleted));
  };
  auto found = co_await store_.read(std::move(load));
  if (!found) {
    spdlog::warn("images: {}", found.error().detail);
  } else {
    for (const auto& id : found->first) save(id);
    for (const auto& image : found->second) arm(image);
  }
  schedule_sweep();
}

void ImageService::save(const std::string& image_id) {
  if (!saving_.insert(image_id).second) return;
  asio::co_spawn(loop_, run_save(image_id), asio::detached);
}

asio::awaitable<void> ImageService::run_save(std::string image_id) {
  struct Inputs {
    Image image;
    std::string host, instance_id, base;
    std::int64_t max_used_bytes = 0;
  };
  auto load = [image_id](store::Database& db) -> Result<Inputs> {
    Inputs in;
    auto image = find_image_by_id(db, image_id);
    if (!image) return fail(image.error());
    in.image = *image;
    if (!image->source_instance) return fail(ErrorCode::internal, "image " + image_id + " names no instance");
    auto instance = load_instance(db, *image->source_instance);
    if (!instance) return fail(instance.error());
    if (!*instance || !(*instance)->host_name)
      return fail(ErrorCode::conflict, "instance " + *image->source_instance + " is gone");
    in.host = *(*instance)->host_name;
    in.instance_id = (*instance)->id;
    in.max_used_bytes = (*instance)->system_disk_gib * kGiBBytes;
    if (image->base_image_id) {
      auto base = find_image_by_id(db, *image->base_image_id);
      if (base) in.base = base->engine_image;
    }
    return in;
  };
  auto inputs = co_await store_.read(std::move(load));
  SaveResult result;
  if (!inputs) {
    result.reason = inputs.error().detail;
  } else if (inputs->image.state != "creating") {
    saving_.erase(image_id);
    co_return;
  } else {
    json::object desired{{"instance_id", inputs->instance_id},
                         {"image_id", image_id},
                         {"base", inputs->base},
                         {"max_used_bytes", inputs->max_used_bytes}};
    // Stable: a repeat (after a crash) is the same command.
    agent::Command command{"cmd-save-" + image_id, inputs->host, "image.save", std::move(desired)};
    auto outcome = co_await agent_.execute(std::move(command));
    if (!outcome) {
      result.reason = outcome.error().detail;
    } else if (!outcome->ok) {
      result.reason = agent::outcome_error(*outcome).detail;
    } else {
      const auto& o = outcome->observed;
      const auto* ref = o.if_contains("engine_image");
      const auto* size = o.if_contains("size_bytes");
      const auto* own = o.if_contains("own_size_bytes");
      if (ref && ref->is_string() && size && size->is_int64() && own && own->is_int64()) {
        result.ok = true;
        result.engine_image = std::string(ref->as_string());
        result.size_bytes = size->as_int64();
        result.own_size_bytes = own->as_int64();
      } else {
        result.reason = "the agent's answer to image.save is malformed";
      }
    }
  }
  auto record = [image_id, result, now = clock_.now()](store::Database& db) {
    return finish_save_image(db, image_id, result, now);
  };
  if (auto s = co_await store_.write(std::move(record)); !s) spdlog::warn("image save {}: {}", image_id, s.error().detail);
  spdlog::info(R"({{"event":"image_save_finished","image":"{}","ok":{}}})", image_id, result.ok);
  saving_.erase(image_id);
}

void ImageService::arm(const Image& deleted) {
  if (!deleted.deleted_at || deleted.purged_at) return;
  if (!background_) {
    if (to_leader_) to_leader_(deleted.id);
    return;
  }
  const SysTime at = *deleted.deleted_at;
  const int days = config_.policy.recycle_days;
  std::string id = deleted.id;
  if (!deleted.purge_warned)
    clock_.schedule_at(purge_warning_due(at, days), "image.purge_warning " + id,
                       [this, id, at]() { return warn_timer(id, at); });
  clock_.schedule_at(purge_due(at, days), "image.purge " + id, [this, id, at]() { return purge_timer(id, at); });
}

asio::awaitable<void> ImageService::arm_deleted(std::string image_id) {
  if (stopped_ || !background_) co_return;
  auto load = [](store::Database& db) { return deleted_custom_images(db); };
  auto deleted = co_await store_.read(std::move(load));
  if (!deleted) {
    spdlog::warn("images: {}", deleted.error().detail);
    co_return;
  }
  // Timers armed twice for one deletion are harmless: each purge is a compare-and-set on it.
  for (const auto& image : *deleted)
    if (image_id.empty() || image.id == image_id) arm(image);
}

asio::awaitable<void> ImageService::warn_timer(std::string image_id, SysTime deleted_at) {
  auto write = [image_id, deleted_at, now = clock_.now()](store::Database& db) {
    return warn_purge(db, image_id, deleted_at, now);
  };
  if (auto s = co_await store_.write(std::move(write)); !s) spdlog::warn("image purge warning: {}", s.error().detail);
}

asio::awaitable<void> ImageService::purge_timer(std::string image_id, SysTime deleted_at) {
  auto write = [image_id, deleted_at, now = clock_.now()](store::Database& db) -> Status {
    // The warning first, if its own timer has not run (e.g. recycle_days = 1).
    if (auto s = warn_purge(db, image_id, deleted_at, now); !s) return s;
    return purge_image(db, image_id, deleted_at, now);
  };
  if (auto s = co_await store_.write(std::move(write)); !s) spdlog::warn("image purge: {}", s.error().detail);
  co_await sweep();
}

asio::awaitable<void> ImageService::sweep() {
  if (sweeping_) co_return;
  sweeping_ = true;
  auto load = [](store::Database& db) -> Result<std::vector<std::pair<Image, std::string>>> {
    auto images = engine_images_to_remove(db);
    if (!images) return fail(images.error());
    std::vector<std::pair<Image, std::string>> out;
    for (auto& i : *images) {
      std::string host;
      if (i.host_id)
        if (auto h = market::find_host(db, *i.host_id); h && *h) host = (*h)->name;
      out.emplace_back(std::move(i), std::move(host));
    }
    return out;
  };
  auto due = co_await store_.read(std::move(load));
  if (due) {
    for (const auto& [image, host] : *due) {
      if (host.empty()) continue;
      json::object desired{{"ref", image.engine_image}};
      agent::Command command{"cmd-image-remove-" + image.id + "-" + std::to_string(to_unix_micros(clock_.now())), host,
                             "image.remove", std::move(desired)};
      auto outcome = co_await agent_.execute(std::move(command));
      if (!outcome || !outcome->ok) {
        // In use by a container the store no longer explains, or the engine is away: next sweep.
        spdlog::warn(R"({{"event":"image_engine_copy_kept","image":"{}","detail":"{}"}})", image.id,
                     outcome ? agent::outcome_error(*outcome).detail : outcome.error().detail);
        continue;
      }
      auto mark = [id = image.id](store::Database& db) { return mark_engine_removed(db, id); };
      if (auto s = co_await store_.write(std::move(mark)); !s) spdlog::warn("image sweep: {}", s.error().detail);
    }
  }
  sweeping_ = false;
}

void ImageService::schedule_sweep() {
  if (stopped_) return;
  sweep_timer_.expires_after(std::chrono::seconds(30));
  sweep_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    asio::co_spawn(loop_, sweep_and_reschedule(), asio::detached);
  });
}

asio::awaitable<void> ImageService::sweep_and_reschedule() {
  co_await sweep();
  schedule_sweep();
}

}  // namespace gpucloud::instances
