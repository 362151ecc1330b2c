#pragma once
// Resource identifiers ("i-3kq9x2m7c4v8") and resource names ("train-1").
#include <string>
#include <string_view>

namespace gpucloud {

// A fresh random id with the type prefix of api.md ("u", "i", "tok", ...): 12 base32 chars,
// 60 random bits — ids are not secrets, only unique.
std::string new_id(std::string_view prefix);

// True when `text` has the shape of an id of that prefix, so a name can never be taken for one.
bool looks_like_id(std::string_view text, std::string_view prefix);
bool looks_like_any_id(std::string_view text);

// Names of instances, disks, keys, ...: [a-z][a-z0-9-]{0,62}, never shaped like an id.
bool is_valid_resource_name(std::string_view name);

// Usernames: [a-z][a-z0-9_-]{2,31}.
bool is_valid_username(std::string_view name);

}  // namespace gpucloud
