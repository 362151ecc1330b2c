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

void Router::add_prefix(std::string method, std::string pattern, Access access, std::string tag, std::string summary,
                        Handler handler) {
  add(std::move(method), std::move(pattern), access, std::move(tag), std::move(summary), std::move(handler));
  routes_.back().prefix = true;
}

namespace {
// Every request is matched against the table, so this allocates nothing until a route
// matches: the path's segments are views into it, parameters are copied only on the match.
constexpr std::size_t kMaxSegments = 16;

bool is_parameter(const std::string& seg) { return seg.size() > 2 && seg.front() == '{' && seg.back() == '}'; }

bool segments_match(const Route& route, const std::string_view* parts, std::size_t count) {
  std::size_t fixed = count;
  if (route.prefix) {
    fixed = route.segments.size() - 1;  // the last segment takes the rest, however deep
    if (count < fixed) return false;
  } else if (route.segments.size() != count) {
    return false;
  }
  for (std::size_t i = 0; i < fixed; ++i) {
    const std::string& seg = route.segments[i];
    if (seg != parts[i] && !is_parameter(seg)) return false;
  }
  return true;
}
}  // namespace

RouteMatch Router::match(std::string_view method, std::string_view path,
                         std::map<std::string, std::string>& params) const {
  RouteMatch result;
  std::string_view parts[kMaxSegments];
  std::size_t count = 0;
  bool deep = false;
  for (std::size_t i = 0; i < path.size();) {
    while (i < path.size() && path[i] == '/') ++i;
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) {
      if (count == kMaxSegments) {
        deep = true;  // deeper than any fixed route; a prefix route may take it
        break;
      }
      parts[count++] = path.substr(i, j - i);
    }
    i = j;
  }
  // Literal segments win over parameters ("/tokens/mine" before "/tokens/{id}"): routes are
  // tried in the order added, and literal routes are added first by convention.
  for (const Route& route : routes_) {
    if (deep && !route.prefix) continue;
    if (!segments_match(route, parts, count)) continue;
    if (route.method == method) {
      result.route = &route;
      params.clear();
      for (std::size_t i = 0; i < count && i < route.segments.size(); ++i)
        if (is_parameter(route.segments[i]) && !(route.prefix && i + 1 == route.segments.size()))
          params[route.segments[i].substr(1, route.segments[i].size() - 2)] = std::string(parts[i]);
      return result;
    }
    result.path_known = true;
    if (std::find(result.allowed.begin(), result.allowed.end(), route.method) == result.allowed.end())
      result.allowed.push_back(route.method);
  }
  return result;
}

}  // namespace gpucloud::server
