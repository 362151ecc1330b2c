#pragma once
// The market: offers per (zone, GPU model) with live free counts, plus the no-GPU offer.
#include <boost/json/array.hpp>

#include "config/config.h"
#include "market/hosts.h"
#include "market/prices.h"

namespace gpucloud::market {

// Free counts follow the spec: per host the least of free GPUs, free CPU / CPU per GPU and
// free memory / memory per GPU; only ready hosts count as free.
boost::json::array market_offers(const config::Config& config, const std::vector<HostRecord>& hosts,
                                 const PriceTable& prices);

}  // namespace gpucloud::market
