// libFuzzer: request bodies through api/json_input (parse_object, then every field reader on
// every member), as handlers use them. A crash, a sanitizer report or an exception escaping
// is a bug: bad bodies must come back as errors.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/json_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = gpucloud::api::parse_object(body);
  if (!parsed) return 0;
  const auto& o = *parsed;
  for (const auto& member : o) {
    std::string_view key = member.key();
    (void)gpucloud::api::required_string(o, key);
    (void)gpucloud::api::optional_string(o, key);
    (void)gpucloud::api::required_int(o, key);
    (void)gpucloud::api::optional_int(o, key);
    (void)gpucloud::api::optional_bool(o, key);
  }
  (void)gpucloud::api::required_string(o, "name");
  (void)gpucloud::api::optional_int(o, "gpu_count");
  (void)gpucloud::api::only_fields(o, {"name", "gpu_model", "gpu_count", "ports"});
  return 0;
}
