#pragma once
// A "client host" for real-traffic tests: a network namespace joined to the host by a veth
// pair, so its connections to the host's published ports are forwarded like a remote
// machine's (the host's own 127.0.0.1 connections never meet source rules). And the traffic
// itself: TCP/HTTP and UDP from inside a namespace, with deadlines.
//
// Names come from unique_name() and addresses from a subnet_prefix() /24 (support/
// test_resources.h); both go into a ResourceLease before they are made, so a killed test's
// namespace is swept by the next run, and the destructor removes them on any failure.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "support/test_resources.h"

namespace gpucloud::testing {

class ClientHost {
 public:
  // Namespace with `client_ip`/30 on its veth end and a default route via `host_ip`/30 on the
  // host's end: quad 0 of "10.B.C" is .2 (host .1), quad 1 is .6 (host .5), and so on.
  // nullptr with `error` set when it cannot be made (no root, no `ip`).
  static std::unique_ptr<ClientHost> make(const std::string& subnet_prefix, int quad, std::string* error);
  ~ClientHost();
  ClientHost(const ClientHost&) = delete;
  ClientHost& operator=(const ClientHost&) = delete;

  const std::string& netns() const { return netns_; }
  const std::string& ip() const { return client_ip_; }
  const std::string& host_ip() const { return host_ip_; }  // the host's address as this client sees it
  std::string cidr() const { return client_ip_ + "/32"; }
  // The host's end of the veth pair: down, the namespace is cut off (a pulled cable).
  std::string host_interface() const { return veth_ + "h"; }

 private:
  ClientHost() = default;
  std::string netns_, veth_, client_ip_, host_ip_;
  ResourceLease lease_;
};

// A socket of `type` in namespace `netns` ("" = this process's own).
int socket_in(const std::string& netns, int type);

// Connects from `netns` to ip:port, sends an HTTP/1.0 GET and reads the answer to EOF.
// nullopt when refused, dropped or not answered within `timeout`. `connected`, when given,
// says whether the TCP handshake completed (the kernel answers it, so a busy machine delays
// the answer, not the handshake: a firewall hole shows as no handshake).
std::optional<std::string> http_get(const std::string& netns, const std::string& ip, int port,
                                    std::chrono::milliseconds timeout, bool* connected = nullptr);

// An HTTP 200 whose body names `marker` (the test's own server, not another test's on a port
// it happened to pick too).
bool is_http_ok(const std::optional<std::string>& answer, const std::string& marker);

// One datagram "ping-RANDOM" from `netns`; true when `marker` + ":" + it comes back in time.
bool udp_echo(const std::string& netns, const std::string& ip, int port, std::chrono::milliseconds timeout,
              const std::string& marker);

}  // namespace gpucloud::testing
