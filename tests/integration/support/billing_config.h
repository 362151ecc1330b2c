#pragma once
// The billing tests' installation (billing_test.cpp, and the store tests that move or run it on
// PostgreSQL): one host with two simulated RTX 4090s, prices that make seconds read as fen for
// the no-GPU size, a weekly GPU subscription, storage prices and short arrears steps.
#include <cstdint>
#include <string>

#include "support/test_resources.h"

namespace gpucloud::testing {

// 3600 fen per hour for the no-GPU size: one fen a second, so seconds read as fen.
inline std::string billing_test_config(std::int64_t signup_credit_fen = -1) {
  static const int base = port_block();
  std::string c = R"(
[[zones]]
name = "zone-a"
[[hosts]]
name = "node-1"
zone = "zone-a"
cpu = 4
memory_gib = 16
port_range = ")" + std::to_string(base) + "-" + std::to_string(base + 99) + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 2 } ]
[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 1
memory_gib_per_gpu = 1
price_per_gpu_hour = 198
price_per_gpu_week = 26600
price_per_gpu_month = 99800
[no_gpu_offer]
cpu = 1
memory_gib = 1
price_per_hour = 3600
[storage_prices]
system_disk_free_gib = 30
data_disk_per_gib_hour = 0.02
[alerts]
allow_private_webhook_targets = true
[policy]
arrears_release_instances_after_days = 2
arrears_delete_disks_after_days = 4
recycle_days = 1
)";
  if (signup_credit_fen >= 0) c += "[billing]\nsignup_credit = " + std::to_string(signup_credit_fen) + "\n";
  return c;
}

}  // namespace gpucloud::testing
