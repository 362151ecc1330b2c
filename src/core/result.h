#pragma once
// Errors as values across module boundaries (LevelDB's Status, tl::expected on g++ 12).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

namespace gpucloud {

// The stable problem codes of api.md; each maps to one HTTP status.
enum class ErrorCode {
  invalid_argument,
  unauthorized,
  forbidden,
  not_found,
  conflict,
  insufficient_balance,
  no_capacity,
  quota_exceeded,
  rate_limited,
  payload_too_large,
  method_not_allowed,
  unsupported_media_type,
  unavailable,
  internal,
};

std::string_view to_string(ErrorCode code);
int http_status(ErrorCode code);
std::string_view http_title(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string detail;
  // Extra integer members of the problem document, e.g. {"gpus_free", 3}.
  std::vector<std::pair<std::string, std::int64_t>> numbers;
  // For rate_limited: seconds to put in Retry-After.
  std::int64_t retry_after_seconds = 0;
};

template <class T>
using Result = tl::expected<T, Error>;
using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> fail(ErrorCode code, std::string detail) {
  return tl::unexpected<Error>(Error{code, std::move(detail), {}, 0});
}
inline tl::unexpected<Error> fail(Error error) { return tl::unexpected<Error>(std::move(error)); }
inline tl::unexpected<Error> invalid(std::string detail) { return fail(ErrorCode::invalid_argument, std::move(detail)); }

inline Status ok() { return {}; }

}  // namespace gpucloud
