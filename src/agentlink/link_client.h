#pragma once
// The agent's side of the link (gpucloud-agent): it joins once with a token (pinning the
// control plane's CA by the fingerprint the token carries), keeps its key and certificate in
// its data directory, and then dials out: one WebSocket over mutual TLS carrying its hello
// (the host's inventory), heartbeats, samples, change reports and command outcomes, and the
// control plane's commands. A dropped link is dialled again with backoff; the instances
// never notice. The certificate is renewed at two-thirds of its life.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "agent/host_agent.h"

namespace gpucloud::agentlink {

// What the agent keeps in DATA_DIR/identity: key.pem (0600), certificate.pem, ca.pem, and
// link.json (the control plane's URL, the host, when the certificate was issued and ends).
struct AgentIdentity {
  std::string url;   // https://HOST:PORT
  std::string host;  // the host the certificate names
  std::string key_pem, certificate_pem, ca_pem;
  std::int64_t issued_at = 0, not_after = 0;  // unix seconds
};
Result<AgentIdentity> load_identity(const std::filesystem::path& dir);
Status save_identity(const std::filesystem::path& dir, const AgentIdentity& identity);  // blocking

// Joins `url` with `token` as `host_name`: the control plane's certificate must chain to the
// CA whose fingerprint the token carries (and name the URL's host) before the token is sent.
boost::asio::awaitable<Result<AgentIdentity>> join_control_plane(boost::asio::any_io_executor loop, std::string url,
                                                                 std::string token, std::string host_name);

class LinkClient {
 public:
  struct Options {
    std::chrono::milliseconds max_backoff = std::chrono::seconds(30);
  };
  // Sets the agent's sinks (before its register_hosts, which start() calls).
  LinkClient(boost::asio::any_io_executor loop, AgentIdentity identity, std::filesystem::path identity_dir,
             agent::HostAgent& agent, Options options);
  ~LinkClient();
  boost::asio::awaitable<Status> start();  // registers the local agent's host, then dials forever
  void stop();
  bool connected() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace gpucloud::agentlink
