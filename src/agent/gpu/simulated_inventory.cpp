#include "agent/gpu/simulated_inventory.h"

#include <cstdio>
#include <utility>

#include "core/units.h"

namespace gpucloud::gpu {

namespace {


// FNV-1a: fixed by definition, unlike std::hash, so UUIDs do not change between builds.
std::uint64_t fnv1a(std::string_view data, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string simulated_gpu_uuid(std::string_view host_name, int index) {
  const std::uint64_t host = fnv1a(host_name);
  const std::uint64_t gpu = fnv1a("/" + std::to_string(index), host);
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-sim-%08x-%04x-%04x-%04x-%08x%04x",
                static_cast<unsigned>(host >> 32), static_cast<unsigned>((host >> 16) & 0xffff),
                static_cast<unsigned>(host & 0xffff), static_cast<unsigned>(gpu >> 48),
                static_cast<unsigned>(gpu & 0xffffffff), static_cast<unsigned>(index & 0xffff));
  return buf;
}

SimulatedInventory::SimulatedInventory(std::string host_name, std::vector<SimulatedGpuSpec> specs)
    : host_name_(std::move(host_name)), specs_(std::move(specs)) {}

Status SimulatedInventory::validate() const {
  if (host_name_.empty()) {
    return fail(ErrorCode::invalid_argument, "simulated_gpus: the host has no name");
  }
  int total = 0;
  for (const auto& s : specs_) {
    if (s.model.empty()) {
      return fail(ErrorCode::invalid_argument,
                  "simulated_gpus on " + host_name_ + ": model is empty");
    }
    if (s.memory_gib <= 0) {
      return fail(ErrorCode::invalid_argument,
                  "simulated_gpus on " + host_name_ + ": " + s.model + " needs memory_gib > 0");
    }
    if (s.count < 0) {
      return fail(ErrorCode::invalid_argument, "simulated_gpus on " + host_name_ + ": " + s.model +
                                                   " count must not be negative");
    }
    total += s.count;
    if (total > kMaxSimulatedGpusPerHost) {
      return fail(ErrorCode::invalid_argument, "simulated_gpus on " + host_name_ + ": more than " +
                                                   std::to_string(kMaxSimulatedGpusPerHost) +
                                                   " GPUs on one host");
    }
  }
  return ok();
}

Result<std::vector<GpuDevice>> SimulatedInventory::discover() {
  if (auto v = validate(); !v) return fail(v.error());
  std::vector<GpuDevice> out;
  for (const auto& s : specs_) {
    for (int i = 0; i < s.count; ++i) {
      GpuDevice d;
      d.index = static_cast<int>(out.size());
      d.minor = d.index;
      d.uuid = simulated_gpu_uuid(host_name_, d.index);
      d.model = s.model;
      d.memory_bytes = s.memory_gib * kGiB;
      d.health = "ok";
      d.simulated = true;
      out.push_back(std::move(d));
    }
  }
  return out;
}

Result<GpuSample> SimulatedInventory::sample(int index) {
  if (auto v = validate(); !v) return fail(v.error());
  int first = 0;
  for (const auto& s : specs_) {
    if (index >= first && index < first + s.count) {
      GpuSample out;
      out.index = index;
      out.memory_total_bytes = s.memory_gib * kGiB;
      return out;
    }
    first += s.count;
  }
  return fail(ErrorCode::not_found,
              "host " + host_name_ + " has no simulated GPU " + std::to_string(index));
}

}  // namespace gpucloud::gpu
