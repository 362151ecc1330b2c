#include "api/json_input.h"

#include <algorithm>

#include <boost/json.hpp>

namespace gpucloud::api {
namespace json = boost::json;

Result<json::object> parse_object(std::string_view body) {
  if (body.empty()) return json::object{};
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "body: not valid JSON (" + ec.message() + ")");
  if (!v.is_object()) return fail(ErrorCode::invalid_argument, "body: must be a JSON object");
  return std::move(v.as_object());
}

Result<std::optional<std::string>> optional_string(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<std::string>{};
  if (!it->value().is_string()) return fail(ErrorCode::invalid_argument, std::string(field) + ": must be a string");
  return std::optional<std::string>{std::string(it->value().as_string())};
}

Result<std::string> required_string(const json::object& o, std::string_view field) {
  auto v = optional_string(o, field);
  if (!v) return fail(v.error());
  if (!*v) return fail(ErrorCode::invalid_argument, std::string(field) + ": is required");
  return std::move(**v);
}

Result<std::optional<std::int64_t>> optional_int(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<std::int64_t>{};
  const json::value& v = it->value();
  if (v.is_int64()) return std::optional<std::int64_t>{v.as_int64()};
  if (v.is_uint64() && v.as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return std::optional<std::int64_t>{static_cast<std::int64_t>(v.as_uint64())};
  return fail(ErrorCode::invalid_argument, std::string(field) + ": must be an integer");
}

Result<std::int64_t> required_int(const json::object& o, std::string_view field) {
  auto v = optional_int(o, field);
  if (!v) return fail(v.error());
  if (!*v) return fail(ErrorCode::invalid_argument, std::string(field) + ": is required");
  return **v;
}

Result<std::optional<bool>> optional_bool(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<bool>{};
  if (!it->value().is_bool()) return fail(ErrorCode::invalid_argument, std::string(field) + ": must be true or false");
  return std::optional<bool>{it->value().as_bool()};
}

Status only_fields(const json::object& o, std::initializer_list<std::string_view> known, std::string_view prefix) {
  for (const auto& member : o) {
    if (std::find(known.begin(), known.end(), std::string_view(member.key())) == known.end())
      return fail(ErrorCode::invalid_argument, std::string(prefix) + std::string(member.key()) + ": not a field of this request");
  }
  return ok();
}

}  // namespace gpucloud::api
