#pragma once
// "Notify me" (issue 24): a user watches a zone's GPU model, usually a sold-out one. When a
// reservation that held a GPU of it is released (a stop, a release, a failed create), every
// open watch on that zone and model fires once, in the release's transaction: an event
// `market.gpu_available` for the watcher and, when their balance alert has a webhook, one POST
// to it through the webhook outbox. A fired watch stays listed (with `fired_at`) and is not
// fired again; asking again makes a new one.
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "core/result.h"
#include "core/time_format.h"
#include "store/database.h"

namespace gpucloud::market {

struct Watch {
  std::string id, user_id, zone, gpu_model;
  SysTime created_at;
  std::optional<SysTime> fired_at;
};

// The user's open watch on (zone, model), made if there is none. `known`: the model is sold
// in the zone (an offer the caller checked); otherwise invalid_argument.
Result<Watch> watch_model(store::Database& db, const std::string& user_id, const std::string& zone,
                          const std::string& gpu_model, SysTime now);
// Newest first: open ones and those that fired.
Result<std::vector<Watch>> list_watches(store::Database& db, const std::string& user_id);
// Another user's, or none: not_found.
Status delete_watch(store::Database& db, const std::string& user_id, const std::string& id);

// Fires the open watches on the zone and model of each GPU the reservation `reservation_id`
// held (called by release_reservation, in its transaction).
Status fire_watches_for_reservation(store::Database& db, const std::string& reservation_id, SysTime now);

boost::json::object watch_json(const Watch& watch);

}  // namespace gpucloud::market
