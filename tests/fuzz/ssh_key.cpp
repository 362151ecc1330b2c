// libFuzzer: SSH public-key lines through instances::parse_public_key. What it accepts must
// re-serialise to a line it accepts again, with the same fingerprint.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "instances/ssh_keys.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto key = gpucloud::instances::parse_public_key(text);
  if (!key) return 0;
  auto again = gpucloud::instances::parse_public_key(key->line());
  if (!again || again->fingerprint != key->fingerprint || again->line() != key->line()) std::abort();
  return 0;
}
