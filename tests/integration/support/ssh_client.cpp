#include "support/ssh_client.h"

#include <fstream>

#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace json = boost::json;

KeyPair make_key() {
  KeyPair k;
  k.dir = "/tmp/gpucloud-it-key-" + random_suffix();
  shell("mkdir -p " + k.dir + " && ssh-keygen -q -t ed25519 -N '' -f " + k.dir + "/id");
  k.private_key = k.dir + "/id";
  k.public_key = shell("cat " + k.dir + "/id.pub");
  while (!k.public_key.empty() && k.public_key.back() == '\n') k.public_key.pop_back();
  return k;
}

std::string ssh_run(const json::value& instance, const KeyPair& key, const std::string& command, int* rc,
                    const SshRoute& route) {
  const auto& ssh = instance.at("ssh").as_object();
  std::string port = std::to_string(ssh.at("port").as_int64());
  std::string known = key.dir + "/known_hosts";
  std::ofstream(known) << "[" << route.address << "]:" << port << " " << std::string(ssh.at("host_key").as_string())
                       << "\n";
  std::string cmd = (route.netns.empty() ? "" : "ip netns exec " + route.netns + " ") + "timeout 20 ssh -i " +
                    key.private_key + " -p " + port + " -o BatchMode=yes -o UserKnownHostsFile=" + known +
                    " -o StrictHostKeyChecking=yes -o ConnectTimeout=5 root@" + route.address + " '" + command +
                    "' 2>/dev/null; echo \"rc=$?\"";
  std::string out = shell(cmd);
  auto pos = out.rfind("rc=");
  if (rc) *rc = pos == std::string::npos ? -1 : std::stoi(out.substr(pos + 3));
  return pos == std::string::npos ? out : out.substr(0, pos);
}

}  // namespace gpucloud::testing
