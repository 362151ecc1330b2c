#include "api/problem.h"

#include <boost/json.hpp>

namespace gpucloud::api {

std::string problem_body(const Error& error) {
  boost::json::object doc;
  doc["type"] = "about:blank";
  doc["title"] = std::string(http_title(error.code));
  doc["status"] = http_status(error.code);
  doc["detail"] = error.detail;
  doc["code"] = std::string(to_string(error.code));
  for (const auto& [name, value] : error.numbers) doc[name] = value;
  return boost::json::serialize(doc);
}

}  // namespace gpucloud::api
