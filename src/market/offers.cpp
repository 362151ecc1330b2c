#include "market/offers.h"

#include <algorithm>

#include <boost/json.hpp>

namespace gpucloud::market {
namespace json = boost::json;

json::array market_offers(const config::Config& config, const std::vector<HostRecord>& hosts, const PriceTable& prices) {
  json::array items;
  for (const auto& zone : config.zones) {
    for (const auto& offer : config.offers) {
      std::int64_t total = 0, free = 0, max_one_host = 0, memory_bytes = 0;
      bool simulated = false, any = false;
      for (const auto& h : hosts) {
        if (h.zone != zone.name) continue;
        auto capacity = to_capacity(h);
        std::int64_t of_model = 0;
        for (const auto& g : h.gpus) {
          if (!g.present || g.model != offer.gpu_model) continue;
          ++of_model;
          any = true;
          simulated = simulated || g.simulated;
          if (memory_bytes == 0) memory_bytes = g.memory_bytes;
        }
        total += of_model;
        if (of_model == 0) continue;
        auto host_free = scheduler::free_gpus_for_offer(capacity, offer.gpu_model, offer.cpu_per_gpu,
                                                        offer.memory_gib_per_gpu);
        free += host_free;
        max_one_host = std::max(max_one_host, host_free);
      }
      if (!any) continue;  // no host in this zone has the model: nothing to rent here
      GpuPrice price = prices.gpus.count(offer.gpu_model) ? prices.gpus.at(offer.gpu_model) : GpuPrice{};
      json::object o;
      o["zone"] = zone.name;
      o["gpu_model"] = offer.gpu_model;
      o["gpu_memory_gib"] = offer.gpu_memory_gib > 0 ? offer.gpu_memory_gib : memory_bytes / (1LL << 30);
      o["simulated"] = simulated;
      o["cpu_per_gpu"] = offer.cpu_per_gpu;
      o["memory_gib_per_gpu"] = offer.memory_gib_per_gpu;
      o["price_per_gpu_hour"] = price.per_gpu_hour;
      o["price_per_gpu_week"] = price.per_gpu_week;
      o["price_per_gpu_month"] = price.per_gpu_month;
      o["gpus_total"] = total;
      o["gpus_free"] = free;
      // The largest instance one could get right now: the most free (with CPU and memory) on one host.
      o["max_gpus_per_instance"] = max_one_host;
      o["currency"] = config.currency;
      items.push_back(std::move(o));
    }
    // The no-GPU offer (无卡模式): a small CPU share for data preparation.
    bool zone_has_host = std::any_of(hosts.begin(), hosts.end(), [&](const HostRecord& h) { return h.zone == zone.name; });
    if (!zone_has_host) continue;
    std::int64_t no_gpu_free = 0;
    for (const auto& h : hosts) {
      if (h.zone != zone.name || h.state != "ready") continue;
      std::int64_t by_cpu = config.no_gpu_offer.cpu > 0 ? (h.cpu - h.cpu_used) / config.no_gpu_offer.cpu : 0;
      std::int64_t by_mem = config.no_gpu_offer.memory_gib > 0 ? (h.memory_gib - h.memory_gib_used) / config.no_gpu_offer.memory_gib : 0;
      no_gpu_free += std::min(by_cpu, by_mem);
    }
    json::object o;
    o["zone"] = zone.name;
    o["gpu_model"] = nullptr;
    o["simulated"] = false;
    o["price_per_hour"] = prices.no_gpu_per_hour;
    o["cpu"] = config.no_gpu_offer.cpu;
    o["memory_gib"] = config.no_gpu_offer.memory_gib;
    o["instances_free"] = no_gpu_free;
    o["currency"] = config.currency;
    items.push_back(std::move(o));
  }
  return items;
}

}  // namespace gpucloud::market
