#pragma once
// The route table: method + path pattern ("/api/v1/tokens/{id}") -> handler. The same table
// feeds the OpenAPI document and the per-route metrics, so the three never disagree.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "server/http_types.h"

namespace gpucloud::server {

enum class Access { public_route, user, admin };

struct RequestContext;  // defined in app.h
using Handler = std::function<boost::asio::awaitable<Result<Response>>(RequestContext&)>;

struct Route {
  std::string method;
  std::string pattern;
  Access access = Access::user;
  std::string summary;
  std::string tag;
  Handler handler;
  std::vector<std::string> segments;  // split pattern; "{x}" marks a parameter
  // A prefix route: its last segment ("{path}") stands for whatever follows, any depth or
  // none (the handler reads it from the request's raw path). Its body is passed on as it is
  // (no application/json check).
  bool prefix = false;
};

struct RouteMatch {
  const Route* route = nullptr;         // set on a match
  bool path_known = false;              // the path exists under another method (-> 405)
  std::vector<std::string> allowed;     // methods for that path
};

class Router {
 public:
  void add(std::string method, std::string pattern, Access access, std::string tag, std::string summary,
           Handler handler);
  // A prefix route (see Route::prefix); `pattern` ends with "/{path}".
  void add_prefix(std::string method, std::string pattern, Access access, std::string tag, std::string summary,
                  Handler handler);
  RouteMatch match(std::string_view method, std::string_view path, std::map<std::string, std::string>& params) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

std::vector<std::string> split_path(std::string_view path);

}  // namespace gpucloud::server
