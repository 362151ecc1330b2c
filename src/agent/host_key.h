#pragma once
// The instance's SSH host key, made by the agent before its container first starts and kept
// in the instance's config directory (the init's read-only /.gpucloud/config), so the agent
// knows the key at create time without waiting for the init to print it, sshd starts
// without a key generation inside, and a saved image never carries the key (it is not on the
// system disk). Blocking (forks ssh-keygen, fsyncs): call from the agent's state thread.
#include <string>
#include <string_view>

#include "core/result.h"

namespace gpucloud::agent {

// In the config directory (host) and in /.gpucloud/config (container): the private key
// (0600) and its ".pub".
inline constexpr std::string_view kConfigHostKeyName = "ssh_host_ed25519_key";

// "ssh-ed25519 AAAA..." of the key in `config_dir`; "" when there is none (or half of one).
Result<std::string> read_config_host_key(const std::string& config_dir);

// The key in `config_dir`, made now (ssh-keygen, ed25519) when there is none. unavailable
// when the host has no ssh-keygen: the caller then leaves it to the init, as before.
Result<std::string> ensure_config_host_key(const std::string& config_dir, const std::string& comment);

}  // namespace gpucloud::agent
