#pragma once
// The OpenAPI 3 document, generated from the route table itself so it cannot drift from
// what the server serves; each route's shapes, statuses and parameters come from the table
// in openapi_schemas.h (a route missing there is still listed, generically).
#include <boost/json/object.hpp>

#include "server/router.h"

namespace gpucloud::server {

boost::json::object openapi_document(const Router& router);

}  // namespace gpucloud::server
