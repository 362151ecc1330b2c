#pragma once
// What tests take from the shared machine, allocated so that test processes running in
// parallel (ctest -j, and other checkouts on the same host) never collide, and recorded so
// that what a killed test left behind is swept at the start of the next run.
//
// Everything lives under kAllocDir (/tmp/gpucloud-test-alloc). Each claim is a file held with
// flock(2) for as long as its owner lives: the kernel drops the lock when the process dies
// however it dies, so "locked" means "in use" and nothing goes stale.
#include <string>
#include <vector>

namespace gpucloud::testing {

inline constexpr const char* kAllocDir = "/tmp/gpucloud-test-alloc";

// Host ports for `[[hosts]] port_range`: a block of kPortBlockSize ports that no other live
// test process holds, below the kernel's ephemeral range (32768+) so no daemon's bound port
// can fall inside it. Held until this process exits.
inline constexpr int kPortBlockSize = 200;
int port_block();
// "FIRST-LAST": `count` ports at the start of a fresh port_block().
std::string port_range(int count = 100);

// An IPv4 /24 that no other live test process holds, as its first three octets ("10.B.C":
// append ".0/24" for the subnet, ".2" for an address). Drawn from 10.100.0.0-10.199.255.0,
// apart from the 10.200+ range where gpucloudd picks its own installation networks, and
// never one the host already has an address or route in. Held until this process exits.
std::string subnet_prefix();

// A name no other test process (here or in another run) will make: PREFIX + pid + counter +
// random letters, at most `max_len` characters (nftables and interface names are short).
std::string unique_name(const std::string& prefix, std::size_t max_len = 48);

// A record of what a test made outside its own process (containers by label, networks,
// nftables tables, network namespaces, iptables rules), one `KIND VALUE` line each; see
// support/cleanup.py for the kinds. While the lease lives its file is locked; once its owner
// is gone `cleanup.py sweep` removes everything it lists.
class ResourceLease {
 public:
  ResourceLease();
  ~ResourceLease();  // forgets the record; call clean() first to also remove the resources
  ResourceLease(const ResourceLease&) = delete;
  ResourceLease& operator=(const ResourceLease&) = delete;

  void add(const std::string& kind, const std::string& value);
  void clean();  // removes everything listed now (cleanup.py release), keeps the lease
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace gpucloud::testing
