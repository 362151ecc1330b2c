#pragma once
// The control plane's TLS listener for remote agents ([agents] listen). One port, three
// requests, each on its own TLS connection:
//   POST /v1/join   {token, csr, agent_version}  no client certificate: a join token admits
//                   one host; the CA signs the request for that host alone
//   POST /v1/renew  {csr}                        the host's valid certificate: a new one
//   GET  /v1/agent  WebSocket upgrade            the host's valid certificate: the link
// The server certificate is the CA's (issued at each start for [agents] server_names) and
// chains to it, so an agent that pinned the CA's fingerprint verifies the control plane.
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "agentlink/agent_hub.h"
#include "config/config.h"
#include "pki/certificate_authority.h"
#include "store/store.h"

namespace gpucloud::agentlink {

class LinkListener {
 public:
  LinkListener(boost::asio::any_io_executor loop, const config::Config& config, store::Store& store,
               const pki::CertificateAuthority& ca, AgentHub& hub);
  ~LinkListener();
  // Makes the server certificate and binds `[agents] listen`; the bound address (port 0: any).
  Result<boost::asio::ip::tcp::endpoint> listen();
  void start();
  void stop();
  std::size_t links() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace gpucloud::agentlink
