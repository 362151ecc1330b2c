#include "instances/ssh_keys.h"

#include <array>
#include <sodium.h>

#include "core/ids.h"

namespace gpucloud::instances {

namespace {
constexpr std::array<std::string_view, 6> kKeyTypes = {
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com"};

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}
}  // namespace

Result<ParsedKey> parse_public_key(const std::string& raw) {
  std::string text = raw;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return fail(ErrorCode::invalid_argument, "public_key: is empty");
  if (text.find('\n') != std::string::npos || text.find('\r') != std::string::npos)
    return fail(ErrorCode::invalid_argument, "public_key: must be a single line");
  for (unsigned char c : text)
    if (c < 0x20 && c != '\t') return fail(ErrorCode::invalid_argument, "public_key: contains control characters");
  auto parts = split_ws(text);
  if (parts.size() < 2) return fail(ErrorCode::invalid_argument, "public_key: expected \"TYPE BASE64 [COMMENT]\"");
  if (parts[0] == "ssh-dss") return fail(ErrorCode::invalid_argument, "public_key: DSA keys are not accepted (use ed25519)");
  bool known = false;
  for (auto t : kKeyTypes) known = known || parts[0] == t;
  if (!known)
    return fail(ErrorCode::invalid_argument,
                "public_key: key options are not allowed and \"" + parts[0].substr(0, 40) + "\" is not a key type");
  std::vector<unsigned char> blob(parts[1].size());
  std::size_t len = 0;
  if (sodium_base642bin(blob.data(), blob.size(), parts[1].data(), parts[1].size(), nullptr, &len, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 || len < 4)
    return fail(ErrorCode::invalid_argument, "public_key: the key data is not valid base64");
  blob.resize(len);
  std::uint32_t type_len = (std::uint32_t{blob[0]} << 24) | (std::uint32_t{blob[1]} << 16) | (std::uint32_t{blob[2]} << 8) | blob[3];
  // Compared without `type_len + 4`, which wraps around for a length near 2^32 (found by
  // tests/fuzz/ssh_key: the string below then read far past the blob).
  if (type_len > blob.size() - 4 || std::string(blob.begin() + 4, blob.begin() + 4 + type_len) != parts[0])
    return fail(ErrorCode::invalid_argument, "public_key: the key data does not match its type " + parts[0]);
  std::string comment;
  for (std::size_t i = 2; i < parts.size(); ++i) comment += (i > 2 ? " " : "") + parts[i];
  if (comment.size() > 200) comment.resize(200);
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  crypto_hash_sha256(digest.data(), blob.data(), blob.size());
  std::array<char, sodium_base64_ENCODED_LEN(crypto_hash_sha256_BYTES, sodium_base64_VARIANT_ORIGINAL_NO_PADDING)> fp{};
  sodium_bin2base64(fp.data(), fp.size(), digest.data(), digest.size(), sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
  return ParsedKey{parts[0], parts[1], comment, "SHA256:" + std::string(fp.data())};
}

namespace {
SshKey key_from(const store::Row& r) {
  return SshKey{r.text(0), r.text(1), r.text(2), r.text(3), r.text(4), from_unix_micros(r.int64(5))};
}
constexpr const char* kSshKeyColumns = "SELECT id, owner, name, public_key, fingerprint, created_at FROM ssh_keys ";
}  // namespace

Result<SshKey> add_ssh_key(store::Database& db, const std::string& owner, const std::string& name, const ParsedKey& key,
                           SysTime now) {
  auto taken = db.one("SELECT 1 FROM ssh_keys WHERE owner = ? AND name = ?", {owner, name});
  if (!taken) return fail(taken.error());
  if (*taken) return fail(ErrorCode::conflict, "you already have a key named " + name);
  SshKey k{new_id("key"), owner, name, key.line(), key.fingerprint, now};
  if (auto s = db.run("INSERT INTO ssh_keys (id, owner, name, public_key, fingerprint, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                      {k.id, owner, name, k.public_key, k.fingerprint, to_unix_micros(now)});
      !s)
    return fail(s.error());
  return k;
}

Result<std::vector<SshKey>> list_ssh_keys(store::Database& db, const std::string& owner) {
  auto rows = db.all(std::string(kSshKeyColumns) + "WHERE owner = ? ORDER BY created_at DESC, id DESC", {owner});
  if (!rows) return fail(rows.error());
  std::vector<SshKey> out;
  for (const auto& r : *rows) out.push_back(key_from(r));
  return out;
}

Result<SshKey> find_ssh_key(store::Database& db, const std::string& owner, const std::string& id_or_name) {
  auto row = db.one(std::string(kSshKeyColumns) + "WHERE owner = ? AND (id = ? OR name = ?)", {owner, id_or_name, id_or_name});
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::not_found, "ssh key " + id_or_name + " not found");
  return key_from(**row);
}

Status delete_ssh_key(store::Database& db, const std::string& owner, const std::string& id_or_name) {
  auto key = find_ssh_key(db, owner, id_or_name);
  if (!key) return fail(key.error());
  return db.run("DELETE FROM ssh_keys WHERE id = ?", {key->id});
}

}  // namespace gpucloud::instances
