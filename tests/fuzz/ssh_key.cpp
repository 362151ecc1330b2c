// libFuzzer: SSH public-key lines through instances::parse_public_key. What it accepts must
// re-serialise to a line it accepts again, as the same key (type, blob, fingerprint). The
// comment is free text and may come back trimmed (a comment cut at 200 characters can end
// in a space that the second parse drops).
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
  if (!again || again->fingerprint != key->fingerprint || again->type != key->type ||
      again->blob_base64 != key->blob_base64)
    std::abort();
  return 0;
}
