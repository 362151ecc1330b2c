#pragma once
// OpenSSH against instances, with the instance's host key pinned (never
// StrictHostKeyChecking=no): a key pair per test and a command run over ssh.
#include <string>

#include <boost/json.hpp>

namespace gpucloud::testing {

struct KeyPair {
  std::string dir, private_key, public_key;
};

// A fresh ed25519 key pair in its own /tmp directory (the caller removes `dir`).
KeyPair make_key();

// Where ssh connects from: this host to 127.0.0.1 by default, or from inside network
// namespace `netns` (a client host, support/netns_client.h) to `address`.
struct SshRoute {
  std::string netns;
  std::string address = "127.0.0.1";
};

// Runs `command` (single-quoted for the remote shell: no ' inside) as root on the instance,
// through its published SSH port; `rc` gets ssh's exit status.
std::string ssh_run(const boost::json::value& instance, const KeyPair& key, const std::string& command,
                    int* rc = nullptr, const SshRoute& route = {});

}  // namespace gpucloud::testing
