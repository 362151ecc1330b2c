#include "support/netns_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "support/test_daemon.h"

namespace gpucloud::testing {

using namespace std::chrono_literals;

namespace {

// `cmd`'s exit status, its output appended to `out`.
int run_shell(const std::string& cmd, std::string* out) {
  const std::string result = shell(cmd + " 2>&1; echo \"rc=$?\"");
  const auto at = result.rfind("rc=");
  if (out) *out += result.substr(0, at);
  return at == std::string::npos ? -1 : std::stoi(result.substr(at + 3));
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
  return ::poll(&p, 1, static_cast<int>(std::max(0ms, timeout).count())) == 1;
}

}  // namespace

std::unique_ptr<ClientHost> ClientHost::make(const std::string& subnet_prefix, int quad, std::string* error) {
  std::unique_ptr<ClientHost> c(new ClientHost());
  c->netns_ = unique_name("gpucloud-sgc-");
  c->veth_ = unique_name("gsg", 14);  // + "h"/"c": interface names have at most 15 characters
  c->client_ip_ = subnet_prefix + "." + std::to_string(quad * 4 + 2);
  c->host_ip_ = subnet_prefix + "." + std::to_string(quad * 4 + 1);
  c->lease_.add("netns", c->netns_);  // recorded before it exists; deleting it deletes the veth pair
  std::string out;
  const std::string& ns = c->netns_;
  const std::string h = c->veth_ + "h", v = c->veth_ + "c";
  for (const std::string& cmd :
       {"ip netns add " + ns, "ip link add " + h + " type veth peer name " + v + " netns " + ns,
        "ip addr add " + c->host_ip_ + "/30 dev " + h, "ip link set " + h + " up",
        "ip -n " + ns + " addr add " + c->client_ip_ + "/30 dev " + v, "ip -n " + ns + " link set " + v + " up",
        "ip -n " + ns + " link set lo up", "ip -n " + ns + " route add default via " + c->host_ip_}) {
    if (run_shell(cmd, &out) != 0) {
      if (error) *error = cmd + ": " + out;
      return nullptr;  // the destructor removes what was made
    }
  }
  return c;
}

ClientHost::~ClientHost() {
  shell("ip netns del " + netns_ + " 2>/dev/null; ip link del " + veth_ + "h 2>/dev/null");
}

int socket_in(const std::string& netns, int type) {
  if (netns.empty()) return ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  int fd = -1;
  // A thread that entered the namespace makes the socket; the socket keeps the namespace.
  std::thread([&] {
    const int nsfd = ::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) return;
    if (::setns(nsfd, CLONE_NEWNET) == 0) fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    ::close(nsfd);
  }).join();
  return fd;
}

std::optional<std::string> http_get(const std::string& netns, const std::string& ip, int port,
                                    std::chrono::milliseconds timeout, bool* connected) {
  if (connected) *connected = false;
  const int fd = socket_in(netns, SOCK_STREAM);
  if (fd < 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()); };
  std::optional<std::string> result;
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  const auto addr = ipv4(ip, port);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, left())) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
  }
  if (rc == 0) {
    if (connected) *connected = true;
    const std::string request = "GET / HTTP/1.0\r\nHost: gpucloud-test\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      std::string answer;
      char buf[4096];
      while (wait_fd(fd, POLLIN, left())) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          if (n == 0) result = answer;
          break;
        }
        answer.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  return result;
}

bool is_http_ok(const std::optional<std::string>& answer, const std::string& marker) {
  return answer && answer->rfind("HTTP/1.0 200", 0) == 0 && answer->find(marker) != std::string::npos;
}

bool udp_echo(const std::string& netns, const std::string& ip, int port, std::chrono::milliseconds timeout,
              const std::string& marker) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const int fd = socket_in(netns, SOCK_DGRAM);
  if (fd < 0) return false;
  std::optional<std::string> result;
  const auto addr = ipv4(ip, port);
  const std::string ping = "ping-" + std::to_string(rng());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, ping.data(), ping.size(), 0) == static_cast<ssize_t>(ping.size()) && wait_fd(fd, POLLIN, timeout)) {
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) result = std::string(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return result == marker + ":" + ping;
}

}  // namespace gpucloud::testing
