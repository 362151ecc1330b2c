// gpucloud's nftables port publishing against the real kernel (tests named ROOT_*, skipped
// with a message when not root, when nft or ip is missing, or when network namespaces cannot
// be made).
//
// Topology, all private to one test (random names, a random 10.251.X.0/24 and 10.252.X.0/24):
//   client netns "gpucloud-fwc-ID"  10.251.X.2/30 ── veth ── 10.251.X.1/30  host
//   backend, one of two kinds (each test runs with both):
//     plain:  netns "gpucloud-fwb-ID" 10.251.X.6/30 ── veth ── 10.251.X.5/30 host, a TCP
//             (HTTP-ish) server and a UDP echo run by this process inside that namespace;
//     docker: a container of gpucloud/base:bookworm-2 on its own bridge network
//             (10.252.X.0/24, fixed address .10) running `python3 -m http.server` and a UDP
//             echo (skipped when no engine answers on /var/run/docker.sock or the image is
//             missing: scripts/start-dockerd.sh, scripts/build-base-image.sh).
// The backend is never in the host's own namespace, so traffic to it is forwarded and meets
// the forward hook (and, on a Docker host, Docker's FORWARD chain with policy DROP), exactly
// like traffic to an instance.
//
// Every test uses its own table "gpucloud-test-ID" and never touches the product's table;
// TearDown removes the table, our DOCKER-USER rule, the namespaces, the container, the network.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/un.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "agent/agent_state.h"
#include "agent/firewall/nftables.h"
#include "agent/firewall/port_rules.h"
#include "agent/instance_runtime.h"
#include "agent/runtime/docker_engine_driver.h"
#include "support/capabilities.h"
#include "support/netns_client.h"
#include "support/test_resources.h"

namespace {

using namespace std::chrono_literals;
using gpucloud::ErrorCode;
using gpucloud::agent::firewall::NftablesFirewall;
using gpucloud::agent::firewall::PublishedPort;
using gpucloud::agent::firewall::render_ruleset;
using gpucloud::agent::firewall::SourceRule;
using Clock = std::chrono::steady_clock;
using gpucloud::testing::http_get;
using gpucloud::testing::is_http_ok;
using gpucloud::testing::socket_in;
using gpucloud::testing::udp_echo;

constexpr int kBackendTcpPort = 8000;
constexpr int kBackendUdpPort = 5353;
constexpr auto kBlockedTimeout = 800ms;  // a dropped SYN: how long we wait to call it blocked
constexpr auto kReachTimeout = 3s;

std::pair<int, std::string> sh(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string random_hex(int n) {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += digits[rng() % 16];
  return s;
}

sockaddr_in ipv4(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

bool wait_fd(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

// --- the Docker Engine API over its unix socket (HTTP/1.0: no chunking, EOF ends the body) ---

const std::string kDockerSocket = [] {
  const char* env = std::getenv("GPUCLOUD_TEST_DOCKER_SOCK");
  return std::string(env && *env ? env : "/var/run/docker.sock");
}();
std::string test_image() {
  const char* env = std::getenv("GPUCLOUD_TEST_IMAGE");
  return env && *env ? env : "gpucloud/base:bookworm-2";
}

struct HttpAnswer {
  int status = 0;  // 0: no engine
  std::string body;
};

HttpAnswer docker(const std::string& method, const std::string& path, const std::string& body = "") {
  HttpAnswer answer;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return answer;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", kDockerSocket.c_str());
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    std::string request = method + " /v1.41" + path + " HTTP/1.0\r\nHost: docker\r\n";
    if (!body.empty()) {
      request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                 "\r\n";
    }
    request += "\r\n" + body;
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      std::string raw;
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<std::size_t>(n));
      const auto space = raw.find(' ');
      const auto head_end = raw.find("\r\n\r\n");
      if (space != std::string::npos && head_end != std::string::npos) {
        answer.status = std::atoi(raw.c_str() + space + 1);
        answer.body = raw.substr(head_end + 4);
      }
    }
  }
  ::close(fd);
  return answer;
}

std::string json_string_field(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":\"";
  const auto at = json.find(needle);
  if (at == std::string::npos) return "";
  const auto start = at + needle.size();
  return json.substr(start, json.find('"', start) - start);
}

// An exclusive flock on `path`, held for the object's lifetime. On kHostLockPath (the lock
// every NftablesFirewall takes): while a test holds it, no firewall in any process changes
// tables, DOCKER-USER or sysctls (and none may be called from this process meanwhile).
class FileLock {
 public:
  explicit FileLock(const char* path = gpucloud::agent::firewall::kHostLockPath)
      : fd_(::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    EXPECT_GE(fd_, 0) << path;
    if (fd_ >= 0) {
      EXPECT_EQ(::flock(fd_, LOCK_EX), 0);
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// Tests in other processes pick their subnets under this lock, until their addresses exist.
constexpr const char* kSetupLockPath = "/run/gpucloud-firewall-test-setup.lock";

// --- the fixture ---

enum class BackendKind { plain, docker };

class NftablesFirewallTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    GPUCLOUD_NEED("root", ::geteuid() == 0, "needs root (nftables, network namespaces)");
    GPUCLOUD_NEED("root", sh("command -v nft").first == 0, "nft not installed (apt-get install nftables)");
    GPUCLOUD_NEED("root", sh("command -v ip").first == 0, "ip not installed (apt-get install iproute2)");
    if (GetParam() == BackendKind::docker) {
      GPUCLOUD_NEED("docker", docker("GET", "/_ping").status == 200,
                    std::string("no Docker Engine answers on ") + kDockerSocket + " (scripts/start-dockerd.sh starts one)");
      GPUCLOUD_NEED("docker", docker("GET", "/images/" + test_image() + "/json").status == 200,
                    "image " + test_image() + " missing (scripts/build-base-image.sh builds it)");
    }

    id_ = random_hex(6);
    table_ = "gpucloud-test-" + id_;
    marker_ = "gpucloud-fw-" + id_;
    client_ns_ = "gpucloud-fwc-" + id_;
    // Recorded before anything is made: if this process dies, the next run's sweep removes it.
    lease_ = std::make_unique<gpucloud::testing::ResourceLease>();
    lease_->add("nft-table", "ip " + table_);
    lease_->add("iptables-comment", "DOCKER-USER gpucloud:" + table_);
    lease_->add("netns", client_ns_);
    lease_->add("netns", "gpucloud-fwb-" + id_);
    lease_->add("container", "gpucloud-fwtest-" + id_);
    lease_->add("network", "gpucloud-fwtest-" + id_);
    FileLock setup_lock(kSetupLockPath);
    pick_subnets();
    client_ip_ = net_ + ".2";
    host_ip_ = net_ + ".1";

    // The client host.
    {
      const auto [rc, out] = sh("ip netns add " + client_ns_);
      GPUCLOUD_NEED("root", rc == 0, "cannot make a network namespace here: " + out);
    }
    client_ns_made_ = true;
    must("ip link add gfc" + id_ + "h type veth peer name gfc" + id_ + "c netns " + client_ns_);
    must("ip addr add " + host_ip_ + "/30 dev gfc" + id_ + "h");
    must("ip link set gfc" + id_ + "h up");
    must("ip -n " + client_ns_ + " addr add " + client_ip_ + "/30 dev gfc" + id_ + "c");
    must("ip -n " + client_ns_ + " link set gfc" + id_ + "c up");
    must("ip -n " + client_ns_ + " link set lo up");
    must("ip -n " + client_ns_ + " route add default via " + host_ip_);
    if (HasFatalFailure()) return;

    if (GetParam() == BackendKind::plain) {
      start_plain_backend();
    } else {
      start_docker_backend();
    }
    if (HasFatalFailure()) return;

    // Published ports from the cross-process allocator (held until this process exits).
    const int base = gpucloud::testing::port_block();
    tcp_host_port_ = base;
    udp_host_port_ = base + 1;
    firewall_ = std::make_unique<NftablesFirewall>(table_);
  }

  void TearDown() override {
    if (id_.empty()) return;  // skipped before anything was made
    if (firewall_) {
      auto removed = firewall_->remove_table();
      EXPECT_TRUE(removed) << removed.error().detail;
    }
    stop_ = true;
    for (auto& t : servers_) t.join();
    for (int fd : server_fds_) ::close(fd);
    if (!container_id_.empty()) docker("DELETE", "/containers/" + container_id_ + "?force=true");
    if (network_made_) docker("DELETE", "/networks/" + network_);
    if (backend_ns_made_) sh("ip netns del " + backend_ns_);
    if (client_ns_made_) sh("ip netns del " + client_ns_);
    // Deleting a namespace deletes its veth end and so the pair; make sure of it.
    sh("ip link del gfc" + id_ + "h 2>/dev/null; ip link del gfb" + id_ + "h 2>/dev/null");
  }

  void must(const std::string& cmd) {
    const auto [rc, out] = sh(cmd);
    ASSERT_EQ(rc, 0) << cmd << ": " << out;
  }

  // Two /24s from the shared allocator (no other test process holds them; the host has no
  // route into them).
  void pick_subnets() {
    net_ = gpucloud::testing::subnet_prefix();
    docker_net_ = gpucloud::testing::subnet_prefix();
  }

  void start_plain_backend() {
    backend_ns_ = "gpucloud-fwb-" + id_;
    backend_ip_ = net_ + ".6";
    must("ip netns add " + backend_ns_);
    backend_ns_made_ = true;
    must("ip link add gfb" + id_ + "h type veth peer name gfb" + id_ + "c netns " + backend_ns_);
    must("ip addr add " + net_ + ".5/30 dev gfb" + id_ + "h");
    must("ip link set gfb" + id_ + "h up");
    must("ip -n " + backend_ns_ + " addr add " + backend_ip_ + "/30 dev gfb" + id_ + "c");
    must("ip -n " + backend_ns_ + " link set gfb" + id_ + "c up");
    must("ip -n " + backend_ns_ + " route add default via " + net_ + ".5");
    if (HasFatalFailure()) return;

    const int tcp = socket_in(backend_ns_, SOCK_STREAM);
    const int udp = socket_in(backend_ns_, SOCK_DGRAM);
    ASSERT_GE(tcp, 0);
    ASSERT_GE(udp, 0);
    server_fds_ = {tcp, udp};
    const int one = 1;
    ::setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const auto tcp_addr = ipv4(backend_ip_, kBackendTcpPort);
    const auto udp_addr = ipv4(backend_ip_, kBackendUdpPort);
    ASSERT_EQ(::bind(tcp, reinterpret_cast<const sockaddr*>(&tcp_addr), sizeof tcp_addr), 0)
        << std::strerror(errno);
    ASSERT_EQ(::listen(tcp, 64), 0);
    ASSERT_EQ(::bind(udp, reinterpret_cast<const sockaddr*>(&udp_addr), sizeof udp_addr), 0)
        << std::strerror(errno);

    servers_.emplace_back([this, tcp] {
      while (!stop_) {
        if (!wait_fd(tcp, POLLIN, 100ms)) continue;
        const int conn = ::accept4(tcp, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        char buf[1024];
        if (wait_fd(conn, POLLIN, 2s) && ::recv(conn, buf, sizeof buf, 0) > 0) {
          const std::string answer = "HTTP/1.0 200 OK\r\nContent-Length: " +
                                     std::to_string(marker_.size()) + "\r\n\r\n" + marker_;
          ::send(conn, answer.data(), answer.size(), MSG_NOSIGNAL);
        }
        ::close(conn);
      }
    });
    servers_.emplace_back([this, udp] {
      while (!stop_) {
        if (!wait_fd(udp, POLLIN, 100ms)) continue;
        char buf[2048];
        sockaddr_in from{};
        socklen_t len = sizeof from;
        const ssize_t n = ::recvfrom(udp, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n <= 0) continue;
        const std::string echo = marker_ + ":" + std::string(buf, static_cast<std::size_t>(n));
        ::sendto(udp, echo.data(), echo.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
      }
    });
  }

  void start_docker_backend() {
    network_ = "gpucloud-fwtest-" + id_;
    backend_ip_ = docker_net_ + ".10";
    const std::string labels = R"("Labels":{"gpucloud.test":"firewall"})";
    auto net = docker("POST", "/networks/create",
                      R"({"Name":")" + network_ + R"(","CheckDuplicate":true,"Driver":"bridge",)" +
                          R"("IPAM":{"Config":[{"Subnet":")" + docker_net_ + R"(.0/24"}]},)" + labels + "}");
    ASSERT_EQ(net.status, 201) << net.body;
    network_made_ = true;
    // http.server on TCP 8000 listing a directory that holds the marker, and a UDP echo on
    // 5353 that prefixes the marker.
    const std::string udp_echo_py =
        R"(import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('',5353))\n)"
        R"(while True:\n  d,a=s.recvfrom(2048)\n  s.sendto(b')" + marker_ + R"(:'+d,a)\n)";
    const std::string cmd = R"(["sh","-c","mkdir -p /srv/www && touch /srv/www/)" + marker_ +
                            R"( && cd /srv/www && { python3 -m http.server 8000 >/dev/null 2>&1 & } && )" +
                            R"(exec python3 -c \")" + udp_echo_py + R"(\""])";
    auto created = docker(
        "POST", "/containers/create?name=" + network_,
        R"({"Image":")" + test_image() + R"(","Cmd":)" + cmd + "," + labels +
            R"(,"HostConfig":{"NetworkMode":")" + network_ + R"("},)" +
            R"("NetworkingConfig":{"EndpointsConfig":{")" + network_ +
            R"(":{"IPAMConfig":{"IPv4Address":")" + backend_ip_ + R"("}}}}})");
    ASSERT_EQ(created.status, 201) << created.body;
    container_id_ = json_string_field(created.body, "Id");
    ASSERT_FALSE(container_id_.empty()) << created.body;
    auto started = docker("POST", "/containers/" + container_id_ + "/start");
    ASSERT_EQ(started.status, 204) << started.body;
    // Ready when the host reaches both servers directly (the host's own traffic is never
    // forwarded).
    const auto deadline = Clock::now() + 20s;
    while (!is_http_ok(http_get("", backend_ip_, kBackendTcpPort, 1s), marker_)) {
      ASSERT_LT(Clock::now(), deadline) << "http.server in the container never answered";
      std::this_thread::sleep_for(100ms);
    }
    while (!udp_echo("", backend_ip_, kBackendUdpPort, 500ms, marker_)) {
      ASSERT_LT(Clock::now(), deadline) << "the UDP echo in the container never answered";
    }
  }

  std::vector<PublishedPort> ports(std::vector<std::string> cidrs) const {
    PublishedPort tcp;
    tcp.instance_id = "i-test-" + id_;
    tcp.host_port = tcp_host_port_;
    tcp.container_ip = backend_ip_;
    tcp.container_port = kBackendTcpPort;
    tcp.protocol = "tcp";
    for (auto& c : cidrs) tcp.allowed.push_back(SourceRule{c});
    PublishedPort udp = tcp;
    udp.host_port = udp_host_port_;
    udp.container_port = kBackendUdpPort;
    udp.protocol = "udp";
    return {tcp, udp};
  }

  void apply(std::vector<std::string> cidrs) {
    auto applied = firewall_->apply(ports(std::move(cidrs)));
    ASSERT_TRUE(applied) << applied.error().detail;
  }

  bool client_reaches(std::chrono::milliseconds timeout = kReachTimeout) const {
    return is_http_ok(http_get(client_ns_, host_ip_, tcp_host_port_, timeout), marker_);
  }
  bool client_blocked() const {
    return !http_get(client_ns_, host_ip_, tcp_host_port_, kBlockedTimeout).has_value();
  }
  bool host_reaches(const std::string& ip = "127.0.0.1") const {
    return is_http_ok(http_get("", ip, tcp_host_port_, kReachTimeout), marker_);
  }

  // Our rule in DOCKER-USER (empty when there is no such chain).
  int docker_user_rules() const {
    const auto [rc, out] = sh("iptables -w 5 -S DOCKER-USER");
    if (rc != 0) return 0;
    int n = 0;
    const std::string needle = "gpucloud:" + table_;
    for (auto at = out.find(needle); at != std::string::npos; at = out.find(needle, at + 1)) ++n;
    return n;
  }
  static bool forward_policy_drops() {
    return sh("iptables -w 5 -S FORWARD").second.find("-P FORWARD DROP") != std::string::npos;
  }
  static bool docker_user_chain_exists() { return sh("iptables -w 5 -S DOCKER-USER").first == 0; }

  std::string id_, table_, marker_, client_ns_, backend_ns_, net_, docker_net_;
  std::string client_ip_, host_ip_, backend_ip_;
  std::string network_, container_id_;
  bool client_ns_made_ = false, backend_ns_made_ = false, network_made_ = false;
  int tcp_host_port_ = 0, udp_host_port_ = 0;
  std::unique_ptr<NftablesFirewall> firewall_;
  std::unique_ptr<gpucloud::testing::ResourceLease> lease_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> servers_;
  std::vector<int> server_fds_;
};

// (a) Published: the client host and the host itself (127.0.0.1 and its own address) reach it.
TEST_P(NftablesFirewallTest, ROOT_PublishedPortReachableFromClientAndHost) {
  apply({"0.0.0.0/0"});
  EXPECT_TRUE(client_reaches());
  EXPECT_TRUE(host_reaches("127.0.0.1"));
  EXPECT_TRUE(host_reaches(host_ip_));
  EXPECT_TRUE(udp_echo(client_ns_, host_ip_, udp_host_port_, kReachTimeout, marker_));
  EXPECT_TRUE(udp_echo("", "127.0.0.1", udp_host_port_, kReachTimeout, marker_));
  // Without our table the host port is closed (no engine publishing involved).
  ASSERT_TRUE(firewall_->remove_table());
  EXPECT_FALSE(http_get(client_ns_, host_ip_, tcp_host_port_, kBlockedTimeout));
}

// (b) A source no rule allows cannot connect; the host itself (the operator) still can.
TEST_P(NftablesFirewallTest, ROOT_SourceNotAllowedIsBlockedButHostStillReaches) {
  apply({"192.0.2.0/24"});
  EXPECT_TRUE(client_blocked());
  EXPECT_FALSE(udp_echo(client_ns_, host_ip_, udp_host_port_, kBlockedTimeout, marker_));
  EXPECT_TRUE(host_reaches("127.0.0.1"));
  EXPECT_TRUE(host_reaches(host_ip_));

  apply({"192.0.2.0/24", client_ip_ + "/32"});
  EXPECT_TRUE(client_reaches());
  EXPECT_TRUE(udp_echo(client_ns_, host_ip_, udp_host_port_, kReachTimeout, marker_));

  apply({});  // no rule at all: unreachable from every other host
  EXPECT_TRUE(client_blocked());
  EXPECT_TRUE(host_reaches("127.0.0.1"));
}

// (c) A changed rule set holds for new connections within 2 s (in fact once apply returns).
TEST_P(NftablesFirewallTest, ROOT_RuleChangesApplyToNewConnectionsWithin2s) {
  apply({"0.0.0.0/0"});
  ASSERT_TRUE(client_reaches());

  auto start = Clock::now();
  apply({"198.51.100.0/24"});
  bool blocked = false;
  while (!(blocked = client_blocked()) && Clock::now() - start < 2s) {
  }
  EXPECT_TRUE(blocked);
  EXPECT_LT(Clock::now() - start, 2s + kBlockedTimeout);

  start = Clock::now();
  apply({net_ + ".0/24"});
  bool reached = false;
  while (!(reached = client_reaches(500ms)) && Clock::now() - start < 2s) {
  }
  EXPECT_TRUE(reached);
  EXPECT_LT(Clock::now() - start, 2s);
}

// (c2) Revoking a source cuts what it has open, not only its new connections: a UDP flow
// (one socket, its conntrack entry established by an answered datagram) and a TCP connection
// whose handshake completed before the change get nothing more through within 2 s. The
// control: the same flows keep going across an apply that still allows them.
TEST_P(NftablesFirewallTest, ROOT_ARevokedSourceLosesItsEstablishedConnectionsWithin2s) {
  apply({client_ip_ + "/32"});
  // One UDP socket in the client's namespace: every ping of it is one conntrack entry.
  const int udp = socket_in(client_ns_, SOCK_DGRAM);
  ASSERT_GE(udp, 0);
  server_fds_.push_back(udp);
  const auto to = ipv4(host_ip_, udp_host_port_);
  ASSERT_EQ(::connect(udp, reinterpret_cast<const sockaddr*>(&to), sizeof to), 0) << std::strerror(errno);
  int sent = 0;
  auto ping = [&](std::chrono::milliseconds timeout) {
    const std::string msg = "flow-" + std::to_string(++sent);
    if (::send(udp, msg.data(), msg.size(), 0) != static_cast<ssize_t>(msg.size())) return false;
    const auto deadline = Clock::now() + timeout;
    char buf[512];
    while (Clock::now() < deadline) {
      if (!wait_fd(udp, POLLIN, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()))) break;
      const ssize_t n = ::recv(udp, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0 && std::string(buf, static_cast<std::size_t>(n)) == marker_ + ":" + msg) return true;
    }
    return false;
  };
  // A TCP connection, handshake done, request not sent yet.
  auto open_tcp = [&] {
    const int fd = socket_in(client_ns_, SOCK_STREAM);
    const auto addr = ipv4(host_ip_, tcp_host_port_);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      if (fd >= 0) ::close(fd);
      return -1;
    }
    return fd;
  };
  auto answered = [&](int fd, std::chrono::milliseconds timeout) {
    const std::string request = "GET / HTTP/1.0\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return false;
    std::string answer;
    char buf[4096];
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline &&
           wait_fd(fd, POLLIN, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()))) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<std::size_t>(n));
    }
    return is_http_ok(answer, marker_);
  };
  ASSERT_TRUE(ping(kReachTimeout)) << "the flow is established";

  // The control: an apply that still allows the client keeps both flowing.
  const int kept = open_tcp();
  ASSERT_GE(kept, 0);
  apply({client_ip_ + "/32", "192.0.2.0/24"});
  EXPECT_TRUE(ping(kReachTimeout)) << "an allowed flow survives a replace";
  EXPECT_TRUE(answered(kept, kReachTimeout)) << "an allowed connection survives a replace";
  ::close(kept);

  const int cut = open_tcp();
  ASSERT_GE(cut, 0);
  const auto revoked = Clock::now();
  apply({"192.0.2.0/24"});
  // Within 2 s nothing more gets through on either (each try waits up to 500 ms).
  bool udp_cut = false;
  while (!(udp_cut = !ping(500ms)) && Clock::now() - revoked < 2s) {
  }
  EXPECT_TRUE(udp_cut) << "the established UDP flow still answers 2 s after the revoke";
  EXPECT_FALSE(answered(cut, 1500ms)) << "the established TCP connection still answers after the revoke";
  ::close(cut);
  // Allowed again: the same UDP socket (its entry still in conntrack) flows again.
  apply({client_ip_ + "/32"});
  EXPECT_TRUE(ping(kReachTimeout));
}

// (d) remove_table leaves nothing of ours behind, and is idempotent.
TEST_P(NftablesFirewallTest, ROOT_RemoveTableRemovesEverything) {
  apply({"0.0.0.0/0"});
  ASSERT_TRUE(client_reaches());
  EXPECT_NE(sh("nft list tables").second.find("table ip " + table_ + "\n"), std::string::npos);
  if (docker_user_chain_exists()) {
    EXPECT_EQ(docker_user_rules(), 1);
  }

  auto removed = firewall_->remove_table();
  ASSERT_TRUE(removed) << removed.error().detail;
  EXPECT_EQ(sh("nft list tables").second.find(table_), std::string::npos);
  EXPECT_EQ(docker_user_rules(), 0);
  auto current = firewall_->current();
  ASSERT_FALSE(current);
  EXPECT_EQ(current.error().code, ErrorCode::not_found);
  EXPECT_FALSE(http_get(client_ns_, host_ip_, tcp_host_port_, kBlockedTimeout));
  // route_localnet goes off with the last gpucloud table (its guard goes with the table), and
  // stays on while another one (a test in another process) still needs and guards it: checked
  // either way. Under the host lock: no table comes or goes while we look.
  {
    FileLock lock;
    const bool others = sh("nft list tables ip").second.find("table ip gpucloud") != std::string::npos;
    EXPECT_EQ(sh("cat /proc/sys/net/ipv4/conf/all/route_localnet").second, others ? "1\n" : "0\n")
        << (others ? "another gpucloud table still relies on it" : "no gpucloud table is left");
  }
  auto again = firewall_->remove_table();
  EXPECT_TRUE(again) << again.error().detail;
}

// Applying the same set twice changes nothing and adds no second DOCKER-USER rule; Docker's
// own tables stay.
TEST_P(NftablesFirewallTest, ROOT_ApplyIsIdempotentAndLeavesOtherTablesAlone) {
  const std::string before = sh("nft list tables").second;
  apply({"10.0.0.0/8"});
  auto first = firewall_->current();
  ASSERT_TRUE(first) << first.error().detail;
  apply({"10.0.0.0/8"});
  auto second = firewall_->current();
  ASSERT_TRUE(second);
  EXPECT_EQ(*first, *second);
  // The DNAT target is an element of the `published` map (nft lists "tcp . PORT ... : IP . PORT").
  EXPECT_NE(first->find(" : " + backend_ip_ + " . " + std::to_string(kBackendTcpPort)), std::string::npos)
      << *first;
  EXPECT_NE(first->find("dnat ip to meta l4proto . th dport map @published"), std::string::npos) << *first;
  if (docker_user_chain_exists()) {
    EXPECT_EQ(docker_user_rules(), 1);
  }
  const std::string after = sh("nft list tables").second;
  for (const char* table : {"table ip nat\n", "table ip filter\n"}) {
    if (before.find(table) != std::string::npos) {
      EXPECT_NE(after.find(table), std::string::npos) << table;
    }
  }
  EXPECT_EQ(sh("cat /proc/sys/net/ipv4/conf/all/route_localnet").second, "1\n");
  EXPECT_EQ(sh("cat /proc/sys/net/ipv4/ip_forward").second, "1\n");
  EXPECT_TRUE(client_reaches());
}

// A replace is one transaction: while the table is rewritten again and again (each time with
// other sources for ~400 more ports of this test's block, so each apply takes a while), an
// allowed client keeps connecting at every moment and a blocked port never answers.
// SERIAL_: the probe's 900 ms handshake limit is a timing judgment; with two other tests on two
// cores the kernel's own packet processing was seen to lag past it (2 of ~100 probes, while a
// split transaction misses ~80), so it runs alone.
TEST_P(NftablesFirewallTest, ROOT_SERIAL_NoHoleWhileTheTableIsReplaced) {
  auto table = [&](int round) {
    auto p = ports({client_ip_ + "/32"});
    p[1].allowed = {SourceRule{"192.0.2.0/24"}};  // the UDP port: blocked for the client
    for (int port = tcp_host_port_ + 2; port < tcp_host_port_ + gpucloud::testing::kPortBlockSize; ++port) {
      for (const char* proto : {"tcp", "udp"}) {
        PublishedPort filler{"i-fill-" + id_, port, backend_ip_, 9, proto, {}};
        for (int i = 0; i < 10; ++i) {
          filler.allowed.push_back(SourceRule{"198.51." + std::to_string(100 + round % 2) + "." +
                                              std::to_string(i * 20 + port % 20) + "/32"});
        }
        p.push_back(std::move(filler));
      }
    }
    return p;
  };
  ASSERT_TRUE(firewall_->apply(table(0)));
  ASSERT_TRUE(client_reaches());

  std::atomic<bool> done{false};
  std::atomic<int> reached{0}, missed{0}, slow{0}, leaked{0};
  std::thread prober([&] {
    while (!done) {
      // Well under TCP's 1 s SYN retransmission: a SYN lost in a hole, or a SYN the table let
      // through without its DNAT (refused), shows as no handshake. A handshake whose answer is
      // late is the test's own server thread waiting for a CPU on a loaded machine (CI runs
      // three tests at once on two cores), not a hole.
      bool connected = false;
      if (is_http_ok(http_get(client_ns_, host_ip_, tcp_host_port_, 900ms, &connected), marker_)) ++reached;
      else if (connected) ++slow;
      else ++missed;
      if (udp_echo(client_ns_, host_ip_, udp_host_port_, 50ms, marker_)) ++leaked;
    }
  });
  const auto start = Clock::now();
  int applies = 0;
  for (int round = 1; round <= 30 || Clock::now() - start < 2s; ++round) {
    auto applied = firewall_->apply(table(round));
    EXPECT_TRUE(applied) << applied.error().detail;
    ++applies;
  }
  done = true;
  prober.join();
  EXPECT_EQ(missed, 0) << reached << " connections got through (" << slow << " more connected but answered late) during "
                       << applies << " replaces";
  EXPECT_EQ(leaked, 0);
  EXPECT_GE(reached, 10);
}

// The agent applies a sources change from its saved record while the Docker Engine is down:
// InstanceRuntime on an engine socket nobody answers, its table this test's, the instance's
// address this test's backend. The command fails at the engine; the client's traffic
// follows the new rules all the same.
TEST_P(NftablesFirewallTest, ROOT_ASourcesChangeReachesTrafficWhileTheEngineIsDown) {
  namespace json = boost::json;
  using gpucloud::agent::AgentStateStore;
  using gpucloud::agent::Command;
  using gpucloud::agent::InstanceRecord;
  const std::string dir = "/tmp/gpucloud-fwfirst-" + id_;
  auto desired = [&](std::vector<std::string> allowed, std::int64_t generation) {
    json::array sources;
    for (auto& a : allowed) sources.emplace_back(a);
    json::array published{json::object{{"container_port", kBackendTcpPort},
                                       {"host_port", tcp_host_port_},
                                       {"protocol", "tcp"},
                                       {"allowed", std::move(sources)}}};
    return json::object{{"instance_id", "i-fw-" + id_}, {"name", "box"}, {"state", "running"},
                        {"image", "img"}, {"cpu", 1}, {"memory_gib", 1},
                        {"ports", std::move(published)}, {"generation", generation}};
  };
  {
    InstanceRecord record;
    auto spec = gpucloud::agent::instance_spec_from_json(desired({"192.0.2.0/24"}, 1));
    ASSERT_TRUE(spec) << spec.error().detail;
    record.desired = *spec;
    record.ipv4 = backend_ip_;
    record.generation = 1;
    ASSERT_TRUE(AgentStateStore(dir + "/state").save_instance(record));
  }
  apply({"192.0.2.0/24"});  // what the agent applied before the engine went away
  ASSERT_TRUE(client_blocked());

  boost::asio::io_context io;
  gpucloud::agent::DockerEngineDriver::Options engine;
  engine.engine.socket_path = dir + "/no-engine.sock";
  auto runtime = std::make_unique<gpucloud::agent::InstanceRuntime>(
      io.get_executor(), "fwfirst" + id_, dir + "/state",
      std::make_unique<gpucloud::agent::DockerEngineDriver>(io.get_executor(), engine), "", table_);
  auto ensure = [&](json::object d) {
    std::optional<gpucloud::Result<gpucloud::agent::CommandOutcome>> out;
    Command command{"c-" + random_hex(8), "h", "instance.ensure", std::move(d)};
    boost::asio::co_spawn(io, runtime->handle(std::move(command)),
                          [&](std::exception_ptr e, gpucloud::Result<gpucloud::agent::CommandOutcome> result) {
      if (e) std::rethrow_exception(e);
      out.emplace(std::move(result));
    });
    io.restart();
    io.run();
    return std::move(*out);
  };

  auto opened = ensure(desired({client_ip_ + "/32"}, 2));
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, ErrorCode::unavailable) << opened.error().detail;
  EXPECT_TRUE(client_reaches());

  auto closed = ensure(desired({}, 3));
  ASSERT_FALSE(closed);
  EXPECT_EQ(closed.error().code, ErrorCode::unavailable) << closed.error().detail;
  EXPECT_TRUE(client_blocked());
  EXPECT_TRUE(host_reaches("127.0.0.1"));

  runtime.reset();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// Where Docker's FORWARD policy drops, our DOCKER-USER rule is what lets allowed traffic in;
// apply() puts it back when it went missing.
TEST_P(NftablesFirewallTest, ROOT_DockerUserRuleIsRestoredByApply) {
  GPUCLOUD_NEED("docker", docker_user_chain_exists(), "no DOCKER-USER chain on this host");
  apply({"0.0.0.0/0"});
  ASSERT_TRUE(client_reaches());
  ASSERT_EQ(docker_user_rules(), 1);
  sh("iptables -w 5 -D DOCKER-USER -m connmark --mark 0x10000000/0x10000000 -m comment "
     "--comment gpucloud:" + table_ + " -j ACCEPT");
  ASSERT_EQ(docker_user_rules(), 0);
  {
    // Another gpucloud table's rule (a test in another process) would accept our marked
    // connections too; under the host lock no new one appears while we look.
    FileLock lock;
    const bool others = sh("iptables -w 5 -S DOCKER-USER").second.find("gpucloud:") != std::string::npos;
    if (forward_policy_drops() && !others) {
      EXPECT_TRUE(client_blocked()) << "FORWARD policy DROP let it pass";
    }
  }
  apply({"0.0.0.0/0"});
  EXPECT_EQ(docker_user_rules(), 1);
  EXPECT_TRUE(client_reaches());
  // The control, whatever other gpucloud rules DOCKER-USER holds (each accepts any marked
  // connection): ours, put back at the top, is the one that accepts the client. Under the host
  // lock no other rule is inserted above it meanwhile; its packet count must grow. Another
  // test's daemon may insert its rule at the top between our apply and our taking the lock
  // (its daemon does not take our lock; one busy applying its own rules can win ten times in
  // a row, seen in CI): then apply again, until a deadline (apply takes the same lock, so
  // never while we hold it).
  auto our_packets = [&] {
    const std::string listing = sh("iptables -w 5 -L DOCKER-USER -v -x -n").second;
    std::istringstream lines(listing);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("gpucloud:" + table_ + " ") == std::string::npos &&
          !line.ends_with("gpucloud:" + table_ + " */"))
        continue;
      return std::stol(line);  // the first column: packets
    }
    return -1L;
  };
  bool checked = false;
  std::string first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int attempts = 0;
  for (; !checked && std::chrono::steady_clock::now() < deadline; ++attempts) {
    if (attempts > 0) apply({"0.0.0.0/0"});
    FileLock lock;
    first = sh("iptables -w 5 -S DOCKER-USER | sed -n 2p").second;
    if (first.find("gpucloud:" + table_) == std::string::npos) continue;
    checked = true;
    const long before = our_packets();
    ASSERT_GE(before, 0) << sh("iptables -w 5 -L DOCKER-USER -v -x -n").second;
    EXPECT_TRUE(client_reaches());
    EXPECT_GT(our_packets(), before) << "the client's connection passed DOCKER-USER without our rule";
  }
  EXPECT_TRUE(checked) << "ours was never the first rule after " << attempts << " applies in 30 s: " << first;
}

// route_localnet (on while a table exists) must not open the host's loopback to other hosts:
// a client routing 127.0.0.0/8 to the host is dropped, although the port is published on
// 127.0.0.1 too. Without the guard chain the same connection would go through.
TEST_P(NftablesFirewallTest, ROOT_LoopbackIsNotReachableFromOtherHosts) {
  apply({"0.0.0.0/0"});
  ASSERT_TRUE(client_reaches());
  ASSERT_EQ(sh("cat /proc/sys/net/ipv4/conf/all/route_localnet").second, "1\n");
  // The client plays an attacker: it routes 127.1.0.0/16 to the host and accepts answers
  // from loopback addresses on its veth.
  sh("ip -n " + client_ns_ + " route del 127.0.0.0/8 dev lo table local");
  must("ip -n " + client_ns_ + " route add 127.1.0.0/16 via " + host_ip_);
  must("ip netns exec " + client_ns_ + " sh -c 'echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet'");
  EXPECT_FALSE(http_get(client_ns_, "127.1.0.1", tcp_host_port_, kBlockedTimeout));

  // The control, whatever other gpucloud tables exist (a test in another process: its guard
  // drops the same packets): it must be OUR guard that drops the attack. Under the host lock
  // (no table changes meanwhile) our table is made again, so its chains are the newest and
  // the kernel runs them first among hooks of equal priority (a new hook goes before older
  // ones of its priority); the attack's SYN must then be counted by our guard's rule. Were
  // our guard missing, nothing would count it, whichever other guard dropped it.
  {
    FileLock lock;
    auto script = render_ruleset(table_, ports({"0.0.0.0/0"}));
    ASSERT_TRUE(script);
    FILE* nft = ::popen("nft -f - 2>&1", "w");
    ASSERT_NE(nft, nullptr);
    std::fwrite(script->data(), 1, script->size(), nft);
    ASSERT_EQ(::pclose(nft), 0);
    auto hits = [&] {
      const std::string chain = sh("nft list chain ip " + table_ + " localnet_guard").second;
      const auto at = chain.find("counter packets ");
      return at == std::string::npos ? -1L : std::stol(chain.substr(at + 16));
    };
    const long before = hits();
    ASSERT_GE(before, 0) << sh("nft list chain ip " + table_ + " localnet_guard").second;
    EXPECT_FALSE(http_get(client_ns_, "127.1.0.1", tcp_host_port_, kBlockedTimeout));
    EXPECT_GT(hits(), before) << "our guard did not see the attack: another table's dropped it, or ours is missing";
    // Where ours is the only guard, also the stronger control: without it the attack works.
    const std::string tables = sh("nft list tables ip").second;
    std::size_t guards = 0;
    for (auto at = tables.find("table ip gpucloud"); at != std::string::npos;
         at = tables.find("table ip gpucloud", at + 1)) {
      ++guards;
    }
    if (guards == 1) {
      must("nft flush chain ip " + table_ + " localnet_guard");
      EXPECT_TRUE(is_http_ok(http_get(client_ns_, "127.1.0.1", tcp_host_port_, kReachTimeout), marker_));
    }
  }
  apply({"0.0.0.0/0"});
  EXPECT_FALSE(http_get(client_ns_, "127.1.0.1", tcp_host_port_, kBlockedTimeout));
}

// Instances reach nothing on the host itself (HostGuard): the backend plays the instance (a
// container on its bridge, or the plain namespace behind its veth), and a listener of this
// test on the host's 0.0.0.0 is what it must not reach, through its gateway or any other
// host address. "Reached" is a completed TCP handshake (the kernel answers it at once; a
// dropped SYN never completes), so a slow answer can't pass for blocked. The guard names this
// test's interface only, so no other test's table can produce the drop, and the control (the
// same connection with the guard off) runs every time.
TEST_P(NftablesFirewallTest, ROOT_InstancesReachNoHostServiceButTheirEgressWorks) {
  const bool docker_backend = GetParam() == BackendKind::docker;
  // The backend's own namespace, by name (a container's is attached under a name of ours).
  std::string backend_ns = backend_ns_, guarded, gateway;
  if (docker_backend) {
    auto net = docker("GET", "/networks/" + network_);
    ASSERT_EQ(net.status, 200) << net.body;
    const std::string net_id = json_string_field(net.body, "Id");
    ASSERT_GE(net_id.size(), 12u) << net.body;
    guarded = "br-" + net_id.substr(0, 12);
    gateway = docker_net_ + ".1";
    auto inspected = docker("GET", "/containers/" + container_id_ + "/json");
    ASSERT_EQ(inspected.status, 200) << inspected.body;
    const auto pid = boost::json::parse(inspected.body).at("State").at("Pid").as_int64();
    backend_ns = "gpucloud-fwi-" + id_;
    lease_->add("netns", backend_ns);  // `ip netns del` only unmounts the name
    must("ip netns attach " + backend_ns + " " + std::to_string(pid));
  } else {
    guarded = "gfb" + id_ + "h";
    gateway = net_ + ".5";
  }
  struct NsName {
    std::string name;
    bool attached;
    ~NsName() {
      if (attached) sh("ip netns del " + name);
    }
  } attached{backend_ns, docker_backend};

  // A listener of ours on every host address, and one in the client's namespace (a host out
  // on the internet, as the instance sees it).
  const int host_port = tcp_host_port_ + 2, remote_port = tcp_host_port_ + 3;
  auto listen_on = [&](const std::string& ns, const std::string& ip, int port) {
    const int fd = socket_in(ns, SOCK_STREAM);
    EXPECT_GE(fd, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const auto addr = ipv4(ip, port);
    EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(fd, 64), 0);
    server_fds_.push_back(fd);  // closed by TearDown; the backlog completes handshakes by itself
    return fd;
  };
  listen_on("", "0.0.0.0", host_port);
  listen_on(client_ns_, client_ip_, remote_port);
  if (HasFailure()) return;
  auto handshake = [&](const std::string& ip, int port) {
    bool connected = false;
    http_get(backend_ns, ip, port, 1500ms, &connected);
    return connected;
  };

  // The control: without the guard the backend reaches the host's listener.
  ASSERT_TRUE(firewall_->apply(ports({"0.0.0.0/0"})));
  EXPECT_TRUE(handshake(gateway, host_port)) << "the control: no guard, the host's listener answers";
  EXPECT_TRUE(handshake(host_ip_, host_port));

  gpucloud::agent::firewall::HostGuard guard{{guarded}};
  auto applied = firewall_->apply(ports({"0.0.0.0/0"}), guard);
  ASSERT_TRUE(applied) << applied.error().detail;
  EXPECT_FALSE(handshake(gateway, host_port)) << "the bridge's gateway is the host";
  EXPECT_FALSE(handshake(host_ip_, host_port)) << "any other address of the host";
  // Its egress still works (a container's is masqueraded and accepted by the engine's own
  // FORWARD rules; the plain namespace's only where FORWARD accepts at all).
  if (docker_backend || !forward_policy_drops()) {
    EXPECT_TRUE(handshake(client_ip_, remote_port)) << "the instance's egress";
  }
  // Its published ports still work, for remote clients and the host, and the host still
  // reaches it directly (the replies come back through the guard).
  EXPECT_TRUE(client_reaches());
  EXPECT_TRUE(host_reaches("127.0.0.1"));
  EXPECT_TRUE(is_http_ok(http_get("", backend_ip_, kBackendTcpPort, kReachTimeout), marker_));
  const auto table = firewall_->current();
  ASSERT_TRUE(table);
  EXPECT_NE(table->find("iifname \"" + guarded + "\" drop"), std::string::npos) << *table;

  // Without the guard again, the host is open again: the guard was the drop.
  ASSERT_TRUE(firewall_->apply(ports({"0.0.0.0/0"})));
  EXPECT_TRUE(handshake(gateway, host_port));
}

INSTANTIATE_TEST_SUITE_P(Backends, NftablesFirewallTest,
                         ::testing::Values(BackendKind::plain, BackendKind::docker),
                         [](const auto& info) {
                           return info.param == BackendKind::plain ? "plain" : "docker";
                         });

// nft itself accepts what render_ruleset writes (checked with nft -c, not applied).
TEST(NftablesScript, ROOT_RenderedScriptPassesNftCheck) {
  GPUCLOUD_NEED("root", ::geteuid() == 0, "needs root (nft -c talks to the kernel)");
  GPUCLOUD_NEED("root", sh("command -v nft").first == 0, "nft not installed (apt-get install nftables)");
  std::vector<PublishedPort> ports;
  auto add = [&](int host_port, std::string ip, int port, std::string proto,
                 std::vector<std::string> cidrs) {
    PublishedPort p{"i-" + std::to_string(host_port), host_port, std::move(ip), port, std::move(proto), {}};
    for (auto& c : cidrs) p.allowed.push_back(SourceRule{c});
    ports.push_back(std::move(p));
  };
  add(30022, "10.88.0.10", 22, "tcp", {"0.0.0.0/0"});
  add(30888, "10.88.0.10", 8888, "tcp", {"10.0.0.0/8", "192.168.0.0/16", "192.168.3.0/24", "203.0.113.9/32"});
  add(30022, "10.88.0.11", 53, "udp", {});
  add(65535, "10.88.0.12", 1, "tcp", {"198.51.100.0/24"});
  const std::string table = "gpucloud-test-" + random_hex(6);
  auto script = render_ruleset(table, ports, gpucloud::agent::firewall::HostGuard{{"br-0123456789ab", "gpucloud0"}});
  ASSERT_TRUE(script) << script.error().detail;
  const std::string log = "/tmp/" + table + ".log";
  FILE* nft = ::popen(("nft -c -f - >" + log + " 2>&1").c_str(), "w");
  ASSERT_NE(nft, nullptr);
  std::fwrite(script->data(), 1, script->size(), nft);
  const int status = ::pclose(nft);
  EXPECT_EQ(WEXITSTATUS(status), 0) << sh("cat " + log).second << *script;
  std::remove(log.c_str());
  EXPECT_EQ(sh("nft list tables").second.find(table), std::string::npos);
}

}  // namespace
