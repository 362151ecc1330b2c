#include "auth/accounts.h"

#include "auth/credentials.h"
#include "core/ids.h"

namespace gpucloud::auth {
namespace {
constexpr const char* kUserColumns = "id, username, email, role, disabled, created_at";

User user_from(const store::Row& row, std::size_t first = 0) {
  return User{row.text(first), row.text(first + 1), row.opt_text(first + 2), row.text(first + 3),
              row.int64(first + 4) != 0, from_unix_micros(row.int64(first + 5))};
}
}  // namespace

Result<User> create_user(store::Database& db, const std::string& username, const std::optional<std::string>& email,
                         const std::string& password_hash, const std::string& role, SysTime now) {
  auto existing = db.one("SELECT 1 FROM users WHERE username = ?", {username});
  if (!existing) return fail(existing.error());
  if (*existing) return fail(ErrorCode::conflict, "username \"" + username + "\" is taken");
  User user{new_id("u"), username, email, role, false, now};
  if (auto s = db.run("INSERT INTO users (id, username, email, password_hash, role, disabled, created_at) "
                      "VALUES (?, ?, ?, ?, ?, 0, ?)",
                      {user.id, username, email, password_hash, role, to_unix_micros(now)});
      !s)
    return fail(s.error());
  return user;
}

Result<std::optional<std::pair<User, std::string>>> find_user_with_hash(store::Database& db,
                                                                        const std::string& username) {
  auto row = db.one(std::string("SELECT ") + kUserColumns + ", password_hash FROM users WHERE username = ?",
                    {username});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<std::pair<User, std::string>>{};
  return std::optional<std::pair<User, std::string>>{std::make_pair(user_from(**row), (*row)->text(6))};
}

Result<std::optional<User>> find_user(store::Database& db, const std::string& id_or_name) {
  auto row = db.one(std::string("SELECT ") + kUserColumns + " FROM users WHERE id = ? OR username = ?",
                    {id_or_name, id_or_name});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<User>{};
  return std::optional<User>{user_from(**row)};
}

Result<std::vector<User>> list_users(store::Database& db) {
  auto rows = db.all(std::string("SELECT ") + kUserColumns + " FROM users ORDER BY created_at DESC, id DESC");
  if (!rows) return fail(rows.error());
  std::vector<User> users;
  for (auto& row : *rows) users.push_back(user_from(row));
  return users;
}

Status set_user_disabled(store::Database& db, const std::string& user_id, bool disabled) {
  return db.run("UPDATE users SET disabled = ? WHERE id = ?", {disabled, user_id});
}

Status set_user_role(store::Database& db, const std::string& user_id, const std::string& role) {
  return db.run("UPDATE users SET role = ? WHERE id = ?", {role, user_id});
}

Status set_password_hash(store::Database& db, const std::string& user_id, const std::string& hash) {
  return db.run("UPDATE users SET password_hash = ? WHERE id = ?", {hash, user_id});
}

Result<IssuedToken> issue_token(store::Database& db, const std::string& user_id, const std::string& kind,
                                const std::string& name, SysTime now, std::optional<SysTime> expires_at) {
  IssuedToken issued{TokenInfo{new_id("tok"), name, kind, now, expires_at}, new_token_secret()};
  std::optional<std::int64_t> expires;
  if (expires_at) expires = to_unix_micros(*expires_at);
  if (auto s = db.run("INSERT INTO tokens (id, user_id, kind, name, token_hash, created_at, expires_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      {issued.info.id, user_id, kind, name, token_hash(issued.secret), to_unix_micros(now), expires});
      !s)
    return fail(s.error());
  return issued;
}

Result<Principal> authenticate(store::Database& db, const std::string& token, SysTime now) {
  auto row = db.one(std::string("SELECT t.id, t.kind, t.expires_at, t.revoked_at, u.") +
                        "id, u.username, u.email, u.role, u.disabled, u.created_at "
                        "FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?",
                    {token_hash(token)});
  if (!row) return fail(row.error());
  const auto& r = *row;
  if (!r || !r->is_null(3)) return fail(ErrorCode::unauthorized, "the token is not valid");
  if (auto expires = r->opt_int64(2); expires && *expires <= to_unix_micros(now))
    return fail(ErrorCode::unauthorized, "the session has expired; log in again");
  Principal p{user_from(*r, 4), r->text(0), r->text(1)};
  if (p.user.disabled) return fail(ErrorCode::unauthorized, "this account is disabled");
  return p;
}

Result<std::vector<TokenInfo>> list_api_tokens(store::Database& db, const std::string& user_id) {
  auto rows = db.all("SELECT id, name, kind, created_at, expires_at FROM tokens WHERE user_id = ? AND kind = 'api' "
                     "AND revoked_at IS NULL ORDER BY created_at DESC, id DESC",
                     {user_id});
  if (!rows) return fail(rows.error());
  std::vector<TokenInfo> tokens;
  for (auto& r : *rows) {
    std::optional<SysTime> expires;
    if (auto e = r.opt_int64(4)) expires = from_unix_micros(*e);
    tokens.push_back(TokenInfo{r.text(0), r.text(1), r.text(2), from_unix_micros(r.int64(3)), expires});
  }
  return tokens;
}

Result<std::string> resolve_api_token(store::Database& db, const std::string& user, const std::string& id_or_name) {
  auto named = db.all("SELECT id FROM tokens WHERE user_id = ? AND kind = 'api' AND revoked_at IS NULL AND name = ? "
                      "AND NOT EXISTS (SELECT 1 FROM tokens WHERE id = ? AND user_id = ?)",
                      {user, id_or_name, id_or_name, user});
  if (!named) return fail(named.error());
  if (named->size() > 1)
    return fail(ErrorCode::conflict,
                std::to_string(named->size()) + " API tokens are named \"" + id_or_name + "\": revoke one by its id");
  return named->size() == 1 ? named->front().text(0) : id_or_name;
}

Result<std::optional<SysTime>> token_expiry(store::Database& db, const std::string& token_id) {
  auto row = db.one("SELECT expires_at FROM tokens WHERE id = ?", {token_id});
  if (!row) return fail(row.error());
  if (!*row || (*row)->is_null(0)) return std::optional<SysTime>{};
  return std::optional<SysTime>{from_unix_micros((*row)->int64(0))};
}

Status revoke_token(store::Database& db, const std::string& user_id, const std::string& token_id, SysTime now) {
  if (auto s = db.run("UPDATE tokens SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL",
                      {to_unix_micros(now), token_id, user_id});
      !s)
    return s;
  if (db.changes() == 0) return fail(ErrorCode::not_found, "token " + token_id + " not found");
  return ok();
}

Status revoke_other_sessions(store::Database& db, const std::string& user_id, const std::string& keep_token_id,
                             SysTime now) {
  return db.run("UPDATE tokens SET revoked_at = ? WHERE user_id = ? AND kind = 'session' AND id != ? "
                "AND revoked_at IS NULL",
                {to_unix_micros(now), user_id, keep_token_id});
}

Status revoke_api_tokens(store::Database& db, const std::string& user_id, SysTime now) {
  return db.run("UPDATE tokens SET revoked_at = ? WHERE user_id = ? AND kind = 'api' AND revoked_at IS NULL",
                {to_unix_micros(now), user_id});
}

}  // namespace gpucloud::auth
