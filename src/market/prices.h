#pragma once
// The price table: per GPU model (hour, week, month), the no-GPU hour, storage per GiB-hour
// in millionths of the smallest unit, and the free system-disk allowance. Seeded from the
// config on first start; the operator changes it with PUT /admin/prices.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "config/config.h"
#include "store/database.h"

namespace gpucloud::market {

struct GpuPrice {
  std::int64_t per_gpu_hour = 0, per_gpu_week = 0, per_gpu_month = 0;
};

struct PriceTable {
  std::map<std::string, GpuPrice> gpus;
  std::int64_t no_gpu_per_hour = 0;
  std::int64_t system_disk_free_gib = 0;
  std::int64_t system_disk_per_gib_hour_micros = 0;
  std::int64_t data_disk_per_gib_hour_micros = 0;
  std::int64_t snapshot_per_gib_hour_micros = 0;
  std::int64_t image_per_gib_hour_micros = 0;
};

// Writes config prices for what the store does not have yet; existing prices are kept.
Status seed_prices(store::Database& db, const config::Config& config);
Result<PriceTable> load_prices(store::Database& db);
// The hourly price of `gpus` GPUs of `model` (no model or 0 GPUs: the no-GPU price); 0 for a
// model the table has no price for.
std::int64_t hourly_price(const PriceTable& table, const std::optional<std::string>& model, int gpus);
Status save_prices(store::Database& db, const PriceTable& table);

boost::json::object prices_json(const PriceTable& table, const std::string& currency);
// Parses a PUT body; models must be known offers (`known_models`), amounts non-negative integers.
Result<PriceTable> prices_from_json(const boost::json::object& body, const std::vector<std::string>& known_models);

}  // namespace gpucloud::market
