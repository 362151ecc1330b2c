// libFuzzer: the daemon's TOML config through parse_config (which also runs validate) and
// validate again, as gpucloudd does after its flag overrides. Refusals are values.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cfg = gpucloud::config::parse_config(text, "fuzz");
  if (cfg) (void)gpucloud::config::validate(*cfg);
  return 0;
}
