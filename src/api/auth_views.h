#pragma once
// JSON shapes of users and tokens, exactly as api.md names their fields.
#include <boost/json/object.hpp>

#include "auth/accounts.h"

namespace gpucloud::api {

boost::json::object user_json(const auth::User& user);
boost::json::object token_json(const auth::TokenInfo& token);

}  // namespace gpucloud::api
