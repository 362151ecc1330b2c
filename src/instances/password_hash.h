#pragma once
// The instance's root password as /etc/shadow wants it: crypt(3) SHA-512 with a random salt.
// The plain password is never stored; the hash reaches the instance through a read-only
// file, never its environment (a saved image would carry it).
#include <string>

#include "core/result.h"

namespace gpucloud::instances {

Result<std::string> shadow_password_hash(const std::string& password);

}  // namespace gpucloud::instances
