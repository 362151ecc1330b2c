#pragma once
// Secrets: Argon2id for passwords (slow on purpose: call off the event loop), random API
// and session tokens stored as SHA-256 (long random secrets need no slow hash).
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::auth {

Result<std::string> hash_password(std::string_view password);            // Argon2id, PHC string
bool verify_password(std::string_view password, const std::string& phc);  // constant time
std::string new_token_secret();                                          // "gpc_" + 256 random bits, base64url
std::string token_hash(std::string_view token);                          // SHA-256, lowercase hex
Status check_password_strength(std::string_view password);               // >= 8 characters, <= 1024
// HMAC-SHA-256, lowercase hex: a digest of data that may hold a password (a request body),
// which a plain SHA-256 in the database would let anyone holding a copy test guesses against.
std::string keyed_hash(std::string_view key, std::string_view data);
// 32 random bytes kept in `path` (created 0600 when absent); a fresh in-memory key when the
// file cannot be read or written.
std::string load_or_create_key(const std::string& path);

}  // namespace gpucloud::auth
