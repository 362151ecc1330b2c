// GPUCLOUD_REQUIRE's reading, apart from the probes in capabilities.cpp: the unit tests that
// need the tests' PostgreSQL link this file alone.
#include <cstdlib>
#include <string_view>

#include "support/capabilities.h"

namespace gpucloud::testing {

bool capability_required(std::string_view capability) {
  const char* env = std::getenv("GPUCLOUD_REQUIRE");
  if (!env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    auto comma = list.find(',');
    auto item = list.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == capability || item == "all") return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace gpucloud::testing
