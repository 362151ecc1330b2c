#include "server/pagination.h"

#include <charconv>

namespace gpucloud::server {

std::string encode_cursor(std::int64_t created_at_micros, const std::string& id) {
  return std::to_string(created_at_micros) + "." + id;
}

Result<PageRequest> parse_page_request(const Request& request) {
  PageRequest page;
  auto query = request.query();
  if (auto it = query.find("limit"); it != query.end()) {
    std::size_t limit = 0;
    auto [ptr, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), limit);
    if (ec != std::errc() || ptr != it->second.data() + it->second.size() || limit < 1 || limit > 1000)
      return fail(ErrorCode::invalid_argument, "limit: must be an integer from 1 to 1000");
    page.limit = limit;
  }
  if (auto it = query.find("cursor"); it != query.end() && !it->second.empty()) {
    const std::string& c = it->second;
    auto dot = c.find('.');
    std::int64_t micros = 0;
    if (dot == std::string::npos ||
        std::from_chars(c.data(), c.data() + dot, micros).ptr != c.data() + dot || dot + 1 >= c.size())
      return fail(ErrorCode::invalid_argument, "cursor: not a cursor this server returned");
    page.after = std::make_pair(micros, c.substr(dot + 1));
  }
  return page;
}

boost::json::object page_in_order(const boost::json::array& items, const PageRequest& page) {
  std::vector<std::int64_t> positions(items.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  // Descending keys, as page_of wants: position 0 is the "newest".
  auto key = [](std::int64_t pos) { return std::make_pair(-pos, std::string("p")); };
  auto to_json = [&items](std::int64_t pos) { return items[static_cast<std::size_t>(pos)]; };
  return page_of(positions, page, key, to_json);
}

}  // namespace gpucloud::server
