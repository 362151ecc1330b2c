#include "server/terminal_control.h"

#include <boost/json.hpp>

namespace gpucloud::server {
namespace json = boost::json;

namespace {
tl::unexpected<Error> refuse(std::string detail) {
  if (detail.size() > 120) detail.resize(120);  // a close frame's reason holds 123 bytes
  return fail(ErrorCode::invalid_argument, std::move(detail));
}

// One of rows/cols: an integer in 1..kTerminalMaxDimension.
Result<int> dimension(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return refuse(std::string("resize needs \"") + key + "\"");
  std::int64_t n = 0;
  if (v->is_int64()) {
    n = v->as_int64();
  } else if (v->is_uint64()) {
    n = kTerminalMaxDimension + 1;  // beyond int64: too big either way
  } else {
    return refuse(std::string("resize: \"") + key + "\" must be an integer");
  }
  if (n < 1 || n > kTerminalMaxDimension)
    return refuse(std::string("resize: \"") + key + "\" must be 1.." + std::to_string(kTerminalMaxDimension));
  return static_cast<int>(n);
}
}  // namespace

Result<TerminalResize> parse_terminal_control(std::string_view text) {
  if (text.size() > kTerminalControlMaxBytes) return refuse("control message over 4096 bytes");
  boost::system::error_code ec;
  json::value parsed = json::parse(text, ec);
  if (ec) return refuse("control message is not JSON");
  if (!parsed.is_object()) return refuse("control message must be a JSON object");
  const auto& o = parsed.as_object();
  const json::value* type = o.if_contains("type");
  if (type == nullptr || !type->is_string()) return refuse("control message needs a string \"type\"");
  // The type is not echoed: cut short it might end inside a UTF-8 sequence.
  if (type->as_string() != "resize") return refuse("unknown control message type (known: resize)");
  auto rows = dimension(o, "rows");
  if (!rows) return tl::unexpected(rows.error());
  auto cols = dimension(o, "cols");
  if (!cols) return tl::unexpected(cols.error());
  return TerminalResize{*rows, *cols};
}

}  // namespace gpucloud::server
