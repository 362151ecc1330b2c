#pragma once
// SSH public keys: one OpenSSH key line, validated and re-serialised by the server so
// nothing but "TYPE BASE64 [COMMENT]" ever reaches an instance's authorized_keys.
#include <optional>
#include <string>
#include <vector>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::instances {

struct ParsedKey {
  std::string type;
  std::string blob_base64;
  std::string comment;
  std::string fingerprint;  // "SHA256:..." as ssh-keygen -l prints it
  std::string line() const { return type + " " + blob_base64 + (comment.empty() ? "" : " " + comment); }
};

// Refuses options ("command=...", "from=..."), several lines, DSA keys, and blobs that do not
// decode to a key of the named type.
Result<ParsedKey> parse_public_key(const std::string& text);

struct SshKey {
  std::string id, owner, name, public_key, fingerprint;
  SysTime created_at;
};

Result<SshKey> add_ssh_key(store::Database& db, const std::string& owner, const std::string& name, const ParsedKey& key,
                           SysTime now);
Result<std::vector<SshKey>> list_ssh_keys(store::Database& db, const std::string& owner);
// By id or name, the owner's only (another user's key is "not found").
Result<SshKey> find_ssh_key(store::Database& db, const std::string& owner, const std::string& id_or_name);
Status delete_ssh_key(store::Database& db, const std::string& owner, const std::string& id_or_name);

}  // namespace gpucloud::instances
