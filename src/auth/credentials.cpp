#include "auth/credentials.h"

#include <array>
#include <sodium.h>

namespace gpucloud::auth {
namespace {
// Argon2id with libsodium's interactive limits (64 MiB, 2 passes): ~50-100 ms a hash.
constexpr unsigned long long kOpsLimit = crypto_pwhash_OPSLIMIT_INTERACTIVE;
constexpr std::size_t kMemLimit = crypto_pwhash_MEMLIMIT_INTERACTIVE;
}  // namespace

Result<std::string> hash_password(std::string_view password) {
  std::array<char, crypto_pwhash_STRBYTES> out{};
  if (crypto_pwhash_str_alg(out.data(), password.data(), password.size(), kOpsLimit, kMemLimit,
                            crypto_pwhash_ALG_ARGON2ID13) != 0)
    return fail(ErrorCode::unavailable, "password hashing ran out of memory");
  return std::string(out.data());
}

bool verify_password(std::string_view password, const std::string& phc) {
  return crypto_pwhash_str_verify(phc.c_str(), password.data(), password.size()) == 0;
}

std::string new_token_secret() {
  std::array<unsigned char, 32> raw{};
  randombytes_buf(raw.data(), raw.size());
  std::array<char, sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)> text{};
  sodium_bin2base64(text.data(), text.size(), raw.data(), raw.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  return "gpc_" + std::string(text.data());
}

std::string token_hash(std::string_view token) {
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(token.data()), token.size());
  std::array<char, crypto_hash_sha256_BYTES * 2 + 1> hex{};
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  return std::string(hex.data());
}

Status check_password_strength(std::string_view password) {
  if (password.size() < 8) return fail(ErrorCode::invalid_argument, "password: must be at least 8 characters");
  if (password.size() > 1024) return fail(ErrorCode::invalid_argument, "password: must be at most 1024 characters");
  return ok();
}

}  // namespace gpucloud::auth
