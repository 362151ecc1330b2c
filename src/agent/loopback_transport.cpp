#include "agent/loopback_transport.h"

#include <boost/json.hpp>

namespace gpucloud::agent {
namespace json = boost::json;

namespace {
json::value through_text(const json::value& v) { return json::parse(json::serialize(v)); }
}  // namespace

boost::asio::awaitable<Result<std::vector<HostInventory>>> LoopbackJsonAgent::register_hosts() {
  auto hosts = co_await inner_->register_hosts();
  if (!hosts) co_return hosts;
  std::vector<HostInventory> out;
  for (const auto& h : *hosts) {
    ++messages_;
    auto copy = host_inventory_from_json(through_text(to_json(h)));
    if (!copy) co_return tl::unexpected(copy.error());
    out.push_back(std::move(*copy));
  }
  co_return out;
}

boost::asio::awaitable<Result<CommandOutcome>> LoopbackJsonAgent::execute(Command command) {
  ++messages_;
  auto sent = command_from_json(through_text(to_json(command)));
  if (!sent) co_return tl::unexpected(sent.error());
  auto outcome = co_await inner_->execute(std::move(*sent));
  if (!outcome) co_return outcome;
  co_return command_outcome_from_json(through_text(to_json(*outcome)));
}

void LoopbackJsonAgent::on_heartbeat(std::function<void(Heartbeat)> sink) {
  inner_->on_heartbeat([this, sink = std::move(sink)](Heartbeat beat) {
    ++messages_;
    if (auto copy = heartbeat_from_json(through_text(to_json(beat)))) sink(std::move(*copy));
  });
}

}  // namespace gpucloud::agent
