#include "server/router.h"

#include <algorithm>

namespace gpucloud::server {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.emplace_back(path.substr(i, j - i));
    i = j;
  }
  return parts;
}

void Router::add(std::string method, std::string pattern, Access access, std::string tag, std::string summary,
                 Handler handler) {
  Route r{std::move(method), std::move(pattern), access, std::move(summary), std::move(tag), std::move(handler), {}};
  r.segments = split_path(r.pattern);
  routes_.push_back(std::move(r));
}

namespace {
bool segments_match(const Route& route, const std::vector<std::string>& parts, std::map<std::string, std::string>& params) {
  if (route.segments.size() != parts.size()) return false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& seg = route.segments[i];
    if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
      params[seg.substr(1, seg.size() - 2)] = parts[i];
    } else if (seg != parts[i]) {
      return false;
    }
  }
  return true;
}
}  // namespace

RouteMatch Router::match(const std::string& method, const std::string& path,
                         std::map<std::string, std::string>& params) const {
  RouteMatch result;
  auto parts = split_path(path);
  // Literal segments win over parameters ("/tokens/mine" before "/tokens/{id}"): routes are
  // tried in the order added, and literal routes are added first by convention.
  for (const Route& route : routes_) {
    std::map<std::string, std::string> candidate;
    if (!segments_match(route, parts, candidate)) continue;
    if (route.method == method) {
      result.route = &route;
      params = std::move(candidate);
      return result;
    }
    result.path_known = true;
    if (std::find(result.allowed.begin(), result.allowed.end(), route.method) == result.allowed.end())
      result.allowed.push_back(route.method);
  }
  return result;
}

}  // namespace gpucloud::server
