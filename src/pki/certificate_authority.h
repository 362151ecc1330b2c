#pragma once
// The control plane's certificate authority for remote agents (issue 26), on OpenSSL 3's EVP
// APIs. One ECDSA P-256 CA kept in DATA_DIR/pki (ca.key 0600, ca.crt); it signs each joined
// host's client certificate (CN = the host's name, clientAuth) and the agents' listener's
// server certificate (serverAuth, SANs). Agents pin the CA by its fingerprint (the SHA-256
// of its DER), which the join token carries. Nothing here logs; keys never leave as text
// except in the PEM strings handed back to the caller.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;

namespace gpucloud::pki {

struct IssuedCertificate {
  std::string certificate_pem;
  std::string serial;  // lowercase hex, as identity_of() reads it back
  std::int64_t not_after = 0;  // unix seconds
};

struct KeyAndCertificate {
  std::string key_pem;  // PKCS#8, unencrypted
  std::string certificate_pem;
  std::int64_t not_after = 0;  // unix seconds
};

class CertificateAuthority {
 public:
  // DIR/ca.key (0600) and DIR/ca.crt; an ECDSA P-256 CA (10 years, CN "gpucloud agents CA
  // <random>") is made when both are absent (DIR made 0700). One without the other, a key
  // that does not match the certificate, a certificate that is not a CA, or a ca.key that
  // group or others may read is refused (invalid_argument naming the file). Blocking:
  // callers offload.
  static Result<CertificateAuthority> load_or_create(const std::filesystem::path& dir);

  CertificateAuthority(CertificateAuthority&&) noexcept;
  CertificateAuthority& operator=(CertificateAuthority&&) noexcept;
  ~CertificateAuthority();

  const std::string& certificate_pem() const { return certificate_pem_; }
  // Lowercase hex SHA-256 of the CA certificate's DER (64 characters).
  const std::string& fingerprint() const { return fingerprint_; }
  const std::string& common_name() const { return common_name_; }

  // Signs a PEM certificate request for `host_name`: subject CN = host_name (the request's
  // own subject is ignored), clientAuth, a random 128-bit serial, valid from now - 5 min to
  // now + validity. Refuses (invalid_argument) text that is not one PEM request, a request
  // whose self-signature fails, a key that is not EC P-256/P-384, RSA >= 2048 or Ed25519,
  // and a host name that is not a host name.
  Result<IssuedCertificate> sign_host_csr(std::string_view csr_pem, const std::string& host_name,
                                          std::chrono::seconds validity, std::int64_t now_unix) const;

  // The agents' listener certificate, with a fresh P-256 key: serverAuth, CN
  // gpucloud-control-plane, SANs = names (DNS names, or IPv4/IPv6 literals as IP SANs).
  Result<KeyAndCertificate> issue_server_certificate(const std::vector<std::string>& names,
                                                     std::chrono::seconds validity, std::int64_t now_unix) const;

 private:
  CertificateAuthority() = default;
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key_{nullptr, nullptr};
  std::unique_ptr<X509, void (*)(X509*)> certificate_{nullptr, nullptr};
  std::string certificate_pem_;
  std::string fingerprint_;
  std::string common_name_;
};

// Agent side: a fresh ECDSA P-256 key and a certificate request for host_name.
struct KeyAndRequest {
  std::string key_pem;  // PKCS#8, unencrypted
  std::string csr_pem;
};
Result<KeyAndRequest> make_key_and_request(const std::string& host_name);

// What a (verified) peer certificate says.
struct PeerIdentity {
  std::string common_name;
  std::string serial;  // lowercase hex, the form of IssuedCertificate::serial
  std::int64_t not_after = 0;  // unix seconds
};
// From a live handshake (SSL_get0_peer_certificate); does not verify anything itself.
Result<PeerIdentity> identity_of(X509* certificate);
Result<PeerIdentity> identity_of_pem(std::string_view certificate_pem);
// Same form as CertificateAuthority::fingerprint().
Result<std::string> fingerprint_of_pem(std::string_view certificate_pem);

// Whether `name` is a name the listener certificate can carry: an IPv4/IPv6 literal, or a
// DNS name (letters, digits, '-', '.'; labels of 1-63; at most 253).
bool is_certificate_name(std::string_view name);
// Whether `name` is an IPv4 or IPv6 literal.
bool is_ip_literal(std::string_view name);

}  // namespace gpucloud::pki
