// The agents' CA: made once and reloaded, host certificates that verify against it (also with
// the `openssl verify` tool), refused requests, and a real mutual-TLS handshake.
#include "pki/certificate_authority.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/child_process.h"
#include "core/unique_temp_dir.h"

namespace gpucloud::pki {
namespace {
namespace fs = std::filesystem;

std::int64_t pki_test_now() { return static_cast<std::int64_t>(::time(nullptr)); }

struct CaTestX509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using CaTestX509 = std::unique_ptr<X509, CaTestX509Free>;

CaTestX509 read_pem_cert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return CaTestX509(x);
}

EVP_PKEY* read_pem_key(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return k;
}

// Verifies `leaf` against `ca` alone, for `purpose` (X509_PURPOSE_SSL_CLIENT/SERVER).
int verify_with_store(X509* ca, X509* leaf, int purpose) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  int r = X509_verify_cert(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return r;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CertificateAuthorityTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = gpucloud::testing::unique_temp_dir("gpucloud-pki"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CertificateAuthorityTest, MadeOnceThenReloadedWithTheSameFingerprint) {
  auto ca = CertificateAuthority::load_or_create(dir_ / "pki");
  ASSERT_TRUE(ca) << ca.error().detail;
  EXPECT_EQ(ca->fingerprint().size(), 64u);
  EXPECT_EQ(ca->fingerprint().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(ca->common_name().rfind("gpucloud agents CA ", 0), 0u) << ca->common_name();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "pki" / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ / "pki").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
  EXPECT_EQ(read_text(dir_ / "pki" / "ca.crt"), ca->certificate_pem());

  auto again = CertificateAuthority::load_or_create(dir_ / "pki");
  ASSERT_TRUE(again) << again.error().detail;
  EXPECT_EQ(again->fingerprint(), ca->fingerprint());
  EXPECT_EQ(again->certificate_pem(), ca->certificate_pem());
  auto fp = fingerprint_of_pem(ca->certificate_pem());
  ASSERT_TRUE(fp);
  EXPECT_EQ(*fp, ca->fingerprint());

  // Ten years, and a CA.
  auto cert = read_pem_cert(ca->certificate_pem());
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  auto id = identity_of(cert.get());
  ASSERT_TRUE(id);
  EXPECT_GT(id->not_after, pki_test_now() + 10LL * 365 * 86400 - 86400);

  // Another directory: another CA.
  auto other = CertificateAuthority::load_or_create(dir_ / "other");
  ASSERT_TRUE(other);
  EXPECT_NE(other->fingerprint(), ca->fingerprint());
}

TEST_F(CertificateAuthorityTest, RefusesAKeyOthersMayReadOrAHalfPresentPair) {
  ASSERT_TRUE(CertificateAuthority::load_or_create(dir_ / "pki"));
  fs::permissions(dir_ / "pki" / "ca.key", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  auto loose = CertificateAuthority::load_or_create(dir_ / "pki");
  ASSERT_FALSE(loose);
  EXPECT_NE(loose.error().detail.find("chmod 600"), std::string::npos) << loose.error().detail;

  fs::remove(dir_ / "pki" / "ca.crt");
  auto half = CertificateAuthority::load_or_create(dir_ / "pki");
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().detail.find("ca.crt is missing"), std::string::npos) << half.error().detail;
  EXPECT_TRUE(fs::exists(dir_ / "pki" / "ca.key")) << "never replaced";
}

TEST_F(CertificateAuthorityTest, SignedHostCertificateVerifiesWithTheHostsNameAndClientAuth) {
  auto ca = CertificateAuthority::load_or_create(dir_);
  ASSERT_TRUE(ca) << ca.error().detail;
  // The request names another host: the certificate names the one the token admitted.
  auto kr = make_key_and_request("someone-else");
  ASSERT_TRUE(kr) << kr.error().detail;
  EXPECT_NE(kr->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  std::int64_t now = pki_test_now();
  auto issued = ca->sign_host_csr(kr->csr_pem, "gpu-node-7", std::chrono::hours(24 * 30), now);
  ASSERT_TRUE(issued) << issued.error().detail;
  EXPECT_EQ(issued->not_after, now + 30 * 86400);
  EXPECT_EQ(issued->serial.size(), 32u) << issued->serial;

  auto cert = read_pem_cert(issued->certificate_pem);
  auto ca_cert = read_pem_cert(ca->certificate_pem());
  ASSERT_TRUE(cert && ca_cert);
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(ca_cert.get())), 1);
  EXPECT_EQ(verify_with_store(ca_cert.get(), cert.get(), X509_PURPOSE_SSL_CLIENT), 1);
  EXPECT_NE(verify_with_store(ca_cert.get(), cert.get(), X509_PURPOSE_SSL_SERVER), 1) << "a client certificate only";
  EXPECT_TRUE(X509_get_extension_flags(cert.get()) & EXFLAG_XKUSAGE);
  EXPECT_TRUE(X509_get_extended_key_usage(cert.get()) & XKU_SSL_CLIENT);
  EXPECT_FALSE(X509_get_extended_key_usage(cert.get()) & XKU_SSL_SERVER);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);

  auto id = identity_of_pem(issued->certificate_pem);
  ASSERT_TRUE(id) << id.error().detail;
  EXPECT_EQ(id->common_name, "gpu-node-7");
  EXPECT_EQ(id->serial, issued->serial);
  EXPECT_EQ(id->not_after, issued->not_after);

  // The certificate is for the request's key.
  EVP_PKEY* key = read_pem_key(kr->key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key), 1);
  EVP_PKEY_free(key);

  // Serials differ from one signing to the next.
  auto second = ca->sign_host_csr(kr->csr_pem, "gpu-node-7", std::chrono::hours(1), now);
  ASSERT_TRUE(second);
  EXPECT_NE(second->serial, issued->serial);
}

TEST_F(CertificateAuthorityTest, RefusesTamperedMalformedOrWrongRequests) {
  auto ca = CertificateAuthority::load_or_create(dir_);
  ASSERT_TRUE(ca);
  auto kr = make_key_and_request("node-a");
  ASSERT_TRUE(kr);
  std::int64_t now = pki_test_now();

  // The subject changed after signing: the self-signature no longer verifies.
  BIO* in = BIO_new_mem_buf(kr->csr_pem.data(), static_cast<int>(kr->csr_pem.size()));
  X509_REQ* req = PEM_read_bio_X509_REQ(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  ASSERT_NE(req, nullptr);
  X509_NAME* name = X509_NAME_new();
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("node-b"), -1, -1, 0);
  X509_REQ_set_subject_name(req, name);
  X509_NAME_free(name);
  BIO* out = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(out, req);
  char* data = nullptr;
  long n = BIO_get_mem_data(out, &data);
  std::string tampered(data, static_cast<std::size_t>(n));
  BIO_free(out);
  X509_REQ_free(req);
  auto refused = ca->sign_host_csr(tampered, "node-a", std::chrono::hours(1), now);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(refused.error().detail.find("signature"), std::string::npos) << refused.error().detail;

  for (std::string bad : {std::string(), std::string("not pem"), ca->certificate_pem(),
                          kr->csr_pem.substr(0, kr->csr_pem.size() / 2)}) {
    auto r = ca->sign_host_csr(bad, "node-a", std::chrono::hours(1), now);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << r.error().detail;
  }
  EXPECT_FALSE(ca->sign_host_csr(kr->csr_pem, "bad name!", std::chrono::hours(1), now));
  EXPECT_FALSE(ca->sign_host_csr(kr->csr_pem, "node-a", std::chrono::seconds(0), now));
  EXPECT_EQ(ERR_peek_error(), 0ul) << "the error queue is left empty";
}

TEST_F(CertificateAuthorityTest, OpenSslVerifyAcceptsTheHostCertificate) {
  if (!fs::exists("/usr/bin/openssl")) GTEST_SKIP() << "the openssl tool is absent (apt-get install openssl)";
  auto ca = CertificateAuthority::load_or_create(dir_ / "pki");
  ASSERT_TRUE(ca);
  auto kr = make_key_and_request("node-v");
  ASSERT_TRUE(kr);
  auto issued = ca->sign_host_csr(kr->csr_pem, "node-v", std::chrono::hours(24), pki_test_now());
  ASSERT_TRUE(issued);
  { std::ofstream(dir_ / "host.crt") << issued->certificate_pem; }
  auto r = run_process({"/usr/bin/openssl", "verify", "-purpose", "sslclient", "-CAfile", (dir_ / "pki" / "ca.crt").string(),
                        (dir_ / "host.crt").string()},
                       "");
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  EXPECT_NE(r->out.find(": OK"), std::string::npos) << r->out;

  // And refuses it against another CA.
  auto other = CertificateAuthority::load_or_create(dir_ / "other");
  ASSERT_TRUE(other);
  auto bad = run_process({"/usr/bin/openssl", "verify", "-CAfile", (dir_ / "other" / "ca.crt").string(),
                          (dir_ / "host.crt").string()},
                         "");
  ASSERT_TRUE(bad);
  EXPECT_NE(bad->exit_code, 0) << bad->out;
}

TEST_F(CertificateAuthorityTest, ServerCertificateCarriesTheNamesAndRefusesBadOnes) {
  auto ca = CertificateAuthority::load_or_create(dir_);
  ASSERT_TRUE(ca);
  auto server = ca->issue_server_certificate({"control.example", "localhost", "127.0.0.1", "::1"},
                                             std::chrono::hours(24), pki_test_now());
  ASSERT_TRUE(server) << server.error().detail;
  auto cert = read_pem_cert(server->certificate_pem);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_host(cert.get(), "control.example", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "other.example", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "10.0.0.1", 0), 0);
  EXPECT_TRUE(X509_get_extended_key_usage(cert.get()) & XKU_SSL_SERVER);
  auto ca_cert = read_pem_cert(ca->certificate_pem());
  EXPECT_EQ(verify_with_store(ca_cert.get(), cert.get(), X509_PURPOSE_SSL_SERVER), 1);
  auto id = identity_of(cert.get());
  ASSERT_TRUE(id);
  EXPECT_EQ(id->common_name, "gpucloud-control-plane");

  EXPECT_FALSE(ca->issue_server_certificate({}, std::chrono::hours(1), pki_test_now()));
  EXPECT_FALSE(ca->issue_server_certificate({"a,DNS:evil.example"}, std::chrono::hours(1), pki_test_now()));
  EXPECT_FALSE(ca->issue_server_certificate({"-bad-.example"}, std::chrono::hours(1), pki_test_now()));
}

// Both ends of a mutual-TLS connection over a socketpair: the server presents the listener
// certificate and demands a client certificate from the CA; the client pins the CA alone and
// checks the server's IP SAN.
struct TlsEnd {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~TlsEnd() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
  }
};

void tls_load(SSL_CTX* ctx, const std::string& ca_pem, const std::string& cert_pem, const std::string& key_pem) {
  auto ca = read_pem_cert(ca_pem);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca.get());
  auto cert = read_pem_cert(cert_pem);
  SSL_CTX_use_certificate(ctx, cert.get());
  EVP_PKEY* key = read_pem_key(key_pem);
  SSL_CTX_use_PrivateKey(ctx, key);
  EVP_PKEY_free(key);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

struct HandshakeResult {
  bool server_ok = false, client_ok = false;
  std::string server_saw_cn, server_saw_serial;
};

HandshakeResult mutual_handshake(const CertificateAuthority& trusted_by_client, const CertificateAuthority& trusted_by_server,
                                 const KeyAndCertificate& server_cert, const std::string& client_key,
                                 const std::string& client_cert, const char* expected_ip) {
  // A side refused writes to a socket its peer shut: EPIPE here, not the signal.
  struct SigpipeIgnored {
    void (*previous)(int) = std::signal(SIGPIPE, SIG_IGN);
    ~SigpipeIgnored() { std::signal(SIGPIPE, previous); }
  } sigpipe_ignored;
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  HandshakeResult result;
  TlsEnd server, client;
  server.ctx = SSL_CTX_new(TLS_server_method());
  client.ctx = SSL_CTX_new(TLS_client_method());
  tls_load(server.ctx, trusted_by_server.certificate_pem(), server_cert.certificate_pem, server_cert.key_pem);
  tls_load(client.ctx, trusted_by_client.certificate_pem(), client_cert, client_key);
  server.ssl = SSL_new(server.ctx);
  client.ssl = SSL_new(client.ctx);
  SSL_set_fd(server.ssl, fds[0]);
  SSL_set_fd(client.ssl, fds[1]);
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(client.ssl), expected_ip);
  std::thread accept_side([&] {
    if (SSL_accept(server.ssl) == 1 && SSL_get_verify_result(server.ssl) == X509_V_OK) {
      result.server_ok = true;
      auto id = identity_of(SSL_get0_peer_certificate(server.ssl));
      if (id) {
        result.server_saw_cn = id->common_name;
        result.server_saw_serial = id->serial;
      }
      char byte = 0;
      SSL_read(server.ssl, &byte, 1);  // the client's byte: its side finished too
    }
    ::shutdown(fds[0], SHUT_RDWR);
  });
  if (SSL_connect(client.ssl) == 1 && SSL_get_verify_result(client.ssl) == X509_V_OK) {
    char byte = 'x';
    // TLS 1.3: the server checks the client's certificate after the client's connect returns.
    result.client_ok = SSL_write(client.ssl, &byte, 1) == 1;
  }
  ::shutdown(fds[1], SHUT_RDWR);
  accept_side.join();
  ::close(fds[0]);
  ::close(fds[1]);
  ERR_clear_error();
  return result;
}

TEST_F(CertificateAuthorityTest, MutualTlsHandshakeWithThePinnedCa) {
  auto ca = CertificateAuthority::load_or_create(dir_ / "ca");
  auto rogue = CertificateAuthority::load_or_create(dir_ / "rogue");
  ASSERT_TRUE(ca && rogue);
  std::int64_t now = pki_test_now();
  auto server = ca->issue_server_certificate({"localhost", "127.0.0.1"}, std::chrono::hours(24), now);
  ASSERT_TRUE(server);
  auto kr = make_key_and_request("node-tls");
  ASSERT_TRUE(kr);
  auto host = ca->sign_host_csr(kr->csr_pem, "node-tls", std::chrono::hours(24), now);
  ASSERT_TRUE(host);

  auto good = mutual_handshake(*ca, *ca, *server, kr->key_pem, host->certificate_pem, "127.0.0.1");
  EXPECT_TRUE(good.client_ok);
  EXPECT_TRUE(good.server_ok);
  EXPECT_EQ(good.server_saw_cn, "node-tls");
  EXPECT_EQ(good.server_saw_serial, host->serial);

  // The server's certificate does not name the address the client dialled.
  auto wrong_ip = mutual_handshake(*ca, *ca, *server, kr->key_pem, host->certificate_pem, "10.1.2.3");
  EXPECT_FALSE(wrong_ip.client_ok);

  // A client pinning another CA refuses the control plane.
  auto pinned_other = mutual_handshake(*rogue, *ca, *server, kr->key_pem, host->certificate_pem, "127.0.0.1");
  EXPECT_FALSE(pinned_other.client_ok);

  // A host certificate from another CA is refused by the server.
  auto rogue_host = rogue->sign_host_csr(kr->csr_pem, "node-tls", std::chrono::hours(24), now);
  ASSERT_TRUE(rogue_host);
  auto refused = mutual_handshake(*ca, *ca, *server, kr->key_pem, rogue_host->certificate_pem, "127.0.0.1");
  EXPECT_FALSE(refused.server_ok);
}

}  // namespace
}  // namespace gpucloud::pki
