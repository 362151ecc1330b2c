// The agents' CA on OpenSSL 3 (EVP, X509v3 "nconf" extensions; no deprecated call).
#include "pki/certificate_authority.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "config/config.h"

namespace gpucloud::pki {

namespace {

namespace fs = std::filesystem;

// RAII for the OpenSSL objects used here.
struct PkiBioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkiKeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct PkiX509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkiReqFree {
  void operator()(X509_REQ* r) const { X509_REQ_free(r); }
};
struct PkiExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct PkiBnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
struct PkiAsn1IntFree {
  void operator()(ASN1_INTEGER* i) const { ASN1_INTEGER_free(i); }
};
using PkiBio = std::unique_ptr<BIO, PkiBioFree>;
using PkiKey = std::unique_ptr<EVP_PKEY, PkiKeyFree>;
using PkiX509 = std::unique_ptr<X509, PkiX509Free>;
using PkiReq = std::unique_ptr<X509_REQ, PkiReqFree>;
using PkiExt = std::unique_ptr<X509_EXTENSION, PkiExtFree>;
using PkiBn = std::unique_ptr<BIGNUM, PkiBnFree>;
using PkiAsn1Int = std::unique_ptr<ASN1_INTEGER, PkiAsn1IntFree>;

// OpenSSL's error queue as text (and emptied), for an internal error's detail.
std::string pki_openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail" : out;
}

tl::unexpected<Error> pki_internal(std::string_view what) {
  return fail(ErrorCode::internal, "pki: " + std::string(what) + ": " + pki_openssl_errors());
}

std::string pki_bio_text(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
}

Result<std::string> pki_key_pem(EVP_PKEY* key) {
  PkiBio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return pki_internal("writing a private key");
  return pki_bio_text(bio.get());
}

Result<std::string> pki_cert_pem(X509* cert) {
  PkiBio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return pki_internal("writing a certificate");
  return pki_bio_text(bio.get());
}

Result<PkiKey> pki_new_p256_key() {
  PkiKey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return pki_internal("making an EC P-256 key");
  return key;
}

Result<PkiX509> pki_read_cert(std::string_view pem) {
  PkiBio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return pki_internal("reading a certificate");
  PkiX509 cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    ERR_clear_error();
    return invalid("certificate: not a PEM certificate");
  }
  return cert;
}

std::string pki_hex(const unsigned char* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[data[i] >> 4];
    out += digits[data[i] & 0xf];
  }
  return out;
}

Result<std::string> pki_fingerprint(X509* cert) {
  unsigned char* der = nullptr;
  int len = i2d_X509(cert, &der);
  if (len <= 0) return pki_internal("encoding a certificate");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  int okay = EVP_Digest(der, static_cast<std::size_t>(len), md, &md_len, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  if (okay != 1) return pki_internal("hashing a certificate");
  return pki_hex(md, md_len);
}

// Serials are read and written the same way: the INTEGER's magnitude in lowercase hex.
Result<std::string> pki_serial_hex(const ASN1_INTEGER* serial) {
  PkiBn bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (!bn) return pki_internal("reading a serial");
  char* text = BN_bn2hex(bn.get());
  if (text == nullptr) return pki_internal("reading a serial");
  std::string out(text);
  OPENSSL_free(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// A random positive 128-bit serial (RFC 5280: at most 20 octets, positive).
Status pki_set_random_serial(X509* cert) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) return pki_internal("random serial");
  raw[0] &= 0x7f;
  raw[0] |= 0x40;  // always 16 octets, never leading zeros
  PkiBn bn(BN_bin2bn(raw, sizeof raw, nullptr));
  if (!bn) return pki_internal("random serial");
  PkiAsn1Int serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!serial || X509_set_serialNumber(cert, serial.get()) != 1) return pki_internal("random serial");
  return ok();
}

Result<std::int64_t> pki_unix_time(const ASN1_TIME* t) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return pki_internal("reading a certificate time");
  return static_cast<std::int64_t>(timegm(&tm));
}

Status pki_add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  PkiExt ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return pki_internal("certificate extension " + value);
  return ok();
}

Status pki_set_cn(X509_NAME* name, const std::string& cn) {
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()),
                                 static_cast<int>(cn.size()), -1, 0) != 1)
    return pki_internal("certificate subject");
  return ok();
}

// A certificate skeleton: version 3, random serial, subject CN, validity, public key.
Result<PkiX509> pki_new_cert(const std::string& cn, EVP_PKEY* public_key, std::int64_t not_before,
                             std::int64_t not_after) {
  PkiX509 cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return pki_internal("new certificate");
  if (auto s = pki_set_random_serial(cert.get()); !s) return fail(s.error());
  if (auto s = pki_set_cn(X509_get_subject_name(cert.get()), cn); !s) return fail(s.error());
  if (ASN1_TIME_set(X509_getm_notBefore(cert.get()), static_cast<time_t>(not_before)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), static_cast<time_t>(not_after)) == nullptr)
    return pki_internal("certificate validity");
  if (X509_set_pubkey(cert.get(), public_key) != 1) return pki_internal("certificate key");
  return cert;
}

constexpr std::int64_t kBackdateSeconds = 300;  // clock skew between the control plane and a host

Status pki_check_validity(std::chrono::seconds validity, std::int64_t now_unix) {
  if (validity.count() <= 0 || validity > std::chrono::hours(24 * 3660))
    return invalid("validity: must be from 1 s to 10 years");
  if (now_unix <= kBackdateSeconds) return invalid("now: not a time");
  return ok();
}

Result<std::string> pki_read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::internal, "pki: cannot read " + path.string() + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `data` to `path` through a temporary file in the same directory (mode `mode`,
// fsync'd, renamed into place), so a crash leaves the old file or the new one.
Status pki_write_file(const fs::path& path, const std::string& data, mode_t mode) {
  std::string tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return fail(ErrorCode::internal, "pki: cannot create " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(ErrorCode::internal, "pki: cannot write " + tmp + ": " + std::strerror(e));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, "pki: cannot write " + tmp + ": " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fail(ErrorCode::internal, "pki: cannot rename " + tmp + ": " + std::strerror(e));
  }
  return ok();
}

Status pki_fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::internal, "pki: cannot open " + dir.string() + ": " + std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
  return ok();
}

// The request's key: the kinds an agent may sensibly make.
Status pki_check_request_key(EVP_PKEY* key) {
  if (EVP_PKEY_is_a(key, "EC")) {
    char group[64] = {};
    std::size_t len = 0;
    if (EVP_PKEY_get_utf8_string_param(key, "group", group, sizeof group, &len) != 1) {
      ERR_clear_error();
      return invalid("csr: an EC key without a named curve");
    }
    std::string_view g(group, len);
    if (g != "prime256v1" && g != "P-256" && g != "secp384r1" && g != "P-384")
      return invalid("csr: EC curve " + std::string(g) + " is not P-256 or P-384");
    return ok();
  }
  if (EVP_PKEY_is_a(key, "RSA")) {
    if (EVP_PKEY_get_bits(key) < 2048) return invalid("csr: an RSA key shorter than 2048 bits");
    return ok();
  }
  if (EVP_PKEY_is_a(key, "ED25519")) return ok();
  return invalid("csr: the key is not EC P-256/P-384, RSA or Ed25519");
}

}  // namespace

bool is_ip_literal(std::string_view name) {
  if (name.empty() || name.size() >= INET6_ADDRSTRLEN) return false;
  std::string text(name);
  unsigned char buf[sizeof(struct in6_addr)];
  return ::inet_pton(AF_INET, text.c_str(), buf) == 1 || ::inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

bool is_certificate_name(std::string_view name) { return config::is_valid_certificate_name(name); }

CertificateAuthority::CertificateAuthority(CertificateAuthority&&) noexcept = default;
CertificateAuthority& CertificateAuthority::operator=(CertificateAuthority&&) noexcept = default;
CertificateAuthority::~CertificateAuthority() = default;

Result<CertificateAuthority> CertificateAuthority::load_or_create(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::internal, "pki: cannot create " + dir.string() + ": " + ec.message());
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  const fs::path key_path = dir / "ca.key";
  const fs::path cert_path = dir / "ca.crt";
  bool have_key = fs::exists(key_path, ec);
  bool have_cert = fs::exists(cert_path, ec);

  CertificateAuthority ca;
  if (!have_key && !have_cert) {
    auto key = pki_new_p256_key();
    if (!key) return fail(key.error());
    unsigned char rnd[4];
    if (RAND_bytes(rnd, sizeof rnd) != 1) return pki_internal("random CA name");
    std::string cn = "gpucloud agents CA " + pki_hex(rnd, sizeof rnd);
    std::int64_t now = static_cast<std::int64_t>(::time(nullptr));
    auto cert = pki_new_cert(cn, key->get(), now - kBackdateSeconds, now + 10LL * 365 * 86400 + 2 * 86400);
    if (!cert) return fail(cert.error());
    if (X509_set_issuer_name(cert->get(), X509_get_subject_name(cert->get())) != 1)
      return pki_internal("CA issuer");
    for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                              std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                              std::pair{NID_subject_key_identifier, "hash"}}) {
      if (auto s = pki_add_ext(cert->get(), cert->get(), nid, value); !s) return fail(s.error());
    }
    if (X509_sign(cert->get(), key->get(), EVP_sha256()) <= 0) return pki_internal("signing the CA certificate");
    auto key_text = pki_key_pem(key->get());
    if (!key_text) return fail(key_text.error());
    auto cert_text = pki_cert_pem(cert->get());
    if (!cert_text) return fail(cert_text.error());
    // The key first: a crash between the two leaves a key without a certificate, which is
    // refused below rather than silently replaced (agents may already pin nothing, but an
    // operator should look).
    if (auto s = pki_write_file(key_path, *key_text, 0600); !s) return fail(s.error());
    if (auto s = pki_write_file(cert_path, *cert_text, 0644); !s) return fail(s.error());
    if (auto s = pki_fsync_dir(dir); !s) return fail(s.error());
  } else if (!have_key || !have_cert) {
    return invalid("pki: " + (have_key ? cert_path : key_path).string() + " is missing beside " +
                   (have_key ? key_path : cert_path).string() + " (restore it, or remove both to make a new CA)");
  }

  struct stat st {};
  if (::stat(key_path.c_str(), &st) != 0)
    return fail(ErrorCode::internal, "pki: cannot stat " + key_path.string() + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0)
    return invalid("pki: " + key_path.string() + " may be read by group or others (chmod 600 it)");
  auto key_text = pki_read_file(key_path);
  if (!key_text) return fail(key_text.error());
  auto cert_text = pki_read_file(cert_path);
  if (!cert_text) return fail(cert_text.error());

  PkiBio key_bio(BIO_new_mem_buf(key_text->data(), static_cast<int>(key_text->size())));
  if (!key_bio) return pki_internal("reading ca.key");
  PkiKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  OPENSSL_cleanse(key_text->data(), key_text->size());
  if (!key) {
    ERR_clear_error();
    return invalid("pki: " + key_path.string() + " is not a PEM private key");
  }
  auto cert = pki_read_cert(*cert_text);
  if (!cert) return invalid("pki: " + cert_path.string() + " is not a PEM certificate");
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return invalid("pki: " + key_path.string() + " is not the key of " + cert_path.string());
  }
  if (X509_check_ca(cert->get()) == 0) return invalid("pki: " + cert_path.string() + " is not a CA certificate");
  auto fp = pki_fingerprint(cert->get());
  if (!fp) return fail(fp.error());
  auto id = identity_of(cert->get());
  if (!id) return fail(id.error());

  ca.key_ = std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)>(key.release(), EVP_PKEY_free);
  ca.certificate_ = std::unique_ptr<X509, void (*)(X509*)>(cert->release(), X509_free);
  ca.certificate_pem_ = std::move(*cert_text);
  ca.fingerprint_ = std::move(*fp);
  ca.common_name_ = id->common_name;
  return ca;
}

Result<IssuedCertificate> CertificateAuthority::sign_host_csr(std::string_view csr_pem, const std::string& host_name,
                                                              std::chrono::seconds validity,
                                                              std::int64_t now_unix) const {
  if (!config::is_valid_host_name(host_name)) return invalid("host: not a host name");
  if (auto s = pki_check_validity(validity, now_unix); !s) return fail(s.error());
  if (csr_pem.empty() || csr_pem.size() > 64 * 1024) return invalid("csr: not a PEM certificate request");
  PkiBio bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  if (!bio) return pki_internal("reading a request");
  PkiReq req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) {
    ERR_clear_error();
    return invalid("csr: not a PEM certificate request");
  }
  EVP_PKEY* request_key = X509_REQ_get0_pubkey(req.get());
  if (request_key == nullptr) {
    ERR_clear_error();
    return invalid("csr: the request has no usable public key");
  }
  if (X509_REQ_verify(req.get(), request_key) != 1) {
    ERR_clear_error();
    return invalid("csr: the request's signature does not verify");
  }
  if (auto s = pki_check_request_key(request_key); !s) return fail(s.error());

  std::int64_t not_after = now_unix + validity.count();
  auto cert = pki_new_cert(host_name, request_key, now_unix - kBackdateSeconds, not_after);
  if (!cert) return fail(cert.error());
  if (X509_set_issuer_name(cert->get(), X509_get_subject_name(certificate_.get())) != 1)
    return pki_internal("certificate issuer");
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                            std::pair{NID_key_usage, "critical,digitalSignature"},
                            std::pair{NID_ext_key_usage, "clientAuth"},
                            std::pair{NID_subject_key_identifier, "hash"},
                            std::pair{NID_authority_key_identifier, "keyid:always"}}) {
    if (auto s = pki_add_ext(cert->get(), certificate_.get(), nid, value); !s) return fail(s.error());
  }
  if (X509_sign(cert->get(), key_.get(), EVP_sha256()) <= 0) return pki_internal("signing a host certificate");
  auto pem = pki_cert_pem(cert->get());
  if (!pem) return fail(pem.error());
  auto serial = pki_serial_hex(X509_get0_serialNumber(cert->get()));
  if (!serial) return fail(serial.error());
  return IssuedCertificate{std::move(*pem), std::move(*serial), not_after};
}

Result<KeyAndCertificate> CertificateAuthority::issue_server_certificate(const std::vector<std::string>& names,
                                                                         std::chrono::seconds validity,
                                                                         std::int64_t now_unix) const {
  if (names.empty()) return invalid("names: at least one DNS name or IP address");
  if (auto s = pki_check_validity(validity, now_unix); !s) return fail(s.error());
  std::string san;
  for (const auto& n : names) {
    if (!is_certificate_name(n)) return invalid("names: \"" + n + "\" is not a DNS name or an IP address");
    if (!san.empty()) san += ",";
    san += (is_ip_literal(n) ? "IP:" : "DNS:") + n;
  }
  auto key = pki_new_p256_key();
  if (!key) return fail(key.error());
  std::int64_t not_after = now_unix + validity.count();
  auto cert = pki_new_cert("gpucloud-control-plane", key->get(), now_unix - kBackdateSeconds, not_after);
  if (!cert) return fail(cert.error());
  if (X509_set_issuer_name(cert->get(), X509_get_subject_name(certificate_.get())) != 1)
    return pki_internal("certificate issuer");
  for (auto [nid, value] : {std::pair{NID_basic_constraints, std::string("critical,CA:FALSE")},
                            std::pair{NID_key_usage, std::string("critical,digitalSignature")},
                            std::pair{NID_ext_key_usage, std::string("serverAuth")},
                            std::pair{NID_subject_key_identifier, std::string("hash")},
                            std::pair{NID_authority_key_identifier, std::string("keyid:always")},
                            std::pair{NID_subject_alt_name, san}}) {
    if (auto s = pki_add_ext(cert->get(), certificate_.get(), nid, value); !s) return fail(s.error());
  }
  if (X509_sign(cert->get(), key_.get(), EVP_sha256()) <= 0) return pki_internal("signing the server certificate");
  auto key_pem = pki_key_pem(key->get());
  if (!key_pem) return fail(key_pem.error());
  auto pem = pki_cert_pem(cert->get());
  if (!pem) return fail(pem.error());
  return KeyAndCertificate{std::move(*key_pem), std::move(*pem), not_after};
}

Result<KeyAndRequest> make_key_and_request(const std::string& host_name) {
  if (!config::is_valid_host_name(host_name)) return invalid("host: not a host name");
  auto key = pki_new_p256_key();
  if (!key) return fail(key.error());
  PkiReq req(X509_REQ_new());
  if (!req || X509_REQ_set_version(req.get(), 0) != 1) return pki_internal("new request");
  if (auto s = pki_set_cn(X509_REQ_get_subject_name(req.get()), host_name); !s) return fail(s.error());
  if (X509_REQ_set_pubkey(req.get(), key->get()) != 1) return pki_internal("request key");
  if (X509_REQ_sign(req.get(), key->get(), EVP_sha256()) <= 0) return pki_internal("signing the request");
  PkiBio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) return pki_internal("writing the request");
  auto key_pem = pki_key_pem(key->get());
  if (!key_pem) return fail(key_pem.error());
  return KeyAndRequest{std::move(*key_pem), pki_bio_text(bio.get())};
}

Result<PeerIdentity> identity_of(X509* certificate) {
  if (certificate == nullptr) return fail(ErrorCode::unauthorized, "certificate: none presented");
  PeerIdentity id;
  X509_NAME* subject = X509_get_subject_name(certificate);
  int index = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (index >= 0) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
    unsigned char* utf8 = nullptr;
    int len = ASN1_STRING_to_UTF8(&utf8, data);
    if (len < 0) return pki_internal("reading the certificate's CN");
    id.common_name.assign(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
    OPENSSL_free(utf8);
  }
  auto serial = pki_serial_hex(X509_get0_serialNumber(certificate));
  if (!serial) return fail(serial.error());
  id.serial = std::move(*serial);
  auto not_after = pki_unix_time(X509_get0_notAfter(certificate));
  if (!not_after) return fail(not_after.error());
  id.not_after = *not_after;
  return id;
}

Result<PeerIdentity> identity_of_pem(std::string_view certificate_pem) {
  auto cert = pki_read_cert(certificate_pem);
  if (!cert) return fail(cert.error());
  return identity_of(cert->get());
}

Result<std::string> fingerprint_of_pem(std::string_view certificate_pem) {
  auto cert = pki_read_cert(certificate_pem);
  if (!cert) return fail(cert.error());
  return pki_fingerprint(cert->get());
}

}  // namespace gpucloud::pki
