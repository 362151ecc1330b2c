#pragma once
// application/problem+json documents (RFC 9457) with the stable codes of api.md.
#include <string>

#include "core/result.h"

namespace gpucloud::api {

inline constexpr const char* kProblemContentType = "application/problem+json";

// {"type":"about:blank","title":...,"status":...,"detail":...,"code":..., extra numbers}
std::string problem_body(const Error& error);

}  // namespace gpucloud::api
