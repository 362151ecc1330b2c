#include "agentlink/terminal_messages.h"

#include <boost/beast/core/detail/base64.hpp>
#include <boost/json.hpp>

namespace gpucloud::agentlink {
namespace json = boost::json;
namespace base64 = boost::beast::detail::base64;

std::string terminal_bytes_to_base64(std::string_view bytes) {
  std::string out(base64::encoded_size(bytes.size()), '\0');
  out.resize(base64::encode(out.data(), bytes.data(), bytes.size()));
  return out;
}

Result<std::string> terminal_bytes_from_base64(std::string_view text) {
  std::string out(base64::decoded_size(text.size()), '\0');
  const auto [written, read] = base64::decode(out.data(), text.data(), text.size());
  // The decoder stops at the padding: what it left must be that padding and nothing else.
  const std::string_view rest = text.substr(read);
  if (rest.size() > 2 || rest.find_first_not_of('=') != std::string_view::npos || (text.size() % 4) != 0)
    return fail(ErrorCode::invalid_argument, "terminal data is not base64");
  out.resize(written);
  return out;
}

std::optional<std::int64_t> terminal_int_field(const json::object& body, std::string_view name) {
  const json::value* v = body.if_contains(name);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v->as_uint64());
  return std::nullopt;
}

std::string terminal_string_field(const json::object& body, std::string_view name) {
  const json::value* v = body.if_contains(name);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

Result<std::int64_t> terminal_stream_of(const json::object& body) {
  auto id = terminal_int_field(body, "stream");
  if (!id || *id <= 0) return fail(ErrorCode::invalid_argument, "a terminal message needs a positive \"stream\"");
  return *id;
}

Result<std::string> terminal_data_of(const json::object& body) {
  const json::value* v = body.if_contains("data");
  if (!v || !v->is_string()) return fail(ErrorCode::invalid_argument, "a terminal message needs \"data\" (base64)");
  return terminal_bytes_from_base64(v->as_string());
}

}  // namespace gpucloud::agentlink
