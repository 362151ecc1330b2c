#include "agent/instance_runtime.h"

// Published ports: gpucloud's nftables table from every running instance's ports, and a
// change of ports (or their sources) alone applied before any engine call.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/instance_runtime_internal.h"
#include "core/offload.h"

namespace gpucloud::agent {

namespace net = boost::asio;
namespace json = boost::json;
using net::awaitable;
using net::use_awaitable;
using namespace runtime_detail;

// ---- published ports -------------------------------------------------------------------

std::vector<firewall::PublishedPort> InstanceRuntime::published_ports() const {
  std::vector<firewall::PublishedPort> out;
  for (const auto& [id, slot] : instances_) {
    if (!slot->record || slot->record->desired.state != "running") continue;
    for (const auto& p : slot->record->desired.ports) {
      firewall::PublishedPort port;
      port.instance_id = id;
      port.host_port = p.host_port;
      port.container_ip = slot->record->ipv4;
      port.container_port = p.container_port;
      port.protocol = p.protocol;
      for (const auto& cidr : p.allowed) port.allowed.push_back(firewall::SourceRule{cidr});
      out.push_back(std::move(port));
    }
  }
  return out;
}

Status InstanceRuntime::check_ports_free(const InstanceSpec& spec) const {
  for (const auto& [id, slot] : instances_) {
    // Only running instances publish ports (published_ports): a stopped record's ports may
    // already belong to another instance in the store, which is what decides.
    if (!slot->record || id == spec.instance_id || slot->record->desired.state != "running") continue;
    for (const auto& theirs : slot->record->desired.ports) {
      for (const auto& ours : spec.ports) {
        if (ours.host_port == theirs.host_port && ours.protocol == theirs.protocol) {
          return fail(ErrorCode::conflict, "host port " + ours.protocol + "/" +
                                               std::to_string(ours.host_port) +
                                               " is already published for instance " + id);
        }
      }
    }
  }
  return ok();
}

awaitable<Status> InstanceRuntime::apply_firewall() {
  // The snapshot is taken now, on the strand; the single firewall thread applies snapshots
  // in the order they were taken, so the last one applied is the newest.
  auto ports = published_ports();
  // The bridge as the network record has it (persisted, so the guard stays in the table
  // also when a ports-only change is applied while the engine is away).
  firewall::HostGuard guard;
  if (network_ && !network_->bridge.empty()) guard.interfaces.push_back(network_->bridge);
  auto job = [this, ports = std::move(ports), guard = std::move(guard)]() -> Status {
    return options_.apply_ports ? options_.apply_ports(ports) : firewall_.apply(ports, guard);
  };
  co_return co_await offload<Status>(firewall_thread_.get_executor(), std::move(job));
}

bool InstanceRuntime::only_ports_differ(const InstanceSpec& recorded, const InstanceSpec& desired) {
  // Published only while running; a stopped instance's ports are in no table.
  if (recorded.state != "running" || desired.state != "running") return false;
  json::object a = to_json(recorded), b = to_json(desired);
  if (a == b) return false;  // nothing changed: the full ensure (it repairs what drifted)
  a.erase("ports");
  b.erase("ports");
  return a == b;
}

awaitable<Status> InstanceRuntime::apply_ports_change(Instance& slot, InstanceSpec spec, std::int64_t generation) {
  if (auto s = check_ports_free(spec); !s) co_return s;
  const InstanceRecord old = *slot.record;
  InstanceRecord updated = old;
  updated.desired = std::move(spec);
  updated.generation = std::max(updated.generation, generation);
  // Taken in memory at once (no suspension since the check), so no other instance's ensure
  // can claim these host ports meanwhile; the file follows.
  slot.record = updated;
  if (auto s = co_await save_record(updated); !s) {
    slot.record = old;
    co_return s;
  }
  if (auto s = co_await apply_firewall(); !s) {
    // nft applies a whole file or nothing: the table still holds the old record's rules.
    co_await restore_record(slot, old);
    co_return s;
  }
  spdlog::info(R"({{"event":"instance_ports_applied","instance":"{}","generation":{}}})", old.desired.instance_id,
               updated.generation);
  co_return ok();
}

}  // namespace gpucloud::agent
