#include "instances/password_hash.h"

#include <array>
#include <crypt.h>
#include <sodium.h>

namespace gpucloud::instances {

Result<std::string> shadow_password_hash(const std::string& password) {
  static constexpr char kSaltChars[] = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string setting = "$6$";
  for (int i = 0; i < 16; ++i) setting += kSaltChars[randombytes_uniform(64)];
  crypt_data data{};
  const char* hash = crypt_r(password.c_str(), setting.c_str(), &data);
  if (!hash || hash[0] == '*') return fail(ErrorCode::internal, "crypt(3) refused to hash the password");
  std::string out(hash);
  sodium_memzero(&data, sizeof data);
  return out;
}

}  // namespace gpucloud::instances
