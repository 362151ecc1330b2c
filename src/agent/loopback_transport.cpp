#include "agent/loopback_transport.h"

#include <boost/json.hpp>

namespace gpucloud::agent {
namespace json = boost::json;

namespace {
// What a wire would do: text out, parsed back in (a parse failure is an error value).
Result<json::value> through_text(const json::value& v) { return parse_message(json::serialize(v)); }
}  // namespace

boost::asio::awaitable<Result<std::vector<HostInventory>>> LoopbackJsonAgent::register_hosts() {
  auto hosts = co_await inner_->register_hosts();
  if (!hosts) co_return hosts;
  std::vector<HostInventory> out;
  for (const auto& h : *hosts) {
    ++messages_;
    auto text = through_text(to_json(h));
    if (!text) co_return tl::unexpected(text.error());
    auto copy = host_inventory_from_json(*text);
    if (!copy) co_return tl::unexpected(copy.error());
    out.push_back(std::move(*copy));
  }
  co_return out;
}

boost::asio::awaitable<Result<CommandOutcome>> LoopbackJsonAgent::execute(Command command) {
  ++messages_;
  auto sent_text = through_text(to_json(command));
  if (!sent_text) co_return tl::unexpected(sent_text.error());
  auto sent = command_from_json(*sent_text);
  if (!sent) co_return tl::unexpected(sent.error());
  auto outcome = co_await inner_->execute(std::move(*sent));
  if (!outcome) co_return outcome;
  auto reply = through_text(to_json(*outcome));
  if (!reply) co_return tl::unexpected(reply.error());
  co_return command_outcome_from_json(*reply);
}

void LoopbackJsonAgent::on_heartbeat(std::function<void(Heartbeat)> sink) {
  inner_->on_heartbeat([this, sink = std::move(sink)](Heartbeat beat) {
    ++messages_;
    auto text = through_text(to_json(beat));
    if (!text) return;
    if (auto copy = heartbeat_from_json(*text)) sink(std::move(*copy));
  });
}

void LoopbackJsonAgent::on_samples(std::function<void(SampleReport)> sink) {
  inner_->on_samples([this, sink = std::move(sink)](SampleReport report) {
    ++messages_;
    auto text = through_text(to_json(report));
    if (!text) return;
    if (auto copy = sample_report_from_json(*text)) sink(std::move(*copy));
  });
}

void LoopbackJsonAgent::on_changes(std::function<void(ChangeReport)> sink) {
  inner_->on_changes([this, sink = std::move(sink)](ChangeReport report) {
    ++messages_;
    auto text = through_text(to_json(report));
    if (!text) return;
    if (auto copy = change_report_from_json(*text)) sink(std::move(*copy));
  });
}

}  // namespace gpucloud::agent
