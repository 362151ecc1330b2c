#pragma once
// Users and their tokens in the store. Every function runs inside a store transaction or
// read (it takes the Database the store hands out) and never blocks on anything else.
#include <optional>
#include <string>
#include <vector>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::auth {

struct User {
  std::string id;
  std::string username;
  std::optional<std::string> email;
  std::string role;  // "user" | "admin"
  bool disabled = false;
  SysTime created_at;
  bool is_admin() const { return role == "admin"; }
};

// Who is calling: resolved from the bearer token on every request.
struct Principal {
  User user;
  std::string token_id;
  std::string token_kind;  // "session" | "api"
};

struct TokenInfo {
  std::string id;
  std::string name;
  std::string kind;
  SysTime created_at;
  std::optional<SysTime> expires_at;
};

struct IssuedToken {
  TokenInfo info;
  std::string secret;  // shown once, never stored
};

Result<User> create_user(store::Database& db, const std::string& username, const std::optional<std::string>& email,
                         const std::string& password_hash, const std::string& role, SysTime now);
Result<std::optional<std::pair<User, std::string>>> find_user_with_hash(store::Database& db,
                                                                        const std::string& username);
// By id or username; nullopt when absent.
Result<std::optional<User>> find_user(store::Database& db, const std::string& id_or_name);
Result<std::vector<User>> list_users(store::Database& db);
Status set_user_disabled(store::Database& db, const std::string& user_id, bool disabled);
Status set_user_role(store::Database& db, const std::string& user_id, const std::string& role);
Status set_password_hash(store::Database& db, const std::string& user_id, const std::string& hash);

Result<IssuedToken> issue_token(store::Database& db, const std::string& user_id, const std::string& kind,
                                const std::string& name, SysTime now, std::optional<SysTime> expires_at);
// The principal for a bearer token, or unauthorized (unknown, revoked, expired, disabled user).
Result<Principal> authenticate(store::Database& db, const std::string& token, SysTime now);
Result<std::vector<TokenInfo>> list_api_tokens(store::Database& db, const std::string& user_id);
// not_found unless the token exists, is the user's and is live.
Status revoke_token(store::Database& db, const std::string& user_id, const std::string& token_id, SysTime now);
// The live API token a user means by `id_or_name`: an id as given, else the one token of that
// name (conflict when several share it).
Result<std::string> resolve_api_token(store::Database& db, const std::string& user_id, const std::string& id_or_name);
// When the token stops working by itself (sessions), if ever.
Result<std::optional<SysTime>> token_expiry(store::Database& db, const std::string& token_id);
// Revokes every live API token of the user (a password change with revoke_tokens).
Status revoke_api_tokens(store::Database& db, const std::string& user_id, SysTime now);
// Revokes every live session of the user except `keep_token_id` ("": all of them).
Status revoke_other_sessions(store::Database& db, const std::string& user_id, const std::string& keep_token_id,
                             SysTime now);

}  // namespace gpucloud::auth
