#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "agent/gpu/nvml_library.h"
#include "agent/gpu/simulated_inventory.h"

namespace gpucloud::gpu {
namespace {

// "GPU-sim-" + 8-4-4-4-12 lower-case hex, the shape of NVML's UUIDs after its "GPU-".
bool simulated_uuid_shape(const std::string& uuid) {
  const std::string prefix = "GPU-sim-";
  if (uuid.rfind(prefix, 0) != 0) return false;
  std::string body = uuid.substr(prefix.size());
  const std::size_t groups[] = {8, 4, 4, 4, 12};
  std::size_t pos = 0;
  for (std::size_t g = 0; g < 5; ++g) {
    for (std::size_t i = 0; i < groups[g]; ++i, ++pos) {
      if (pos >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[pos])) ||
          std::isupper(static_cast<unsigned char>(body[pos]))) {
        return false;
      }
    }
    if (g < 4 && (pos >= body.size() || body[pos++] != '-')) return false;
  }
  return pos == body.size();
}

TEST(NvmlLibraryTest, MissingLibraryFailsCleanly) {
  NvmlLibrary nvml("/nonexistent/libnvidia-ml.so.1");
  auto s = nvml.open();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::unavailable);
  EXPECT_EQ(s.error().detail.rfind("NVML not available: /nonexistent/libnvidia-ml.so.1: "
                                   "cannot open shared object file",
                                   0),
            0u)
      << s.error().detail;
  EXPECT_FALSE(nvml.is_open());

  auto count = nvml.device_count();
  ASSERT_FALSE(count);
  EXPECT_EQ(count.error().code, ErrorCode::unavailable);
  EXPECT_FALSE(nvml.sample(0));
}

TEST(NvmlLibraryTest, LibraryWithoutNvmlSymbolsFailsCleanly) {
  NvmlLibrary nvml("libm.so.6");
  auto s = nvml.open();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::unavailable);
  EXPECT_EQ(s.error().detail, "NVML not available: symbol not found in libm.so.6: nvmlInit_v2");
  // A second try fails the same way (the library was let go, not left half-open).
  EXPECT_EQ(nvml.open().error().detail, s.error().detail);
}

TEST(NvmlInventoryTest, DiscoverWithoutDriverIsAnError) {
  NvmlInventory inventory("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(inventory.kind(), "nvml");
  auto devices = inventory.discover();
  ASSERT_FALSE(devices);
  EXPECT_EQ(devices.error().code, ErrorCode::unavailable);
  EXPECT_NE(devices.error().detail.find("NVML not available"), std::string::npos);
  EXPECT_FALSE(inventory.sample(0));
}

// A fake NVML behind the injected entry points, to reach the per-call error paths without
// a GPU. Device 1 is "lost": its UUID query fails the way a fallen-off-the-bus GPU does.
struct FakeNvml {
  nvml::Return init_rc = nvml::kSuccess;
  nvml::Return count_rc = nvml::kSuccess;
  int shutdowns = 0;
};
FakeNvml g_fake;

nvml::Device handle_for(unsigned i) {
  return reinterpret_cast<nvml::Device>(static_cast<std::uintptr_t>(0x1000 + i));
}
unsigned index_of(nvml::Device d) {
  return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(d) - 0x1000);
}

nvml::Api fake_api() {
  nvml::Api api;
  api.init = [] { return g_fake.init_rc; };
  api.shutdown = [] {
    ++g_fake.shutdowns;
    return nvml::kSuccess;
  };
  api.error_string = [](nvml::Return rc) -> const char* {
    switch (rc) {
      case nvml::kErrorDriverNotLoaded: return "Driver Not Loaded";
      case nvml::kErrorGpuIsLost: return "GPU is lost";
      default: return "Unknown Error";
    }
  };
  api.device_get_count = [](unsigned* n) {
    *n = 2;
    return g_fake.count_rc;
  };
  api.device_get_handle_by_index = [](unsigned i, nvml::Device* d) {
    if (i >= 2) return nvml::Return{2};  // NVML_ERROR_INVALID_ARGUMENT
    *d = handle_for(i);
    return nvml::kSuccess;
  };
  api.device_get_pci_info = [](nvml::Device d, nvml::PciInfo* pci) {
    std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", 0x3B + index_of(d));
    return nvml::kSuccess;
  };
  api.device_get_name = [](nvml::Device, char* buf, unsigned len) {
    std::snprintf(buf, len, "NVIDIA H100 80GB HBM3");
    return nvml::kSuccess;
  };
  api.device_get_uuid = [](nvml::Device d, char* buf, unsigned len) {
    if (index_of(d) == 1) return nvml::kErrorGpuIsLost;
    std::snprintf(buf, len, "GPU-5d1b9e4c-8a0f-4c77-9a1e-0c2d3e4f5a6b");
    return nvml::kSuccess;
  };
  api.device_get_memory_info = [](nvml::Device, nvml::Memory* m) {
    m->total = 80ULL << 30;
    m->used = 3ULL << 30;
    m->free = m->total - m->used;
    return nvml::kSuccess;
  };
  api.device_get_utilization_rates = [](nvml::Device d, nvml::Utilization* u) {
    if (index_of(d) == 1) return nvml::kErrorGpuIsLost;
    u->gpu = 87;
    u->memory = 40;
    return nvml::kSuccess;
  };
  // Device 0 runs three processes (one whose memory NVML cannot tell); asked with too little
  // room, it says how many.
  api.device_get_compute_running_processes = [](nvml::Device d, unsigned* count, nvml::ProcessInfo* infos) {
    if (index_of(d) != 0) {
      *count = 0;
      return nvml::kSuccess;
    }
    if (*count < 3) {
      *count = 3;
      return nvml::kErrorInsufficientSize;
    }
    infos[0] = {4242, 1ULL << 30, 0, 0};
    infos[1] = {4343, 512ULL << 20, 0, 0};
    infos[2] = {4444, nvml::kValueNotAvailable, 0, 0};
    *count = 3;
    return nvml::kSuccess;
  };
  api.device_get_minor_number = [](nvml::Device d, unsigned* minor) {
    *minor = 4 + static_cast<unsigned>(index_of(d));  // minors need not follow NVML's order
    return nvml::kSuccess;
  };
  return api;
}

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { g_fake = FakeNvml{}; }
};

TEST_F(FakeNvmlTest, DevicesWithFailedQueriesReportTheErrorAsHealth) {
  {
    NvmlLibrary nvml(fake_api());
    ASSERT_TRUE(nvml.open());
    auto devices = nvml.devices();
    ASSERT_TRUE(devices) << devices.error().detail;
    ASSERT_EQ(devices->size(), 2u);

    const GpuDevice& good = (*devices)[0];
    EXPECT_EQ(good.index, 0);
    EXPECT_EQ(good.uuid, "GPU-5d1b9e4c-8a0f-4c77-9a1e-0c2d3e4f5a6b");
    EXPECT_EQ(good.model, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(good.memory_bytes, std::int64_t{80} << 30);
    EXPECT_EQ(good.pci_bus_id, "00000000:3B:00.0");
    EXPECT_EQ(good.health, "ok");
    EXPECT_FALSE(good.simulated);
    EXPECT_EQ(good.minor, 4) << "nvmlDeviceGetMinorNumber: the node /dev/nvidia4";

    auto procs = nvml.processes(0);
    ASSERT_TRUE(procs) << procs.error().detail;
    ASSERT_EQ(procs->size(), 3u);
    EXPECT_EQ((*procs)[0].pid, 4242u);
    EXPECT_EQ((*procs)[0].used_bytes, std::int64_t{1} << 30);
    EXPECT_EQ((*procs)[1].used_bytes, std::int64_t{512} << 20);
    EXPECT_EQ((*procs)[2].used_bytes, 0) << "NVML_VALUE_NOT_AVAILABLE counts as 0";
    auto none = nvml.processes(1);
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());

    const GpuDevice& lost = (*devices)[1];
    EXPECT_EQ(lost.index, 1);
    EXPECT_EQ(lost.health, "nvmlDeviceGetUUID: GPU is lost");
    EXPECT_FALSE(lost.healthy());
    EXPECT_TRUE(lost.uuid.empty());
    EXPECT_EQ(lost.pci_bus_id, "00000000:3C:00.0");  // what still answers is kept

    auto s = nvml.sample(0);
    ASSERT_TRUE(s) << s.error().detail;
    EXPECT_EQ(s->gpu_util_percent, 87);
    EXPECT_EQ(s->memory_util_percent, 40);
    EXPECT_EQ(s->memory_used_bytes, std::int64_t{3} << 30);
    EXPECT_EQ(s->memory_total_bytes, std::int64_t{80} << 30);

    auto bad = nvml.sample(1);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().detail, "nvmlDeviceGetUtilizationRates: GPU is lost");
    EXPECT_FALSE(nvml.driver_version());  // not provided by the fake
  }
  EXPECT_EQ(g_fake.shutdowns, 1);
}

TEST_F(FakeNvmlTest, InitFailureCarriesNvidiasString) {
  g_fake.init_rc = nvml::kErrorDriverNotLoaded;
  NvmlLibrary nvml(fake_api());
  auto s = nvml.open();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().detail, "NVML not available: nvmlInit_v2: Driver Not Loaded");
  EXPECT_FALSE(nvml.is_open());
}

TEST_F(FakeNvmlTest, CountFailureFailsDiscovery) {
  g_fake.count_rc = nvml::kErrorUnknown;
  NvmlInventory inventory(std::make_unique<NvmlLibrary>(fake_api()));
  auto devices = inventory.discover();
  ASSERT_FALSE(devices);
  EXPECT_EQ(devices.error().detail, "nvmlDeviceGetCount_v2: Unknown Error");
}

// Runs only where the driver is: the same suite serves CI and the GPU machine (Mesos style).
TEST(NvmlLibraryTest, NVIDIA_GPU_DiscoversRealDevices) {
  NvmlLibrary nvml;
  if (auto s = nvml.open(); !s) GTEST_SKIP() << s.error().detail;
  auto devices = nvml.devices();
  ASSERT_TRUE(devices) << devices.error().detail;
  ASSERT_FALSE(devices->empty());
  for (const auto& d : *devices) {
    EXPECT_EQ(d.health, "ok");
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
    EXPECT_FALSE(d.model.empty());
    EXPECT_GT(d.memory_bytes, 0);
    EXPECT_FALSE(d.pci_bus_id.empty());
    auto s = nvml.sample(static_cast<unsigned>(d.index));
    ASSERT_TRUE(s) << s.error().detail;
    EXPECT_EQ(s->memory_total_bytes, d.memory_bytes);
  }
}

TEST(SimulatedInventoryTest, DevicesFromConfigWithStableUuids) {
  SimulatedInventory inv("node-1", {{"RTX 4090", 24, 8}, {"A100", 80, 2}});
  EXPECT_EQ(inv.kind(), "simulated");
  auto devices = inv.discover();
  ASSERT_TRUE(devices) << devices.error().detail;
  ASSERT_EQ(devices->size(), 10u);
  for (int i = 0; i < 10; ++i) {
    const GpuDevice& d = (*devices)[static_cast<std::size_t>(i)];
    EXPECT_EQ(d.index, i);
    EXPECT_TRUE(d.simulated);
    EXPECT_EQ(d.health, "ok");
    EXPECT_TRUE(simulated_uuid_shape(d.uuid)) << d.uuid;
    EXPECT_EQ(d.uuid, simulated_gpu_uuid("node-1", i));
    EXPECT_EQ(d.minor, i) << "a simulated GPU's node is nvidia<index>";
    EXPECT_EQ(d.model, i < 8 ? "RTX 4090" : "A100");
    EXPECT_EQ(d.memory_bytes, (i < 8 ? std::int64_t{24} : std::int64_t{80}) << 30);
  }
  // The same host gets the same UUIDs every time; another host, other ones.
  EXPECT_EQ(*SimulatedInventory("node-1", {{"RTX 4090", 24, 8}, {"A100", 80, 2}}).discover(),
            *devices);
  auto other = SimulatedInventory("node-2", {{"RTX 4090", 24, 8}}).discover();
  ASSERT_TRUE(other);
  for (std::size_t i = 0; i < other->size(); ++i) EXPECT_NE((*other)[i].uuid, (*devices)[i].uuid);
  // Pinned, so a change to the derivation (which would orphan running instances) is noticed.
  EXPECT_EQ(simulated_gpu_uuid("node-1", 0), "GPU-sim-e696ecc2-2078-79c3-09f8-fb401c5c0000");
  EXPECT_EQ(simulated_gpu_uuid("node-1", 7), "GPU-sim-e696ecc2-2078-79c3-09f8-fb401aa90007");
}

TEST(SimulatedInventoryTest, SampleIsIdle) {
  SimulatedInventory inv("node-1", {{"RTX 4090", 24, 2}});
  auto s = inv.sample(1);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->gpu_util_percent, 0);
  EXPECT_EQ(s->memory_total_bytes, std::int64_t{24} << 30);
  auto missing = inv.sample(2);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}

TEST(SimulatedInventoryTest, BadConfigIsInvalidArgument) {
  for (auto specs : std::vector<std::vector<SimulatedGpuSpec>>{
           {{"", 24, 1}}, {{"RTX 4090", 0, 1}}, {{"RTX 4090", 24, -1}}, {{"RTX 4090", 24, 65}}}) {
    auto d = SimulatedInventory("node-1", specs).discover();
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, ErrorCode::invalid_argument);
  }
  EXPECT_TRUE(SimulatedInventory("node-1", {}).discover()->empty());
}

}  // namespace
}  // namespace gpucloud::gpu
