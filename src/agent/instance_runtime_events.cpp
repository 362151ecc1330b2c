#include "agent/instance_runtime.h"

// Engine events (what changed, reported to the control plane; pooled holders that die are
// replaced) and the sampler's targets.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "agent/instance_runtime_internal.h"
#include "agent/local_agent.h"
#include "core/units.h"

namespace gpucloud::agent {

namespace net = boost::asio;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

// ---- engine events -----------------------------------------------------------------------

void InstanceRuntime::report_changes_to(std::function<void(ChangeReport)> sink) {
  if (!driver_->reports_events() || watching_) return;
  change_sink_ = std::move(sink);
  watching_ = true;
  net::co_spawn(strand_, watch_engine_events(), net::detached);
}

void InstanceRuntime::on_engine_event(const EngineEvent& event) {
  if (!watching_) return;
  for (auto& [host, ids] : instances_of(event)) change_sink_(ChangeReport{host, std::move(ids)});
  if ((event.action == "die" || event.action == "destroy") &&
      event.attributes.contains(std::string(kNetworkHolderLabel))) {
    auto pooled = std::find_if(pool_.begin(), pool_.end(), [&](const PoolHolder& h) { return h.id == event.id; });
    if (pooled == pool_.end()) return;
    spdlog::warn(R"({{"event":"network_holder_dropped","holder":"{}","why":"it {} in the pool"}})", pooled->name,
                 event.action == "die" ? "died" : "was removed");
    pool_.erase(pooled);
    net::co_spawn(strand_, replace_pooled_holder(event.action == "die" ? event.id : std::string()), net::detached);
  }
}

awaitable<void> InstanceRuntime::replace_pooled_holder(std::string container_id) {
  if (!container_id.empty()) co_await remove_container_quietly(std::move(container_id));
  schedule_refill();
}

std::map<std::string, std::vector<std::string>> InstanceRuntime::instances_of(const EngineEvent& event) const {
  std::map<std::string, std::vector<std::string>> out;
  const auto own = event.attributes.find(std::string(kInstanceLabel));
  const bool holder = event.attributes.contains(std::string(kNetworkHolderLabel));
  for (const auto& [id, slot] : instances_) {
    if (!slot->record) continue;
    const auto& record = *slot->record;
    const bool concerned = (own != event.attributes.end() && own->second == id) ||
                           (holder && !record.holder.id.empty() && record.holder.id == event.id);
    if (concerned) out[record.desired.host].push_back(id);
  }
  return out;
}

awaitable<void> InstanceRuntime::watch_engine_events() {
  constexpr auto kFirstPause = std::chrono::seconds(1), kLongestPause = std::chrono::seconds(30);
  auto pause = std::chrono::seconds(kFirstPause);
  bool ever_connected = false;
  std::string last_error;
  net::steady_timer timer(strand_);
  while (watching_) {
    bool connected = false;
    auto on_connected = [&] {
      connected = true;
      // Reconnected: what happened meanwhile was not seen, so everything may have changed.
      if (ever_connected && watching_) change_sink_(ChangeReport{});
      ever_connected = true;
      if (!last_error.empty()) spdlog::info("{}", R"({"event":"engine_events_following"})");
      last_error.clear();
    };
    // instances_ and the pool are touched on the strand, where they are written.
    auto on_event = [this](EngineEvent event) {
      net::post(strand_, [this, event = std::move(event)] { on_engine_event(event); });
    };
    std::map<std::string, std::string> labels{{std::string(kInstallationLabel), installation_id_}};
    auto s = co_await driver_->watch_events(std::move(labels), on_event, on_connected);
    if (!watching_) break;
    std::string error = s ? std::string("the engine ended the event stream") : s.error().detail;
    // The first retry after losing a stream comes at once-ish; failed retries back off.
    pause = connected || last_error.empty() ? std::chrono::seconds(kFirstPause)
                                            : std::min(pause * 2, std::chrono::seconds(kLongestPause));
    if (error != last_error)
      spdlog::warn(R"({{"event":"engine_events_lost","error":{},"retry_in_s":{}}})", q(error), pause.count());
    last_error = error;
    timer.expires_after(pause);
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

// ---- the sampler's targets ----------------------------------------------------------------

void InstanceRuntime::register_sample_source(LocalAgent& agent) {
  agent.set_sample_source([this](std::vector<std::string> stale) { return sample_targets(std::move(stale)); });
}

awaitable<Result<std::vector<sampling::SampleTarget>>> InstanceRuntime::sample_targets(std::vector<std::string> stale) {
  co_return co_await net::co_spawn(strand_, sample_targets_on_strand(std::move(stale)), use_awaitable);
}

awaitable<Result<std::vector<sampling::SampleTarget>>> InstanceRuntime::sample_targets_on_strand(
    std::vector<std::string> stale) {
  if (auto s = co_await ensure_started(); !s) co_return fail(std::move(s.error()));
  for (const auto& id : stale) sample_pids_.erase(id);
  // Copied first: commands for these instances may run while the engine is asked below.
  std::vector<sampling::SampleTarget> candidates;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record || slot->record->desired.state != "running" || slot->record->container_id.empty()) continue;
    const InstanceRecord& r = *slot->record;
    sampling::SampleTarget t;
    t.instance_id = id;
    t.host_name = r.desired.host;
    t.container_id = r.container_id;
    t.gpu_uuids = r.desired.gpu_uuids;
    t.gpus_simulated = r.desired.gpus_simulated;
    t.memory_limit_bytes = r.desired.memory_gib * kGiB;
    candidates.push_back(std::move(t));
  }
  std::map<std::string, int> known;
  std::vector<sampling::SampleTarget> out;
  bool engine_away = false;
  for (auto& t : candidates) {
    auto cached = sample_pids_.find(t.container_id);
    if (cached != sample_pids_.end()) {
      t.pid = cached->second;
    } else {
      if (engine_away) continue;
      auto c = co_await driver_->inspect(t.container_id);
      // The engine away: the instances whose pid is known are still sampled (cgroups need
      // no engine); the others wait for the next round.
      if (!c) {
        engine_away = true;
        continue;
      }
      if (!c->exists || !c->running || c->pid <= 0) continue;  // asked again next round
      t.pid = c->pid;
    }
    known[t.container_id] = t.pid;
    out.push_back(std::move(t));
  }
  sample_pids_ = std::move(known);  // containers gone or stopped are forgotten
  co_return out;
}

}  // namespace gpucloud::agent
