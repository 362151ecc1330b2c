#include "api/auth_views.h"

namespace gpucloud::api {

boost::json::object user_json(const auth::User& user) {
  boost::json::object o;
  o["id"] = user.id;
  o["username"] = user.username;
  if (user.email) o["email"] = *user.email;
  else o["email"] = nullptr;
  o["role"] = user.role;
  o["disabled"] = user.disabled;
  o["created_at"] = format_rfc3339(user.created_at);
  return o;
}

boost::json::object token_json(const auth::TokenInfo& token) {
  boost::json::object o;
  o["id"] = token.id;
  o["name"] = token.name;
  o["created_at"] = format_rfc3339(token.created_at);
  if (token.expires_at) o["expires_at"] = format_rfc3339(*token.expires_at);
  else o["expires_at"] = nullptr;
  return o;
}

}  // namespace gpucloud::api
