#pragma once
// Events: what happened, stored in the same transaction as the change itself, numbered by
// an increasing `seq` so clients resume a stream exactly where they left off.
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::events {

struct Event {
  std::int64_t seq = 0;
  std::string id;
  SysTime time;
  std::string type;      // "instance.running", "host.unreachable", ...
  std::string resource;  // the resource id
  std::optional<std::string> user;
  std::string message;
  boost::json::object data;
};

// Call inside the transaction that makes the change.
Status record(store::Database& db, SysTime time, const std::string& type, const std::string& resource,
              const std::optional<std::string>& user, const std::string& message, boost::json::object data = {});

struct Query {
  std::optional<std::string> user;  // nullopt: every user's (the operator)
  std::int64_t since_seq = 0;
  std::optional<std::string> resource;
  std::size_t limit = 100;
};
// Oldest first, seq > since_seq.
Result<std::vector<Event>> list(store::Database& db, const Query& query);
Result<std::int64_t> latest_seq(store::Database& db);

boost::json::object to_json(const Event& event);

// `resource` may be a name (api.md: a name is accepted wherever an id is). The user's live
// instance, SSH key or image of that name wins; else their latest released instance; else
// it is returned as given (an id, or nothing we name). `user` nullopt: anyone's (operator).
Result<std::string> resolve_resource_name(store::Database& db, const std::optional<std::string>& user,
                                          const std::string& resource);

}  // namespace gpucloud::events
