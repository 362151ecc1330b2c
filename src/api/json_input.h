#pragma once
// Reading request bodies: every refusal names the field, as api.md asks.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "core/result.h"

namespace gpucloud::api {

// The body as a JSON object; an empty body is an empty object.
Result<boost::json::object> parse_object(std::string_view body);

Result<std::string> required_string(const boost::json::object& o, std::string_view field);
Result<std::optional<std::string>> optional_string(const boost::json::object& o, std::string_view field);
Result<std::int64_t> required_int(const boost::json::object& o, std::string_view field);
Result<std::optional<std::int64_t>> optional_int(const boost::json::object& o, std::string_view field);
Result<std::optional<bool>> optional_bool(const boost::json::object& o, std::string_view field);

// Refuses a member not in `known` ("bogus: not a field of this request"): a typo must not
// pass for an accepted change.
Status only_fields(const boost::json::object& o, std::initializer_list<std::string_view> known, std::string_view prefix = "");

}  // namespace gpucloud::api
