#include "market/prices.h"

#include <algorithm>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "api/json_input.h"

namespace gpucloud::market {
namespace json = boost::json;

namespace {
struct NamedPrice {
  const char* name;
  std::int64_t PriceTable::*field;
};
constexpr NamedPrice kOtherPrices[] = {
    {"no_gpu_price_per_hour", &PriceTable::no_gpu_per_hour},
    {"system_disk_free_gib", &PriceTable::system_disk_free_gib},
    {"system_disk_per_gib_hour_micros", &PriceTable::system_disk_per_gib_hour_micros},
    {"data_disk_per_gib_hour_micros", &PriceTable::data_disk_per_gib_hour_micros},
    {"snapshot_per_gib_hour_micros", &PriceTable::snapshot_per_gib_hour_micros},
    {"image_per_gib_hour_micros", &PriceTable::image_per_gib_hour_micros},
};

PriceTable from_config(const config::Config& c) {
  PriceTable t;
  for (const auto& o : c.offers) t.gpus[o.gpu_model] = {o.price_per_gpu_hour, o.price_per_gpu_week, o.price_per_gpu_month};
  t.no_gpu_per_hour = c.no_gpu_offer.price_per_hour;
  t.system_disk_free_gib = c.storage_prices.system_disk_free_gib;
  t.system_disk_per_gib_hour_micros = c.storage_prices.system_disk_per_gib_hour_micros;
  t.data_disk_per_gib_hour_micros = c.storage_prices.data_disk_per_gib_hour_micros;
  t.snapshot_per_gib_hour_micros = c.storage_prices.snapshot_per_gib_hour_micros;
  t.image_per_gib_hour_micros = c.storage_prices.image_per_gib_hour_micros;
  return t;
}
}  // namespace

namespace {
// The config's prices as last applied, so a later start can tell an edited config (apply
// it) from an unchanged one (keep what PUT /admin/prices set since).
json::object config_snapshot(const PriceTable& t) {
  json::object gpus;
  for (const auto& [model, p] : t.gpus) gpus[model] = json::array{p.per_gpu_hour, p.per_gpu_week, p.per_gpu_month};
  json::object o{{"gpus", std::move(gpus)}};
  for (const auto& np : kOtherPrices) o[np.name] = t.*np.field;
  return o;
}
}  // namespace

Status seed_prices(store::Database& db, const config::Config& config) {
  PriceTable t = from_config(config);
  json::object now = config_snapshot(t);
  json::object before;
  auto meta = db.one("SELECT value FROM meta WHERE key = 'config_prices'");
  if (!meta) return fail(meta.error());
  if (*meta) {
    boost::system::error_code ec;
    auto parsed = json::parse((*meta)->text(0), ec);
    if (!ec && parsed.is_object()) before = std::move(parsed.as_object());
  }
  const json::object* before_gpus = before.contains("gpus") && before.at("gpus").is_object() ? &before.at("gpus").as_object() : nullptr;
  for (const auto& [model, p] : t.gpus) {
    // New model: insert. Known model whose config price changed since last start: apply it.
    bool changed = before_gpus && before_gpus->contains(model) && before_gpus->at(model) != now.at("gpus").at(model);
    std::string sql = std::string("INSERT INTO gpu_prices (gpu_model, price_per_gpu_hour, price_per_gpu_week, price_per_gpu_month) "
                                  "VALUES (?, ?, ?, ?) ON CONFLICT (gpu_model) DO ") +
                      (changed ? "UPDATE SET price_per_gpu_hour = excluded.price_per_gpu_hour, "
                                 "price_per_gpu_week = excluded.price_per_gpu_week, price_per_gpu_month = excluded.price_per_gpu_month"
                               : "NOTHING");
    if (auto s = db.run(sql, {model, p.per_gpu_hour, p.per_gpu_week, p.per_gpu_month}); !s) return s;
    if (changed) spdlog::info(R"({{"event":"price_from_config","gpu_model":"{}","price_per_gpu_hour":{}}})", model, p.per_gpu_hour);
  }
  for (const auto& np : kOtherPrices) {
    bool changed = before.contains(np.name) && before.at(np.name) != now.at(np.name);
    std::string sql = std::string("INSERT INTO other_prices (name, value) VALUES (?, ?) ON CONFLICT (name) DO ") +
                      (changed ? "UPDATE SET value = excluded.value" : "NOTHING");
    if (auto s = db.run(sql, {np.name, t.*np.field}); !s) return s;
    if (changed) spdlog::info(R"({{"event":"price_from_config","name":"{}","value":{}}})", np.name, t.*np.field);
  }
  return db.run("INSERT INTO meta (key, value) VALUES ('config_prices', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                {json::serialize(now)});
}

Result<PriceTable> load_prices(store::Database& db) {
  PriceTable t;
  auto gpus = db.all("SELECT gpu_model, price_per_gpu_hour, price_per_gpu_week, price_per_gpu_month FROM gpu_prices");
  if (!gpus) return fail(gpus.error());
  for (const auto& r : *gpus) t.gpus[r.text(0)] = {r.int64(1), r.int64(2), r.int64(3)};
  auto others = db.all("SELECT name, value FROM other_prices");
  if (!others) return fail(others.error());
  for (const auto& r : *others)
    for (const auto& np : kOtherPrices)
      if (r.text(0) == np.name) t.*np.field = r.int64(1);
  return t;
}

Status save_prices(store::Database& db, const PriceTable& t) {
  for (const auto& [model, p] : t.gpus)
    if (auto s = db.run("INSERT INTO gpu_prices (gpu_model, price_per_gpu_hour, price_per_gpu_week, price_per_gpu_month) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (gpu_model) DO UPDATE SET "
                        "price_per_gpu_hour = excluded.price_per_gpu_hour, price_per_gpu_week = excluded.price_per_gpu_week, "
                        "price_per_gpu_month = excluded.price_per_gpu_month",
                        {model, p.per_gpu_hour, p.per_gpu_week, p.per_gpu_month});
        !s)
      return s;
  for (const auto& np : kOtherPrices)
    if (auto s = db.run("INSERT INTO other_prices (name, value) VALUES (?, ?) "
                        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        {np.name, t.*np.field});
        !s)
      return s;
  return ok();
}

json::object prices_json(const PriceTable& t, const std::string& currency) {
  json::array gpus;
  for (const auto& [model, p] : t.gpus)
    gpus.push_back(json::object{{"gpu_model", model},
                                {"price_per_gpu_hour", p.per_gpu_hour},
                                {"price_per_gpu_week", p.per_gpu_week},
                                {"price_per_gpu_month", p.per_gpu_month}});
  json::object o;
  o["currency"] = currency;
  o["gpus"] = std::move(gpus);
  for (const auto& np : kOtherPrices) o[np.name] = t.*np.field;
  return o;
}

Result<PriceTable> prices_from_json(const json::object& body, const std::vector<std::string>& known_models) {
  PriceTable t;
  for (const auto& [key, value] : body) {
    bool known = key == "gpus" || key == "currency";
    for (const auto& np : kOtherPrices) known = known || key == np.name;
    if (!known) return fail(ErrorCode::invalid_argument, std::string(key) + ": unknown price field");
  }
  auto gpus = body.find("gpus");
  if (gpus == body.end() || !gpus->value().is_array())
    return fail(ErrorCode::invalid_argument, "gpus: required, a list of {gpu_model, price_per_gpu_hour, ...}");
  for (std::size_t i = 0; i < gpus->value().as_array().size(); ++i) {
    const auto& item = gpus->value().as_array()[i];
    std::string where = "gpus[" + std::to_string(i) + "]";
    if (!item.is_object()) return fail(ErrorCode::invalid_argument, where + ": must be an object");
    const auto& o = item.as_object();
    auto model = api::required_string(o, "gpu_model");
    if (!model) return fail(ErrorCode::invalid_argument, where + "." + model.error().detail);
    if (std::find(known_models.begin(), known_models.end(), *model) == known_models.end())
      return fail(ErrorCode::invalid_argument, where + ".gpu_model: \"" + *model + "\" is not an offer in the config");
    GpuPrice p;
    for (auto [field, target] : {std::pair{"price_per_gpu_hour", &p.per_gpu_hour},
                                 std::pair{"price_per_gpu_week", &p.per_gpu_week},
                                 std::pair{"price_per_gpu_month", &p.per_gpu_month}}) {
      auto v = api::required_int(o, field);
      if (!v) return fail(ErrorCode::invalid_argument, where + "." + v.error().detail);
      if (*v < 0) return fail(ErrorCode::invalid_argument, where + "." + field + ": must not be negative");
      *target = *v;
    }
    t.gpus[*model] = p;
  }
  for (const auto& np : kOtherPrices) {
    auto v = api::required_int(body, np.name);
    if (!v) return fail(v.error());
    if (*v < 0) return fail(ErrorCode::invalid_argument, std::string(np.name) + ": must not be negative");
    t.*np.field = *v;
  }
  return t;
}

std::int64_t hourly_price(const PriceTable& table, const std::optional<std::string>& model, int gpus) {
  if (!model || gpus == 0) return table.no_gpu_per_hour;
  auto it = table.gpus.find(*model);
  return it == table.gpus.end() ? 0 : it->second.per_gpu_hour * gpus;
}

}  // namespace gpucloud::market
