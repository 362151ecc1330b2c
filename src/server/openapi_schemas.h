#pragma once
// What the route table cannot say about an endpoint: its request and answer shapes
// (api.md's objects as OpenAPI component schemas), its success status, the problems its
// handler can answer and the query parameters it reads. Keyed by (method, pattern) so that
// openapi_document() still walks the route table and documents exactly what is served.
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

namespace gpucloud::server::openapi {

struct QueryParam {
  std::string_view name;
  std::string_view type;  // "integer" | "string" | "boolean"
  std::string_view description;
  std::vector<std::string_view> values = {};  // an enum, when the handler accepts only these
};

struct OperationSpec {
  std::string_view method;
  std::string_view pattern;
  std::string_view operation_id;
  int status;                    // the success status the handler answers
  std::string_view response;     // component schema of the success body; "" = no body
  std::string_view request = {};  // component schema of the request body; "" = none
  bool request_required = true;  // false: an empty body is accepted too
  bool idempotent = false;       // honours Idempotency-Key (run_idempotent)
  std::vector<int> errors = {};  // problem statuses the handler itself answers (the pipeline's are added)
  std::vector<QueryParam> query = {};
  std::string_view media = "application/json";  // of the success body
  std::string_view id_description = "The resource's id or its name";  // for a {id} path segment
};

// Every documented operation, in no particular order.
const std::vector<OperationSpec>& operation_specs();
// The entry for a route, or nullptr: such a route is still documented, generically.
const OperationSpec* find_operation_spec(std::string_view method, std::string_view pattern);
// components/schemas: Problem and every object the operations refer to.
boost::json::object component_schemas();

}  // namespace gpucloud::server::openapi
