#include "pki/join_tokens.h"

#include <array>

#include <sodium.h>

#include "config/config.h"

namespace gpucloud::pki {

namespace {

constexpr std::size_t kFingerprintChars = 64;
constexpr std::size_t kIdBytes = 8;                 // 16 hex
constexpr std::size_t kSecretBytes = 32;            // 43 base64url characters, no padding
constexpr std::size_t kSecretChars = 43;
constexpr std::int64_t kMicros = 1'000'000;

bool join_is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool join_is_base64url(std::string_view s) {
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  return true;
}

std::string join_hex(const unsigned char* data, std::size_t n) {
  std::string out(n * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), data, n);
  out.pop_back();
  return out;
}

// The stored form of a secret: its SHA-256 in hex.
std::string join_secret_hash(std::string_view secret) {
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  return join_hex(digest.data(), digest.size());
}

tl::unexpected<Error> join_refused(std::string_view why) {
  return fail(ErrorCode::unauthorized, "join token: " + std::string(why));
}

}  // namespace

Result<JoinToken> create_join_token(store::Database& db, const std::string& host_name, const std::string& ca_fingerprint,
                                    std::chrono::seconds ttl, const std::string& created_by_user_id, std::int64_t now) {
  if (!config::is_valid_host_name(host_name))
    return invalid("host: not a host name (letters, digits, '-', '.', '_'; at most 63)");
  if (ca_fingerprint.size() != kFingerprintChars || !join_is_lower_hex(ca_fingerprint))
    return invalid("ca_fingerprint: not 64 lowercase hex characters");
  if (ttl < std::chrono::seconds(1) || ttl > std::chrono::hours(24 * 7))
    return invalid("ttl_seconds: must be from 1 to 604800");
  if (sodium_init() < 0) return fail(ErrorCode::internal, "join token: libsodium failed to initialise");
  std::array<unsigned char, kIdBytes> id_raw{};
  std::array<unsigned char, kSecretBytes> secret_raw{};
  randombytes_buf(id_raw.data(), id_raw.size());
  randombytes_buf(secret_raw.data(), secret_raw.size());
  std::string id = join_hex(id_raw.data(), id_raw.size());
  std::array<char, sodium_base64_ENCODED_LEN(kSecretBytes, sodium_base64_VARIANT_URLSAFE_NO_PADDING)> text{};
  sodium_bin2base64(text.data(), text.size(), secret_raw.data(), secret_raw.size(),
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  std::string secret(text.data());
  sodium_memzero(secret_raw.data(), secret_raw.size());
  sodium_memzero(text.data(), text.size());
  std::int64_t expires_at = now + ttl.count();
  if (auto s = db.run("INSERT INTO join_tokens (id, host_name, secret_hash, created_by, created_at, expires_at, used_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, NULL)",
                      {id, host_name, join_secret_hash(secret), created_by_user_id, now * kMicros, expires_at * kMicros});
      !s)
    return fail(s.error());
  JoinToken t;
  t.token = std::string(kJoinTokenPrefix) + "." + ca_fingerprint + "." + id + "." + secret;
  sodium_memzero(secret.data(), secret.size());
  t.host_name = host_name;
  t.expires_at = expires_at;
  t.ca_fingerprint = ca_fingerprint;
  return t;
}

Result<ParsedJoinToken> parse_join_token(std::string_view token) {
  auto bad = [] { return invalid("join token: not a gcjoin1 token (gcjoin1.<fingerprint>.<id>.<secret>)"); };
  constexpr std::size_t expected = 7 + 1 + kFingerprintChars + 1 + kIdBytes * 2 + 1 + kSecretChars;
  if (token.size() != expected) return bad();
  std::string_view rest = token;
  auto take = [&](std::size_t n) {
    std::string_view part = rest.substr(0, n);
    rest.remove_prefix(n);
    return part;
  };
  if (take(kJoinTokenPrefix.size()) != kJoinTokenPrefix || take(1) != ".") return bad();
  std::string_view fingerprint = take(kFingerprintChars);
  if (!join_is_lower_hex(fingerprint) || take(1) != ".") return bad();
  std::string_view id = take(kIdBytes * 2);
  if (!join_is_lower_hex(id) || take(1) != ".") return bad();
  std::string_view secret = take(kSecretChars);
  if (!join_is_base64url(secret) || !rest.empty()) return bad();
  return ParsedJoinToken{std::string(fingerprint), std::string(id), std::string(secret)};
}

Result<std::string> redeem_join_token(store::Database& db, std::string_view token, std::int64_t now) {
  auto parsed = parse_join_token(token);
  if (!parsed) return join_refused("malformed");
  auto row = db.one("SELECT host_name, secret_hash, expires_at, used_at FROM join_tokens WHERE id = ?", {parsed->id});
  if (!row) return fail(row.error());
  if (!*row) return join_refused("unknown");
  std::string host_name = (*row)->text(0);
  std::string stored = (*row)->text(1);
  std::string presented = join_secret_hash(parsed->secret);
  sodium_memzero(parsed->secret.data(), parsed->secret.size());
  // Forged before anything else: without the secret nothing about the token is told.
  if (stored.size() != presented.size() || sodium_memcmp(stored.data(), presented.data(), stored.size()) != 0)
    return join_refused("forged");
  if (!(*row)->is_null(3)) return join_refused("used");
  if ((*row)->int64(2) <= now * kMicros) return join_refused("expired");
  auto claimed = claim_join_token(db, parsed->id, now);
  if (!claimed) return fail(claimed.error());
  if (!*claimed) return join_refused("used");  // another replica redeemed it meanwhile
  return host_name;
}

Result<bool> claim_join_token(store::Database& db, const std::string& id, std::int64_t now) {
  if (auto s = db.run("UPDATE join_tokens SET used_at = ? WHERE id = ? AND used_at IS NULL AND expires_at > ?",
                      {now * kMicros, id, now * kMicros});
      !s)
    return fail(s.error());
  return db.changes() == 1;
}

}  // namespace gpucloud::pki
