// The OpenAPI document against the real route table (an App registers every handler file's
// routes) and against the JSON the handlers' serializers really produce.
#include <filesystem>
#include <regex>
#include <set>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "billing/ledger.h"
#include "core/unique_temp_dir.h"
#include <sodium.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "api/auth_views.h"
#include "events/events.h"
#include "instances/images.h"
#include "instances/instance_record.h"
#include "market/offers.h"
#include "market/prices.h"
#include "server/app.h"
#include "server/openapi.h"
#include "server/handlers/recycle_bin.h"
#include "server/openapi_schemas.h"
#include "server/pagination.h"

namespace gpucloud::server {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

class OpenApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_GE(sodium_init(), 0);
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-openapi");
    config::Config cfg;
    cfg.data_dir = dir_.string();
    auto store = store::Store::open((dir_ / "test.db").string(), 1);
    ASSERT_TRUE(store) << store.error().detail;
    io_ = new boost::asio::io_context(1);
    auto clock = std::make_unique<PlatformClock>(io_->get_executor(), false, system_now());
    app_ = new App(io_->get_executor(), std::move(cfg), std::move(*store), std::move(clock));
    doc_ = new json::object(openapi_document(app_->router()));
  }
  static void TearDownTestSuite() {
    delete doc_;
    delete app_;
    delete io_;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static const json::object& schemas() { return doc_->at("components").at("schemas").as_object(); }
  static const json::object& op(std::string_view path, std::string_view method) {
    return doc_->at("paths").at(path).at(method).as_object();
  }

  static inline fs::path dir_;
  static inline boost::asio::io_context* io_ = nullptr;
  static inline App* app_ = nullptr;
  static inline json::object* doc_ = nullptr;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void collect_refs(const json::value& v, std::vector<std::string>& out) {
  if (v.is_object()) {
    for (const auto& [key, child] : v.as_object()) {
      if (key == "$ref" && child.is_string()) out.emplace_back(child.as_string());
      else collect_refs(child, out);
    }
  } else if (v.is_array()) {
    for (const auto& child : v.as_array()) collect_refs(child, out);
  }
}

const json::object& resolve(const json::object& schemas, const json::object& schema) {
  if (auto r = schema.if_contains("$ref")) {
    std::string name(r->as_string());
    return resolve(schemas, schemas.at(name.substr(name.rfind('/') + 1)).as_object());
  }
  return schema;
}

// An object schema flattened through $ref and allOf: every property it allows, every one it
// requires, and whether it is nullable.
struct Flat {
  json::object properties;
  std::set<std::string> required;
  bool nullable = false;
  bool open = false;  // additionalProperties allowed with no properties listed
  const json::object* leaf = nullptr;  // the schema when it is not an object composition
};

Flat flatten(const json::object& schemas, const json::object& given) {
  const json::object& schema = resolve(schemas, given);
  Flat f;
  f.nullable = schema.contains("nullable") && schema.at("nullable").as_bool();
  if (auto parts = schema.if_contains("allOf")) {
    for (const auto& part : parts->as_array()) {
      Flat p = flatten(schemas, part.as_object());
      for (const auto& [k, v] : p.properties) f.properties[k] = v;
      f.required.insert(p.required.begin(), p.required.end());
      f.nullable = f.nullable || p.nullable;
      f.open = f.open || p.open;
      if (p.leaf) f.leaf = p.leaf;
    }
    return f;
  }
  if (auto props = schema.if_contains("properties")) f.properties = props->as_object();
  if (auto req = schema.if_contains("required"))
    for (const auto& r : req->as_array()) f.required.emplace(r.as_string());
  f.open = !schema.contains("properties");
  if (!schema.contains("properties")) f.leaf = &schema;
  return f;
}

// Checks a value the server produces against its schema: the subset of OpenAPI this
// document uses ($ref, allOf, nullable, type, properties, required, items, enum).
void expect_conforms(const json::object& schemas, const json::object& given, const json::value& value,
                     const std::string& where) {
  Flat f = flatten(schemas, given);
  if (value.is_null()) {
    EXPECT_TRUE(f.nullable) << where << ": null, but the schema is not nullable";
    return;
  }
  if (!f.properties.empty()) {
    ASSERT_TRUE(value.is_object()) << where << ": expected an object";
    for (const auto& name : f.required)
      EXPECT_TRUE(value.as_object().contains(name)) << where << "." << name << ": required by the schema, not emitted";
    for (const auto& [key, child] : value.as_object()) {
      auto prop = f.properties.if_contains(key);
      EXPECT_TRUE(prop != nullptr) << where << "." << std::string(key) << ": emitted, but not in the schema";
      if (prop) expect_conforms(schemas, prop->as_object(), child, where + "." + std::string(key));
    }
    return;
  }
  const json::object& s = f.leaf ? *f.leaf : given;
  std::string type = s.contains("type") ? std::string(s.at("type").as_string()) : "";
  if (type == "string") { EXPECT_TRUE(value.is_string()) << where << ": expected a string"; }
  if (type == "integer") { EXPECT_TRUE(value.is_int64() || value.is_uint64()) << where << ": expected an integer"; }
  if (type == "boolean") { EXPECT_TRUE(value.is_bool()) << where << ": expected a boolean"; }
  if (type == "object") { EXPECT_TRUE(value.is_object()) << where << ": expected an object"; }
  if (type == "array") {
    ASSERT_TRUE(value.is_array()) << where << ": expected an array";
    for (std::size_t i = 0; i < value.as_array().size(); ++i)
      expect_conforms(schemas, s.at("items").as_object(), value.as_array()[i], where + "[" + std::to_string(i) + "]");
  }
  if (auto values = s.if_contains("enum")) {
    const auto& e = values->as_array();
    EXPECT_NE(std::find(e.begin(), e.end(), value), e.end()) << where << ": " << json::serialize(value) << " not in the enum";
  }
}

TEST_F(OpenApiTest, EveryServedRouteHasATableEntryWithASpecificSuccessStatus) {
  const auto& routes = app_->router().routes();
  ASSERT_GT(routes.size(), 30u);
  for (const Route& route : routes) {
    std::string name = route.method + " " + route.pattern;
    const auto* spec = openapi::find_operation_spec(route.method, route.pattern);
    ASSERT_NE(spec, nullptr) << name << " has no entry in openapi_schemas.cpp";
    EXPECT_TRUE(std::set<int>({101, 200, 201, 202, 204}).contains(spec->status)) << name;
    const auto& responses = op(route.pattern, lower(route.method)).at("responses").as_object();
    EXPECT_TRUE(responses.contains(std::to_string(spec->status))) << name;
    EXPECT_FALSE(responses.contains("2XX")) << name;
    EXPECT_TRUE(responses.contains("default")) << name;
    if (route.access != Access::public_route) { EXPECT_TRUE(responses.contains("401")) << name; }
    if (route.access == Access::admin) { EXPECT_TRUE(responses.contains("403")) << name; }
    if (!spec->request.empty()) { EXPECT_TRUE(responses.contains("415")) << name; }
  }
}

TEST_F(OpenApiTest, EveryTableEntryIsAServedRoute) {
  std::set<std::pair<std::string, std::string>> served;
  for (const Route& route : app_->router().routes()) served.emplace(route.method, route.pattern);
  for (const auto& spec : openapi::operation_specs())
    EXPECT_TRUE(served.contains({std::string(spec.method), std::string(spec.pattern)}))
        << spec.method << " " << spec.pattern << " is documented but not served";
  std::size_t operations = 0;
  for (const auto& [path, methods] : doc_->at("paths").as_object()) operations += methods.as_object().size();
  EXPECT_EQ(operations, app_->router().routes().size());
}

TEST_F(OpenApiTest, EveryRefResolvesToADefinedComponent) {
  std::vector<std::string> refs;
  collect_refs(*doc_, refs);
  ASSERT_FALSE(refs.empty());
  const std::string prefix = "#/components/schemas/";
  for (const auto& ref : refs) {
    ASSERT_EQ(ref.substr(0, prefix.size()), prefix) << ref;
    EXPECT_TRUE(schemas().contains(ref.substr(prefix.size()))) << ref << " is not defined";
  }
  for (std::string_view name : {"Problem", "User", "Token", "TokenCreated", "Zone", "MarketOffer", "Image", "Instance",
                                "SshKey", "Event", "Host", "PriceTable", "Clock", "InstanceList", "EventList"})
    EXPECT_TRUE(schemas().contains(name)) << name;
}

TEST_F(OpenApiTest, OperationIdsAreUniqueIdentifiers) {
  std::set<std::string> seen;
  const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*");
  for (const auto& [path, methods] : doc_->at("paths").as_object()) {
    for (const auto& [method, operation] : methods.as_object()) {
      std::string id(operation.at("operationId").as_string());
      EXPECT_TRUE(std::regex_match(id, identifier)) << id;
      EXPECT_TRUE(seen.insert(id).second) << id << " is used twice";
    }
  }
}

TEST_F(OpenApiTest, OperationsCarryTheContractsShapes) {
  const auto& create = op("/api/v1/instances", "post");
  EXPECT_EQ(create.at("operationId"), "createInstance");
  EXPECT_EQ(create.at("requestBody").at("content").at("application/json").at("schema").at("$ref"),
            "#/components/schemas/InstanceCreate");
  EXPECT_EQ(create.at("responses").at("202").at("content").at("application/json").at("schema").at("$ref"),
            "#/components/schemas/Instance");
  EXPECT_TRUE(create.at("responses").as_object().contains("409"));
  EXPECT_EQ(op("/api/v1/tokens", "post").at("responses").at("201").at("content").at("application/json").at("schema").at(
                "$ref"),
            "#/components/schemas/TokenCreated");
  EXPECT_FALSE(op("/api/v1/auth/logout", "post").at("responses").at("204").as_object().contains("content"));
  EXPECT_EQ(op("/api/v1/auth/login", "post").at("responses").at("429").at("headers").as_object().size(), 1u);
  // The path id takes a name too; lists take limit and cursor.
  const auto& get = op("/api/v1/instances/{id}", "get");
  EXPECT_NE(std::string(get.at("parameters").at(0).at("description").as_string()).find("name"), std::string::npos);
  std::set<std::string> query;
  for (const auto& p : op("/api/v1/instances", "get").at("parameters").as_array())
    if (p.at("in") == "query") query.emplace(p.at("name").as_string());
  EXPECT_EQ(query, (std::set<std::string>{"limit", "cursor", "state", "all"}));
  // Every POST/PUT/PATCH in the table with a body has its schema.
  for (const auto& spec : openapi::operation_specs())
    if (!spec.request.empty()) {
      EXPECT_TRUE(op(spec.pattern, lower(std::string(spec.method))).contains("requestBody")) << spec.pattern;
    }
}

TEST_F(OpenApiTest, TheConformanceCheckCatchesFieldsTheSchemaDoesNotDescribe) {
  EXPECT_NONFATAL_FAILURE(expect_conforms(schemas(), json::object{{"$ref", "#/components/schemas/Clock"}},
                                          json::object{{"now", "2026-01-01T00:00:00Z"}, {"extra", 1}}, "Clock"),
                          "not in the schema");
  EXPECT_NONFATAL_FAILURE(expect_conforms(schemas(), json::object{{"$ref", "#/components/schemas/Clock"}},
                                          json::object{}, "Clock"),
                          "required by the schema");
  EXPECT_NONFATAL_FAILURE(expect_conforms(schemas(), json::object{{"$ref", "#/components/schemas/Clock"}},
                                          json::object{{"now", 5}}, "Clock"),
                          "expected a string");
  EXPECT_NONFATAL_FAILURE(expect_conforms(schemas(), json::object{{"$ref", "#/components/schemas/Instance"}},
                                          json::value(nullptr), "Instance"),
                          "not nullable");
}

// The serializers the handlers answer with, against the schemas.
TEST_F(OpenApiTest, HandlerJsonConformsToTheSchemas) {
  auto check = [](std::string_view component, const json::value& value) {
    expect_conforms(schemas(), json::object{{"$ref", "#/components/schemas/" + std::string(component)}}, value,
                    std::string(component));
  };
  auto now = system_now();

  instances::Instance i;
  i.id = "i-1";
  i.owner = "u-1";
  i.name = "train-1";
  i.state = instances::InstanceState::running;
  i.zone = "zone-a";
  i.host_name = "host-1";
  i.gpu_model = "RTX 4090";
  i.gpu_count = 1;
  i.image_id = "img-1";
  i.ssh_keys = {"key-1"};
  i.created_at = now;
  i.started_at = now;
  i.ports = {{22, "tcp", 30022}, {8888, "tcp", 30023}};
  i.gpu_uuids = {"GPU-1"};
  instances::ViewContext view{"127.0.0.1", "CNY"};
  check("Instance", instances::instance_json(i, view, 60));
  i.ports.clear();  // no ssh port: `ssh` is null
  i.state_reason = "restart";
  i.host_key = "ssh-ed25519 AAAA";
  check("Instance", instances::instance_json(i, view, 0));
  // Its GPU gone from the host: `degraded` and the GPU's health (since unknown, then known).
  i.gpu_health = {instances::Instance::GpuHealth{"missing", 1, "RTX 4090", std::nullopt}};
  check("Instance", instances::instance_json(i, view, 0));
  i.gpu_health[0].lost_at = now;
  check("Instance", instances::instance_json(i, view, 0));
  EXPECT_TRUE(instances::instance_json(i, view, 0).at("degraded").is_object());

  instances::Image image;
  image.id = "img-1";
  image.name = "base";
  image.frameworks = {{"torch", "2.3"}};
  image.visibility = "public";
  image.state = "available";
  image.created_at = now;
  // As the handlers answer it: with purge_at (server/handlers/recycle_bin.h).
  check("Image", with_purge_at(instances::image_json(image), image.deleted_at, 7));
  image.owner = "u-1";
  image.os = "ubuntu 22.04";
  check("Image", with_purge_at(instances::image_json(image), image.deleted_at, 7));
  image.state = "deleted";
  image.deleted_at = now;
  check("Image", with_purge_at(instances::image_json(image), image.deleted_at, 7));
  EXPECT_TRUE(with_purge_at(instances::image_json(image), image.deleted_at, 7).at("purge_at").is_string());

  auth::User user{"u-1", "alice", std::nullopt, "user", false, now};
  check("User", api::user_json(user));
  auth::TokenInfo token{"tok-1", "ci", "api", now, std::nullopt};
  check("Token", api::token_json(token));
  json::object created = api::token_json(token);
  created["token"] = "secret";
  check("TokenCreated", created);

  PageRequest page;
  std::vector<auth::User> users{user};
  auto key = [](const auth::User& u) { return std::make_pair(to_unix_micros(u.created_at), u.id); };
  check("UserList", page_of(users, page, key, api::user_json));

  events::Event event{7, "ev-1", now, "instance.running", "i-1", "u-1", "instance train-1 is running", {{"state", "running"}}};
  check("Event", events::to_json(event));
  event.user.reset();
  check("Event", events::to_json(event));

  market::PriceTable prices;
  prices.gpus["RTX 4090"] = {200, 10000, 40000};
  check("PriceTable", market::prices_json(prices, "CNY"));

  billing::Account account;
  account.id = "ba-1";
  account.kind = "user";
  account.balance = -12;
  account.created_at = now;
  check("BillingAccount", billing::account_json(account, "CNY"));
  account.alert_threshold = 500;
  account.alert_webhook_url = "https://hooks.example/x";
  account.arrears_since = now;
  check("BillingAccount", billing::account_json(account, "CNY"));
  billing::Entry entry;
  entry.id = "le-1";
  entry.account_id = "ba-1";
  entry.seq = 1;
  entry.time = now;
  entry.amount = -198;
  entry.balance_after = 802;
  entry.resource = "i-1";
  entry.resource_kind = "compute";
  entry.quantity = 3600;
  check("LedgerEntry", billing::entry_json(entry));
  entry.resource.reset();
  entry.resource_kind.reset();
  entry.kind = billing::EntryKind::credit;
  check("LedgerEntry", billing::entry_json(entry));

  config::Config cfg;
  cfg.zones = {{"zone-a", "local", "the first zone"}};
  config::Offer offer;
  offer.gpu_model = "RTX 4090";
  offer.cpu_per_gpu = 8;
  offer.memory_gib_per_gpu = 32;
  cfg.offers = {offer};
  market::HostRecord host;
  host.id = "h-1";
  host.name = "host-1";
  host.zone = "zone-a";
  host.state = "ready";
  host.cpu = 32;
  host.memory_gib = 128;
  market::GpuRecord gpu;
  gpu.uuid = "GPU-1";
  gpu.model = "RTX 4090";
  gpu.memory_bytes = 24LL << 30;
  gpu.health = "ok";
  host.gpus = {gpu};
  check("Host", market::host_json(host));
  host.gpus[0].reserved_by = "i-1";
  host.gpus[0].lost_at = now;
  host.last_seen = now;
  host.inventory_error = "NVML: driver not loaded";
  check("Host", market::host_json(host));
  // Drained, unreachable, served by a remote agent with a certificate (issue 26).
  host.state = "draining";
  host.liveness = "unreachable";
  host.admin_state = "draining";
  host.agent = market::HostAgentInfo{"remote", "0.1.0", "10.0.0.5:7443", now, now, now};
  check("Host", market::host_json(host));
  host.gpus[0].reserved_by.reset();
  host.last_seen.reset();
  json::array offers = market::market_offers(cfg, {host}, prices);
  ASSERT_EQ(offers.size(), 2u);  // the GPU offer and the zone's no-GPU offer
  for (const auto& o : offers) check("MarketOffer", o);
  check("MarketOfferList", page_in_order(offers, page));
}

}  // namespace
}  // namespace gpucloud::server
