#include "cli/instance_spec.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace gpucloud::cli {
namespace {

namespace json = boost::json;

InstanceArgs base() {
  InstanceArgs a;
  a.name = "train-1";
  a.gpu = "RTX 4090:1";
  a.image = "pytorch-2.3-cuda12.1";
  return a;
}

TEST(CliGpuSpec, ModelAndCount) {
  auto s = parse_gpu_spec("RTX 4090:2");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->model, "RTX 4090");
  EXPECT_EQ(s->count, 2);
  s = parse_gpu_spec("NVIDIA A100-SXM4-80GB: 8");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->model, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(s->count, 8);
}

TEST(CliGpuSpec, CountIsRequiredAndPositive) {
  for (const char* bad : {"RTX 4090", "RTX 4090:", "RTX 4090:0", "RTX 4090:-1", ":1",
                          "RTX 4090:two", "RTX 4090:1.5", ""}) {
    auto s = parse_gpu_spec(bad);
    ASSERT_FALSE(s.has_value()) << bad;
    EXPECT_EQ(s.error().exit_code, kExitUsage) << bad;
    EXPECT_NE(s.error().message.find("MODEL:COUNT"), std::string::npos);
  }
}

TEST(CliInstanceBody, MinimalGpuInstance) {
  auto body = build_instance_body(base(), std::nullopt);
  ASSERT_TRUE(body.has_value()) << body.error().message;
  EXPECT_EQ(*body, (json::object{{"name", "train-1"},
                                 {"gpu_model", "RTX 4090"},
                                 {"gpu_count", 1},
                                 {"image", "pytorch-2.3-cuda12.1"}}));
}

TEST(CliInstanceBody, NoGpuInstance) {
  InstanceArgs a = base();
  a.gpu.clear();
  a.no_gpu = true;
  auto body = build_instance_body(a, std::nullopt);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(body->at("gpu_count").as_int64(), 0);
  EXPECT_FALSE(body->contains("gpu_model"));
}

TEST(CliInstanceBody, EveryFlag) {
  InstanceArgs a = base();
  a.zone = "zone-a";
  a.system_disk = "50";
  a.ports = {"8888", "22", "6006", "8888"};
  a.keys = {"laptop", "key-123"};
  a.billing = "monthly";
  a.autostop_idle = "30";
  a.data_disks = {"100", "20:/mnt/scratch", "5"};
  a.attach = {"datasets:/root/data", "old"};
  a.security_group = "web";
  auto body = build_instance_body(a, std::string("hunter22"));
  ASSERT_TRUE(body.has_value()) << body.error().message;
  EXPECT_EQ(body->at("zone"), "zone-a");
  EXPECT_EQ(body->at("system_disk_gib").as_int64(), 50);
  EXPECT_EQ(body->at("ports"), (json::array{22, 8888, 6006}));
  EXPECT_EQ(body->at("ssh_keys"), (json::array{"laptop", "key-123"}));
  EXPECT_EQ(body->at("password"), "hunter22");
  EXPECT_EQ(body->at("billing"), (json::object{{"mode", "monthly"}, {"auto_renew", true}}));
  EXPECT_EQ(body->at("autostop"),
            (json::object{{"idle_minutes", 30}, {"gpu_util_below_percent", 5}}));
  EXPECT_EQ(body->at("security_group"), "web");
  // Defaults skip the path taken explicitly by --attach datasets:/root/data.
  EXPECT_EQ(body->at("data_disks"),
            json::parse(R"([
              {"size_gib":100,"delete_on_release":false,"mount_path":"/root/data2"},
              {"size_gib":20,"delete_on_release":false,"mount_path":"/mnt/scratch"},
              {"size_gib":5,"delete_on_release":false,"mount_path":"/root/data3"},
              {"id":"datasets","mount_path":"/root/data"},
              {"id":"old","mount_path":"/root/data4"}])"));
}

TEST(CliInstanceBody, HourlyHasNoAutoRenewAndNoAutoRenewNeedsASubscription) {
  InstanceArgs a = base();
  a.billing = "hourly";
  EXPECT_EQ(build_instance_body(a, std::nullopt)->at("billing"),
            (json::object{{"mode", "hourly"}, {"auto_renew", false}}));
  a.billing = "weekly";
  a.no_auto_renew = true;
  EXPECT_EQ(build_instance_body(a, std::nullopt)->at("billing"),
            (json::object{{"mode", "weekly"}, {"auto_renew", false}}));
  a.billing.clear();
  EXPECT_EQ(build_instance_body(a, std::nullopt).error().exit_code, kExitUsage);
}

TEST(CliInstanceBody, BadValuesAreUsageErrors) {
  auto expect_usage = [](InstanceArgs a, const char* what) {
    auto body = build_instance_body(a, std::nullopt);
    ASSERT_FALSE(body.has_value()) << what;
    EXPECT_EQ(body.error().exit_code, kExitUsage) << what;
    EXPECT_EQ(body.error().message.rfind("error: ", 0), 0u) << body.error().message;
  };
  InstanceArgs a = base();
  a.gpu = "RTX 4090";
  expect_usage(a, "gpu without count");
  a = base();
  a.gpu.clear();
  expect_usage(a, "neither --gpu nor --no-gpu");
  a = base();
  a.no_gpu = true;
  expect_usage(a, "both --gpu and --no-gpu");
  a = base();
  a.system_disk = "30G";
  expect_usage(a, "system disk with unit");
  a = base();
  a.ports = {"0"};
  expect_usage(a, "port 0");
  a = base();
  a.ports = {"70000"};
  expect_usage(a, "port too big");
  a = base();
  a.ports = {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"};
  expect_usage(a, "eleven ports with 22");
  a = base();
  a.billing = "daily";
  expect_usage(a, "billing mode");
  a = base();
  a.autostop_idle = "0";
  expect_usage(a, "autostop zero");
  a = base();
  a.data_disks = {"big"};
  expect_usage(a, "data disk size");
  a = base();
  a.data_disks = {"100:relative"};
  expect_usage(a, "relative mount path");
  a = base();
  a.data_disks = {"10:/root/x", "20:/root/x"};
  expect_usage(a, "same mount path twice");
  a = base();
  a.attach = {":/root/x"};
  expect_usage(a, "attach without disk");
  a = base();
  a.attach = {"d:/root/../etc"};
  expect_usage(a, "dot-dot path");
}

}  // namespace
}  // namespace gpucloud::cli
