#include "auth/credentials.h"

#include <array>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

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

std::string keyed_hash(std::string_view key, std::string_view data) {
  std::array<unsigned char, crypto_auth_hmacsha256_BYTES> mac{};
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  crypto_auth_hmacsha256_final(&state, mac.data());
  std::array<char, crypto_auth_hmacsha256_BYTES * 2 + 1> hex{};
  sodium_bin2hex(hex.data(), hex.size(), mac.data(), mac.size());
  return std::string(hex.data());
}

std::string load_or_create_key(const std::string& path) {
  std::string key(32, '\0');
  if (int fd = ::open(path.c_str(), O_RDONLY); fd >= 0) {
    bool whole = ::read(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
    ::close(fd);
    if (whole) return key;
  }
  randombytes_buf(key.data(), key.size());
  // Created 0600 from the start; O_EXCL so two starts never overwrite each other's key.
  if (int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600); fd >= 0) {
    bool written = ::write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
    ::fsync(fd);
    ::close(fd);
    if (!written) ::unlink(path.c_str());
  }
  return key;
}

Status check_password_strength(std::string_view password) {
  if (password.size() < 8) return fail(ErrorCode::invalid_argument, "password: must be at least 8 characters");
  if (password.size() > 1024) return fail(ErrorCode::invalid_argument, "password: must be at most 1024 characters");
  return ok();
}

}  // namespace gpucloud::auth
